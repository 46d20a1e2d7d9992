package clitest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// The jobs fixture: one tool per way a call can go, as the CLI and the
// TUI show it.
//
//   - greet (task support forbidden): "Hello, <name>!".
//   - slow_compute (optional, retryable): seconds (0 for at once) and a
//     label; `Computation "<label>" completed ...`.
//   - failing_job (required): ends after a second with the tool error
//     "simulated failure: job crashed".
//   - protocol_error_job (required): ends with the JSON-RPC error
//     "internal error: simulated protocol error".
//   - confirm_delete (required): asks the client to confirm (a boolean
//     form), then "deleted '<filename>'" or "kept '<filename>'".

type greetIn struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

type computeIn struct {
	Seconds float64 `json:"seconds,omitempty" jsonschema:"how long to compute, in seconds"`
	Label   string  `json:"label,omitempty" jsonschema:"a label echoed in the result"`
}

type deleteIn struct {
	Filename string `json:"filename" jsonschema:"the file to delete"`
}

func textResult(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func addJobs(b *builder.Builder) {
	builder.Tool(b, &mcp.Tool{Name: "greet", Description: "Greet someone; never a task."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in greetIn) (*mcp.CallToolResult, any, error) {
			return textResult("Hello, %s!", in.Name), nil, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskForbidden})
	builder.Tool(b, &mcp.Tool{Name: "slow_compute", Description: "Compute for a number of seconds; a task when the client allows."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in computeIn) (*mcp.CallToolResult, any, error) {
			if in.Seconds < 0 || in.Seconds > 3600 {
				return nil, nil, fmt.Errorf("seconds must be between 0 and 3600, got %v", in.Seconds)
			}
			if err := pause(ctx, time.Duration(in.Seconds*float64(time.Second))); err != nil {
				return nil, nil, err
			}
			return textResult("Computation %q completed after %g seconds.", in.Label, in.Seconds), nil, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional, Retryable: true})
	builder.Tool(b, &mcp.Tool{Name: "failing_job", Description: "Ends with a tool error (isError) after a second."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			if err := pause(ctx, time.Second); err != nil {
				return nil, nil, err
			}
			return nil, nil, errors.New("simulated failure: job crashed")
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskRequired})
	b.RawTool(&mcp.Tool{Name: "protocol_error_job", Description: "Ends with a JSON-RPC error.", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if err := pause(ctx, 200*time.Millisecond); err != nil {
				return nil, err
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error: simulated protocol error"}
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskRequired})
	builder.Tool(b, &mcp.Tool{Name: "confirm_delete", Description: "Ask the client to confirm before deleting a file."},
		func(ctx context.Context, req *mcp.CallToolRequest, in deleteIn) (*mcp.CallToolResult, any, error) {
			res, err := taskrouter.Elicit(ctx, req, &mcp.ElicitParams{
				Mode:    "form",
				Message: fmt.Sprintf("Delete '%s'?", in.Filename),
				RequestedSchema: map[string]any{
					"type":       "object",
					"properties": map[string]any{"confirm": map[string]any{"type": "boolean"}},
					"required":   []string{"confirm"},
				},
			})
			if err != nil {
				return nil, nil, err
			}
			if res.Action == "accept" && res.Content["confirm"] == true {
				return textResult("deleted '%s'", in.Filename), nil, nil
			}
			return textResult("kept '%s'", in.Filename), nil, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskRequired})
}
