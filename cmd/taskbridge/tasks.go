package main

// `taskbridge tasks ...`: one task's status, result or cancellation, and
// the list of the tasks this computer created or opened (the local task
// history) merged with what the server's tasks/list shows.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// parseTasks checks `tasks SUBCOMMAND ...`.
func parseTasks(args []string) (*plan, error) {
	if len(args) == 0 {
		return nil, usagef("tasks needs a subcommand: list, get, result, cancel, pause, resume or forget")
	}
	sub, args := args[0], args[1:]
	one := func(f func(cmd *command, ctx context.Context, id string) error) (*plan, error) {
		if len(args) != 1 {
			return nil, usagef("tasks %s needs one task id", sub)
		}
		id := args[0]
		switch {
		case id == "-h" || id == "-help" || id == "--help":
			return nil, errHelp
		case strings.HasPrefix(id, "-"):
			return nil, usagef("tasks %s takes no flag %s: give it one task id", sub, id)
		}
		return &plan{run: func(ctx context.Context, cmd *command) error { return f(cmd, ctx, id) }}, nil
	}
	switch sub {
	case "list":
		if len(args) > 0 {
			return nil, usagef("tasks list takes no arguments, not %q", args[0])
		}
		return &plan{run: func(ctx context.Context, cmd *command) error { return cmd.list(ctx) }}, nil
	case "get":
		return one((*command).get)
	case "result":
		return one((*command).result)
	case "cancel":
		return one((*command).cancel)
	case "forget":
		return parseForget(args)
	case "pause":
		return parsePause(args)
	case "resume":
		return parseResume(args)
	}
	return nil, usagef("unknown tasks subcommand %q (list, get, result, cancel, pause, resume, forget)", sub)
}

func (cmd *command) get(ctx context.Context, id string) error {
	t, err := cmd.c.GetTask(ctx, id)
	if err != nil {
		return err
	}
	cmd.remember(id, "", "", t.CreatedAt)
	return cmd.out.task(t)
}

func (cmd *command) cancel(ctx context.Context, id string) error {
	t, err := cmd.c.CancelTask(ctx, id)
	if err != nil {
		return err
	}
	cmd.remember(id, "", "", t.CreatedAt)
	return cmd.out.task(t)
}

// result waits for a task's result and prints it as `call` does: a tool
// result's text, or a workflow's outcome.
func (cmd *command) result(ctx context.Context, id string) error {
	cmd.waiting = id
	raw, err := cmd.c.TaskResult(ctx, id)
	if err != nil {
		return err
	}
	cmd.waiting = ""
	if doc, err := handoff.FromResultJSON(raw); err == nil {
		cmd.remember(id, doc.Workflow, history.KindWorkflow, time.Time{})
		if err := cmd.out.completed(doc); err != nil {
			return err
		}
		return handoffFailure(doc)
	}
	cmd.remember(id, "", "", time.Time{})
	var r mcp.CallToolResult
	if json.Unmarshal(raw, &r) != nil {
		return cmd.out.raw(raw)
	}
	t, err := cmd.c.GetTask(ctx, id)
	if err != nil {
		// The result is what counts; say what is known of the task.
		t = &client.Task{ID: id, Status: mcptask.StatusCompleted}
		if r.IsError {
			t.Status = mcptask.StatusFailed
		}
	}
	if err := cmd.out.result(t, &r); err != nil {
		return err
	}
	if r.IsError {
		return failedf("task %s ended with a tool error (isError)", id)
	}
	return nil
}

// listRow is one task of `tasks list`.
type listRow struct {
	id      string
	entry   *history.Entry // what the history remembers, if anything
	task    *client.Task   // the server's answer
	listed  bool           // tasks/list showed it
	missing bool           // tasks/get says the server does not know it
}

func (r *listRow) created() time.Time {
	if r.task != nil && !r.task.CreatedAt.IsZero() {
		return r.task.CreatedAt
	}
	if r.entry != nil {
		return r.entry.Created
	}
	return time.Time{}
}

// getConcurrency bounds the tasks/get requests `tasks list` has in flight.
const getConcurrency = 8

// list runs `tasks list`: the tasks the history remembers for this
// server, each with its status from tasks/get, merged with the server's
// tasks/list where the dialect has one.
func (cmd *command) list(ctx context.Context) error {
	entries, herr := cmd.hist.List(cmd.server())
	if herr != nil {
		fmt.Fprintf(cmd.stderr, "taskbridge: warning: cannot read the task history: %v\n", herr)
	}
	byID := map[string]*listRow{}
	var rows []*listRow
	row := func(id string) *listRow {
		r := byID[id]
		if r == nil {
			r = &listRow{id: id}
			byID[id] = r
			rows = append(rows, r)
		}
		return r
	}
	for i := range entries {
		row(entries[i].ID).entry = &entries[i]
	}
	serverList := cmd.c.Dialect().HasMethod(mcptask.MethodTasksList) && cmd.c.ServerTasks().List
	listed := 0
	if serverList {
		for t, err := range cmd.c.ListTasks(ctx) {
			if err != nil {
				return err
			}
			r := row(t.ID)
			r.task, r.listed = t, true
			listed++
		}
	}
	var todo []*listRow
	for _, r := range rows {
		if r.task == nil {
			todo = append(todo, r)
		}
	}
	errs := make([]error, len(todo))
	sem := make(chan struct{}, getConcurrency)
	var wg sync.WaitGroup
	for i, r := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t, err := cmd.c.GetTask(ctx, r.id)
			switch {
			case errors.Is(err, client.ErrNotFound):
				r.missing = true
			case err != nil:
				errs[i] = err
			default:
				r.task = t
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	slices.SortStableFunc(rows, func(a, b *listRow) int { return a.created().Compare(b.created()) })
	for _, r := range rows {
		if err := cmd.out.listed(r); err != nil {
			return err
		}
	}
	if !cmd.out.json {
		fmt.Fprintln(cmd.out.w, cmd.listSummary(len(rows), len(entries), listed, serverList))
	}
	return nil
}

// listSummary says where the tasks of `tasks list` come from.
func (cmd *command) listSummary(total, remembered, listed int, serverList bool) string {
	s := fmt.Sprintf("%d task(s) on %s: %d from this computer's task history", total, cmd.server(), remembered)
	if p := cmd.hist.Path(); p != "" {
		s += " (" + p + ")"
	} else {
		s += " (off: " + history.EnvPath + "=off)"
	}
	switch {
	case serverList:
		s += fmt.Sprintf(", %d listed by the server (tasks/list: %s)", listed, listScope(cmd.c.target))
	case !cmd.c.Dialect().HasMethod(mcptask.MethodTasksList):
		s += fmt.Sprintf("; the %s extension has no tasks/list, so a task created elsewhere shows once you open it here (tasks get ID)", mcptask.ExtensionID)
	default:
		s += "; the server does not declare tasks/list"
	}
	return s
}

// listScope says which tasks a core-dialect tasks/list shows.
func listScope(t target) string {
	if t.stdio() {
		return "a taskbridge server over stdio lists every task of its local owner; one that authenticates you, your tasks"
	}
	return "the tasks of this session, which is new on every run, or all yours on a server that authenticates you"
}

// parseForget checks `tasks forget ID...` and `tasks forget -all`.
func parseForget(args []string) (*plan, error) {
	fs := flag.NewFlagSet("tasks forget", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	all := fs.Bool("all", false, "forget every task of the server -url or -stdio names")
	ids, err := parseFlags(fs, "tasks forget", args)
	if err != nil {
		return nil, err
	}
	if *all == (len(ids) > 0) {
		return nil, usagef("tasks forget needs task ids, or -all (with -url or -stdio) for every task of a server")
	}
	return &plan{local: func(l *local) error {
		server := l.target.String()
		if *all && server == "" {
			return usagef("tasks forget -all needs -url or -stdio: the server whose tasks to forget")
		}
		if l.hist == nil {
			return errors.New("the task history is off (" + history.EnvPath + "=off)")
		}
		n, err := l.hist.Forget(server, ids...)
		if err != nil {
			return err
		}
		if l.out.json {
			return l.out.line(map[string]any{"event": "forgotten", "count": n})
		}
		fmt.Fprintf(l.out.w, "forgot %d task(s) from the task history (the tasks on the server are untouched)\n", n)
		return nil
	}}, nil
}
