package main

// Questions to the person at the terminal: elicitations, workflow
// placeholders, and corrected arguments for a step the server handed over.
// Every answer is checked against the schema it is for and asked again
// when the schema refuses it.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/argschema"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// maxAsks bounds how often one question is asked again after a refused
// answer.
const maxAsks = 5

// asker asks the person at the terminal. A question waits for a line of
// stdin, for the end of the context it is asked in, or for the end of the
// command (Ctrl-C, -timeout), whichever comes first: an interrupted
// command never hangs on a question.
type asker struct {
	mu    sync.Mutex
	in    *bufio.Reader
	out   io.Writer
	ctx   context.Context // the command's
	once  sync.Once
	lines chan readLine // lines of stdin, read one ahead of the questions
	end   error         // stdin ended (or failed) with this
}

type readLine struct {
	text string
	err  error
}

func newAsker(ctx context.Context, in io.Reader, out io.Writer) *asker {
	return &asker{in: bufio.NewReader(in), out: out, ctx: ctx}
}

// read reads stdin line by line until it ends.
func (a *asker) read() {
	for {
		line, err := a.in.ReadString('\n')
		a.lines <- readLine{line, err}
		if err != nil {
			return
		}
	}
}

func (a *asker) ask(ctx context.Context, question string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fmt.Fprintf(a.out, "%s ", question)
	if a.end != nil {
		return "", fmt.Errorf("reading your answer: %w", a.end)
	}
	a.once.Do(func() {
		a.lines = make(chan readLine)
		go a.read()
	})
	var r readLine
	select {
	case r = <-a.lines:
	case <-ctx.Done():
		fmt.Fprintln(a.out)
		return "", ctx.Err()
	case <-a.ctx.Done():
		fmt.Fprintln(a.out)
		return "", a.ctx.Err()
	}
	if r.err != nil {
		a.end = r.err
		if r.text == "" || !errors.Is(r.err, io.EOF) {
			return "", fmt.Errorf("reading your answer: %w", r.err)
		}
	}
	return strings.TrimSpace(r.text), nil
}

// askField asks for one field until the answer fits its schema. label is
// the question; current, when not empty, is kept on an empty answer.
// yesNo also accepts y/yes/n/no for a boolean (an elicitation's question).
// set is false for an optional field left empty.
func (a *asker) askField(ctx context.Context, label string, f argschema.Field, current string, yesNo bool) (v any, set bool, err error) {
	question := fmt.Sprintf("  %s (%s)", label, f.Hint())
	if current != "" {
		question += fmt.Sprintf(" [%s]", oneLine(current, 60))
	}
	for range maxAsks {
		ans, err := a.ask(ctx, question+":")
		if err != nil {
			return nil, false, err
		}
		if ans == "" && current != "" {
			ans = current
		}
		if yesNo && f.Type == "boolean" {
			switch strings.ToLower(ans) {
			case "y", "yes":
				ans = "true"
			case "n", "no":
				ans = "false"
			}
		}
		v, set, err := f.Parse(ans)
		if err == nil {
			return v, set, nil
		}
		fmt.Fprintf(a.out, "    ✗ %v — try again\n", err)
	}
	return nil, false, fmt.Errorf("no valid value for %s after %d tries", f.Name, maxAsks)
}

// answer handles a task's elicitation on the terminal.
func (a *asker) answer(ctx context.Context, taskID string, req client.InputRequest) (json.RawMessage, error) {
	p, err := req.Elicitation()
	if err != nil {
		return nil, fmt.Errorf("the CLI cannot answer %s", req.Method)
	}
	fields, err := argschema.Fields(p.RequestedSchema)
	if err != nil {
		return nil, err
	}
	who := "The server asks"
	if taskID != "" {
		who += " (task " + taskID + ")"
	}
	fmt.Fprintf(a.out, "\n%s: %s\n", who, p.Message)
	content := map[string]any{}
	for _, f := range fields {
		v, set, err := a.askField(ctx, f.Name, f, argschema.Format(f.Default), true)
		if err != nil {
			return nil, err
		}
		if set {
			content[f.Name] = v
		}
	}
	return json.Marshal(map[string]any{"action": "accept", "content": content})
}

// fieldFor returns the schema field of a tool argument, or an untyped
// field when the tool's schema does not describe it.
func fieldFor(fields []argschema.Field, name string) argschema.Field {
	if f, ok := argschema.Lookup(fields, name); ok {
		return f
	}
	return argschema.Field{Name: name, Required: true}
}

// fill asks for a workflow step's placeholder arguments, checking each
// answer against the tool's input schema.
func (a *asker) fill(ctx context.Context, step handoff.RemainingStep, placeholders []string, fields []argschema.Field) (map[string]any, error) {
	fmt.Fprintf(a.out, "\nStep %q: call %s", step.Name, step.Tool)
	if step.Guidance != "" {
		fmt.Fprintf(a.out, " — %s", step.Guidance)
	}
	fmt.Fprintln(a.out)
	out := map[string]any{}
	for _, name := range placeholders {
		var desc string
		_ = json.Unmarshal(step.Arguments[name], &desc)
		f := fieldFor(fields, name)
		if cf, ok := callFill(step, name); ok && f.Type == "" {
			f.Type = cf.Type // an event's payload field: its type is the handoff's
		}
		f.Required = true // the workflow needs a value
		v, _, err := a.askField(ctx, name+" "+desc, f, "", false)
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

// callFill is the value named name that the call of step lists for the
// client to fill (handoff.Call.Fill), when it does.
func callFill(step handoff.RemainingStep, name string) (handoff.Fill, bool) {
	if step.Call == nil {
		return handoff.Fill{}, false
	}
	for _, f := range step.Call.Fill {
		if f.Name == name {
			return f, true
		}
	}
	return handoff.Fill{}, false
}

// repair shows why the server gave up on a step it handed to the client
// and asks for the arguments to perform it with, prefilled with the
// resolved ones (an empty answer keeps a value). An argument naming the
// workflow task (_task_id) is taskID, never asked.
func (a *asker) repair(ctx context.Context, step handoff.RemainingStep, fields []argschema.Field, taskID string) (map[string]any, error) {
	fmt.Fprintf(a.out, "\nStep %q (tool %s) failed on the server", step.Name, step.Tool)
	if step.Attempts > 0 {
		fmt.Fprintf(a.out, " after %d attempt(s)", step.Attempts)
	}
	fmt.Fprintln(a.out, " and is handed to you.")
	if step.Error != "" {
		fmt.Fprintf(a.out, "  error: %s\n", step.Error)
	}
	fmt.Fprintln(a.out, "  Correct the arguments (Enter keeps the value in brackets):")
	var names []string
	for _, f := range fields {
		if _, ok := step.Arguments[f.Name]; ok || f.Required {
			names = append(names, f.Name)
		}
	}
	for name := range step.Arguments {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	out := map[string]any{}
	for _, name := range names {
		if name == mcptask.MetaTaskID {
			out[name] = taskID
			continue
		}
		cur := ""
		if raw, ok := step.Arguments[name]; ok && !handoff.IsPlaceholder(raw) {
			cur = argschema.Format(raw)
			if cur == "" {
				cur = `""`
			}
		}
		v, set, err := a.askField(ctx, name, fieldFor(fields, name), cur, false)
		if err != nil {
			return nil, err
		}
		if set {
			out[name] = v
		}
	}
	return out, nil
}
