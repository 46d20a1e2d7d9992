package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// TaskPromptHandler serves a task-aware workflow prompt: every version of
// one workflow registered with a Bridge.
type TaskPromptHandler struct {
	bridge *Bridge
	name   string
}

// Handle is the mcp.PromptHandler. A prompts/get naming a task (with
// _meta._task_id, or the argument _task_id) resumes that workflow task,
// retrying server steps that failed; otherwise it starts a new task on the
// workflow's newest version. The task exists, bound to the caller, before
// any step runs; the steps run on the engine, and Handle answers once the
// workflow rests or Options.PromptWait has passed.
func (h *TaskPromptHandler) Handle(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	b := h.bridge
	q := b.engine.Resolve(ctx, req)
	args := map[string]string{}
	var meta mcp.Meta
	if req.Params != nil {
		maps.Copy(args, req.Params.Arguments)
		meta = req.Params.GetMeta()
	}
	id, named, err := taskIDOf(meta, args)
	if err != nil {
		return nil, err
	}
	if named {
		t, p, err := h.resume(ctx, q, id)
		if err != nil {
			return nil, err
		}
		return b.promptResult(t, p, q.Dialect)
	}
	t, p, err := h.start(ctx, q, args)
	if err != nil {
		return nil, err
	}
	res, err := b.promptResult(t, p, q.Dialect)
	if err != nil {
		// The caller learns of no task: none is left running behind it.
		b.failTask(context.WithoutCancel(ctx), t.ID, fmt.Sprintf("the workflow's first answer could not be made, so its caller never learned of this task: %v", err))
		return nil, err
	}
	res.Messages = append([]*mcp.PromptMessage{startMessage(b.newestDef(h.name), p)}, res.Messages...)
	return res, nil
}

// argError is a workflow argument refused before a task exists: the
// -32602 error a prompts/get answers with; the workflow's tool answers
// with a tool error the model reads instead.
type argError struct{ rpc error }

func (e *argError) Error() string { return e.rpc.Error() }
func (e *argError) Unwrap() error { return e.rpc }

// taskIDOf reads the task id a request names: _meta._task_id, or the
// argument _task_id (removed from args). Both may be given if they agree.
func taskIDOf(meta mcp.Meta, args map[string]string) (id string, named bool, err error) {
	raw, inMeta := meta[mcptask.MetaTaskID]
	if inMeta {
		s, ok := raw.(string)
		if !ok || s == "" {
			return "", false, mcptask.InvalidParams("_meta.%s must be a non-empty string task id", mcptask.MetaTaskID)
		}
		id = s
	}
	if arg, ok := args[mcptask.ArgTaskID]; ok {
		delete(args, mcptask.ArgTaskID)
		switch {
		case arg == "":
			return "", false, mcptask.InvalidParams("argument %s must be a non-empty task id", mcptask.ArgTaskID)
		case inMeta && arg != id:
			return "", false, mcptask.InvalidParams("argument %s (%q) and _meta.%s (%q) name different tasks", mcptask.ArgTaskID, arg, mcptask.MetaTaskID, id)
		}
		id = arg
	}
	return id, id != "", nil
}

// start creates a task for a new run of the workflow and sets its server
// steps off on the engine. It returns where the workflow stands once it
// rests or PromptWait has passed.
func (h *TaskPromptHandler) start(ctx context.Context, q *taskrouter.Request, args map[string]string) (*store.Task, *Progress, error) {
	b := h.bridge
	if q.OwnerErr != nil {
		return nil, nil, q.OwnerErr
	}
	wf := b.newest(h.name)
	if wf == nil {
		return nil, nil, mcptask.InvalidParams("workflow %q is not registered", h.name)
	}
	a, err := wf.def.promptArgs(args)
	if err != nil {
		return nil, nil, &argError{rpc: mcptask.InvalidParams("workflow %q: %v", h.name, err)}
	}
	p := newProgress(wf, a, b.engine.Now())
	in, err := b.create(ctx, q, wf, p, nil, nil, "")
	if err != nil {
		return nil, nil, err
	}
	defer b.done(in)
	in.decided(ctx) // its first decision is written before the answer is made (drive.go)
	t, p := b.settle(ctx, in.id)
	if ctx.Err() == nil {
		// The handoff is about to be returned: a client holds the id now.
		in.touch(context.WithoutCancel(ctx))
	}
	return t, p, nil
}

// create stores a new task of workflow version wf at progress p (fresh,
// or forked) for the requestor, with extra labels and variables (and id,
// when not "": see taskrouter.CreateOptions.ID), and sets its server
// steps off. It returns the task's instance: release it with done.
func (b *Bridge) create(ctx context.Context, q *taskrouter.Request, wf *compiled, p *Progress, labels map[string]string, vars map[string]json.RawMessage, id string) (*instance, error) {
	now := b.engine.Now()
	if wf.def.queue == nil {
		markReached(wf, p, now) // a client step first is the client's at once (a queued workflow's: once it has its place)
	}
	p.refresh()
	if p.PauseReason = pauseReason(wf, p); p.PauseReason == "" {
		p.PauseReason = fmt.Sprintf("starting workflow %q", wf.def.Name)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, mcptask.InternalError("encoding workflow progress: %v", err)
	}
	rawArgs, _ := json.Marshal(p.Arguments)
	v := map[string]json.RawMessage{}
	maps.Copy(v, vars)
	v[VarProgress] = raw
	if wf.def.hasWebhook() {
		v[VarWebhookToken] = marshal(newWebhookToken())
	}
	l := map[string]string{LabelWorkflow: wf.def.Name, LabelVersion: wf.version, LabelFingerprint: wf.fingerprint}
	maps.Copy(l, labels)
	t, err := b.engine.CreateTask(ctx, q, store.Request{Method: mcptask.MethodPromptsGet, Name: wf.def.Name, Arguments: rawArgs},
		&taskrouter.CreateOptions{ID: id, TTL: b.ttlOf(wf), Kind: taskrouter.KindWorkflow, Labels: l,
			Variables: v, StatusMessage: p.PauseReason, Lease: true, WakeAt: p.timerWake(),
			InputRequired: statusFor(p) == mcptask.StatusInputRequired})
	if err != nil {
		return nil, storeErr(err)
	}
	in := b.use(t.ID)
	in.writing(func() {
		in.locked(func() {
			in.adopt(t)
			in.lease = b.engine.AdoptLease(t)
			in.kickLocked("")
		})
	})
	return in, nil
}

// resume continues an existing workflow task: server steps that failed
// (including those handed to the client) are tried again.
func (h *TaskPromptHandler) resume(ctx context.Context, q *taskrouter.Request, id string) (*store.Task, *Progress, error) {
	b := h.bridge
	t, err := b.load(ctx, q, id)
	if err != nil {
		return nil, nil, err
	}
	if name := t.Labels[LabelWorkflow]; name != h.name {
		return nil, nil, mcptask.InvalidParams("task %s belongs to workflow %q, not %q", id, name, h.name)
	}
	in := b.use(id)
	defer b.done(in)
	unserved := false
	in.writing(func() {
		in.locked(func() { in.adopt(t) })
		if in.verr != nil {
			in.unserved(ctx)
			unserved = true
			return
		}
		err = in.commit(ctx, func(p *Progress) (store.Update, error) {
			for _, sl := range in.wf.slots(p) {
				if sp := sl.sp; sp.Execution == string(mcptask.ExecServer) && sp.Status == mcptask.StepFailed {
					sp.HandedToClient, sp.ReachedAt, sp.Deadline, sp.RetryAt, sp.Tries = false, nil, nil, nil, 0
					sl.s.kind.takeBack(sp)
				}
			}
			return store.Update{Labels: map[string]string{LabelTouched: "1"}}, nil
		})
	})
	if unserved {
		return b.current(ctx, id)
	}
	switch {
	case err == nil:
		in.kick(ReasonResume)
	case errors.Is(err, errEnded), errors.Is(err, errTakenOver):
		// It ended, or another process runs it: show where it stands.
	default:
		return nil, nil, err
	}
	t, p := b.settle(ctx, id)
	return t, p, nil
}

// load reads a workflow task the requestor may access.
func (b *Bridge) load(ctx context.Context, q *taskrouter.Request, id string) (*store.Task, error) {
	t, err := b.engine.TaskFor(ctx, q, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, mcptask.InvalidParams("unknown workflow task %q", id)
		}
		return nil, storeErr(err)
	}
	if t.Labels[taskrouter.LabelKind] != taskrouter.KindWorkflow {
		return nil, mcptask.InvalidParams("task %q is not a workflow task", id)
	}
	return t, nil
}

// current reads task id and its progress as stored now.
func (b *Bridge) current(ctx context.Context, id string) (*store.Task, *Progress, error) {
	t, err := b.engine.Task(context.WithoutCancel(ctx), id)
	if err != nil {
		return nil, nil, storeErr(err)
	}
	p, err := decodeProgress(t)
	if err != nil {
		return nil, nil, mcptask.InternalError("%v", err)
	}
	return t, p, nil
}

// settle waits until the workflow task rests (see rests), ends, or
// Options.PromptWait has passed, and returns it as it stands then (read
// again when the wait ran out, not as last seen while waiting). The
// steps go on afterwards either way; a caller that gives up cancels
// nothing.
func (b *Bridge) settle(ctx context.Context, taskID string) (*store.Task, *Progress) {
	wait := b.opts.PromptWait
	deadline := time.Time{}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if wait > 0 {
		deadline = b.engine.Now().Add(wait)
		wctx, cancel = context.WithTimeout(wctx, wait)
		defer cancel()
	}
	defer context.AfterFunc(b.ctx, cancel)() // the bridge closing ends the wait
	var last *Progress
	got, err := b.engine.Await(wctx, taskID, func(t *store.Task) bool {
		p, err := decodeProgress(t)
		if err != nil {
			return true
		}
		last = p
		return t.Status.Terminal() || rests(p, deadline)
	})
	if got == nil || err != nil {
		// The wait ran out (or failed): what it read last may be stale (a
		// change another replica made, whose notification has not come,
		// or was lost), so the answer reads the task again.
		if cur, p, rerr := b.current(ctx, taskID); rerr == nil {
			return cur, p
		}
	}
	if got != nil && last == nil {
		last, _ = decodeProgress(got)
	}
	return got, last
}

// promptResult is the prompt result of task t at progress p: the trace of
// the server steps, then the handoff as the final assistant message, with
// the same document in _meta.
func (b *Bridge) promptResult(t *store.Task, p *Progress, d mcptask.Dialect) (*mcp.GetPromptResult, error) {
	doc := b.handoff(t, p, d)
	msg, err := doc.Message()
	if err != nil {
		return nil, mcptask.InternalError("rendering handoff: %v", err)
	}
	msgs := append(b.trace(t, p), msg)
	desc := ""
	if wf := b.newest(t.Labels[LabelWorkflow]); wf != nil {
		desc = wf.def.Description
	}
	return &mcp.GetPromptResult{Meta: b.resultMeta(t, doc.Meta()), Description: desc, Messages: msgs}, nil
}

// resultMeta is the _meta of a workflow prompt or tool result: extra
// (the handoff), the related task, and Options.ResultMeta's entries.
func (b *Bridge) resultMeta(t *store.Task, extra map[string]any) mcp.Meta {
	meta := mcp.Meta{}
	maps.Copy(meta, extra)
	maps.Copy(meta, mcptask.RelatedTaskMeta(t.ID))
	if b.opts.ResultMeta != nil {
		maps.Copy(meta, b.opts.ResultMeta(t))
	}
	return meta
}

// trace is the conversation of the server steps that completed: each
// call and its result, in step order.
func (b *Bridge) trace(t *store.Task, p *Progress) []*mcp.PromptMessage {
	var msgs []*mcp.PromptMessage
	for i := range p.Steps {
		sp := &p.Steps[i]
		if sp.Status != mcptask.StepCompleted || sp.CompletedBy != string(mcptask.ExecServer) {
			continue
		}
		var args map[string]json.RawMessage
		_ = json.Unmarshal(sp.Arguments, &args)
		msgs = append(msgs, callMessage(sp.Name, sp.Tool, args), resultMessage(sp.Name, sp.Tool, p.Outputs[sp.Output]))
	}
	return msgs
}

func (b *Bridge) newestDef(name string) *Definition {
	if wf := b.newest(name); wf != nil {
		return wf.def
	}
	return &Definition{Name: name}
}

func startMessage(w *Definition, p *Progress) *mcp.PromptMessage {
	return textMessage("user", fmt.Sprintf("Run workflow %q: %s. Arguments: %s", w.Name, w.goal(), marshal(p.Arguments)))
}

// resultJSON is the final result of workflow task t ending in status
// (completed, or failed with message), as tasks/result returns it: a tool
// result whose text is the handoff (prose and JSON), with the document in
// _meta. A completed workflow's result also carries the document as its
// structured content; a failed one's is a tool result with isError and no
// structured content (docs/INTEROP.md, "How a workflow's end reads"), so
// that tasks/result answers a failed workflow with the tool result the
// client reads, not a JSON-RPC error.
func (b *Bridge) resultJSON(t *store.Task, p *Progress, status mcptask.Status, message string) (json.RawMessage, error) {
	end := *t
	end.Status, end.StatusMessage = status, message
	d, err := mcptask.ParseDialect(t.Labels[taskrouter.LabelDialect])
	if err != nil {
		d = mcptask.Core
	}
	doc := b.handoff(&end, p, d)
	text, err := renderTool(doc, reader{d: d})
	if err != nil {
		return nil, mcptask.InternalError("rendering the workflow result: %v", err)
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, Meta: mcp.Meta(doc.Meta())}
	if status == mcptask.StatusCompleted {
		res.StructuredContent = doc
	} else {
		res.IsError = true
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, mcptask.InternalError("encoding the workflow result: %v", err)
	}
	return raw, nil
}
