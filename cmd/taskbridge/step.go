package main

// `call TOOL -task-id ID`: one step of a workflow task, with the arguments
// its handoff already resolved filled in and only the placeholders asked.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/stepview"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// step performs one step of a workflow task: the tool call carries
// _meta._task_id, and the server answers with the tool's result and where
// the workflow stands (_meta["taskbridge/workflow"]). The arguments the
// workflow's handoff already resolved are filled in, the ones given on
// the command line override them, and the placeholders left are asked.
func (cmd *command) step(ctx context.Context, tool string, given map[string]any, taskID, workflow string) error {
	cmd.waiting = taskID
	args, workflow, ref, err := cmd.stepArgs(ctx, tool, given, taskID, workflow)
	if err != nil {
		return err
	}
	cmd.remember(taskID, workflow, history.KindWorkflow, time.Time{})
	opts := &client.CallOptions{Meta: map[string]any{mcptask.MetaTaskID: ref}, AllowPlain: true}
	res, err := cmd.c.CallToolAndWait(ctx, tool, args, opts)
	if err != nil {
		return err
	}
	cmd.waiting = ""
	sum, err := mcptask.SummaryFromMeta(res.Meta)
	if err != nil {
		return fmt.Errorf("_meta[%q] is not a workflow summary: %w", mcptask.MetaWorkflow, err)
	}
	var parent *client.Task
	if sum != nil && sum.TaskID != "" && sum.TaskID != taskID {
		// The step was a child workflow's: it is recorded on the child,
		// whose summary this is; say where the workflow followed stands.
		if t, err := cmd.c.GetTask(ctx, taskID); err == nil {
			parent = t
		}
	}
	if err := cmd.out.stepResult(res, sum, parent); err != nil {
		return err
	}
	if parent != nil {
		sum = &mcptask.WorkflowSummary{TaskID: parent.ID, Status: parent.Status}
	}
	switch {
	case sum != nil && (sum.Status == mcptask.StatusFailed || sum.Status == mcptask.StatusCancelled):
		return failedf("workflow task %s is %s", taskID, sum.Status)
	case res.IsError:
		return failedf("step %s of workflow task %s failed", tool, taskID)
	case sum == nil:
		return failedf("the result of %s carries no workflow summary: is %s a workflow task, and %s one of its steps?", tool, taskID, tool)
	}
	return nil
}

// stepArgs reads the workflow's handoff (prompts/get with the task id, as
// `prompt -resume` does, when -workflow or the task history names the
// workflow; otherwise the server's task_result tool, which answers with
// the handoff of any workflow task) and builds the step's arguments from
// it. A step without a tool of its own (an event, a question: the handoff
// names the event tool) is performed with the event tool: `call
// workflow_event -task-id ID approved=true reason=…` fills the event's
// payload from the key=value pairs (event=NAME picks the event when
// several wait). When no handoff can be read, the arguments given are
// sent as they are. It also returns the task reference the call sends as
// _task_id: the one the handoff's entry names (a child workflow's task for
// a child's step, "TASK#build[2]" for a for-each's item), else taskID.
func (cmd *command) stepArgs(ctx context.Context, tool string, given map[string]any, taskID, workflow string) (map[string]any, string, string, error) {
	if workflow == "" {
		if e, ok, _ := cmd.hist.Lookup(cmd.server(), taskID); ok && e.Kind == history.KindWorkflow {
			workflow = e.Name
		}
	}
	doc, err := cmd.handoffOf(ctx, taskID, workflow)
	if err != nil {
		return nil, workflow, "", err
	}
	if doc == nil {
		fmt.Fprintf(cmd.stderr, "taskbridge: the handoff of task %s cannot be read (the task history does not know its workflow, and no task_result tool of the server shows one): "+
			"sending only the arguments given; add -workflow NAME to fill the others from the handoff\n", taskID)
		return given, "", taskID, nil
	}
	workflow = doc.Workflow
	if mcptask.Status(doc.Status).Terminal() {
		return nil, workflow, "", failedf("workflow %q (task %s) is %s: it takes no more steps", doc.Workflow, taskID, doc.Status)
	}
	event, _ := given["event"].(string)
	i := slices.IndexFunc(doc.RemainingSteps, func(s handoff.RemainingStep) bool {
		if s.Tool == "" && s.Call != nil && s.Call.Tool == tool {
			var name string
			_ = json.Unmarshal(s.Call.Arguments["event"], &name)
			return event == "" || name == event
		}
		return s.Tool == tool && (s.Execution == mcptask.ExecClient || s.HandedToClient)
	})
	if i < 0 && tool == eventTool {
		// An event the workflow has not reached yet (the steps before it
		// still run): the server keeps one delivered early.
		i = slices.IndexFunc(doc.RemainingSteps, func(s handoff.RemainingStep) bool {
			return s.Kind == string(mcptask.StepKindEvent) && (event == "" || s.Name == event)
		})
		if i >= 0 {
			s := doc.RemainingSteps[i]
			payload := map[string]any{}
			for k, v := range given {
				if k != "event" && k != "payload" {
					payload[k] = v
				}
			}
			if p, ok := given["payload"].(map[string]any); ok {
				payload = p
			}
			fmt.Fprintf(cmd.stderr, "Event %q of workflow %q (task %s) is not awaited yet: the server keeps it until the workflow reaches it\n", s.Name, doc.Workflow, taskID)
			return map[string]any{"event": s.Name, "payload": payload}, doc.Workflow, taskID, nil
		}
	}
	if i < 0 {
		var yours []string
		for _, s := range doc.RemainingSteps {
			switch {
			case s.Tool == "" && s.Call != nil:
				yours = append(yours, fmt.Sprintf("%s (tool %s)", s.Name, s.Call.Tool))
			case s.Tool == "" && s.Execution == mcptask.ExecClient:
				yours = append(yours, fmt.Sprintf("%s (%s, once the steps before it are done)", s.Name, mcptask.StepKind(s.Kind).Label()))
			case s.Execution == mcptask.ExecClient || s.HandedToClient:
				yours = append(yours, fmt.Sprintf("%s (tool %s)", s.Name, s.Tool))
			}
		}
		if len(yours) == 0 {
			yours = []string{"none (the server is running its steps)"}
		}
		return nil, workflow, "", failedf("no remaining step of workflow %q (task %s) that is yours calls %s; yours now: %s",
			doc.Workflow, taskID, tool, strings.Join(yours, ", "))
	}
	s := doc.RemainingSteps[i]
	ref := stepview.Ref(doc, s)
	call := s.Call
	if s.Tool == "" {
		s = s.AsCall() // the event tool's call, a placeholder per payload field
	} else {
		call = nil
	}
	args := map[string]any{}
	var holes, filled []string
	for k, v := range s.Arguments {
		_, overridden := given[k]
		switch {
		case k == mcptask.ArgTaskID:
			args[k] = ref
		case overridden:
		case handoff.IsPlaceholder(v):
			holes = append(holes, k)
		default:
			args[k] = json.RawMessage(v)
			if call == nil {
				filled = append(filled, k)
			}
		}
	}
	for k, v := range given {
		args[k] = v
	}
	slices.Sort(filled)
	slices.Sort(holes)
	if len(filled) > 0 {
		fmt.Fprintf(cmd.stderr, "Step %q of workflow %q (task %s): %s from the handoff\n", s.Name, doc.Workflow, taskID, strings.Join(filled, ", "))
	}
	if len(holes) > 0 {
		schemas, err := toolSchemas(ctx, cmd.c)
		if err != nil {
			return nil, workflow, "", err
		}
		vals, err := cmd.in.fill(ctx, s, holes, schemas[tool])
		if err != nil {
			return nil, workflow, "", err
		}
		for k, v := range vals {
			args[k] = v
		}
	}
	return call.Nest(args), doc.Workflow, ref, nil
}

// handoffOf reads the handoff of workflow task taskID: by resuming the
// workflow's prompt when workflow is known, else with the server's
// task_result tool (which answers with the handoff of a workflow task
// that has not ended). It returns nil, nil when neither can say (no such
// tool; a task the server does not show, or no workflow's).
func (cmd *command) handoffOf(ctx context.Context, taskID, workflow string) (*handoff.Document, error) {
	if workflow != "" {
		_, doc, err := cmd.c.ResumePrompt(ctx, workflow, taskID)
		if err != nil {
			return nil, fmt.Errorf("reading the handoff of workflow %q (task %s): %w", workflow, taskID, err)
		}
		if doc == nil {
			return nil, fmt.Errorf("prompt %q answered without a handoff: is it a task-aware workflow, and %s its task?", workflow, taskID)
		}
		return doc, nil
	}
	tools, err := cmd.c.Tools(ctx)
	if err != nil || !slices.ContainsFunc(tools, func(t client.Tool) bool { return t.Name == resultTool }) {
		return nil, nil
	}
	res, err := cmd.c.CallToolAndWait(ctx, resultTool, map[string]any{"task_id": taskID, "wait_seconds": 0}, &client.CallOptions{AllowPlain: true})
	if err != nil {
		return nil, err
	}
	if doc, err := handoff.FromToolResult(res); err == nil && doc.TaskID == taskID {
		return doc, nil
	}
	return nil, nil // no workflow task the server shows: the call itself says why
}

// resultTool is the built-in tool that reads a task (taskrouter's
// DefaultResultToolName); eventTool the workflow bridge's event tool
// (workflow.DefaultEventTool).
const (
	resultTool = "task_result"
	eventTool  = "workflow_event"
)
