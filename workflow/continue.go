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
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// continueCall serves a tool call bound to a workflow task (_meta._task_id,
// or the argument _task_id, which the engine moved into _meta): the tool
// runs, its result is recorded against the matching step, the server steps
// that became runnable run on the engine, and the call answers with the
// tool's result and where the workflow stands.
//
// Every check happens before the tool runs, so a refused call records
// nothing: an unknown, hidden, finished or non-workflow task; a task whose
// version this server does not serve; a tool that matches no step the
// client may perform now; a step whose inputs do not exist yet. A call
// that repeats a step the client already performed, with the same
// arguments (a client retrying after a lost reply), is answered with the
// recorded result without running the tool again; with other arguments it
// is refused with the recorded ones. A call whose tool fails with a
// JSON-RPC error records nothing either. Once the step's outcome is
// recorded, the answer is that outcome and the workflow's state, whatever
// happens to the task afterwards (it completes on another replica, it is
// cancelled): a refusal always means nothing was recorded.
func (b *Bridge) continueCall(ctx context.Context, q *taskrouter.Request, req *mcp.CallToolRequest) (mcp.Result, error) {
	if b.isWorkflowTool(req.Params.Name) {
		// The workflow's own tool named with a task: a resume.
		return b.toolHandler(req.Params.Name)(ctx, req)
	}
	meta := req.Params.GetMeta()
	id, ok := meta[MetaTaskID].(string)
	if !ok || id == "" {
		return nil, mcptask.InvalidParams("_meta.%s (or the argument %s) must be a non-empty string task id", MetaTaskID, TaskIDArgument)
	}
	setVars, err := taskVars(meta[MetaTaskVars])
	if err != nil {
		return nil, err
	}
	t, err := b.load(ctx, q, id)
	if err != nil {
		return nil, err
	}
	if req.Params.Name == b.opts.EventTool {
		return b.eventCall(ctx, q, t, req)
	}
	in := b.use(id)
	defer b.done(in)
	if refused := in.prepareCall(ctx, t, req); refused != nil {
		return refused, nil
	}
	step, replay, err := in.claimStep(ctx, t, req)
	if err != nil {
		return nil, err
	}
	if replay != nil {
		return b.answer(ctx, in, step, replay, readerOf(q), true), nil
	}
	defer in.releaseStep(step.Name)

	delete(meta, MetaTaskVars)
	meta[mcptask.MetaIdempotencyKey] = idempotencyKey(id, step.Name)
	tctx, untrack := b.engine.Track(ctx, id)
	res, callErr := b.engine.RunTool(withStep(tctx, id, step.Name, in.nextAttempt(step.Name), ByClient), req)
	untrack()
	if why := taskrouter.Stopped(tctx); why != "" {
		return nil, mcptask.InvalidParams("workflow task %s was %s while step %q ran; nothing was recorded", id, why, step.Name)
	}
	if callErr != nil {
		// A JSON-RPC error (arguments the tool refused, say) is the
		// client's to fix: nothing is recorded.
		return nil, callErr
	}
	recorded, err := in.recordClient(context.WithoutCancel(ctx), step, req, res, setVars, ByClient)
	if err != nil {
		return nil, err
	}
	if recorded != nil {
		// Another call recorded the step meanwhile: answer as a repeated
		// call is answered.
		return b.answer(ctx, in, step, recorded, readerOf(q), true), nil
	}
	// The step is recorded: from here on the call answers with its result
	// and where the workflow stands, whatever happens to the task (it is
	// cancelled, expires, completes on the replica that took it over); no
	// path below returns an error.
	if f := b.opts.AfterRecord; f != nil {
		f(ctx, id, step.Name)
	}
	if !res.IsError {
		in.kick("")
	}
	return b.answerOrLeg(ctx, q, req, in, step, res), nil
}

// answerOrLeg answers a recorded continuation (see answer), or, for a
// client that takes tasks, makes the rest of it a leg when the workflow
// has nothing for the model yet (its server steps outlast PromptWait, or
// it waits for a person's decision): the leg's result is the same answer,
// once it has.
func (b *Bridge) answerOrLeg(ctx context.Context, q *taskrouter.Request, req *mcp.CallToolRequest, in *instance, step *Step, res *mcp.CallToolResult) mcp.Result {
	rd := readerOf(q)
	if !taskrouter.CanStartLeg(q) {
		return b.answer(ctx, in, step, res, rd, false)
	}
	cur, p := b.settle(ctx, in.id)
	answer := func(t *store.Task, p *Progress) (*mcp.CallToolResult, error) {
		return b.continuationResult(t, p, step, res, rd, false), nil
	}
	if leg, ok, err := b.legTail(ctx, q, req, cur, p, answer); ok && err == nil {
		return leg
	}
	if cur == nil || p == nil {
		return b.answer(ctx, in, step, res, rd, false) // reads what this process knows
	}
	return b.continuationResult(cur, p, step, res, rd, false)
}

// answer is a continuation's reply once its step is recorded (by this
// call, or by an earlier one it repeats): the step's result and where the
// workflow stands once it rests or Options.PromptWait has passed. It never
// fails: when the task cannot be read now (the store is down, the task was
// deleted), it shows the task as this process last knew it.
func (b *Bridge) answer(ctx context.Context, in *instance, step *Step, res *mcp.CallToolResult, rd reader, replayed bool) *mcp.CallToolResult {
	cur, p := b.settle(ctx, in.id)
	if cur == nil || p == nil {
		cur, p = in.known()
	}
	if cur == nil || p == nil {
		out := *res
		out.Meta = mcp.Meta{}
		maps.Copy(out.Meta, res.Meta)
		maps.Copy(out.Meta, mcptask.RelatedTaskMeta(in.id))
		return &out
	}
	return b.continuationResult(cur, p, step, res, rd, replayed)
}

// claimStep checks a continuation against the task as it stands and marks
// its step as being performed here (so a second call of the same step
// waits for the first, then gets its recorded result). It returns the
// step, with the recorded result when the call repeats a recorded step
// (replay), or a refusal.
func (in *instance) claimStep(ctx context.Context, t *store.Task, req *mcp.CallToolRequest) (*Step, *mcp.CallToolResult, error) {
	tool := req.Params.Name
	for {
		var (
			step   *Step
			replay *mcp.CallToolResult
			err    error
			busy   chan struct{}
			done   bool
		)
		in.locked(func() {
			if t != nil && (in.task == nil || t.Version > in.task.Version) {
				in.adopt(t)
			}
			t = nil
			if err = in.load(ctx); err != nil {
				err, done = storeErr(err), true
				return
			}
			if in.verr != nil {
				in.unserved(ctx)
				verr := in.verr
				if verr == nil {
					verr = errors.New("the task's definition is not served here")
				}
				err, done = mcptask.InvalidParams("workflow task %s cannot continue: %v; nothing was recorded", in.id, verr), true
				return
			}
			cur, wf, p := in.task, in.wf, in.p
			if s := replayable(wf, p, tool); s != nil {
				if res, rerr, ok := recordedResult(cur, wf, p, s, req); ok {
					step, replay, err, done = s, res, rerr, true
					return
				}
			}
			if cur.Status.Terminal() {
				msg := fmt.Sprintf("workflow task %s is %s", in.id, cur.Status)
				if cur.StatusMessage != "" {
					msg += ": " + cur.StatusMessage
				}
				err, done = mcptask.InvalidParams("%s; it takes no more steps (nothing was recorded)", msg), true
				return
			}
			if step, err = checkStep(wf, p, cur.ID, tool); err != nil {
				done = true
				return
			}
			if busy = in.clients[step.Name]; busy != nil {
				return
			}
			in.clients[step.Name] = make(chan struct{})
			done = true
		})
		if done {
			return step, replay, err
		}
		select {
		case <-busy:
			continue // it ended: look again (a replay, most likely)
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// prepareCall readies a continuation's arguments before anything runs.
// It refuses (a tool error, recording nothing) a value that is still the
// handoff's placeholder for it: a model that echoes "<true to publish>"
// must not have its step recorded. And it adds the values the server
// resolved that the call leaves out, so that a client sends only the task
// id and what it fills in (a value the call sends wins). A call that
// matches no step the client may perform now is left as it is (claimStep
// refuses it).
func (in *instance) prepareCall(ctx context.Context, t *store.Task, req *mcp.CallToolRequest) (refused *mcp.CallToolResult) {
	wf, err := in.refresh(ctx, t)
	if err != nil {
		return nil
	}
	var args map[string]json.RawMessage
	if len(req.Params.Arguments) > 0 && json.Unmarshal(req.Params.Arguments, &args) != nil {
		return nil // the tool refuses arguments that are not an object
	}
	if args == nil {
		args = map[string]json.RawMessage{}
	}
	in.locked(func() {
		if in.p == nil {
			return
		}
		s := match(wf, in.p, req.Params.Name)
		c := callOf(s)
		if c == nil {
			return
		}
		resolved, _ := c.resolve(&resolver{w: wf.def, vars: in.vars}, in.p, true, false)
		for _, name := range c.argNames() {
			src, got := c.args[name]
			sent, ok := args[name]
			switch {
			case ok && src.Kind == SourceClient && sameJSON(sent, placeholder(src, nil)):
				f := c.fillOf(&view{wf: wf}, name, src)
				refused = refusal("argument %q still holds the handoff's placeholder %s: put %s there (%s), then call tool %q again with the task id as %s; nothing was recorded",
					name, compact(sent), article(f.Type), src.Description, c.tool, TaskIDArgument)
				return
			case !ok && got && src.Kind != SourceClient && resolved[name] != nil && !handoffPlaceholder(resolved[name]):
				args[name] = resolved[name]
			}
		}
	})
	if refused != nil {
		refused.Meta = mcp.Meta(mcptask.RelatedTaskMeta(t.ID))
		return refused
	}
	req.Params.Arguments = marshal(args)
	return nil
}

// handoffPlaceholder reports a value the handoff shows in place of one
// that does not exist yet ("<...>").
func handoffPlaceholder(v json.RawMessage) bool {
	var s string
	return json.Unmarshal(v, &s) == nil && strings.HasPrefix(s, "<") && strings.HasSuffix(s, ">")
}

// article is "a boolean", "an integer", "a value".
func article(t string) string {
	switch {
	case t == "":
		return "a value"
	case strings.ContainsAny(t[:1], "aeiou"):
		return "an " + t
	}
	return "a " + t
}

// releaseStep ends a continuation of step name.
func (in *instance) releaseStep(name string) {
	in.locked(func() {
		if ch := in.clients[name]; ch != nil {
			close(ch)
			delete(in.clients, name)
		}
	})
}

// recordClient records the outcome of the client step a continuation ran,
// durably, with the task variables it sets; the task is marked held by a
// client. It returns a replay answer when another call recorded the step
// first, and an error only when nothing was recorded.
func (in *instance) recordClient(ctx context.Context, step *Step, req *mcp.CallToolRequest, res *mcp.CallToolResult, setVars map[string]json.RawMessage, by string) (*mcp.CallToolResult, error) {
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, mcptask.InternalError("encoding the result of tool %q: %v", req.Params.Name, err)
	}
	meta := req.Params.GetMeta()
	var ans *mcp.CallToolResult
	in.locked(func() { ans, err = in.recordClientLocked(ctx, step, req, res, raw, meta, setVars, by) })
	return ans, err
}

// recordClientLocked is recordClient. Call with mu held.
func (in *instance) recordClientLocked(ctx context.Context, step *Step, req *mcp.CallToolRequest, res *mcp.CallToolResult, raw []byte, meta mcp.Meta, setVars map[string]json.RawMessage, by string) (*mcp.CallToolResult, error) {
	b := in.b
	var err error
	for attempt := 0; ; attempt++ {
		err = in.commit(ctx, func(p *Progress) (store.Update, error) {
			sp := p.step(step.Name)
			if sp == nil || sp.ended() || !reached(in.wf, p, in.wf.index[step.Name]) || !clientSide(step, sp) {
				return store.Update{}, errStale
			}
			now := b.engine.Now()
			vars := maps.Clone(setVars)
			if vars == nil {
				vars = map[string]json.RawMessage{}
			}
			if res.IsError {
				fail(p, in.wf.slotAt(p, step.Name), by, toolError(res), now)
				p.PauseReason = clientFailedMessage(step, toolError(res))
			} else {
				complete(p, in.wf.slotAt(p, step.Name), by, canonical(req.Params.Arguments), res, now)
				vars[VarResultPrefix+step.Name] = raw
			}
			if sp.IdempotencyKey == "" {
				sp.IdempotencyKey = idempotencyKey(in.id, step.Name)
			}
			sp.ReachedAt, sp.Deadline = nil, nil
			emit(b.opts.Observer, in.id, p, in.wf.slotAt(p, step.Name), meta)
			if !res.IsError {
				markReached(in.wf, p, now)
				p.PauseReason = pauseReason(in.wf, p)
			}
			return store.Update{Variables: vars, Labels: map[string]string{LabelTouched: "1"}}, nil
		})
		switch {
		case err == nil:
			return nil, nil
		case errors.Is(err, errTakenOver) && attempt == 0:
			continue // the lease this process held is gone: record without it
		case errors.Is(err, errStale):
			// Another call recorded this step (or the workflow moved on):
			// answer as a repeated call would be answered.
			if ans, rerr, ok := in.recordedNow(ctx, step, req); ok {
				return ans, rerr
			}
			return nil, mcptask.InvalidParams("step %q of workflow task %s can no longer be performed: the workflow moved on while the tool ran; nothing was recorded", step.Name, in.id)
		case errors.Is(err, errEnded):
			cur := in.task
			if cur == nil {
				cur, _ = b.engine.Task(ctx, in.id)
			}
			status := "ended"
			if cur != nil {
				status = string(cur.Status)
			}
			return nil, mcptask.InvalidParams("workflow task %s %s while step %q ran; nothing was recorded", in.id, status, step.Name)
		}
		// A store failure may hide a write that committed (the
		// connection broke before the store answered): when the step
		// reads as recorded with these arguments now, that is the answer.
		if ans, rerr, ok := in.recordedNow(ctx, step, req); ok {
			return ans, rerr
		}
		return nil, err
	}
}

// recordedNow reloads the task and returns the recorded result of step
// when the step was recorded with req's arguments (ok), as a repeated
// call is answered. Call with mu held.
func (in *instance) recordedNow(ctx context.Context, step *Step, req *mcp.CallToolRequest) (*mcp.CallToolResult, error, bool) {
	in.invalidate()
	if err := in.load(ctx); err != nil || in.wf == nil {
		return nil, nil, false
	}
	s := replayable(in.wf, in.p, toolOf(step))
	if s == nil {
		return nil, nil, false
	}
	return recordedResult(in.task, in.wf, in.p, s, req)
}

// continuationResult is the answer to a continuation call: the tool's
// result, then (what a model reads) the handoff of the workflow as it
// stands now, or its completion; the task and a summary in _meta.
func (b *Bridge) continuationResult(t *store.Task, p *Progress, step *Step, res *mcp.CallToolResult, rd reader, replayed bool) *mcp.CallToolResult {
	out := *res
	out.Meta = mcp.Meta{}
	maps.Copy(out.Meta, res.Meta)
	maps.Copy(out.Meta, mcptask.RelatedTaskMeta(t.ID))
	out.Meta[MetaWorkflow] = b.summary(t, p, step.Name, replayed)
	doc := b.handoff(t, p, rd.d)
	out.Meta[handoff.MetaKey] = doc
	if out.StructuredContent == nil {
		out.StructuredContent = doc
	}
	if text, err := renderTool(doc, rd); err == nil {
		out.Content = append(slices.Clone(res.Content), &mcp.TextContent{Text: nextText(t, step, res.IsError) + "\n\n" + text})
	}
	return &out
}

// nextText introduces the handoff appended to a continuation's result.
func nextText(t *store.Task, step *Step, failed bool) string {
	if failed && !t.Status.Terminal() {
		return fmt.Sprintf("That call failed (above), so step %q is not done: call tool %q again with corrected values, as Next says.", step.Name, toolOf(step))
	}
	switch t.Status {
	case store.StatusCompleted:
		return fmt.Sprintf("Step %q is recorded on workflow task %s, and the workflow has completed.", step.Name, t.ID)
	case store.StatusFailed, store.StatusCancelled:
		return fmt.Sprintf("Step %q is recorded on workflow task %s, which has since %s.", step.Name, t.ID, t.Status)
	}
	return fmt.Sprintf("Step %q is recorded on workflow task %s. Where the workflow stands now:", step.Name, t.ID)
}

// summary is the mcptask.WorkflowSummary attached to a continuation's
// result.
func (b *Bridge) summary(t *store.Task, p *Progress, step string, replayed bool) mcptask.WorkflowSummary {
	return mcptask.WorkflowSummary{
		TaskID:         t.ID,
		Workflow:       p.Workflow,
		Status:         t.Status,
		StatusMessage:  t.StatusMessage,
		Step:           step,
		Replayed:       replayed,
		RemainingSteps: p.RemainingSteps,
		ClientSteps:    clientSteps(p),
		PauseReason:    p.PauseReason,
	}
}

// checkStep finds the step a client call of tool performs now, or refuses
// the call, naming what the client may do instead.
func checkStep(wf *compiled, p *Progress, taskID, tool string) (*Step, error) {
	if s := match(wf, p, tool); s != nil {
		return s, nil
	}
	options := "none"
	if names := clientSteps(p); len(names) > 0 {
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%q (tool %q)", n, toolOf(wf.byName[n])))
		}
		options = strings.Join(parts, ", ")
	}
	for i, s := range wf.steps {
		sp := &p.Steps[i]
		if !s.kind.performs(tool) || sp.ended() {
			continue
		}
		if missing := missingInputs(wf, p, s); missing != "" {
			return nil, mcptask.InvalidParams("step %q (tool %q) of workflow task %s cannot run yet: %s", s.Name, tool, taskID, missing)
		}
		if clientSide(s, sp) {
			return nil, mcptask.InvalidParams("step %q (tool %q) of workflow %q (task %s) cannot run yet: an earlier step has not ended (%s); steps the client may perform now: %s",
				s.Name, tool, wf.def.Name, taskID, oneLine(p.PauseReason), options)
		}
		why := string(sp.Status)
		if sp.ServerTakeover {
			why = "the client's wait ran out, so the server performs it"
		}
		return nil, mcptask.InvalidParams("step %q (tool %q) of workflow %q (task %s) is performed by the server, not the client (%s); steps the client may perform now: %s",
			s.Name, tool, wf.def.Name, taskID, why, options)
	}
	return nil, mcptask.InvalidParams("tool %q matches no remaining step of workflow %q (task %s); steps the client may perform now: %s",
		tool, wf.def.Name, taskID, options)
}

// match finds the step a client call of tool performs: a reached step the
// client may perform (a client step, or a server step handed to the
// client) whose inputs exist.
func match(wf *compiled, p *Progress, tool string) *Step {
	for i, s := range wf.steps {
		sp := &p.Steps[i]
		if sp.ended() || !s.kind.performs(tool) || !clientSide(s, sp) || !reached(wf, p, i) || missingInputs(wf, p, s) != "" {
			continue
		}
		return s
	}
	return nil
}

// clientSteps names the steps the client may perform now.
func clientSteps(p *Progress) []string {
	var out []string
	for i := range p.Steps {
		sp := &p.Steps[i]
		if sp.ended() {
			continue
		}
		if sp.Status == StepAwaitingClient || sp.HandedToClient || (sp.Status == StepFailed && sp.Execution == string(ClientDeferred) && !sp.ServerTakeover) {
			out = append(out, sp.Name)
		}
	}
	return out
}

// missingInputs names the steps whose outputs step needs and that have not
// completed, with what the client can do about it; "" when every input
// exists.
func missingInputs(wf *compiled, p *Progress, step *Step) string {
	var parts []string
	seen := map[string]bool{}
	for _, r := range step.kind.reads() {
		src := r.src
		if src.Kind != SourceStepOutput {
			continue
		}
		from := wf.def.producer(src.Name)
		if from == nil || seen[from.Name] {
			continue
		}
		seen[from.Name] = true
		sp := p.step(from.Name)
		if sp == nil || sp.Status == StepCompleted {
			continue
		}
		switch {
		case sp.HandedToClient:
			parts = append(parts, fmt.Sprintf("it needs the output of step %q, which the server could not perform (%s): perform that step first (tool %q), or resume the workflow", from.Name, oneLine(sp.Error), toolOf(from)))
		case from.Execution() == ClientDeferred:
			parts = append(parts, fmt.Sprintf("it needs the output of step %q: perform that step first (tool %q)", from.Name, toolOf(from)))
		default:
			parts = append(parts, fmt.Sprintf("it needs the output of step %q, which the server has not completed (%s)", from.Name, sp.Status))
		}
	}
	return strings.Join(parts, "; ")
}

// replayable returns the completed step the client performed with tool
// (itself, or an outside system through the webhook), if any: a call of it
// is a retry of that step.
func replayable(wf *compiled, p *Progress, tool string) *Step {
	for i, s := range wf.steps {
		if !s.kind.performs(tool) {
			continue
		}
		if sp := &p.Steps[i]; sp.Status == StepCompleted && (sp.CompletedBy == ByClient || sp.CompletedBy == ByWebhook) {
			return s
		}
	}
	return nil
}

// recordedResult answers a retried continuation: the recorded result
// when the arguments are the recorded ones, a clear refusal otherwise. ok
// is false when the call is not a retry after all (other arguments, and a
// remaining step uses the same tool).
func recordedResult(t *store.Task, wf *compiled, p *Progress, s *Step, req *mcp.CallToolRequest) (res *mcp.CallToolResult, err error, ok bool) {
	sp := p.step(s.Name)
	if !sameJSON(canonical(req.Params.Arguments), sp.Arguments) {
		if next := match(wf, p, toolOf(s)); next != nil && !t.Status.Terminal() {
			return nil, nil, false
		}
		return nil, mcptask.InvalidParams("step %q (tool %q) of workflow task %s is already done: it was recorded with arguments %s and result %s; a retry must repeat those arguments",
			s.Name, toolOf(s), t.ID, sp.Arguments, truncate(string(p.Outputs[s.binding()]), 500)), true
	}
	raw, found := t.Variables[VarResultPrefix+s.Name]
	if !found {
		return nil, mcptask.InternalError("step %q of workflow task %s is done but its result was not kept", s.Name, t.ID), true
	}
	var ctr mcp.CallToolResult
	if err := json.Unmarshal(raw, &ctr); err != nil {
		return nil, mcptask.InternalError("decoding the recorded result of step %q: %v", s.Name, err), true
	}
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
