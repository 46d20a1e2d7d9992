package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/argschema"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
	"github.com/taskbridge/taskbridge/handoff"
)

// plan is a command line, checked before anything connects: run performs
// it on a connected server; check, when set, refuses it for a target it
// cannot work with; local, when set instead of run, performs a command
// that needs no server.
type plan struct {
	run   func(ctx context.Context, cmd *command) error
	check func(t target) error
	local func(l *local) error
}

// parseCommand checks a command line (the command and its arguments,
// after the global flags).
func parseCommand(args []string) (*plan, error) {
	switch args[0] {
	case "info", "tools":
		if len(args) > 1 {
			return nil, usagef("%s takes no arguments, not %q", args[0], args[1])
		}
		if args[0] == "info" {
			return &plan{run: func(_ context.Context, cmd *command) error { return cmd.info() }}, nil
		}
		return &plan{run: func(ctx context.Context, cmd *command) error { return cmd.tools(ctx) }}, nil
	case "call":
		return parseCall(args[1:])
	case "tasks":
		return parseTasks(args[1:])
	case "prompt":
		return parsePrompt(args[1:])
	case "workflow":
		return parseWorkflow(args[1:])
	case "webhook":
		return parseWebhook(args[1:])
	case "schedules":
		return parseSchedules(args[1:])
	}
	return nil, usagef("unknown command %q", args[0])
}

// command runs one command against a connected server.
type command struct {
	c      *conn
	out    *printer
	in     *asker
	stderr io.Writer
	hist   *history.History
	// waiting is the task the command is waiting for, if any: an
	// interruption names it.
	waiting string
	warned  bool // the history's problem was reported
}

// local is what a command that needs no server works with.
type local struct {
	out    *printer
	hist   *history.History
	target target // may be empty
}

// server names the connected server in the task history.
func (cmd *command) server() string { return cmd.c.target.String() }

// remember records a task in the local task history; a history that
// cannot be written is reported once, as a warning.
func (cmd *command) remember(id, name, kind string, created time.Time) {
	err := cmd.hist.Record(history.Entry{ID: id, Server: cmd.server(), Name: name, Kind: kind, Created: created})
	if err != nil && !cmd.warned {
		cmd.warned = true
		fmt.Fprintf(cmd.stderr, "taskbridge: warning: the task history (%s) is not updated: %v\n", cmd.hist.Path(), err)
	}
}

// interrupted turns the error of a command that Ctrl-C or -timeout ended
// into an *interruptedError naming the task it waited for, and an error
// that means the connection is gone into an *unreachableError.
func (cmd *command) interrupted(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var fe failedError
	cause := context.Cause(ctx)
	if ctx.Err() != nil && !errors.As(err, &fe) && (errors.Is(cause, errInterrupted) || errors.Is(cause, errTimedOut)) {
		return &interruptedError{timeout: errors.Is(cause, errTimedOut), taskID: cmd.waiting, target: cmd.c.target}
	}
	return lostConnection(cmd.c, err)
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

// parseFlags is parseInterleaved for the command name: -h is errHelp,
// any other flag error a usage error naming the command.
func parseFlags(fs *flag.FlagSet, name string, args []string) ([]string, error) {
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, usagef("%s: %v", name, err)
	}
	return pos, nil
}

// promptArgs reads a prompt's key=value arguments (as strings, which is
// what prompt arguments are).
func promptArgs(name string, args []string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return nil, usagef("%s: prompt argument %q is not key=value", name, a)
		}
		out[k] = v
	}
	return out, nil
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

// parseCall checks `call TOOL [ARGS] [flags]`.
func parseCall(args []string) (*plan, error) {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ttl := fs.Duration("ttl", 0, "task ttl to ask for (core dialect)")
	plain := fs.Bool("plain", false, "allow a plain call when the tool cannot run as a task")
	detach := fs.Bool("detach", false, "print the task id and return without waiting")
	taskID := fs.String("task-id", "", "perform one step of this workflow task")
	follow := fs.Bool("follow", false, "print the task's progress and log lines as they happen")
	workflow := fs.String("workflow", "", "the workflow of -task-id, when the task history does not know it")
	pos, err := parseFlags(fs, "call", args)
	if err != nil {
		return nil, err
	}
	if len(pos) < 1 {
		return nil, usagef("call needs a tool name")
	}
	name := pos[0]
	toolArgs, err := parseArgs(pos[1:])
	if err != nil {
		return nil, err
	}
	switch {
	case *taskID != "" && *detach:
		return nil, usagef("call: -detach and -task-id do not go together (a workflow step runs in the request)")
	case *workflow != "" && *taskID == "":
		return nil, usagef("call: -workflow names the workflow of -task-id; give -task-id too")
	case *follow && *detach:
		return nil, usagef("call: -follow and -detach do not go together (-detach returns before anything happens)")
	case *follow && *taskID != "":
		return nil, usagef("call: -follow does not go with -task-id (follow the workflow with prompt %s -resume ID -follow)", "WORKFLOW")
	}
	p := &plan{run: func(ctx context.Context, cmd *command) error {
		if *taskID != "" {
			return cmd.step(ctx, name, toolArgs, *taskID, *workflow)
		}
		return cmd.call(ctx, name, toolArgs, callFlags{ttl: *ttl, plain: *plain, detach: *detach, follow: *follow})
	}}
	if *detach {
		p.check = func(t target) error {
			if t.stdio() {
				return usagef("call -detach needs a server that outlives this command: over -stdio the server is this " +
					"command's child and stops when it exits, so the task would stop with it (and run again, or fail, " +
					"when the server next starts on the same store). Run the server on its own (serve -http) and use -url")
			}
			return nil
		}
	}
	return p, nil
}

// callFlags are call's flags.
type callFlags struct {
	ttl                   time.Duration
	plain, detach, follow bool
}

func (cmd *command) call(ctx context.Context, name string, toolArgs map[string]any, f callFlags) error {
	ttl, detach := f.ttl, f.detach
	if ttl > 0 && cmd.c.Dialect().ServerSetsTTL() {
		fmt.Fprintf(cmd.stderr, "taskbridge: warning: -ttl %s is ignored: in the %s dialect the server chooses every task's ttl (use -dialect core to ask for one)\n", ttl, mcptask.Extension)
	}
	if detach && cmd.isWorkflowTool(ctx, name) {
		// The call's task would be a leg that follows the workflow to its
		// next pause; the workflow's own task is what to wait for, so it
		// is started as its prompt, whose reply names it.
		return cmd.detachWorkflow(ctx, name, toolArgs)
	}
	status := cmd.out.status(name)
	defer status.stop()
	opts := &client.CallOptions{TTL: ttl, AllowPlain: f.plain}
	if f.follow {
		opts.OnEvent = (&eventPrinter{out: cmd.out, stderr: cmd.stderr, status: status, asker: cmd.in}).print
	}
	for ev, err := range cmd.c.CallTool(ctx, name, toolArgs, opts) {
		if err != nil {
			status.stop()
			return err
		}
		switch ev.Kind {
		case client.EventCreated, client.EventStatus:
			if ev.Kind == client.EventCreated {
				cmd.waiting = ev.Task.ID
				cmd.remember(ev.Task.ID, name, history.KindTool, ev.Task.CreatedAt)
				if detach {
					status.stop()
					return cmd.out.task(ev.Task)
				}
			}
			status.update(ev)
		case client.EventInput:
			status.update(ev)
		case client.EventResult:
			status.stop()
			cmd.waiting = ""
			if doc, err := handoff.FromToolResult(ev.Result); err == nil && doc.Workflow == name {
				// A workflow's tool: its result is the workflow's handoff,
				// shown (and with -follow performed) as prompt shows it;
				// the exit status is the workflow's.
				return cmd.showHandoff(ctx, doc, f.follow)
			}
			if err := cmd.out.result(ev.Task, ev.Result); err != nil {
				return err
			}
			return resultFailure(name, ev.Task, ev.Result)
		}
	}
	return errors.New("the call ended without a result")
}

// isWorkflowTool reports whether tool name is a task-aware workflow
// served as a tool: the server has a prompt of that name, and the tool
// takes the argument _task_id (to resume a run).
func (cmd *command) isWorkflowTool(ctx context.Context, name string) bool {
	prompts, err := cmd.c.Prompts(ctx)
	if err != nil || !slices.ContainsFunc(prompts, func(p *mcp.Prompt) bool { return p.Name == name }) {
		return false
	}
	tools, err := cmd.c.Tools(ctx)
	if err != nil {
		return false
	}
	for _, t := range tools {
		if t.Name != name {
			continue
		}
		var schema struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		raw, _ := json.Marshal(t.InputSchema)
		_ = json.Unmarshal(raw, &schema)
		_, ok := schema.Properties[mcptask.ArgTaskID]
		return ok
	}
	return false
}

// detachWorkflow starts workflow name (its prompt, with the tool's
// arguments as prompt arguments) and prints the workflow task, as -detach
// prints a tool's task.
func (cmd *command) detachWorkflow(ctx context.Context, name string, toolArgs map[string]any) error {
	pargs := make(map[string]string, len(toolArgs))
	for k, v := range toolArgs {
		if s, ok := v.(string); ok {
			pargs[k] = s
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return usagef("argument %s: %v", k, err)
		}
		pargs[k] = string(b)
	}
	_, doc, err := cmd.c.GetPrompt(ctx, name, pargs)
	if err != nil {
		return err
	}
	if doc == nil {
		return fmt.Errorf("prompt %q answered without a handoff", name)
	}
	t, err := cmd.c.GetTask(ctx, doc.TaskID)
	if err != nil {
		return err
	}
	cmd.remember(doc.TaskID, doc.Workflow, history.KindWorkflow, t.CreatedAt)
	return cmd.out.task(t)
}

// resultFailure is the failedError of a tool result with isError or a
// task that ended failed, nil otherwise.
func resultFailure(tool string, t *client.Task, r *mcp.CallToolResult) error {
	switch {
	case t != nil && t.Status == mcptask.StatusFailed:
		return failedf("task %s of %s ended failed", t.ID, tool)
	case r != nil && r.IsError:
		return failedf("%s returned an error (isError)", tool)
	}
	return nil
}

// parsePrompt checks `prompt NAME [key=value ...] [-follow] [-resume ID]`.
func parsePrompt(args []string) (*plan, error) {
	fs := flag.NewFlagSet("prompt", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	follow := fs.Bool("follow", false, "perform the remaining client steps and wait for completion")
	resume := fs.String("resume", "", "continue this workflow task")
	pos, err := parseFlags(fs, "prompt", args)
	if err != nil {
		return nil, err
	}
	if len(pos) < 1 {
		return nil, usagef("prompt needs a prompt name")
	}
	pargs, err := promptArgs("prompt", pos[1:])
	if err != nil {
		return nil, err
	}
	if *resume != "" && len(pargs) > 0 {
		return nil, usagef("prompt -resume takes no key=value arguments: the task already has them")
	}
	return &plan{run: func(ctx context.Context, cmd *command) error {
		return cmd.prompt(ctx, pos[0], pargs, *resume, *follow)
	}}, nil
}

func (cmd *command) prompt(ctx context.Context, name string, pargs map[string]string, resume string, follow bool) error {
	var res *mcp.GetPromptResult
	var doc *handoff.Document
	var err error
	if resume != "" {
		cmd.waiting = resume
		res, doc, err = cmd.c.ResumePrompt(ctx, name, resume)
		if err == nil && doc == nil {
			return fmt.Errorf("prompt %q answered without a handoff: is it a task-aware workflow, and %s its task?", name, resume)
		}
	} else {
		res, doc, err = cmd.c.GetPrompt(ctx, name, pargs)
	}
	if err != nil {
		return err
	}
	if doc == nil {
		return cmd.out.prompt(res)
	}
	return cmd.showHandoff(ctx, doc, follow)
}

// showHandoff records a workflow task the server handed over, prints its
// handoff, and with follow performs its client steps and waits for it;
// without, a failed or given-up workflow is the command's failure.
func (cmd *command) showHandoff(ctx context.Context, doc *handoff.Document, follow bool) error {
	cmd.waiting = doc.TaskID
	cmd.remember(doc.TaskID, doc.Workflow, history.KindWorkflow, time.Time{})
	if err := cmd.out.handoff(doc); err != nil {
		return err
	}
	if !follow {
		return handoffFailure(doc)
	}
	return cmd.follow(ctx, doc)
}

// handoffFailure is the failedError of a handoff whose workflow ended
// failed or cancelled, or has a step the server gave up on.
func handoffFailure(doc *handoff.Document) error {
	switch doc.Status {
	case string(mcptask.StatusFailed), string(mcptask.StatusCancelled):
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
	final, err := cmd.c.Follow(ctx, doc, &client.FollowOptions{
		OnEvent: (&eventPrinter{out: cmd.out, stderr: cmd.stderr, asker: cmd.in}).print,
		Fill: func(ctx context.Context, s handoff.RemainingStep, ph []string) (map[string]any, error) {
			return cmd.in.fill(ctx, s, ph, schemas[s.Tool])
		},
		Repair: func(ctx context.Context, s handoff.RemainingStep) (map[string]any, error) {
			return cmd.in.repair(ctx, s, schemas[s.Tool], doc.TaskID)
		},
	})
	var wf *client.WorkflowError
	if err != nil && (final == nil || !errors.As(err, &wf)) {
		return err
	}
	cmd.waiting = ""
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
func toolSchemas(ctx context.Context, c *conn) (map[string][]argschema.Field, error) {
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
