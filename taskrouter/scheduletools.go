package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
)

// The schedule tools let an operator (the CLI, a program, a model) list,
// pause, resume and trigger the schedules it may manage
// (Schedules.MayManage) over MCP.

// Default names of the schedule tools.
const (
	DefaultScheduleListToolName    = "schedule_list"
	DefaultSchedulePauseToolName   = "schedule_pause"
	DefaultScheduleResumeToolName  = "schedule_resume"
	DefaultScheduleTriggerToolName = "schedule_trigger"
)

// ScheduleToolsOptions name the schedule tools; nil or empty names mean
// the defaults.
type ScheduleToolsOptions struct {
	ListName, PauseName, ResumeName, TriggerName string
}

func (o ScheduleToolsOptions) withDefaults() ScheduleToolsOptions {
	set := func(p *string, def string) {
		if *p == "" {
			*p = def
		}
	}
	set(&o.ListName, DefaultScheduleListToolName)
	set(&o.PauseName, DefaultSchedulePauseToolName)
	set(&o.ResumeName, DefaultScheduleResumeToolName)
	set(&o.TriggerName, DefaultScheduleTriggerToolName)
	return o
}

// scheduleIn names a schedule.
type scheduleIn struct {
	Name string `json:"name" jsonschema:"the schedule's name (schedule_list lists them)"`
}

// schedulePauseIn is schedule_pause's input.
type schedulePauseIn struct {
	Name   string `json:"name" jsonschema:"the schedule's name (schedule_list lists them)"`
	Reason string `json:"reason,omitempty" jsonschema:"why, for the schedule's history"`
}

// scheduleListOut is schedule_list's structured result.
type scheduleListOut struct {
	Schedules []ScheduleInfo `json:"schedules"`
}

// AddTools registers the tools schedule_list, schedule_pause,
// schedule_resume and schedule_trigger (names from opts) on the router's
// server. A requestor sees and acts on the schedules MayManage lets it;
// every action is in the schedule's history, by the requestor's owner.
// Install must have been called.
func (h *Schedules) AddTools(opts *ScheduleToolsOptions) {
	var o ScheduleToolsOptions
	if opts != nil {
		o = *opts
	}
	o = o.withDefaults()
	c := h.c
	addTool(c.tools, &mcp.Tool{Name: o.ListName, Description: "List the server's schedules you may manage: each one's cron expression and time zone, its overlap policy, whether it is paused, its next and last firing, its latest fires (the tasks they started) and its history."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			q := c.e.Resolve(ctx, req)
			if q.OwnerErr != nil {
				return nil, nil, q.OwnerErr
			}
			all, err := h.List(ctx)
			if err != nil {
				return nil, nil, err
			}
			out := scheduleListOut{Schedules: []ScheduleInfo{}}
			var b strings.Builder
			for _, in := range all {
				if c.mayManage(q, in.Name) {
					out.Schedules = append(out.Schedules, in)
					b.WriteString(scheduleLine(in) + "\n")
				}
			}
			if len(out.Schedules) == 0 {
				b.WriteString("There is no schedule you may manage.")
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.TrimSpace(b.String())}}, StructuredContent: out}, nil, nil
		}, nil)
	addTool(c.tools, &mcp.Tool{Name: o.PauseName, Description: "Pause a schedule: it starts no task until resumed (its times that pass meanwhile are not run)."},
		func(ctx context.Context, req *mcp.CallToolRequest, in schedulePauseIn) (*mcp.CallToolResult, any, error) {
			return c.tool(ctx, req, in.Name, func(q *Request) (ScheduleInfo, string, error) {
				info, err := h.Pause(ctx, in.Name, q.Owner, in.Reason)
				return info, fmt.Sprintf("Schedule %q is paused.", in.Name), err
			})
		}, nil)
	addTool(c.tools, &mcp.Tool{Name: o.ResumeName, Description: "Resume a paused schedule: it fires from its next time on."},
		func(ctx context.Context, req *mcp.CallToolRequest, in scheduleIn) (*mcp.CallToolResult, any, error) {
			return c.tool(ctx, req, in.Name, func(q *Request) (ScheduleInfo, string, error) {
				info, err := h.Resume(ctx, in.Name, q.Owner)
				return info, fmt.Sprintf("Schedule %q is resumed; it fires next at %s.", in.Name, stamp(info.Next)), err
			})
		}, nil)
	addTool(c.tools, &mcp.Tool{Name: o.TriggerName, Description: "Fire a schedule now, once, outside its times (also while paused): it starts its task at once. Returns the task's id."},
		func(ctx context.Context, req *mcp.CallToolRequest, in scheduleIn) (*mcp.CallToolResult, any, error) {
			return c.tool(ctx, req, in.Name, func(q *Request) (ScheduleInfo, string, error) {
				f, err := h.Trigger(ctx, in.Name, q.Owner)
				if err != nil && f.TaskID == "" {
					return ScheduleInfo{}, "", err
				}
				info, ierr := c.info(ctx, c.get(in.Name))
				if err == nil {
					err = ierr
				}
				return info, fmt.Sprintf("Schedule %q fired: task %s started (check it with task_result {\"task_id\": %q}).", in.Name, f.TaskID, f.TaskID), err
			})
		}, nil)
}

// tool checks that the requestor of a schedule tool may manage schedule
// name and applies do, answering with what it said and the schedule.
func (c *crons) tool(ctx context.Context, req *mcp.CallToolRequest, name string, do func(q *Request) (ScheduleInfo, string, error)) (*mcp.CallToolResult, any, error) {
	q := c.e.Resolve(ctx, req)
	if q.OwnerErr != nil {
		return nil, nil, q.OwnerErr
	}
	if !c.mayManage(q, name) {
		return errorResult("there is no schedule %q that you may manage (schedule_list lists yours)", name), nil, nil
	}
	info, said, err := do(q)
	switch {
	case errors.Is(err, ErrNoSchedule), errors.Is(err, store.ErrInvalid):
		return errorResult("%s", trimPrefix(err)), nil, nil
	case err != nil:
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: said + "\n" + scheduleLine(info)}}, StructuredContent: info}, nil, nil
}

// scheduleLine says where a schedule stands in one line.
func scheduleLine(in ScheduleInfo) string {
	var b strings.Builder
	tz := in.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	fmt.Fprintf(&b, "%s: %q (%s), overlap %s", in.Name, in.Cron, tz, in.Overlap)
	if in.Paused {
		b.WriteString(", paused")
		for i := len(in.Actions) - 1; i >= 0; i-- {
			if a := in.Actions[i]; a.Action == "paused" {
				fmt.Fprintf(&b, " by %s at %s", a.By, stamp(a.At))
				if a.Detail != "" {
					fmt.Fprintf(&b, " (%s)", a.Detail)
				}
				break
			}
		}
	} else {
		fmt.Fprintf(&b, ", next at %s", stamp(in.Next))
	}
	if len(in.Fires) > 0 {
		f := in.Fires[0]
		fmt.Fprintf(&b, "; last fired for %s (%s): task %s", stamp(f.At), f.Reason, f.TaskID)
	}
	if in.Description != "" {
		fmt.Fprintf(&b, " — %s", in.Description)
	}
	return b.String()
}
