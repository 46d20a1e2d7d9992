package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// continueCall serves a tool call bound to a workflow task with
// _meta._task_id: the tool runs, its result is recorded against the
// matching step, server steps that became runnable run, and the task
// completes when no step remains.
//
// Every check happens before the tool runs, so a bad call records nothing:
// an unknown, hidden, finished or non-workflow task; a tool that matches no
// step the client may perform; a step whose inputs do not exist yet. A call
// that repeats a step the client already performed, with the same
// arguments (a client retrying after a lost reply), is answered with the
// recorded result without running the tool again; with other arguments it
// is refused with the recorded ones.
func (b *Bridge) continueCall(ctx context.Context, q *taskrouter.Request, req *mcp.CallToolRequest) (mcp.Result, error) {
	meta := req.Params.GetMeta()
	id, ok := meta[MetaTaskID].(string)
	if !ok || id == "" {
		return nil, mcptask.InvalidParams("_meta.%s must be a non-empty string task id", MetaTaskID)
	}
	setVars, err := taskVars(meta[MetaTaskVars])
	if err != nil {
		return nil, err
	}
	unlock := b.lock(id)
	defer unlock()
	st, err := b.load(ctx, q, id)
	if err != nil {
		return nil, err
	}
	h := b.handler(st.task.Labels[LabelWorkflow])
	if h == nil {
		return nil, mcptask.InvalidParams("task %s belongs to workflow %q, which this server does not serve", id, st.task.Labels[LabelWorkflow])
	}
	w, p := h.Plain.Workflow, st.progress
	tool := req.Params.Name
	if s := replayable(w, p, tool); s != nil {
		if res, err, ok := h.replay(st, s, req); ok {
			return res, err
		}
	}
	if st.task.Status.Terminal() {
		msg := fmt.Sprintf("workflow task %s is %s", id, st.task.Status)
		if st.task.StatusMessage != "" {
			msg += ": " + st.task.StatusMessage
		}
		return nil, mcptask.InvalidParams("%s; it takes no more steps", msg)
	}
	if err := h.checkStep(st, tool); err != nil {
		return nil, err
	}
	// Take the task's lease: the first write of the call. Another process
	// may have advanced the task since it was loaded, so look again.
	rec, err := b.claim(ctx, st)
	if errors.Is(err, store.ErrTerminal) {
		// Another process ended the task while this call waited for the
		// lease: most likely it recorded this very step.
		if st, err = b.load(ctx, q, id); err != nil {
			return nil, err
		}
		if s := replayable(w, st.progress, tool); s != nil {
			if res, err, ok := h.replay(st, s, req); ok {
				return res, err
			}
		}
		return nil, mcptask.InvalidParams("workflow task %s is %s; it takes no more steps", id, st.task.Status)
	}
	if err != nil {
		return nil, storeErr(err)
	}
	defer rec.giveBack(ctx) // when the call ends before a write released it
	p = st.progress
	if s := replayable(w, p, tool); s != nil {
		if res, err, ok := h.replay(st, s, req); ok {
			return res, err
		}
	}
	if err := h.checkStep(st, tool); err != nil {
		return nil, err
	}
	step := h.match(p, tool)
	delete(meta, MetaTaskVars)
	sp := p.step(step.Name)
	if sp.IdempotencyKey == "" {
		sp.IdempotencyKey = idempotencyKey(id, step.Name)
	}
	meta[mcptask.MetaIdempotencyKey] = sp.IdempotencyKey

	rec.extra, rec.touch = setVars, true
	tctx, done := b.engine.Track(ctx, id)
	res, callErr := b.engine.RunTool(tctx, req)
	done()
	if why := taskrouter.Stopped(tctx); why != "" {
		return nil, mcptask.InvalidParams("workflow task %s was %s while step %q ran; nothing was recorded", id, why, step.Name)
	}
	if err := h.recordClientStep(ctx, rec, p, step, req, res, callErr); err != nil {
		return nil, err
	}
	if callErr != nil {
		return nil, callErr
	}
	return h.continuationResult(rec, p, step, res), nil
}

// recordClientStep records the outcome of the client step that req ran
// (res, or callErr) durably, and when the step succeeded runs the server
// steps that became runnable.
func (h *TaskWorkflowPromptHandler) recordClientStep(ctx context.Context, rec *recorder, p *WorkflowProgress, step *Step, req *mcp.CallToolRequest, res *mcp.CallToolResult, callErr error) error {
	id, meta := rec.task.ID, req.Params.GetMeta()
	now := h.Plain.now()
	var failure string
	switch {
	case callErr != nil:
		failure = callErr.Error()
	case res.IsError:
		failure = toolError(res)
	}
	if failure != "" {
		fail(p, step, "client", failure, now)
		emit(h.bridge.Observer, id, p, step, meta)
		p.PauseReason = clientFailedMessage(step, failure)
	} else {
		complete(p, step, "client", canonical(req.Params.Arguments), res, now)
		emit(h.bridge.Observer, id, p, step, meta)
		raw, err := json.Marshal(res)
		if err != nil {
			return mcptask.InternalError("encoding the result of tool %q: %v", req.Params.Name, err)
		}
		if rec.extra == nil {
			rec.extra = map[string]json.RawMessage{}
		}
		rec.extra[VarResultPrefix+step.Name] = raw
		// The next server step is written as running with this step's
		// result.
		h.runner(id, rec.vars, req.Session).prepare(p, now, "")
	}
	// The step's outcome is durable before anything else runs (when it
	// was the last step, in the write that completes the task).
	if failure != "" || !p.done() {
		if err := rec.Record(ctx, p); err != nil {
			return err
		}
	}
	if failure == "" {
		if _, err := h.run(ctx, rec, p, "", req.Session); err != nil {
			if _, stopped := err.(*stoppedError); !stopped {
				return err
			}
		}
	}
	return nil
}

// continuationResult is the reply to a continuation call: the tool's
// result, tagged with the task and the workflow's state after step.
func (h *TaskWorkflowPromptHandler) continuationResult(rec *recorder, p *WorkflowProgress, step *Step, res *mcp.CallToolResult) *mcp.CallToolResult {
	out := *res
	out.Meta = mcp.Meta{}
	for k, v := range res.Meta {
		out.Meta[k] = v
	}
	for k, v := range mcptask.RelatedTaskMeta(rec.task.ID) {
		out.Meta[k] = v
	}
	out.Meta[MetaWorkflow] = h.summary(rec.task, p, step.Name, false)
	return &out
}

// checkStep refuses a call of tool that matches no step the client may
// perform now, or whose step's inputs do not exist yet.
func (h *TaskWorkflowPromptHandler) checkStep(st *taskState, tool string) error {
	step := h.match(st.progress, tool)
	if step == nil {
		return h.noMatch(st, tool)
	}
	if missing := h.missingInputs(st.progress, step); missing != "" {
		return mcptask.InvalidParams("step %q (tool %q) of workflow task %s cannot run yet: %s", step.Name, tool, st.task.ID, missing)
	}
	return nil
}

// summary is the mcptask.WorkflowSummary attached to a continuation's
// result.
func (h *TaskWorkflowPromptHandler) summary(t *store.Task, p *WorkflowProgress, step string, replayed bool) mcptask.WorkflowSummary {
	return mcptask.WorkflowSummary{
		TaskID:         t.ID,
		Workflow:       h.Plain.Workflow.Name,
		Status:         t.Status,
		StatusMessage:  t.StatusMessage,
		Step:           step,
		Replayed:       replayed,
		RemainingSteps: p.RemainingSteps,
		ClientSteps:    h.clientSteps(p),
		PauseReason:    p.PauseReason,
	}
}

// match finds the remaining step a client call of tool performs: a client
// step not yet completed, or a server step the server handed to the client.
func (h *TaskWorkflowPromptHandler) match(p *WorkflowProgress, tool string) *Step {
	for _, s := range h.Plain.Workflow.Steps {
		sp := p.step(s.Name)
		if sp == nil || sp.Status == StepCompleted || s.Tool != tool {
			continue
		}
		if s.execution() == ClientDeferred || sp.HandedToClient {
			return s
		}
	}
	return nil
}

// clientSteps names the remaining steps the client may perform now.
func (h *TaskWorkflowPromptHandler) clientSteps(p *WorkflowProgress) []string {
	var out []string
	for _, s := range h.Plain.Workflow.Steps {
		sp := p.step(s.Name)
		if sp == nil || sp.Status == StepCompleted {
			continue
		}
		if (s.execution() == ClientDeferred || sp.HandedToClient) && h.missingInputs(p, s) == "" {
			out = append(out, s.Name)
		}
	}
	return out
}

// noMatch explains why a tool matches no step the client may perform.
func (h *TaskWorkflowPromptHandler) noMatch(st *taskState, tool string) error {
	w, p := h.Plain.Workflow, st.progress
	options := "none"
	if names := h.clientSteps(p); len(names) > 0 {
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%q (tool %q)", n, w.step(n).Tool))
		}
		options = strings.Join(parts, ", ")
	}
	for _, s := range w.Steps {
		sp := p.step(s.Name)
		if s.Tool != tool || sp == nil || sp.Status == StepCompleted {
			continue
		}
		return mcptask.InvalidParams("step %q (tool %q) of workflow %q (task %s) is performed by the server, not the client (it is %s); steps the client may perform now: %s",
			s.Name, tool, w.Name, st.task.ID, sp.Status, options)
	}
	return mcptask.InvalidParams("tool %q matches no remaining step of workflow %q (task %s); steps the client may perform now: %s",
		tool, w.Name, st.task.ID, options)
}

// missingInputs names the steps whose outputs step needs and that have not
// completed, with what the client can do about it; "" when every input
// exists.
func (h *TaskWorkflowPromptHandler) missingInputs(p *WorkflowProgress, step *Step) string {
	w := h.Plain.Workflow
	var parts []string
	seen := map[string]bool{}
	for _, arg := range slices.Sorted(maps.Keys(step.Args)) {
		src := step.Args[arg]
		if src.Kind != SourceStepOutput {
			continue
		}
		from := w.producer(src.Name)
		if from == nil || seen[from.Name] {
			continue
		}
		seen[from.Name] = true
		sp := p.step(from.Name)
		if sp.Status == StepCompleted {
			continue
		}
		switch {
		case sp.HandedToClient:
			parts = append(parts, fmt.Sprintf("it needs the output of step %q, which the server could not perform (%s): perform that step first (tool %q), or resume the workflow", from.Name, oneLine(sp.Error), from.Tool))
		case from.execution() == ClientDeferred:
			parts = append(parts, fmt.Sprintf("it needs the output of step %q: perform that step first (tool %q)", from.Name, from.Tool))
		default:
			parts = append(parts, fmt.Sprintf("it needs the output of step %q, which the server has not completed (%s)", from.Name, sp.Status))
		}
	}
	return strings.Join(parts, "; ")
}

func (w *SequentialWorkflow) step(name string) *Step {
	for _, s := range w.Steps {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// replayable returns the completed step the client performed with tool, if
// any: a call of it is a retry of that step.
func replayable(w *SequentialWorkflow, p *WorkflowProgress, tool string) *Step {
	for _, s := range w.Steps {
		if s.Tool != tool {
			continue
		}
		if sp := p.step(s.Name); sp != nil && sp.Status == StepCompleted && sp.CompletedBy == "client" {
			return s
		}
	}
	return nil
}

// replay answers a retried continuation: the recorded result when the
// arguments are the recorded ones, a clear refusal otherwise. ok is false
// when the call is not a retry after all (other arguments, and a remaining
// step uses the same tool).
func (h *TaskWorkflowPromptHandler) replay(st *taskState, s *Step, req *mcp.CallToolRequest) (res mcp.Result, err error, ok bool) {
	sp := st.progress.step(s.Name)
	if !sameJSON(canonical(req.Params.Arguments), sp.Arguments) {
		if next := h.match(st.progress, s.Tool); next != nil && !st.task.Status.Terminal() {
			return nil, nil, false
		}
		return nil, mcptask.InvalidParams("step %q (tool %q) of workflow task %s is already done: it was recorded with arguments %s and result %s; a retry must repeat those arguments",
			s.Name, s.Tool, st.task.ID, sp.Arguments, truncate(string(st.progress.Outputs[s.binding()]), 500)), true
	}
	raw, found := st.task.Variables[VarResultPrefix+s.Name]
	if !found {
		return nil, mcptask.InternalError("step %q of workflow task %s is done but its result was not kept", s.Name, st.task.ID), true
	}
	var ctr mcp.CallToolResult
	if err := json.Unmarshal(raw, &ctr); err != nil {
		return nil, mcptask.InternalError("decoding the recorded result of step %q: %v", s.Name, err), true
	}
	if ctr.Meta == nil {
		ctr.Meta = mcp.Meta{}
	}
	for k, v := range mcptask.RelatedTaskMeta(st.task.ID) {
		ctr.Meta[k] = v
	}
	ctr.Meta[MetaWorkflow] = h.summary(st.task, st.progress, s.Name, true)
	return &ctr, nil, true
}

// canonical returns args as compact JSON with sorted object keys, for
// comparing a retried call's arguments with the recorded ones.
func canonical(args json.RawMessage) json.RawMessage {
	if len(args) == 0 {
		return json.RawMessage("{}")
	}
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		return args
	}
	return marshal(v)
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return reflect.DeepEqual(x, y)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// taskVars decodes _meta._task_vars, refusing reserved keys.
func taskVars(raw any) (map[string]json.RawMessage, error) {
	if raw == nil {
		return nil, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, mcptask.InvalidParams("_meta.%s must be an object of task variables", MetaTaskVars)
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		if k == "" || strings.HasPrefix(k, ReservedPrefix) {
			return nil, mcptask.InvalidParams("task variable %q is reserved: names starting with %q belong to the workflow engine", k, ReservedPrefix)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, mcptask.InvalidParams("task variable %q: %v", k, err)
		}
		out[k] = b
	}
	return out, nil
}
