package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// The event tool: in an LLM host a model has neither tasks/update nor an
// HTTP client, so every step a model may be asked to perform must be a
// tool call. A model delivers an event (a person's decision it asked the
// user for), a question's answer or a text a sampling step asks it to
// write by calling the bridge's event tool with the task id, the step's
// name and its payload; the handoff names the tool, the step and the
// payload's fields.

// DefaultEventTool is the default Options.EventTool.
const DefaultEventTool = "workflow_event"

// eventIn is the event tool's input.
type eventIn struct {
	Name    string          `json:"event"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// addEventTool registers the event tool on s, once.
func (b *Bridge) addEventTool(s *mcp.Server) {
	b.mu.Lock()
	done := b.eventTool
	b.eventTool = true
	b.mu.Unlock()
	if done {
		return
	}
	schema := map[string]any{"type": "object", "required": []string{"event"}, "properties": map[string]any{
		"event":   map[string]any{"type": "string", "description": "The name of the step the workflow waits for (the handoff names it): an event, a question, a sampling step."},
		"payload": map[string]any{"type": "object", "description": "The step's payload: a JSON object with the fields the handoff lists."},
	}}
	s.AddTool(&mcp.Tool{Name: b.opts.EventTool, InputSchema: schema,
		Description: "Deliver what a workflow step waits for from you, as the handoff says: an event or a person's answer (ask the user first), or a text the step asks you to write; with the task id as _task_id, the step's name as event, and its payload. Returns where the workflow stands."},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			// Calls that name a task reach the bridge as continuations
			// (eventCall); this one named none.
			return refusal("call %s with the workflow task's id as the argument %s (the handoff gives it), the event and its payload", b.opts.EventTool, mcptask.ArgTaskID), nil
		})
}

// eventCall serves a call of the event tool bound to workflow task t (a
// continuation): it delivers the event, answering with where the
// workflow stands. What the caller can fix (an unknown or ended event, a
// payload that does not match) is a tool error naming it; nothing is
// recorded then.
func (b *Bridge) eventCall(ctx context.Context, q *taskrouter.Request, t *store.Task, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in eventIn
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.Name == "" {
		return refusal("the arguments must be an object with the event's name as \"event\" and its payload as \"payload\" (an object)"), nil
	}
	payload := in.Payload
	if len(payload) == 0 || string(payload) == "null" {
		payload = json.RawMessage("{}")
	}
	res, _, err := b.deliver(ctx, t.ID, in.Name, payload, string(mcptask.ExecClient), viaTool, readerOf(q))
	var je *jsonrpc.Error
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, store.ErrNotFound), errors.Is(err, ErrNotWaiting):
		return refusal("%v; nothing was recorded", err), nil
	case errors.As(err, &je) && je.Code == mcptask.CodeInvalidParams:
		return refusal("%s; nothing was recorded: call %s again with a payload that matches", je.Message, b.opts.EventTool), nil
	}
	return nil, err
}

// refusal is a tool result with isError, for what the caller can fix.
func refusal(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}
