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
	"github.com/taskbridge/taskbridge/handoff"
)

type command struct {
	c      *client.Client
	out    *printer
	in     *asker
	stderr io.Writer
}

func (cmd *command) dispatch(ctx context.Context, args []string) error {
	switch args[0] {
	case "info":
		return cmd.info()
	case "tools":
		return cmd.tools(ctx)
	case "call":
		return cmd.call(ctx, args[1:])
	case "tasks":
		if len(args) < 2 {
			return usagef("tasks needs a subcommand: list, get, result or cancel")
		}
		return cmd.tasks(ctx, args[1], args[2:])
	case "prompt":
		return cmd.prompt(ctx, args[1:])
	}
	return usagef("unknown command %q", args[0])
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
	ttl := fs.Duration("ttl", 0, "task ttl to ask for")
	plain := fs.Bool("plain", false, "allow a plain call when the tool cannot run as a task")
	detach := fs.Bool("detach", false, "print the task id and return without waiting")
	if err := fs.Parse(args); err != nil {
		return usagef("call: %v", err)
	}
	if fs.NArg() < 1 {
		return usagef("call needs a tool name")
	}
	name := fs.Arg(0)
	toolArgs, err := parseArgs(fs.Args()[1:])
	if err != nil {
		return err
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
			return cmd.out.result(ev.Task, ev.Result)
		}
	}
	return errors.New("the call ended without a result")
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
			fmt.Fprintf(cmd.out.w, "%d task(s)\n", n)
		}
		return nil
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
		return cmd.out.raw(raw)
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

func (cmd *command) prompt(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("prompt", flag.ContinueOnError)
	fs.SetOutput(cmd.stderr)
	follow := fs.Bool("follow", false, "perform the remaining client steps and wait for completion")
	// Accept -follow after the positional arguments too.
	var pos []string
	for _, a := range args {
		if a == "-follow" || a == "--follow" {
			*follow = true
			continue
		}
		pos = append(pos, a)
	}
	if err := fs.Parse(pos); err != nil {
		return usagef("prompt: %v", err)
	}
	if fs.NArg() < 1 {
		return usagef("prompt needs a prompt name")
	}
	pargs := map[string]string{}
	for _, a := range fs.Args()[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return usagef("prompt argument %q is not key=value", a)
		}
		pargs[k] = v
	}
	res, doc, err := cmd.c.GetPrompt(ctx, fs.Arg(0), pargs)
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
		return nil
	}
	final, err := cmd.c.Follow(ctx, doc, client.FollowOptions{Fill: cmd.in.fill})
	if err != nil {
		return err
	}
	var pr mcp.GetPromptResult
	if err := json.Unmarshal(final, &pr); err == nil {
		if fdoc, err := handoff.FromPromptResult(&pr); err == nil {
			if cmd.out.json {
				return cmd.out.line(map[string]any{"event": "completed", "handoff": fdoc})
			}
			fmt.Fprintf(cmd.out.w, "\nWorkflow %q (task %s) is %s: %d step(s) completed.\n", fdoc.Workflow, fdoc.TaskID, fdoc.Status, len(fdoc.CompletedSteps))
			for _, s := range fdoc.CompletedSteps {
				fmt.Fprintf(cmd.out.w, "  ✓ %s (%s): %s\n", s.Name, s.Tool, oneLine(string(s.Result), 100))
			}
			return nil
		}
	}
	return cmd.out.raw(final)
}
