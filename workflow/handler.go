package workflow

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// TaskWorkflowPromptHandler is the task-aware workflow prompt. It composes
// the plain WorkflowPromptHandler: the plain handler's runner runs steps;
// this one supplies a durable task, a recorder that writes progress into
// the task's variables and status message, and the handoff.
type TaskWorkflowPromptHandler struct {
	Plain  *WorkflowPromptHandler
	bridge *Bridge
}

// Handle is the mcp.PromptHandler. A prompts/get with _meta._task_id
// resumes that workflow task (retrying server steps that failed);
// otherwise it starts a new one: the task exists, bound to the caller,
// before any step runs.
func (h *TaskWorkflowPromptHandler) Handle(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	b := h.bridge
	q := b.engine.Resolve(ctx, req)
	if raw, ok := req.Params.GetMeta()[MetaTaskID]; ok {
		id, ok := raw.(string)
		if !ok || id == "" {
			return nil, mcptask.InvalidParams("_meta.%s must be a non-empty string task id", MetaTaskID)
		}
		return h.resume(ctx, q, req, id)
	}
	if q.OwnerErr != nil {
		return nil, q.OwnerErr
	}
	p, err := h.Plain.Start(req.Params.Arguments)
	if err != nil {
		return nil, err
	}
	r := h.runner("", nil, req.Session)
	r.prepare(p, h.Plain.now(), "") // the first write says what runs first
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, mcptask.InternalError("encoding workflow progress: %v", err)
	}
	args, _ := json.Marshal(p.Arguments)
	t, err := b.engine.CreateTask(ctx, q, store.Request{Method: mcptask.MethodPromptsGet, Name: h.Plain.Workflow.Name, Arguments: args},
		taskrouter.CreateOptions{TTL: b.TTL, Kind: taskrouter.KindWorkflow, Labels: map[string]string{LabelWorkflow: h.Plain.Workflow.Name},
			Variables: map[string]json.RawMessage{VarProgress: raw}, StatusMessage: p.PauseReason, Lease: true})
	if err != nil {
		return nil, storeErr(err)
	}
	unlock := b.lock(t.ID)
	defer unlock()
	rec := &recorder{b: b, task: t, lease: b.engine.AdoptLease(t)}
	res, err := h.advance(ctx, q, rec, p, "", req.Session)
	if err != nil {
		return nil, err
	}
	res.Messages = append([]*mcp.PromptMessage{r.startMessage(p)}, res.Messages...)
	return res, nil
}

// resume continues an existing workflow task from its recorded progress;
// server steps that failed (including those handed to the client) are
// tried again.
func (h *TaskWorkflowPromptHandler) resume(ctx context.Context, q *taskrouter.Request, req *mcp.GetPromptRequest, id string) (*mcp.GetPromptResult, error) {
	b := h.bridge
	unlock := b.lock(id)
	defer unlock()
	st, err := b.load(ctx, q, id)
	if err != nil {
		return nil, err
	}
	if st.task.Labels[LabelWorkflow] != h.Plain.Workflow.Name {
		return nil, mcptask.InvalidParams("task %s belongs to workflow %q, not %q", id, st.task.Labels[LabelWorkflow], h.Plain.Workflow.Name)
	}
	if st.task.Status.Terminal() {
		return h.result(st.task, st.progress, nil, q.Dialect)
	}
	rec, err := b.claim(ctx, st)
	if errors.Is(err, store.ErrTerminal) {
		// It ended meanwhile (another process completed it): show that.
		if st, err = b.load(ctx, q, id); err != nil {
			return nil, err
		}
		return h.result(st.task, st.progress, nil, q.Dialect)
	}
	if err != nil {
		return nil, storeErr(err)
	}
	rec.touch = true
	for i := range st.progress.Steps {
		sp := &st.progress.Steps[i]
		if sp.Execution == string(ServerExecutable) && sp.Status == StepFailed {
			sp.HandedToClient = false
		}
	}
	return h.advance(ctx, q, rec, st.progress, ReasonResume, req.Session)
}

func (h *TaskWorkflowPromptHandler) runner(taskID string, vars func(string) (json.RawMessage, bool), session *mcp.ServerSession) *runner {
	r := h.Plain.runner(taskID, vars)
	r.observer = h.bridge.Observer
	r.coalesce = h.bridge.ProgressInterval
	r.recorded = r.now() // the task was just written (created, claimed or continued)
	if session != nil {
		r.call = withSession(r.call, session)
	}
	return r
}

// advance runs what is runnable (with the task's work tracked, so that
// tasks/cancel stops it), ends the task when the workflow is done or a step
// failed it, and builds the prompt result with the handoff. reason is why
// steps that ran before run again (ReasonResume, ReasonRestart, or "").
func (h *TaskWorkflowPromptHandler) advance(ctx context.Context, q *taskrouter.Request, rec *recorder, p *WorkflowProgress, reason string, session *mcp.ServerSession) (*mcp.GetPromptResult, error) {
	trace, err := h.run(ctx, rec, p, reason, session)
	if err != nil {
		var stopped *stoppedError
		if !errors.As(err, &stopped) {
			return nil, err
		}
		// The task was cancelled or expired while steps ran: report it.
		t, terr := h.bridge.engine.Task(context.WithoutCancel(ctx), rec.task.ID)
		if terr != nil {
			return nil, err
		}
		rec.task = t
		if cur, derr := decodeProgress(t); derr == nil {
			p = cur
		}
	}
	return h.result(rec.task, p, trace, q.Dialect)
}

// stoppedError reports that the task's work was stopped by a cancel or its
// expiry.
type stoppedError struct{ why string }

func (e *stoppedError) Error() string {
	return "the workflow task was " + e.why + " while its steps ran"
}

// run advances p and ends the task when the workflow is done or failed. It
// returns the trace of what ran.
func (h *TaskWorkflowPromptHandler) run(ctx context.Context, rec *recorder, p *WorkflowProgress, reason string, session *mcp.ServerSession) ([]*mcp.PromptMessage, error) {
	b := h.bridge
	tctx, done := b.engine.Track(ctx, rec.task.ID)
	defer done()
	defer rec.release() // a pass that ends without releasing lets the lease expire
	r := h.runner(rec.task.ID, rec.vars, session)
	r.reason = reason
	err := r.advance(tctx, p, rec)
	switch why := taskrouter.Stopped(tctx); {
	case why == "cancelled" || why == "expired" || why == "ended":
		return r.trace, &stoppedError{why: why}
	case why == "lease lost":
		return r.trace, mcptask.InternalError("workflow task %s was taken over by another server process while this one ran its steps; get the prompt again with _meta._task_id to see where it stands", rec.task.ID)
	case why == "shutdown":
		return r.trace, mcptask.InternalError("the server is shutting down; the workflow resumes when it restarts")
	case errors.Is(err, ErrWorkflowFailed):
		msg := p.PauseReason
		_, err = rec.write(ctx, p, store.Update{Status: store.StatusFailed, StatusMessage: &msg,
			Error: &store.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg}})
		return r.trace, err
	case err != nil:
		return r.trace, err
	}
	if p.done() {
		return r.trace, h.complete(ctx, rec, p)
	}
	return r.trace, nil
}

// complete ends the task with the workflow's result: the prompt result a
// resume of the finished task returns (its handoff says completed).
func (h *TaskWorkflowPromptHandler) complete(ctx context.Context, rec *recorder, p *WorkflowProgress) error {
	p.PauseReason = completedMessage(p)
	done := *rec.task
	done.Status = store.StatusCompleted
	d, err := mcptask.ParseDialect(rec.task.Labels[taskrouter.LabelDialect])
	if err != nil {
		d = mcptask.Core
	}
	if q := taskrouter.RequestFrom(ctx); q != nil {
		d = q.Dialect // the dialect of the client that completes it
	}
	final, err := h.result(&done, p, nil, d)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(final)
	if err != nil {
		return mcptask.InternalError("encoding the workflow result: %v", err)
	}
	_, err = rec.write(ctx, p, store.Update{Status: store.StatusCompleted, Result: raw, StatusMessage: &p.PauseReason})
	return err
}

// result is the prompt result: the trace, then the handoff as the final
// assistant message, with the same document in _meta.
func (h *TaskWorkflowPromptHandler) result(t *store.Task, p *WorkflowProgress, trace []*mcp.PromptMessage, d mcptask.Dialect) (*mcp.GetPromptResult, error) {
	doc := h.handoff(t, p, d)
	msg, err := doc.Message()
	if err != nil {
		return nil, mcptask.InternalError("rendering handoff: %v", err)
	}
	meta := mcp.Meta{}
	for k, v := range doc.Meta() {
		meta[k] = v
	}
	for k, v := range mcptask.RelatedTaskMeta(t.ID) {
		meta[k] = v
	}
	if h.bridge.ResultMeta != nil {
		for k, v := range h.bridge.ResultMeta(t) {
			meta[k] = v
		}
	}
	msgs := append(append([]*mcp.PromptMessage{}, trace...), msg)
	return &mcp.GetPromptResult{Meta: meta, Description: h.Plain.Workflow.Description, Messages: msgs}, nil
}
