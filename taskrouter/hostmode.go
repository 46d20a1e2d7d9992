package taskrouter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// Host mode: what a model in an LLM host can do with tool calls that carry
// only a name and arguments. It cannot set _meta, so a tool that performs
// a step of a workflow task also takes the task's id as the argument
// _task_id (mcptask.ArgTaskID), advertised in its input schema. The router
// moves that argument into _meta._task_id before the tool's schema is
// checked, so the tool never sees it, and the call continues the task as
// one with _meta._task_id does.

// taskIDArgumentDescription is how the _task_id argument is described in
// the input schema of the tools that take it.
const taskIDArgumentDescription = "Only when performing a step of a workflow task: the task's id (from the handoff). Leave it out otherwise."

var taskIDKey = []byte(`"` + mcptask.ArgTaskID + `"`)

// moveTaskIDArgument moves the argument _task_id of a tools/call into
// _meta._task_id. A value that is not a non-empty string is refused with
// -32602. One that names another task than _meta._task_id is left where
// it is when contained is true (the continuation handler decides, see
// ContinuationHandler: a workflow's id in _meta and one of its children's
// steps or items in the argument, as the handoff gives them, name one
// workflow), and refused with -32602 otherwise.
func moveTaskIDArgument(req *mcp.CallToolRequest, contained bool) error {
	raw := req.Params.Arguments
	if !bytes.Contains(raw, taskIDKey) {
		return nil // the common case: no need to decode
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal(raw, &args); err != nil {
		return nil // not an object: the tool's own validation says so
	}
	v, ok := args[mcptask.ArgTaskID]
	if !ok {
		return nil
	}
	var id string
	if err := json.Unmarshal(v, &id); err != nil || id == "" {
		return mcptask.InvalidParams("argument %s must be a non-empty string: the id of the workflow task this call performs a step of", mcptask.ArgTaskID)
	}
	meta := req.Params.GetMeta()
	if prev, ok := meta[mcptask.MetaTaskID]; ok && prev != id {
		if contained {
			return nil
		}
		return mcptask.InvalidParams("argument %s (%q) and _meta.%s (%v) name different tasks", mcptask.ArgTaskID, id, mcptask.MetaTaskID, prev)
	}
	delete(args, mcptask.ArgTaskID)
	b, err := json.Marshal(args)
	if err != nil {
		return mcptask.InternalError("re-encoding arguments: %v", err)
	}
	req.Params.Arguments = b
	if meta == nil {
		meta = mcp.Meta{}
	}
	meta[mcptask.MetaTaskID] = id
	req.Params.SetMeta(meta)
	return nil
}

// withTaskIDArgument returns a tool's input schema (JSON) with the
// _task_id property added.
func withTaskIDArgument(schema json.RawMessage) json.RawMessage {
	var s map[string]json.RawMessage
	if err := json.Unmarshal(schema, &s); err != nil || s == nil {
		return schema
	}
	props := map[string]json.RawMessage{}
	if p, ok := s["properties"]; ok {
		_ = json.Unmarshal(p, &props)
	}
	if _, exists := props[mcptask.ArgTaskID]; exists {
		return schema
	}
	props[mcptask.ArgTaskID], _ = json.Marshal(map[string]string{"type": "string", "description": taskIDArgumentDescription})
	s["properties"], _ = json.Marshal(props)
	if _, ok := s["type"]; !ok {
		s["type"] = json.RawMessage(`"object"`)
	}
	out, err := json.Marshal(s)
	if err != nil {
		return schema
	}
	return out
}

// LabelHost marks a task that a plain tools/call became when its tool
// outlived Options.HostDeadline.
const LabelHost = "host"

// plainCall serves a tools/call the client did not ask to run as a task.
// A task-capable tool runs for up to Options.HostDeadline; one still
// running then goes on as a durable task (see hostCall). Other tools run
// as plain calls, holding the request.
func (r *Router) plainCall(ctx context.Context, q *Request, req *mcp.CallToolRequest, te toolEntry) (mcp.Result, error) {
	if !r.opts.runsApart(te) || q.OwnerErr != nil {
		return r.inner(ctx, mcptask.MethodToolsCall, req)
	}
	var in any
	if te.check != nil {
		var err error
		if in, err = te.check(req.Params.Arguments); err != nil {
			return r.inner(ctx, mcptask.MethodToolsCall, req) // the tool's own answer, running nothing
		}
	}
	return r.hostCall(ctx, q, req, te, in)
}

// runsApart reports whether a plain call of tool te runs apart from the
// request, in host mode (see hostCall): a task-capable tool without
// Preflight, while Options.HostDeadline is on.
func (o *Options) runsApart(te toolEntry) bool {
	return o.HostDeadline >= 0 && te.opts.TaskSupport != mcptask.TaskForbidden && te.opts.Preflight == nil
}

// refusedAsToolError turns a quota's refusal (-32000, CodeTooManyTasks)
// of a plain tools/call into a tool result with isError naming the limit:
// a tool that creates a task (a workflow's tool, the fork tool) was
// refused admission, and a model in a host reads tool results, not
// JSON-RPC errors.
func refusedAsToolError(res mcp.Result, err error) (mcp.Result, error) {
	var je *jsonrpc.Error
	if errors.As(err, &je) && je.Code == mcptask.CodeTooManyTasks {
		return errorResult("%s", je.Message), nil
	}
	return res, err
}

// hostCall runs a plain call of a task-capable tool apart from the
// request: it answers with the tool's own result when the tool ends
// within Options.HostDeadline (nothing is stored), and otherwise stores the
// work as a task (owner, ttl, cancel, restart recovery and replicas as for
// any task) and answers with an ordinary tool result naming it. A caller
// that goes away before the deadline stops nothing: the work becomes a
// task at once.
func (r *Router) hostCall(ctx context.Context, q *Request, req *mcp.CallToolRequest, te toolEntry, in any) (mcp.Result, error) {
	checked := te.check != nil
	adm := admission{owner: q.Owner, source: q.Source}
	if err := r.admit(adm, false); err != nil {
		return toolExec(r.inner, req, checked, in)(ctx) // no room for a task: a plain call, as before
	}
	deadline := time.Now().Add(r.opts.HostDeadline)
	// The record is made only if the call outlives its window (or its
	// handler needs its task before): a quick tool's call stores nothing
	// and makes no record.
	id, name := NewTaskID(), req.Params.Name
	build := func() *store.Task {
		rec := r.newRecord(q, store.Request{Method: mcptask.MethodToolsCall, Name: name, Arguments: req.Params.Arguments},
			CreateOptions{Kind: KindTool, Lease: true, Labels: map[string]string{LabelHost: "1"}})
		rec.ID = id
		return rec
	}
	o, t, err := r.runPending(ctx, q, adm, id, name, build, toolExec(r.inner, req, checked, in), r.opts.HostDeadline, true)
	switch {
	case err != nil:
		return nil, err
	case o != nil:
		if o.cause != nil {
			return nil, mcptask.InternalError("the server is shutting down")
		}
		return o.res, o.err
	}
	// The task exists (its handler may have asked for its id early): it
	// may still end before the deadline.
	if rest := time.Until(deadline); rest > 0 && ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, rest)
		defer cancel()
		if done, err := r.Await(wctx, t.ID, func(t *store.Task) bool { return t.Status.Terminal() }); err == nil {
			return finalResult(done)
		}
	}
	if cur, err := r.st.Get(context.WithoutCancel(ctx), t.ID); err == nil {
		t = cur
	}
	return r.continuesAsTask(t, te.tool != nil && te.tool.OutputSchema != nil), nil
}

// continuesAsTask is the answer to a plain call whose tool outlived the
// host deadline: a tool result (a model reads its text) naming the task
// that now holds the work and how to get its result, with the task's
// state as structured content. A tool with an outputSchema cannot answer
// so: a client that checks results against it (the TypeScript SDK's
// does) refuses structured content of another shape, and a result
// without any unless it has isError. Its answer is then an isError
// result without structured content, whose text says that nothing
// failed: the work goes on as the task.
func (r *Router) continuesAsTask(t *store.Task, outputSchema bool) *mcp.CallToolResult {
	id := strconv.Quote(t.ID)
	how := fmt.Sprintf("poll tasks/get with {\"taskId\": %s}", id)
	if name := r.tools.resultToolName(); name != "" {
		how = fmt.Sprintf("call the tool %q with {\"task_id\": %s} to wait for its result (a client that speaks MCP tasks may use tasks/get or tasks/result instead)", name, id)
	}
	text := fmt.Sprintf("Tool %q is still working after %s, so the work goes on on the server as task %s (status: %s). Do not call the tool again: %s.",
		t.Request.Name, r.opts.HostDeadline.Round(time.Millisecond), t.ID, t.Status, how)
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, Meta: mcp.Meta(mcptask.RelatedTaskMeta(t.ID))}
	if outputSchema {
		res.IsError = true
		res.Content[0] = &mcp.TextContent{Text: "Not a failure: the call has no result yet. " + text}
		return res
	}
	res.StructuredContent = taskState(t)
	return res
}

// taskState is the structured content of the built-in tools' answers
// about a task.
func taskState(t *store.Task) map[string]any {
	m := map[string]any{"taskId": t.ID, "status": t.Status}
	if t.StatusMessage != "" {
		m["statusMessage"] = t.StatusMessage
	}
	return m
}
