package taskrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
)

// Install puts the router's MCP face onto s: the tasks/* methods, the
// capability advertisements of both dialects, execution.taskSupport in
// tools/list, task-augmented tools/call, and the removal of the shims'
// private _meta keys from every request. Call it once, right after
// mcp.NewServer and before adding tools with AddTool.
//
// The router's middleware must be the only place that turns tools/call
// into tasks. Middleware added to s after Install runs before the router's
// (the SDK makes the latest middleware the outermost); middleware added
// before Install runs after it and also wraps the router's in-process tool
// calls. Components that need to act on a request bound to an existing task
// (the workflow bridge) register a ContinuationHandler instead of adding
// their own middleware.
func (r *Router) Install(s *mcp.Server) error {
	if r.server != nil {
		return fmt.Errorf("taskrouter: already installed")
	}
	r.server = s
	r.tools.install(s)
	for _, m := range []struct {
		name string
		h    func(context.Context, *mcp.ServerSession, *TaskIDParams) (mcp.Result, error)
	}{
		{mcptask.MethodTasksGet, r.tasksGet},
		{mcptask.MethodTasksResult, r.tasksResult},
		{mcptask.MethodTasksCancel, r.tasksCancel},
	} {
		if err := mcp.AddReceivingCustomMethod(s, m.name, m.h); err != nil {
			return err
		}
	}
	if err := mcp.AddReceivingCustomMethod(s, mcptask.MethodTasksList, r.tasksList); err != nil {
		return err
	}
	if err := mcp.AddReceivingCustomMethod(s, mcptask.MethodTasksUpdate, r.tasksUpdate); err != nil {
		return err
	}
	if err := r.hooks.install(s); err != nil {
		return err
	}
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		r.inner = next
		return r.handle
	})
	// A task's progress and log lines are recorded first (events.go); then
	// a fast-path plain call's notifications go to its own reply stream.
	s.AddSendingMiddleware(captureNotifications, sending)
	r.loop.server = s
	return nil
}

// sending is the router's sending middleware: a notification a handler
// sends in the context of a tools/call the fast path serves over HTTP
// goes onto that call's response stream (see replySink), where the SDK
// would have written it; a log message of a fast-path request that
// negotiates per request without a log level is dropped, as the SDK
// drops it (see noLogLevelKey); everything else goes on to the SDK.
func sending(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == methodLogMessage && ctx.Value(noLogLevelKey{}) != nil {
			return nil, nil
		}
		if sink := replySinkFrom(ctx); sink != nil && strings.HasPrefix(method, "notifications/") {
			return nil, sink.notify(method, req.GetParams())
		}
		return next(ctx, method, req)
	}
}

// methodLogMessage is the notification ServerSession.Log sends.
const methodLogMessage = "notifications/message"

// normalizeParams gives a tasks/* request that arrived without params (the
// TypeScript SDK omits them on tasks/list) an empty params value. The SDK
// passes a nil pointer, and the promoted ParamsBase methods it calls for the
// request's protocol version would dereference it.
func normalizeParams(req mcp.Request) {
	switch r := req.(type) {
	case *mcp.ServerRequest[*TaskIDParams]:
		if r.Params == nil {
			r.Params = &TaskIDParams{}
		}
	case *mcp.ServerRequest[*ListTasksParams]:
		if r.Params == nil {
			r.Params = &ListTasksParams{}
		}
	case *mcp.ServerRequest[*UpdateTaskParams]:
		if r.Params == nil {
			r.Params = &UpdateTaskParams{}
		}
	default:
		normalizeWebhookParams(req)
	}
}

// handle is the router's middleware: every request the server receives
// passes here first (after middleware added later).
func (r *Router) handle(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
	// The SDK does not recover panics in request handlers: one bad request
	// must not take the process down.
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("panic handling request", "method", method, "panic", p, "stack", string(debug.Stack()))
			res, err = nil, mcptask.InternalError("internal error handling %s", method)
		}
		err = wireError(err)
	}()
	normalizeParams(req)
	q := resolve(ctx, &r.opts, &r.fast, req)
	ctx = context.WithValue(ctx, requestKey{}, q)
	switch method {
	case mcptask.MethodInitialize:
		res, err := r.inner(ctx, method, req)
		// initialize negotiates 2025-11-25 or older: the core capability
		// only (the extension is advertised by server/discover).
		if ir, ok := res.(*mcp.InitializeResult); ok && err == nil {
			r.fast.noteInitialize(ir)
			return &initializeResult{InitializeResult: ir}, nil
		}
		return res, err
	case mcptask.MethodDiscover:
		res, err := r.inner(ctx, method, req)
		if dr, ok := res.(*mcp.DiscoverResult); ok && err == nil && dr.Capabilities != nil {
			dr.Capabilities.AddExtension(mcptask.ExtensionID, nil)
		}
		return res, err
	case mcptask.MethodToolsList:
		res, err := r.inner(ctx, method, req)
		if lr, ok := res.(*mcp.ListToolsResult); ok && err == nil {
			return &listToolsResult{ListToolsResult: lr, support: r.tools.supportOf(lr.Tools), taskIDArg: r.tools.taskIDToolsOf(lr.Tools)}, nil
		}
		return res, err
	case mcptask.MethodToolsCall:
		if ctr, ok := req.(*mcp.CallToolRequest); ok && ctr.Params != nil {
			return r.toolsCall(ctx, q, ctr)
		}
	}
	return r.inner(ctx, method, req)
}

// wireError makes err a JSON-RPC error with a code: go-sdk sends any other
// error with code 0, which no client can act on. A cancelled or timed-out
// request is a -32603 saying so; any other error a -32603 with its text.
// The fast path's own signals pass unchanged (they never reach a client).
func wireError(err error) error {
	var je *jsonrpc.Error
	switch {
	case err == nil, errors.As(err, &je), errors.Is(err, errHandoff), errors.Is(err, errNoReply):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return mcptask.InternalError("the request was cancelled before it was answered (%v)", err)
	}
	return mcptask.InternalError("%v", err)
}

// toolsCall decides whether a tools/call becomes a task, following the
// request's dialect, and starts it.
func (r *Router) toolsCall(ctx context.Context, q *Request, req *mcp.CallToolRequest) (mcp.Result, error) {
	if r.tools.takesTaskID(req.Params.Name) {
		if err := moveTaskIDArgument(req, r.tools.continuationHandler() != nil); err != nil {
			return nil, err
		}
	}
	if _, bound := req.Params.GetMeta()[mcptask.MetaTaskID]; bound {
		if cont := r.tools.continuationHandler(); cont != nil {
			return cont(ctx, q, req)
		}
	}
	name := req.Params.Name
	te, _ := r.tools.lookup(name)
	var ttl time.Duration
	if q.Dialect.ServerDecidesTasks() {
		// The server decides; a legacy params.task is ignored.
		switch {
		case te.opts.TaskSupport == mcptask.TaskRequired && !q.Declared:
			return nil, mcptask.MissingExtension(fmt.Sprintf("tool %q", name))
		case te.opts.TaskSupport == mcptask.TaskRequired, te.opts.TaskSupport == mcptask.TaskOptional && q.Declared:
		default:
			return refusedAsToolError(r.plainCall(ctx, q, req, te))
		}
	} else {
		switch {
		case q.taskErr != nil:
			return nil, mcptask.InvalidParams("%v", q.taskErr)
		case q.asked && te.opts.TaskSupport == mcptask.TaskForbidden:
			// -32600, not the -32601 the spec suggests: go-sdk replaces the
			// message of every -32601 it sends, and the client must learn why.
			return nil, mcptask.InvalidRequest("tool %q cannot be called as a task: its execution.taskSupport is forbidden (or the tool is unknown); call it without params.task", name)
		case !q.asked && te.opts.TaskSupport == mcptask.TaskRequired && r.opts.HostDeadline < 0:
			return nil, mcptask.InvalidRequest("tool %q must be called as a task: add params.task (execution.taskSupport is required)", name)
		case !q.asked:
			// A required tool called plainly runs as one whose task
			// support is optional would (a deviation from the spec's
			// -32600: a client that sends no params.task, which is every
			// LLM host, could never call it otherwise).
			return refusedAsToolError(r.plainCall(ctx, q, req, te))
		}
		ttl = q.task.Duration()
	}
	// Arguments that fail the tool's input schema create no task. A core
	// client asked for a task, so it gets a JSON-RPC -32602 naming the
	// problem (an SDK waiting for a CreateTaskResult cannot parse a tool
	// result); in the extension, where the server decides, the answer is
	// the plain call's: a tool result with isError, which runs nothing
	// (the SDK validates before the handler runs).
	var in any
	if te.check != nil {
		var err error
		if in, err = te.check(req.Params.Arguments); err != nil {
			if !q.Dialect.ServerDecidesTasks() {
				return nil, mcptask.InvalidParams("invalid arguments for tool %q: %v", name, err)
			}
			return r.inner(ctx, mcptask.MethodToolsCall, req)
		}
	}
	if te.opts.Preflight != nil {
		if res, err := preflight(ctx, q, req, te); res != nil || err != nil {
			return res, err
		}
	}
	return r.startToolTask(ctx, q, req, ttl, te.check != nil, in)
}

// initializeResult adds the core "tasks" capability to the SDK's result.
type initializeResult struct {
	*mcp.InitializeResult
}

// CoreCapability returns the core-dialect tasks capability the server
// declares, a fresh value each call: changing it changes nothing.
func CoreCapability() map[string]any {
	return map[string]any{
		"list":     map[string]any{},
		"cancel":   map[string]any{},
		"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}},
	}
}

// MarshalJSON encodes the SDK's result with capabilities.tasks added.
func (w *initializeResult) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(w.InitializeResult)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	caps := map[string]json.RawMessage{}
	if c, ok := m["capabilities"]; ok {
		_ = json.Unmarshal(c, &caps)
	}
	caps["tasks"], _ = json.Marshal(CoreCapability())
	m["capabilities"], _ = json.Marshal(caps)
	return json.Marshal(m)
}

// listToolsResult adds execution.taskSupport to each tool, and the
// _task_id argument to the tools that take it.
type listToolsResult struct {
	*mcp.ListToolsResult
	support   map[string]mcptask.TaskSupport
	taskIDArg map[string]bool
}

// MarshalJSON encodes the SDK's result with execution.taskSupport added to
// every tool the router knows.
func (w *listToolsResult) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(w.ListToolsResult)
	if err != nil || len(w.support) == 0 && len(w.taskIDArg) == 0 {
		return b, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	var tools []map[string]json.RawMessage
	if err := json.Unmarshal(m["tools"], &tools); err != nil {
		return nil, err
	}
	for _, t := range tools {
		var name string
		_ = json.Unmarshal(t["name"], &name)
		if w.taskIDArg[name] {
			t["inputSchema"] = withTaskIDArgument(t["inputSchema"])
		}
		s, ok := w.support[name]
		if !ok {
			continue
		}
		exec := map[string]json.RawMessage{}
		if old, ok := t["execution"]; ok {
			_ = json.Unmarshal(old, &exec)
		}
		exec["taskSupport"], _ = json.Marshal(s)
		t["execution"], _ = json.Marshal(exec)
	}
	m["tools"], err = json.Marshal(tools)
	if err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// Resolve returns the resolved form of req: the one the middleware stored
// in ctx when it is for the same request, otherwise a fresh resolution.
func (r *Router) Resolve(ctx context.Context, req mcp.Request) *Request {
	if q := RequestFrom(ctx); q != nil && (req == nil || q.MCP == req) {
		return q
	}
	return resolve(ctx, &r.opts, &r.fast, req)
}

// resolve works out everything the engine needs to know about req and
// removes the private _meta keys the shims added, so no handler ever sees
// them; o says who the owner is, and fast learns from req.
func resolve(ctx context.Context, o *Options, fast *fastPath, req mcp.Request) *Request {
	q := &Request{MCP: req, Dialect: mcptask.Core, Source: "local"}
	if req == nil {
		q.Owner = LocalOwner
		return q
	}
	if v, ok := req.(versioned); ok {
		q.Dialect = mcptask.DialectFor(v.ProtocolVersion())
		if caps := clientCapabilities(ctx, req, v); caps != nil {
			_, q.Declared = caps.Extensions[mcptask.ExtensionID]
		}
	}
	if p := req.GetParams(); p != nil && !isNilParams(p) {
		if meta := p.GetMeta(); meta != nil {
			q.task, q.asked, q.taskErr = wire.TakeTaskParam(meta)
			q.connID, _ = meta[wire.MetaConnID].(string)
			wire.DropPrivateMeta(meta)
		}
	}
	extra := req.GetExtra()
	q.Authenticated = extra != nil && extra.TokenInfo != nil
	switch ss, _ := req.GetSession().(*mcp.ServerSession); {
	case ss != nil && ss.ID() != "":
		q.Source = "session:" + ss.ID()
	case q.connID != "":
		q.Source = "session:" + q.connID
	case extra != nil && extra.Header != nil && http.Header(extra.Header).Get(remoteHeader) != "":
		q.Source = "addr:" + http.Header(extra.Header).Get(remoteHeader)
	}
	owner, err := o.Owner(ctx, req)
	if err != nil {
		q.OwnerErr = mcptask.InvalidRequest("cannot identify the requestor: %v", err)
	} else {
		q.Owner = owner
	}
	fast.noteRequest(req, q)
	return q
}
