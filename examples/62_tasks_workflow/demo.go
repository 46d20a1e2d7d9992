package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// taskView is the part of a tasks/get reply the demo prints.
type taskView struct {
	mcp.ResultBase
	TaskID        string          `json:"taskId"`
	Status        string          `json:"status"`
	StatusMessage string          `json:"statusMessage,omitempty"`
	Result        json.RawMessage `json:"result,omitempty"`
}

// demo runs the whole bridge lifecycle in one process and narrates it.
func demo(ctx context.Context, dbPath string, w io.Writer) error {
	b, err := newBuilder(options{DB: dbPath})
	if err != nil {
		return err
	}
	srv, err := b.WithoutEnv().Build(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()

	// The demo's client: a go-sdk client that declares the tasks extension.
	caps := &mcp.ClientCapabilities{}
	caps.AddExtension(mcptask.ExtensionID, nil)
	client := mcp.NewClient(&mcp.Implementation{Name: "demo-client", Version: "0.1.0"}, &mcp.ClientOptions{Capabilities: caps})
	if err := mcp.AddSendingCustomMethod[*taskrouter.TaskIDParams, *taskView](client, "tasks/get"); err != nil {
		return err
	}
	transport, err := srv.Connect(ctx)
	if err != nil {
		return err
	}
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		return err
	}
	defer cs.Close()

	fmt.Fprintf(w, "taskbridge example 62: the task-prompt bridge (store: bbolt at %s)\n\n", dbPath)

	// 1. Get the workflow prompt: a durable task is created and the server
	// runs the steps it can.
	args := map[string]string{"repo": "taskbridge", "since": "v0.1.0"}
	fmt.Fprintf(w, "1. Client -> prompts/get release_notes %s\n", compact(args))
	res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "release_notes", Arguments: args})
	if err != nil {
		return fmt.Errorf("prompts/get: %w", err)
	}
	for _, m := range res.Messages[:len(res.Messages)-1] {
		fmt.Fprintf(w, "   [%s] %s\n", m.Role, oneLine(text(m.Content), 150))
	}

	// 2. The final assistant message is the handoff: prose, then JSON.
	doc, err := handoff.FromPromptResult(res)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n2. Handoff (the prompt's final assistant message):\n\n%s\n", indent(text(res.Messages[len(res.Messages)-1].Content)))

	// 3. Act as the client: perform each client step with _meta._task_id.
	for _, step := range doc.ClientSteps() {
		callArgs := map[string]any{}
		for k, v := range step.Arguments {
			if handoff.IsPlaceholder(v) {
				continue
			}
			var val any
			_ = json.Unmarshal(v, &val)
			callArgs[k] = val
		}
		// The values a reviewer (or an LLM following the prose) would supply.
		callArgs["feedback"] = "Looks good; ship it."
		callArgs["approved"] = true
		fmt.Fprintf(w, "3. Client -> tools/call %s with _meta._task_id=%s\n", step.Tool, doc.TaskID)
		out, err := cs.CallTool(ctx, &mcp.CallToolParams{
			Meta:      mcp.Meta{mcptask.MetaTaskID: doc.TaskID},
			Name:      step.Tool,
			Arguments: callArgs,
		})
		if err != nil {
			return fmt.Errorf("continuation %s: %w", step.Tool, err)
		}
		summary, _ := json.Marshal(out.Meta[mcptask.MetaWorkflow])
		fmt.Fprintf(w, "   tool result: %s\n   workflow: %s\n", oneLine(text(out.Content[0]), 120), summary)
	}

	// 4. The task is complete: tasks/get carries the workflow's result.
	fmt.Fprintf(w, "\n4. Client -> tasks/get %s\n", doc.TaskID)
	tv, err := mcp.CallCustomMethod[*taskrouter.TaskIDParams, *taskView](ctx, cs, "tasks/get", &taskrouter.TaskIDParams{TaskID: doc.TaskID})
	if err != nil {
		return fmt.Errorf("tasks/get: %w", err)
	}
	fmt.Fprintf(w, "   status: %s\n", tv.Status)
	if tv.Status != "completed" {
		return fmt.Errorf("workflow task ended %s (%s)", tv.Status, tv.StatusMessage)
	}
	final, err := handoff.FromPromptResult(decodePrompt(tv.Result))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n5. Workflow result: %d steps completed\n", len(final.CompletedSteps))
	for _, s := range final.CompletedSteps {
		fmt.Fprintf(w, "   - %s (%s): %s\n", s.Name, s.Tool, oneLine(string(s.Result), 100))
	}
	return nil
}

func decodePrompt(raw json.RawMessage) *mcp.GetPromptResult {
	var r mcp.GetPromptResult
	_ = json.Unmarshal(raw, &r)
	return &r
}

func text(c mcp.Content) string {
	if tc, ok := c.(*mcp.TextContent); ok {
		return tc.Text
	}
	return fmt.Sprintf("%T", c)
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

func indent(s string) string {
	return "   " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n   ")
}
