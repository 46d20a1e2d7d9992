package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/argschema"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// command runs one command against a connected server.
type command struct {
	c      *client.Client
	target target
	out    *printer
	in     *asker
	stderr io.Writer
}

func (cmd *command) dispatch(ctx context.Context, args []string) error {
	var err error
	switch args[0] {
	case "info":
		err = cmd.info()
	case "tools":
		err = cmd.tools(ctx)
	case "call":
		err = cmd.call(ctx, args[1:])
	case "tasks":
		if len(args) < 2 {
			return usagef("tasks needs a subcommand: list, get, result or cancel")
		}
		err = cmd.tasks(ctx, args[1], args[2:])
	case "prompt":
		err = cmd.prompt(ctx, args[1:])
	default:
		return usagef("unknown command %q", args[0])
	}
	return lostConnection(cmd.c, cmd.target, err)
}

// parseInterleaved parses fs from args, allowing flags after positional
// arguments (`prompt release_notes repo=x -follow`); it returns the
// positional arguments. Everything after "--" is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for range len(args) + 1 {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return pos, nil
}

func (cmd *command) info() error {
	s := cmd.c.ServerTasks()
	info := map[string]any{
		"dialect":         cmd.c.Dialect().String(),
		"protocolVersion": cmd.c.ProtocolVersion(),
		"tasks": map[string]bool{"core": s.Core, "list": s.List, "cancel": s.Cancel,
			"toolsCall": s.ToolsCall, "extension": s.Extension},
	}
	if si := cmd.c.ServerInfo(); si != nil {
		info["server"] = si.Name + " " + si.Version
	}
	if cmd.out.json {
		return cmd.out.line(info)
	}
	fmt.Fprintf(cmd.out.w, "server:    %v\nprotocol:  %s (dialect %s)\n", info["server"], cmd.c.ProtocolVersion(), cmd.c.Dialect())
	fmt.Fprintf(cmd.out.w, "tasks:     core=%v (list=%v cancel=%v tools/call=%v) extension=%v\n", s.Core, s.List, s.Cancel, s.ToolsCall, s.Extension)
	return nil
}

func (cmd *command) tools(ctx context.Context) error {
	tools, err := cmd.c.Tools(ctx)
	if err != nil {
		return err
	}
	for _, t := range tools {
		if cmd.out.json {
			if err := cmd.out.line(map[string]any{"name": t.Name, "taskSupport": t.TaskSupport, "description": t.Description}); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(cmd.out.w, "%-22s %-9s %s\n", t.Name, t.TaskSupport, oneLine(t.Description, 60))
	}
	return nil
}

// parseArgs reads a JSON object or key=value pairs.
func parseArgs(args []string) (map[string]any, error) {
	out := map[string]any{}
	if len(args) == 1 && strings.HasPrefix(strings.TrimSpace(args[0]), "{") {
		if err := json.Unmarshal([]byte(args[0]), &out); err != nil {
			return nil, usagef("arguments: %v", err)
		}
		return out, nil
	}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, usagef("argument %q is not key=value", a)
		}
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			val = v
		}
		out[k] = val
	}
	return out, nil
}

func (cmd *command) call(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	fs.SetOutput(cmd.stderr)
	ttl := fs.Duration("ttl", 0, "task ttl to ask for (core dialect)")
	plain := fs.Bool("plain", false, "allow a plain call when the tool cannot run as a task")
	detach := fs.Bool("detach", false, "print the task id and return without waiting")
	taskID := fs.String("task-id", "", "perform one step of this workflow task")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return usagef("call: %v", err)
	}
	if len(pos) < 1 {
		return usagef("call needs a tool name")
	}
	name := pos[0]
	toolArgs, err := parseArgs(pos[1:])
	if err != nil {
		return err
	}
	if *taskID != "" {
		if *detach {
			return usagef("call: -detach and -task-id do not go together (a workflow step runs in the request)")
		}
		return cmd.step(ctx, name, toolArgs, *taskID)
	}
	if *ttl > 0 && cmd.c.Dialect() == client.Extension {
		fmt.Fprintf(cmd.stderr, "taskbridge: warning: -ttl %s is ignored: in the %s dialect the server chooses every task's ttl (use -dialect core to ask for one)\n", *ttl, client.Extension)
	}
	status := cmd.out.status(name)
	defer status.stop()
	for ev, err := range cmd.c.CallTool(ctx, name, toolArgs, &client.CallOptions{TTL: *ttl, AllowPlain: *plain}) {
		if err != nil {
			status.stop()
			return err
		}
		switch ev.Kind {
		case client.EventCreated, client.EventStatus:
			if ev.Kind == client.EventCreated && *detach {
				status.stop()
				return cmd.out.task(ev.Task)
			}
			status.update(ev)
		case client.EventInput:
			status.update(ev)
		case client.EventResult:
			status.stop()
			if err := cmd.out.result(ev.Task, ev.Result); err != nil {
				return err
			}
			return resultFailure(name, ev.Task, ev.Result)
		}
	}
	return errors.New("the call ended without a result")
}

// resultFailure is the failedError of a tool result with isError or a
// task that ended failed, nil otherwise.
func resultFailure(tool string, t *client.Task, r *mcp.CallToolResult) error {
	switch {
	case t != nil && t.Status == client.StatusFailed:
		return failedf("task %s of %s ended failed", t.ID, tool)
	case r != nil && r.IsError:
		return failedf("%s returned an error (isError)", tool)
	}
	return nil
}

// step performs one step of a workflow task: the tool call carries
// _meta._task_id, and the server answers with the tool's result and where
// the workflow stands (_meta["taskbridge/workflow"]).
func (cmd *command) step(ctx context.Context, tool string, args map[string]any, taskID string) error {
	opts := &client.CallOptions{Meta: map[string]any{handoff.TaskIDMetaKey: taskID}, AllowPlain: true}
	res, err := cmd.c.CallToolAndWait(ctx, tool, args, opts)
	if err != nil {
		return err
	}
	sum, err := mcptask.SummaryFromMeta(res.Meta)
	if err != nil {
		return fmt.Errorf("_meta[%q] is not a workflow summary: %w", mcptask.MetaWorkflow, err)
	}
	if err := cmd.out.stepResult(res, sum); err != nil {
		return err
	}
	switch {
	case res.IsError:
		return failedf("step %s of workflow task %s failed", tool, taskID)
	case sum == nil:
		return failedf("the result of %s carries no workflow summary: is %s a workflow task, and %s one of its steps?", tool, taskID, tool)
	case sum.Status == mcptask.StatusFailed || sum.Status == mcptask.StatusCancelled:
		return failedf("workflow task %s is %s", taskID, sum.Status)
	}
	return nil
}

func (cmd *command) tasks(ctx context.Context, sub string, args []string) error {
	need := func() (string, error) {
		if len(args) != 1 {
			return "", usagef("tasks %s needs one task id", sub)
		}
		return args[0], nil
	}
	switch sub {
	case "list":
		return cmd.list(ctx)
	case "get":
		id, err := need()
		if err != nil {
			return err
		}
		t, err := cmd.c.GetTask(ctx, id)
		if err != nil {
			return err
		}
		return cmd.out.task(t)
	case "result":
		id, err := need()
		if err != nil {
			return err
		}
		raw, err := cmd.c.TaskResult(ctx, id)
		if err != nil {
			return err
		}
		if err := cmd.out.raw(raw); err != nil {
			return err
		}
		var r mcp.CallToolResult
		if json.Unmarshal(raw, &r) == nil && r.IsError {
			return failedf("task %s ended with a tool error (isError)", id)
		}
		return nil
	case "cancel":
		id, err := need()
		if err != nil {
			return err
		}
		t, err := cmd.c.CancelTask(ctx, id)
		if err != nil {
			return err
		}
		return cmd.out.task(t)
	}
	return usagef("unknown tasks subcommand %q (list, get, result, cancel)", sub)
}

// list runs `tasks list`, saying which tasks tasks/list covers, or why
// there is no list and what to do instead.
func (cmd *command) list(ctx context.Context) error {
	if cmd.c.Dialect() == client.Extension {
		return fmt.Errorf("tasks list is not supported in the %s dialect: the %s extension (%s) has no tasks/list. "+
			"Use 'taskbridge tasks get ID' for a task whose id you have, or -dialect core to list the tasks this session created",
			client.Extension, client.ExtensionID, client.ExtensionVersion)
	}
	n := 0
	for t, err := range cmd.c.ListTasks(ctx) {
		if err != nil {
			return err
		}
		n++
		if err := cmd.out.task(t); err != nil {
			return err
		}
	}
	if !cmd.out.json {
		fmt.Fprintf(cmd.out.w, "%d task(s): %s\n", n, listScope(cmd.target))
	}
	return nil
}

// listScope says which tasks a core-dialect tasks/list shows.
func listScope(t target) string {
	if t.stdio() {
		return "the tasks the server lists for this connection (a taskbridge server over stdio lists every task of its local owner; on a server that authenticates you, your tasks)"
	}
	return "the tasks this session created (each taskbridge run is a new session; on a server that authenticates you, your tasks)"
}

func (cmd *command) prompt(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("prompt", flag.ContinueOnError)
	fs.SetOutput(cmd.stderr)
	follow := fs.Bool("follow", false, "perform the remaining client steps and wait for completion")
	resume := fs.String("resume", "", "continue this workflow task")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return usagef("prompt: %v", err)
	}
	if len(pos) < 1 {
		return usagef("prompt needs a prompt name")
	}
	pargs := map[string]string{}
	for _, a := range pos[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return usagef("prompt argument %q is not key=value", a)
		}
		pargs[k] = v
	}
	var res *mcp.GetPromptResult
	var doc *handoff.Document
	if *resume != "" {
		if len(pargs) > 0 {
			return usagef("prompt -resume takes no key=value arguments: the task already has them")
		}
		res, doc, err = cmd.c.ResumePrompt(ctx, pos[0], *resume)
		if err == nil && doc == nil {
			return fmt.Errorf("prompt %q answered without a handoff: is it a task-aware workflow, and %s its task?", pos[0], *resume)
		}
	} else {
		res, doc, err = cmd.c.GetPrompt(ctx, pos[0], pargs)
	}
	if err != nil {
		return err
	}
	if doc == nil {
		return cmd.out.prompt(res)
	}
	if err := cmd.out.handoff(doc); err != nil {
		return err
	}
	if !*follow {
		return handoffFailure(doc)
	}
	return cmd.follow(ctx, doc)
}

// handoffFailure is the failedError of a handoff whose workflow ended
// failed or cancelled, or has a step the server gave up on.
func handoffFailure(doc *handoff.Document) error {
	switch doc.Status {
	case handoff.StatusFailed, handoff.StatusCancelled:
		return failedf("workflow %q (task %s) is %s", doc.Workflow, doc.TaskID, doc.Status)
	}
	for _, s := range doc.RemainingSteps {
		if s.HandedToClient {
			return failedf("step %q of workflow %q failed and is handed to you (continue with: prompt %s -resume %s -follow)", s.Name, doc.Workflow, doc.Workflow, doc.TaskID)
		}
	}
	return nil
}

// follow performs the workflow's remaining client steps, asking for
// placeholder values and for corrected arguments of handed-over steps,
// and prints the outcome.
func (cmd *command) follow(ctx context.Context, doc *handoff.Document) error {
	schemas, err := toolSchemas(ctx, cmd.c)
	if err != nil {
		return err
	}
	final, err := cmd.c.Follow(ctx, doc, client.FollowOptions{
		Fill: func(ctx context.Context, s handoff.RemainingStep, ph []string) (map[string]any, error) {
			return cmd.in.fill(s, ph, schemas[s.Tool])
		},
		Repair: func(ctx context.Context, s handoff.RemainingStep) (map[string]any, error) {
			return cmd.in.repair(s, schemas[s.Tool])
		},
	})
	if err != nil {
		return err
	}
	if fdoc, err := handoff.FromResultJSON(final); err == nil {
		if err := cmd.out.completed(fdoc); err != nil {
			return err
		}
		return handoffFailure(fdoc)
	}
	return cmd.out.raw(final)
}

// toolSchemas lists the server's tools once and returns the fields of
// each tool's input schema, by tool name.
func toolSchemas(ctx context.Context, c *client.Client) (map[string][]argschema.Field, error) {
	tools, err := c.Tools(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]argschema.Field, len(tools))
	for _, t := range tools {
		fields, err := argschema.Fields(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		out[t.Name] = fields
	}
	return out, nil
}
