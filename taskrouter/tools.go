package taskrouter

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// ToolOptions say how a tool behaves as a task; nil means the defaults
// (a tool that never runs as a task).
type ToolOptions struct {
	// TaskSupport is the level advertised in tools/list as
	// execution.taskSupport. The zero value means mcptask.TaskForbidden.
	TaskSupport mcptask.TaskSupport
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

// toolEntry is what the router knows of a tool it registered: its
// definition, its task options, and how to check its arguments before a
// task exists.
type toolEntry struct {
	tool *mcp.Tool
	opts ToolOptions // TaskSupport filled in (mcptask.TaskForbidden when unset)
	// check decodes and validates arguments as the tool's typed handler
	// does (see toolcall.go), returning the handler's input; nil for raw
	// tools, whose handlers validate for themselves.
	check argCheck
}

// AddTool adds a typed tool to the router's server, as mcp.AddTool does
// (the schemas inferred from In and Out unless given, the input validated
// and decoded, the output checked and put in structuredContent; see
// toolcall.go), and records it in the router's registry with its task
// behaviour. The router holds the tool's handler, so a call it checks
// before running it (a task about to be created) decodes and validates
// the arguments once. Install must have been called. It panics, as
// mcp.AddTool does, on an unusable schema.
func AddTool[In, Out any](r *Router, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out], opts *ToolOptions) {
	addTool(&r.tools, t, h, opts)
}

// toolAdder registers tools on the router's server: what a feature that
// brings its own tools (the schedule tools, the pause tools) needs of
// the engine. *toolRegistry has it.
type toolAdder interface {
	addTool(t *mcp.Tool, h mcp.ToolHandler, opts *ToolOptions, check argCheck)
}

// addTool is AddTool on a toolAdder.
func addTool[In, Out any](g toolAdder, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out], opts *ToolOptions) {
	tt, handler, check, err := typedTool(t, h)
	if err != nil {
		panic(fmt.Sprintf("taskrouter: AddTool %q: %v", t.Name, err))
	}
	g.addTool(tt, handler, opts, check)
}

// AddRawTool adds an untyped tool, like (*mcp.Server).AddTool, and records
// it in the router's registry. As with the SDK, the handler validates its
// own arguments.
func (r *Router) AddRawTool(t *mcp.Tool, h mcp.ToolHandler, opts *ToolOptions) {
	r.tools.addTool(t, h, opts, nil)
}

// CheckToolArguments checks args against the input schema of tool name as
// the server advertises it (a tool added with AddTool: the same check the
// SDK makes before the handler runs; with AddRawTool: its InputSchema), and
// returns a -32602 naming what does not match. A tool the registry holds
// no schema of passes. Components that run a tool for someone who cannot
// read a tool result (the webhook of a workflow step) check first, so that
// arguments the tool would refuse record nothing.
func (r *Router) CheckToolArguments(name string, args json.RawMessage) error {
	te, ok := r.tools.lookup(name)
	if !ok {
		return nil
	}
	var check func(json.RawMessage) error
	switch {
	case te.check != nil:
		check = func(args json.RawMessage) error { _, err := te.check(args); return err }
	case te.tool != nil && te.tool.InputSchema != nil:
		check = schemaCheck(te.tool.InputSchema)
	}
	if check == nil {
		return nil
	}
	if err := check(args); err != nil {
		return mcptask.InvalidParams("invalid arguments for tool %q: %v", name, err)
	}
	return nil
}

// schemaCheck validates arguments against a raw tool's input schema (any
// JSON-encodable schema value); nil when the schema cannot be read.
func schemaCheck(schema any) func(json.RawMessage) error {
	b, err := json.Marshal(schema)
	if err != nil {
		return nil
	}
	s := new(jsonschema.Schema)
	if err := json.Unmarshal(b, s); err != nil {
		return nil
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		return nil
	}
	return func(args json.RawMessage) error {
		var v any = map[string]any{}
		if len(args) > 0 {
			m := map[string]any{}
			if err := json.Unmarshal(args, &m); err != nil {
				return fmt.Errorf("unmarshaling arguments: %w", err)
			}
			v = m
		}
		return resolved.Validate(&v)
	}
}

// SetToolOptions sets the task behaviour of a tool registered directly on
// the server (not through AddTool or AddRawTool).
func (r *Router) SetToolOptions(name string, opts *ToolOptions) {
	r.tools.addTool(&mcp.Tool{Name: name}, nil, opts, nil)
}

// toolRegistry is what the router knows of tools: the entries AddTool,
// AddRawTool and SetToolOptions registered, the tools that take the
// argument _task_id (host mode), the names of the built-in task tools and
// the continuation handler. It is written while the server is set up and
// read on every tools/call and tools/list, hence the RWMutex. Its lock is
// a leaf: nothing else is locked while it is held.
type toolRegistry struct {
	mu           sync.RWMutex
	entries      map[string]*toolEntry // by tool name
	taskIDTools  map[string]bool       // tools that take the argument _task_id (host mode)
	resultTool   string                // the built-in task_result tool's name, once registered
	cancelTool   string                // and task_cancel's
	pauseNames   *TaskToolsOptions     // the pause tools' names, once AddTaskTools asked for them
	pauseAdded   bool                  // and whether they are registered (see pauseToolsIfPausable)
	continuation ContinuationHandler
	server       *mcp.Server // the server tools are added to, once Install ran
}

// install records the server tools are added to.
func (g *toolRegistry) install(s *mcp.Server) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.server = s
}

// mustServer returns the server Install put the router on; it panics
// before Install.
func (g *toolRegistry) mustServer() *mcp.Server {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.server == nil {
		panic("taskrouter: call Install before adding tools")
	}
	return g.server
}

// addTool records t with its task behaviour and, when h is set, adds it
// to the server with h as its handler. It panics before Install and on
// an unknown task support level.
func (g *toolRegistry) addTool(t *mcp.Tool, h mcp.ToolHandler, o *ToolOptions, check argCheck) {
	var opts ToolOptions
	if o != nil {
		opts = *o
	}
	var srv *mcp.Server
	if h != nil {
		srv = g.mustServer()
	}
	if opts.TaskSupport == "" {
		opts.TaskSupport = mcptask.TaskForbidden
	}
	if !opts.TaskSupport.Valid() {
		panic(fmt.Sprintf("taskrouter: tool %q: unknown task support %q", t.Name, opts.TaskSupport))
	}
	g.add(&toolEntry{tool: t, opts: opts, check: check})
	if srv != nil {
		srv.AddTool(t, h)
	}
}

// add registers te under its tool's name, replacing an earlier entry.
func (g *toolRegistry) add(te *toolEntry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.entries == nil {
		g.entries = map[string]*toolEntry{}
	}
	g.entries[te.tool.Name] = te
}

// lookup returns the registry entry of a tool; an unknown tool has task
// support forbidden.
func (g *toolRegistry) lookup(name string) (toolEntry, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	te, ok := g.entries[name]
	if !ok {
		return toolEntry{opts: ToolOptions{TaskSupport: mcptask.TaskForbidden}}, false
	}
	return *te, true
}

// supportOf returns the task support of the tools of list the registry
// knows.
func (g *toolRegistry) supportOf(tools []*mcp.Tool) map[string]mcptask.TaskSupport {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make(map[string]mcptask.TaskSupport, len(tools))
	for _, t := range tools {
		if te, ok := g.entries[t.Name]; ok {
			out[t.Name] = te.opts.TaskSupport
		}
	}
	return out
}

// registered returns the tools registered with a definition (AddTool,
// AddRawTool), sorted by name.
func (g *toolRegistry) registered() []*mcp.Tool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]*mcp.Tool, 0, len(g.entries))
	for _, te := range g.entries {
		if te.tool != nil && (te.check != nil || te.tool.InputSchema != nil) {
			out = append(out, te.tool)
		}
	}
	slices.SortFunc(out, func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// acceptTaskID makes tool name take the argument _task_id.
func (g *toolRegistry) acceptTaskID(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.taskIDTools == nil {
		g.taskIDTools = map[string]bool{}
	}
	g.taskIDTools[name] = true
}

// takesTaskID reports whether tool name takes the argument _task_id.
func (g *toolRegistry) takesTaskID(name string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.taskIDTools[name]
}

// taskIDToolsOf returns the tools of list that take the argument _task_id.
func (g *toolRegistry) taskIDToolsOf(tools []*mcp.Tool) map[string]bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out map[string]bool
	for _, t := range tools {
		if g.taskIDTools[t.Name] {
			if out == nil {
				out = map[string]bool{}
			}
			out[t.Name] = true
		}
	}
	return out
}

// setTaskTools records the names of the built-in task tools: task_result
// and task_cancel, registered, and the pause tools', to register once a
// kind can pause (claimPauseTools).
func (g *toolRegistry) setTaskTools(result, cancel string, pause TaskToolsOptions) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.resultTool, g.cancelTool = result, cancel
	g.pauseNames = &pause
}

// claimPauseTools returns the pause tools' names when AddTaskTools asked
// for them and nobody claimed them before (the caller registers them),
// nil otherwise.
func (g *toolRegistry) claimPauseTools() *TaskToolsOptions {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pauseNames == nil || g.pauseAdded {
		return nil
	}
	g.pauseAdded = true
	return g.pauseNames
}

// resultToolName is the name of the built-in task_result tool, or "" when
// it is not registered.
func (g *toolRegistry) resultToolName() string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.resultTool
}

// cancelToolName is the name of the built-in task_cancel tool.
func (g *toolRegistry) cancelToolName() string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.cancelTool
}

// setContinuation sets the handler of tools/call with _meta._task_id.
func (g *toolRegistry) setContinuation(h ContinuationHandler) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.continuation = h
}

// continuationHandler returns the handler SetContinuation set, or nil.
func (g *toolRegistry) continuationHandler() ContinuationHandler {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.continuation
}

// CallTool runs a tool of the installed server in-process and in the
// caller's goroutine, never as a task: the request goes straight to the
// SDK's tool dispatch below the router's middleware (lookup, input
// validation, the handler, output validation), with no JSON-RPC encoding.
// session is the session the tool's handler sees in req.Session (the
// client's session when the call is made on behalf of a request, so its
// logs and progress reach that client); nil uses the router's loopback
// session, whose client end discards everything. args may be any
// JSON-encodable value or a json.RawMessage.
//
// It is how the workflow bridge runs server steps and how the engine
// re-runs retryable tools after a restart.
func (r *Router) CallTool(ctx context.Context, session *mcp.ServerSession, name string, args any, meta mcp.Meta) (*mcp.CallToolResult, error) {
	raw, ok := args.(json.RawMessage)
	if !ok && args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("taskrouter: encoding arguments of %q: %w", name, err)
		}
		raw = b
	}
	params := &mcp.CallToolParamsRaw{Name: name, Arguments: raw}
	if len(meta) > 0 {
		params.Meta = meta
	}
	return r.RunTool(ctx, &mcp.CallToolRequest{Session: session, Params: params})
}

// RunTool runs a tools/call request in the caller's goroutine, never as a
// task, through the SDK's tool dispatch (see CallTool). A nil req.Session
// is replaced by the loopback session. The continuation handler uses it to
// run the tool a client called. With a context from Track the tool is a
// step of the task: it first waits for a step slot
// (Options.MaxConcurrentSteps), unless the context's step holds one
// already (the tool of a step calling another tool).
func (r *Router) RunTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if r.inner == nil {
		return nil, fmt.Errorf("taskrouter: Install has not been called")
	}
	if m, ok := ctx.Value(stepKey{}).(stepMark); ok && !m.holding {
		release, err := r.quotas.acquireStep(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		m.holding = true
		ctx = context.WithValue(ctx, stepKey{}, m)
	}
	if req.Session == nil {
		ss, err := r.loop.session(ctx)
		if err != nil {
			return nil, err
		}
		req.Session = ss
	}
	res, err := r.inner(ctx, mcptask.MethodToolsCall, req)
	if err != nil {
		return nil, err
	}
	ctr, ok := res.(*mcp.CallToolResult)
	if !ok {
		return nil, mcptask.InternalError("tool %q returned %T, not a tool result", req.Params.Name, res)
	}
	return ctr, nil
}

// RegisteredTools returns the tools added through AddTool and AddRawTool,
// with the input schemas the server advertises for them, without touching
// the server (a tools/list in-process would open the loopback session:
// registering prompts or resources while a session exists makes the SDK
// send list_changed notifications).
func (r *Router) RegisteredTools() []*mcp.Tool { return r.tools.registered() }

// AcceptTaskIDArgument makes tool name take the argument _task_id (see
// above); the workflow bridge calls it for every tool a client may be asked
// to call for a workflow step.
func (r *Router) AcceptTaskIDArgument(name string) { r.tools.acceptTaskID(name) }

// A ContinuationHandler serves a tools/call bound to an existing task with
// _meta._task_id (mcptask.MetaTaskID): the workflow bridge records the
// call's outcome on its workflow task. It runs the tool itself, in the
// request, with Router.CallTool. When the call also carries the
// argument _task_id (mcptask.ArgTaskID) naming another task than _meta
// does, the argument is left in the arguments for the handler to judge
// (the workflow bridge accepts a step of a workflow's child or item named
// so, and refuses the rest); otherwise the argument was moved into _meta.
type ContinuationHandler func(ctx context.Context, q *Request, req *mcp.CallToolRequest) (mcp.Result, error)

// SetContinuation makes h serve every tools/call that carries
// _meta._task_id. Without one, such calls are ordinary tool calls.
func (r *Router) SetContinuation(h ContinuationHandler) { r.tools.setContinuation(h) }

// AddTaskTools registers the built-in tools task_result and task_cancel
// (names from opts) on the router's server, and task_pause and
// task_resume once a kind of task can be paused (a handler that is a
// Pauser, registered before or after: the workflow bridge's), so a server
// with nothing to pause lists no pause tools to a model. Install must
// have been called.
func (r *Router) AddTaskTools(opts *TaskToolsOptions) { r.taskTools.add(opts) }
