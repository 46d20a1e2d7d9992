package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/handoff"
)

// Questions to the person at the terminal: elicitations and workflow placeholders.

// asker asks the person at the terminal.
type asker struct {
	mu  sync.Mutex
	in  *bufio.Reader
	out io.Writer
}

func newAsker(in io.Reader, out io.Writer) *asker {
	return &asker{in: bufio.NewReader(in), out: out}
}

func (a *asker) ask(question string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fmt.Fprintf(a.out, "%s ", question)
	line, err := a.in.ReadString('\n')
	if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
		return "", fmt.Errorf("reading your answer: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// answer handles a task's elicitation on the terminal.
func (a *asker) answer(ctx context.Context, taskID string, req client.InputRequest) (json.RawMessage, error) {
	if req.Method != "elicitation/create" {
		return nil, fmt.Errorf("the CLI cannot answer %s", req.Method)
	}
	var p struct {
		Message         string `json:"message"`
		RequestedSchema struct {
			Properties map[string]struct {
				Type        string `json:"type"`
				Description string `json:"description"`
			} `json:"properties"`
		} `json:"requestedSchema"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil {
		return nil, err
	}
	fmt.Fprintf(a.out, "\nThe server asks (task %s): %s\n", taskID, p.Message)
	content := map[string]any{}
	names := make([]string, 0, len(p.RequestedSchema.Properties))
	for n := range p.RequestedSchema.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		prop := p.RequestedSchema.Properties[n]
		ans, err := a.ask(fmt.Sprintf("  %s (%s):", n, prop.Type))
		if err != nil {
			return nil, err
		}
		content[n] = typed(ans, prop.Type)
	}
	return json.Marshal(map[string]any{"action": "accept", "content": content})
}

func typed(s, typ string) any {
	switch typ {
	case "boolean":
		switch strings.ToLower(s) {
		case "y", "yes", "true", "1":
			return true
		}
		return false
	case "number", "integer":
		var f float64
		if _, err := fmt.Sscan(s, &f); err == nil {
			return f
		}
	}
	return s
}

// fill asks for a workflow step's placeholder arguments.
func (a *asker) fill(ctx context.Context, step handoff.RemainingStep, placeholders []string) (map[string]any, error) {
	fmt.Fprintf(a.out, "\nStep %q: call %s", step.Name, step.Tool)
	if step.Guidance != "" {
		fmt.Fprintf(a.out, " — %s", step.Guidance)
	}
	fmt.Fprintln(a.out)
	out := map[string]any{}
	for _, name := range placeholders {
		var desc string
		_ = json.Unmarshal(step.Arguments[name], &desc)
		ans, err := a.ask(fmt.Sprintf("  %s %s:", name, desc))
		if err != nil {
			return nil, err
		}
		var v any
		if err := json.Unmarshal([]byte(ans), &v); err != nil {
			v = ans
		}
		out[name] = v
	}
	return out, nil
}
