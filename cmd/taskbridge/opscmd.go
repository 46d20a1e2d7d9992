package main

// `taskbridge tasks pause|resume ID` and `taskbridge schedules ...`: an
// operator's actions on a workflow task and on the server's schedules,
// through the built-in tools a taskbridge server registers (task_pause,
// task_resume; schedule_list, schedule_pause, schedule_resume,
// schedule_trigger). The server checks who may: the task's owner, the
// schedule's owner.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/mcptask"
)

// The tools the operator's commands call (taskrouter's default names;
// the CLI does not import the server's packages).
const (
	pauseTool           = "task_pause"
	resumeTool          = "task_resume"
	scheduleListTool    = "schedule_list"
	schedulePauseTool   = "schedule_pause"
	scheduleResumeTool  = "schedule_resume"
	scheduleTriggerTool = "schedule_trigger"
)

// parsePause checks `tasks pause ID [-reason TEXT] [-cut]`.
func parsePause(args []string) (*plan, error) {
	fs := flag.NewFlagSet("tasks pause", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	reason := fs.String("reason", "", "why, for the task's status and history")
	cut := fs.Bool("cut", false, "stop the steps running now too (they run again on resume)")
	pos, err := parseFlags(fs, "tasks pause", args)
	if err != nil {
		return nil, err
	}
	if len(pos) != 1 {
		return nil, usagef("tasks pause needs one task id")
	}
	toolArgs := map[string]any{"task_id": pos[0]}
	if *reason != "" {
		toolArgs["reason"] = *reason
	}
	if *cut {
		toolArgs["cut"] = true
	}
	return &plan{run: func(ctx context.Context, cmd *command) error {
		return cmd.operate(ctx, pauseTool, toolArgs, "pause of "+pos[0])
	}}, nil
}

// parseResume checks `tasks resume ID`.
func parseResume(args []string) (*plan, error) {
	if len(args) != 1 {
		return nil, usagef("tasks resume needs one task id")
	}
	id := args[0]
	return &plan{run: func(ctx context.Context, cmd *command) error {
		return cmd.operate(ctx, resumeTool, map[string]any{"task_id": id}, "resume of "+id)
	}}, nil
}

// parseSchedules checks `schedules list|pause NAME [-reason TEXT]|resume
// NAME|trigger NAME`.
func parseSchedules(args []string) (*plan, error) {
	if len(args) == 0 {
		return nil, usagef("schedules needs a subcommand: list, pause, resume or trigger")
	}
	sub, args := args[0], args[1:]
	named := func(tool string, extra map[string]any) (*plan, error) {
		if len(args) != 1 {
			return nil, usagef("schedules %s needs one schedule name", sub)
		}
		toolArgs := map[string]any{"name": args[0]}
		for k, v := range extra {
			toolArgs[k] = v
		}
		return &plan{run: func(ctx context.Context, cmd *command) error {
			return cmd.operate(ctx, tool, toolArgs, fmt.Sprintf("%s of schedule %s", sub, args[0]))
		}}, nil
	}
	switch sub {
	case "list":
		if len(args) > 0 {
			return nil, usagef("schedules list takes no arguments, not %q", args[0])
		}
		return &plan{run: func(ctx context.Context, cmd *command) error {
			return cmd.operate(ctx, scheduleListTool, map[string]any{}, "schedules list")
		}}, nil
	case "pause":
		fs := flag.NewFlagSet("schedules pause", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		reason := fs.String("reason", "", "why, for the schedule's history")
		pos, err := parseFlags(fs, "schedules pause", args)
		if err != nil {
			return nil, err
		}
		args = pos
		extra := map[string]any{}
		if *reason != "" {
			extra["reason"] = *reason
		}
		return named(schedulePauseTool, extra)
	case "resume":
		return named(scheduleResumeTool, nil)
	case "trigger":
		return named(scheduleTriggerTool, nil)
	}
	return nil, usagef("unknown schedules subcommand %q (list, pause, resume, trigger)", sub)
}

// operate calls one of the operator's tools and shows its answer: its
// text, or with -json its structured content. A refusal (isError) exits
// 1 with the server's reason.
func (cmd *command) operate(ctx context.Context, tool string, args map[string]any, what string) error {
	res, err := cmd.c.CallToolAndWait(ctx, tool, args, &client.CallOptions{AllowPlain: true})
	var rpc *client.RPCError
	switch {
	case errors.As(err, &rpc) && rpc.Code == mcptask.CodeInvalidParams && strings.Contains(rpc.Message, tool):
		return fmt.Errorf("the server has no tool %q (a taskbridge server registers it beside its task tools): %w", tool, err)
	case err != nil:
		return err
	case res.IsError:
		return failedf("%s refused: %s", what, toolText(res))
	}
	if cmd.out.json {
		return cmd.out.line(map[string]any{"event": "result", "tool": tool, "text": toolText(res), "result": res.StructuredContent})
	}
	_, err = fmt.Fprintln(cmd.out.w, toolText(res))
	return err
}
