// Package conftools holds the tools the official MCP conformance suite's
// tasks scenarios call, built on taskbridge. Both the conformance example
// server and the integration tests use it.
package conftools

import (
	"context"
	"errors"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// NewServer builds a go-sdk server with the conformance tools on a new
// router over st (taskrouter.NewRouter). The caller starts the router
// (Start) and serves it.
func NewServer(st store.Store, opts *taskrouter.Options) (*mcp.Server, *taskrouter.Router, error) {
	router, err := taskrouter.NewRouter(st, opts)
	if err != nil {
		return nil, nil, err
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "taskbridge-conformance", Version: "0.1.0"}, nil)
	if err := router.Install(srv); err != nil {
		return nil, nil, err
	}
	AddTools(router)
	router.AddTaskTools(nil) // task_result and task_cancel, for clients that only call tools
	return srv, router, nil
}

type greetIn struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

type slowIn struct {
	Seconds float64 `json:"seconds,omitempty" jsonschema:"how long to compute, in seconds"`
	Label   string  `json:"label,omitempty" jsonschema:"a label echoed in the result"`
}

type deleteIn struct {
	Filename string `json:"filename" jsonschema:"the file to delete"`
}

type empty struct{}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func formSchema(prop, typ string) map[string]any {
	return map[string]any{
		"type":       "object",
		"properties": map[string]any{prop: map[string]any{"type": typ}},
		"required":   []string{prop},
	}
}

// AddTools registers the conformance tools on r: the plain ones, then the
// ones that ask the client for input.
func AddTools(r *taskrouter.Router) {
	addOutcomeTools(r)
	addInputTools(r)
}

// addOutcomeTools registers the tools that end each way a call can:
// greet (never a task), slow_compute, failing_job (a tool error) and
// protocol_error_job (a JSON-RPC error).
func addOutcomeTools(r *taskrouter.Router) {
	taskrouter.AddTool(r, &mcp.Tool{Name: "greet", Description: "Greets someone; never a task."},
		func(ctx context.Context, req *mcp.CallToolRequest, in greetIn) (*mcp.CallToolResult, any, error) {
			return text(fmt.Sprintf("Hello, %s!", in.Name)), nil, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskForbidden})

	// maxComputeSeconds bounds slow_compute: beyond ~292 years a duration
	// overflows, and a day is plenty for a test tool.
	const maxComputeSeconds = 86400
	taskrouter.AddTool(r, &mcp.Tool{Name: "slow_compute", Description: "Computes for a number of seconds; a task when the client allows."},
		func(ctx context.Context, req *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
			label := in.Label
			if label == "" {
				label = "default"
			}
			if in.Seconds > maxComputeSeconds || in.Seconds != in.Seconds {
				return nil, nil, fmt.Errorf("seconds must be between 0 and %d, got %v", maxComputeSeconds, in.Seconds)
			}
			if in.Seconds <= 0 {
				return text(fmt.Sprintf("Computation %q completed instantly. Result: 42.", label)), nil, nil
			}
			if err := sleep(ctx, time.Duration(in.Seconds*float64(time.Second))); err != nil {
				return nil, nil, err
			}
			return text(fmt.Sprintf("Computation %q completed after %g seconds. Result: 42.", label, in.Seconds)), nil, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional, Retryable: true})

	taskrouter.AddTool(r, &mcp.Tool{Name: "failing_job", Description: "Always ends with a tool error (isError)."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ empty) (*mcp.CallToolResult, any, error) {
			if err := sleep(ctx, time.Second); err != nil {
				return nil, nil, err
			}
			return nil, nil, errors.New("simulated failure: job crashed")
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskRequired})

	r.AddRawTool(&mcp.Tool{Name: "protocol_error_job", Description: "Always ends with a JSON-RPC error.",
		InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if err := sleep(ctx, 500*time.Millisecond); err != nil {
				return nil, err
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error: simulated protocol error: server internal failure"}
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskRequired})

}

// addInputTools registers the tools that ask the client for input:
// confirm_delete and multi_input while they run as tasks,
// test_tool_with_task before its task exists.
func addInputTools(r *taskrouter.Router) {
	taskrouter.AddTool(r, &mcp.Tool{Name: "confirm_delete", Description: "Asks the client to confirm before deleting a file."},
		func(ctx context.Context, req *mcp.CallToolRequest, in deleteIn) (*mcp.CallToolResult, any, error) {
			res, err := taskrouter.Elicit(ctx, req, &mcp.ElicitParams{
				Mode:            "form",
				Message:         fmt.Sprintf("Delete '%s'?", in.Filename),
				RequestedSchema: formSchema("confirm", "boolean"),
			})
			if err != nil {
				return nil, nil, err
			}
			if res.Action == "accept" && res.Content["confirm"] == true {
				return text(fmt.Sprintf("deleted '%s'", in.Filename)), nil, nil
			}
			return text(fmt.Sprintf("kept '%s'", in.Filename)), nil, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskRequired})

	taskrouter.AddTool(r, &mcp.Tool{Name: "multi_input", Description: "Asks two questions at once."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ empty) (*mcp.CallToolResult, any, error) {
			type answer struct {
				res *mcp.ElicitResult
				err error
			}
			nameCh, confirmCh := make(chan answer, 1), make(chan answer, 1)
			go func() {
				res, err := taskrouter.Elicit(ctx, req, &mcp.ElicitParams{Mode: "form", Message: "Enter your name:", RequestedSchema: formSchema("name", "string")})
				nameCh <- answer{res, err}
			}()
			go func() {
				res, err := taskrouter.Elicit(ctx, req, &mcp.ElicitParams{Mode: "form", Message: "Confirm action?", RequestedSchema: formSchema("confirm", "boolean")})
				confirmCh <- answer{res, err}
			}()
			n, c := <-nameCh, <-confirmCh
			if err := errors.Join(n.err, c.err); err != nil {
				return nil, nil, err
			}
			return text(fmt.Sprintf("name=%q confirmed=%v", n.res.Content["name"], c.res.Content["confirm"] == true)), nil, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskRequired})

	taskrouter.AddTool(r, &mcp.Tool{Name: "test_tool_with_task", Description: "Asks for a name before becoming a task."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ empty) (*mcp.CallToolResult, any, error) {
			name := "stranger"
			if er, ok := req.Params.InputResponses["user_name"].(*mcp.ElicitResult); ok && er.Action == "accept" {
				if s, ok := er.Content["name"].(string); ok && s != "" {
					name = s
				}
			}
			if err := sleep(ctx, 50*time.Millisecond); err != nil {
				return nil, nil, err
			}
			return text(fmt.Sprintf("Hello, %s! (computed in task)", name)), nil, nil
		}, &taskrouter.ToolOptions{
			TaskSupport: mcptask.TaskRequired,
			Preflight: func(ctx context.Context, req *mcp.CallToolRequest) (mcp.InputRequestMap, error) {
				if _, ok := req.Params.InputResponses["user_name"]; ok {
					return nil, nil
				}
				return mcp.InputRequestMap{"user_name": &mcp.ElicitParams{
					Mode: "form", Message: "What is your name?", RequestedSchema: formSchema("name", "string"),
				}}, nil
			},
		})
}
