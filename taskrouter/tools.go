package taskrouter

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ToolOptions say how a tool behaves as a task.
type ToolOptions struct {
	// TaskSupport is the level advertised in tools/list as
	// execution.taskSupport. The zero value means TaskForbidden.
	TaskSupport TaskSupport
	// Retryable marks the tool as safe to run again from the start: a task
	// of it that a dead process left running is re-run on Start instead of
	// being failed.
	Retryable bool
	// Preflight, when set, runs on each tools/call of the tool that would
	// become a task, before the task is created, and returns the client
	// input still needed (nil when ready). In the extension dialect a
	// non-empty map goes back to the client as an input_required result
	// (SEP-2322 multi round-trip) and no task exists yet; the client retries
	// with inputResponses. In the core dialect the router asks the client
	// directly on the request's stream and runs Preflight again. Handlers
	// read the answers from req.Params.InputResponses.
	Preflight func(ctx context.Context, req *mcp.CallToolRequest) (mcp.InputRequestMap, error)
}

// AddTool adds a typed tool to the router's server exactly like
// mcp.AddTool (the SDK infers schemas and validates input), and records
// how it behaves as a task. Install must have been called.
func AddTool[In, Out any](r *Router, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out], opts ToolOptions) {
	srv := r.mustServer()
	r.SetToolOptions(t.Name, opts)
	mcp.AddTool(srv, t, h)
}

// AddRawTool adds an untyped tool, like (*mcp.Server).AddTool.
func (r *Router) AddRawTool(t *mcp.Tool, h mcp.ToolHandler, opts ToolOptions) {
	srv := r.mustServer()
	r.SetToolOptions(t.Name, opts)
	srv.AddTool(t, h)
}

// SetToolOptions sets the task behaviour of a tool registered directly on
// the server.
func (r *Router) SetToolOptions(name string, opts ToolOptions) {
	if opts.TaskSupport == "" {
		opts.TaskSupport = TaskForbidden
	}
	switch opts.TaskSupport {
	case TaskForbidden, TaskOptional, TaskRequired:
	default:
		panic(fmt.Sprintf("taskrouter: tool %q: unknown task support %q", name, opts.TaskSupport))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tools[name] = &toolEntry{support: opts.TaskSupport, retryable: opts.Retryable, preflight: opts.Preflight}
}

func (r *Router) tool(name string) (toolEntry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	te, ok := r.tools[name]
	if !ok {
		return toolEntry{support: TaskForbidden}, false
	}
	return *te, true
}

func (r *Router) mustServer() *mcp.Server {
	if r.server == nil {
		panic("taskrouter: call Install before adding tools")
	}
	return r.server
}
