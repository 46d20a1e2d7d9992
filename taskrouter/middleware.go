package taskrouter

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"runtime/debug"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
)

// Install puts the router's MCP face onto s: the tasks/* methods, the
// capability advertisements of both dialects, execution.taskSupport in
// tools/list, and task-augmented tools/call. Call it once, before adding
// tools with AddTool.
func (r *Router) Install(s *mcp.Server) error {
	if r.server != nil {
		return fmt.Errorf("taskrouter: already installed")
	}
	r.server = s
	for _, m := range []struct {
		name string
		h    func(context.Context, *mcp.ServerSession, *TaskIDParams) (mcp.Result, error)
	}{
		{methodTasksGet, r.tasksGet},
		{methodTasksResult, r.tasksResult},
		{methodTasksCancel, r.tasksCancel},
	} {
		if err := mcp.AddReceivingCustomMethod(s, m.name, m.h); err != nil {
			return err
		}
	}
	if err := mcp.AddReceivingCustomMethod(s, methodTasksList, r.tasksList); err != nil {
		return err
	}
	if err := mcp.AddReceivingCustomMethod(s, methodTasksUpdate, r.tasksUpdate); err != nil {
		return err
	}
	s.AddReceivingMiddleware(r.middleware)
	return nil
}

type requestCtxKey struct{}

type inlineCtxKey struct{}

// Inline marks ctx so that a tools/call passed down the middleware chain
// with it runs in the request, never as a task. The workflow bridge uses it
// for continuation calls, whose outcome it records on the workflow's task.
func Inline(ctx context.Context) context.Context {
	return context.WithValue(ctx, inlineCtxKey{}, true)
}

// requestFrom returns the MCP request the middleware stored in ctx.
func requestFrom(ctx context.Context) mcp.Request {
	req, _ := ctx.Value(requestCtxKey{}).(mcp.Request)
	return req
}

// versioned is implemented by every *mcp.ServerRequest[P].
type versioned interface {
	ProtocolVersion() string
	ClientCapabilities() *mcp.ClientCapabilities
}

// IsExtension reports whether req speaks the 2026-07-28 protocol, where
// tasks are the io.modelcontextprotocol/tasks extension.
func IsExtension(req mcp.Request) bool { return isExtension(req) }

func isExtension(req mcp.Request) bool {
	v, ok := req.(versioned)
	return ok && v.ProtocolVersion() >= ExtensionVersion
}

// declaresExtension reports whether the request declared the tasks
// extension in its client capabilities.
func declaresExtension(req mcp.Request) bool {
	v, ok := req.(versioned)
	if !ok {
		return false
	}
	caps := v.ClientCapabilities()
	if caps == nil {
		return false
	}
	_, ok = caps.Extensions[ExtensionID]
	return ok
}

func missingExtension(what string) error {
	data, _ := json.Marshal(map[string]any{
		"requiredCapabilities": map[string]any{
			"extensions": map[string]any{ExtensionID: map[string]any{}},
		},
	})
	return &jsonrpc.Error{
		Code:    CodeMissingCapability,
		Message: fmt.Sprintf("%s requires the %s extension; declare it in the request's client capabilities", what, ExtensionID),
		Data:    data,
	}
}

func rpcError(code int64, format string, args ...any) error {
	return &jsonrpc.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

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
	}
}

func (r *Router) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		// The SDK does not recover panics in request handlers: one bad
		// request must not take the process down.
		defer func() {
			if p := recover(); p != nil {
				r.log.Error("panic handling request", "method", method, "panic", p, "stack", string(debug.Stack()))
				res, err = nil, rpcError(CodeInternalError, "internal error handling %s", method)
			}
		}()
		normalizeParams(req)
		ctx = context.WithValue(ctx, requestCtxKey{}, req)
		switch method {
		case methodInitialize:
			res, err := next(ctx, method, req)
			// initialize negotiates 2025-11-25 or older: the core capability
			// only (the extension is advertised by server/discover).
			if ir, ok := res.(*mcp.InitializeResult); ok && err == nil {
				return &initializeResult{InitializeResult: ir}, nil
			}
			return res, err
		case methodDiscover:
			res, err := next(ctx, method, req)
			if dr, ok := res.(*mcp.DiscoverResult); ok && err == nil && dr.Capabilities != nil {
				dr.Capabilities.AddExtension(ExtensionID, nil)
			}
			return res, err
		case methodToolsList:
			res, err := next(ctx, method, req)
			if lr, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				return &listToolsResult{ListToolsResult: lr, support: r.supportOf(lr.Tools)}, nil
			}
			return res, err
		case methodToolsCall:
			if ctr, ok := req.(*mcp.CallToolRequest); ok {
				return r.toolsCall(ctx, ctr, next)
			}
		}
		return next(ctx, method, req)
	}
}

func (r *Router) supportOf(tools []*mcp.Tool) map[string]TaskSupport {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]TaskSupport, len(tools))
	for _, t := range tools {
		if te, ok := r.tools[t.Name]; ok {
			out[t.Name] = te.support
		}
	}
	return out
}

// coreTaskRequest is the params.task object of a core-dialect request.
type coreTaskRequest struct {
	TTL *float64 `json:"ttl,omitempty"`
}

// takeTaskParam removes and decodes the moved params.task marker.
func takeTaskParam(p mcp.Params) (*coreTaskRequest, bool, error) {
	meta := p.GetMeta()
	raw, ok := meta[MetaTaskRequest]
	if !ok {
		return nil, false, nil
	}
	delete(meta, MetaTaskRequest)
	if raw == nil {
		return nil, false, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, true, err
	}
	var tr coreTaskRequest
	if err := json.Unmarshal(b, &tr); err != nil {
		return nil, true, fmt.Errorf("params.task must be an object with an optional numeric ttl: %v", err)
	}
	if tr.TTL != nil && (*tr.TTL < 0 || *tr.TTL != *tr.TTL) {
		return nil, true, fmt.Errorf("params.task.ttl must be a non-negative number of milliseconds")
	}
	return &tr, true, nil
}

func (tr *coreTaskRequest) ttl() time.Duration {
	if tr == nil || tr.TTL == nil {
		return 0
	}
	ms := *tr.TTL
	// Clamp before converting: beyond ~292 years of nanoseconds the
	// product overflows int64. Router.actualTTL caps at MaxTTL anyway.
	if ms >= float64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms * float64(time.Millisecond))
}

func (r *Router) toolsCall(ctx context.Context, req *mcp.CallToolRequest, next mcp.MethodHandler) (mcp.Result, error) {
	if req.Params == nil {
		return next(ctx, methodToolsCall, req)
	}
	taskReq, asked, perr := takeTaskParam(req.Params)
	connID := takeConnID(req.Params)
	if r.isLoopback(req) || ctx.Value(inlineCtxKey{}) != nil {
		return next(ctx, methodToolsCall, req)
	}
	name := req.Params.Name
	te, _ := r.tool(name)
	if isExtension(req) {
		// The server decides; a legacy params.task is ignored.
		declared := declaresExtension(req)
		switch {
		case te.support == TaskRequired && !declared:
			return nil, missingExtension(fmt.Sprintf("tool %q", name))
		case te.support == TaskRequired, te.support == TaskOptional && declared:
			if te.preflight != nil {
				need, err := te.preflight(ctx, req)
				if err != nil {
					return nil, err
				}
				if len(need) > 0 {
					return &inputRequiredResult{ResultType: "input_required", InputRequests: need}, nil
				}
			}
			return r.startToolTask(ctx, req, next, 0, dialectExt, connID)
		}
		return next(ctx, methodToolsCall, req)
	}
	if perr != nil {
		return nil, rpcError(CodeInvalidParams, "%v", perr)
	}
	switch {
	case asked && te.support == TaskForbidden:
		return nil, rpcError(CodeMethodNotFound, "tool %q does not support task-augmented calls (execution.taskSupport is forbidden)", name)
	case !asked && te.support == TaskRequired:
		// -32600, which the spec allows here: go-sdk replaces the message of
		// every -32601 error with "method not found", losing the reason.
		return nil, rpcError(CodeInvalidRequest, "tool %q must be called as a task: add params.task (execution.taskSupport is required)", name)
	case asked:
		if te.preflight != nil {
			if err := r.preflightCore(ctx, req, te); err != nil {
				return nil, err
			}
		}
		return r.startToolTask(ctx, req, next, taskReq.ttl(), dialectCore, connID)
	}
	return next(ctx, methodToolsCall, req)
}

// Owner returns the owner a request acts for, under Config.Owner.
func (r *Router) Owner(ctx context.Context, req mcp.Request) (string, error) {
	owner, err := r.cfg.Owner(ctx, req)
	if err != nil {
		return "", rpcError(CodeInvalidRequest, "cannot identify the requestor: %v", err)
	}
	return owner, nil
}

func (r *Router) startToolTask(ctx context.Context, req *mcp.CallToolRequest, next mcp.MethodHandler, ttl time.Duration, dialect, connID string) (mcp.Result, error) {
	owner, err := r.Owner(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := r.admit(owner); err != nil {
		return nil, err
	}
	t, err := r.CreateTask(ctx, owner, store.Request{Method: methodToolsCall, Name: req.Params.Name, Arguments: req.Params.Arguments},
		CreateOptions{TTL: ttl, Kind: KindTool, Labels: map[string]string{LabelDialect: dialect}})
	if err != nil {
		r.releaseOwner(owner, false)
		return nil, storeError(err)
	}
	r.bindPusher(t.ID, connID)
	r.spawn(t, func(ctx context.Context) (mcp.Result, error) {
		return next(ctx, methodToolsCall, req)
	})
	if dialect == dialectExt {
		return &ExtCreateTaskResult{ResultType: "task", ExtTask: extTask(t), Content: []mcp.Content{}}, nil
	}
	res := &CreateTaskResult{Task: CoreTask(t)}
	if r.cfg.ImmediateResponse != nil {
		if text := r.cfg.ImmediateResponse(req.Params.Name, t); text != "" {
			res.Meta = mcp.Meta{MetaModelImmediateResponse: text}
		}
	}
	return res, nil
}

// initializeResult adds the core "tasks" capability to the SDK's result.
type initializeResult struct {
	*mcp.InitializeResult
}

// CoreCapability is the core-dialect tasks capability the server declares.
var CoreCapability = map[string]any{
	"list":     map[string]any{},
	"cancel":   map[string]any{},
	"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}},
}

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
	caps["tasks"], _ = json.Marshal(CoreCapability)
	m["capabilities"], _ = json.Marshal(caps)
	return json.Marshal(m)
}

// listToolsResult adds execution.taskSupport to each tool.
type listToolsResult struct {
	*mcp.ListToolsResult
	support map[string]TaskSupport
}

func (w *listToolsResult) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(w.ListToolsResult)
	if err != nil || len(w.support) == 0 {
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

// inputRequiredResult is a SEP-2322 input_required reply to tools/call.
type inputRequiredResult struct {
	mcp.ResultBase
	ResultType    string              `json:"resultType"`
	InputRequests mcp.InputRequestMap `json:"inputRequests"`
}

// preflightCore satisfies a tool's preflight for a core-dialect client,
// which cannot retry with inputResponses: the router elicits each answer on
// the request's own stream.
func (r *Router) preflightCore(ctx context.Context, req *mcp.CallToolRequest, te toolEntry) error {
	for range 3 {
		need, err := te.preflight(ctx, req)
		if err != nil || len(need) == 0 {
			return err
		}
		if req.Params.InputResponses == nil {
			req.Params.InputResponses = mcp.InputResponseMap{}
		}
		for key, ir := range need {
			ep, ok := ir.(*mcp.ElicitParams)
			if !ok || req.Session == nil {
				return rpcError(CodeInternalError, "tool %q needs client input (%T) this connection cannot deliver", req.Params.Name, ir)
			}
			res, err := req.Session.Elicit(ctx, ep)
			if err != nil {
				return rpcError(CodeInternalError, "asking the client for input: %v", err)
			}
			req.Params.InputResponses[key] = res
		}
	}
	return rpcError(CodeInternalError, "tool %q kept asking for input", req.Params.Name)
}
