package workflow

// Continuations: a tool call bound to a workflow task (continueCall),
// from the step it performs (claimStep, prepareCall) through the record
// of its outcome (recordClient) to the answer (answer): one walk, in the
// order a call takes it.

import (
	"bytes"
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
	if err := b.narrowTaskRef(ctx, q, req); err != nil {
		return nil, err
	}
	meta := req.Params.GetMeta()
	ref, ok := meta[mcptask.MetaTaskID].(string)
	id, path := splitTaskRef(ref)
	if !ok || id == "" {
		return nil, mcptask.InvalidParams("_meta.%s (or the argument %s) must be a non-empty string task id", mcptask.MetaTaskID, mcptask.ArgTaskID)
	}
	meta[mcptask.MetaTaskID] = id
	setVars, err := taskVars(meta[mcptask.MetaTaskVars])
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
	if refused := in.prepareCall(ctx, t, req, path); refused != nil {
		return refused, nil
	}
	at, replay, err := in.claimStep(ctx, t, req, path)
	if err != nil {
		return nil, err
	}
	if replay != nil {
		return b.answer(ctx, in, at, replay, readerOf(q), true), nil
	}
	defer in.releaseStep(at.path)

	delete(meta, mcptask.MetaTaskVars)
	meta[mcptask.MetaIdempotencyKey] = idempotencyKey(id, at.path)
	tctx, untrack := b.engine.Track(ctx, id)
	res, callErr := b.engine.RunTool(withStep(tctx, id, at.path, in.nextAttempt(at.path), string(mcptask.ExecClient)), req)
	untrack()
	if why := taskrouter.Stopped(tctx); why != "" {
		return nil, mcptask.InvalidParams("workflow task %s was %s while step %q ran; nothing was recorded", id, why, at.path)
	}
	if callErr != nil {
		// A JSON-RPC error (arguments the tool refused, say) is the
		// client's to fix: nothing is recorded.
		return nil, callErr
	}
	recorded, err := in.recordClient(context.WithoutCancel(ctx), at, req, res, setVars, string(mcptask.ExecClient))
	if err != nil {
		return nil, err
	}
	if recorded != nil {
		// Another call recorded the step meanwhile: answer as a repeated
		// call is answered.
		return b.answer(ctx, in, at, recorded, readerOf(q), true), nil
	}
	// The step is recorded: from here on the call answers with its result
	// and where the workflow stands, whatever happens to the task (it is
	// cancelled, expires, completes on the replica that took it over); no
	// path below returns an error.
	if f := b.opts.hooks.AfterRecord; f != nil {
		f(ctx, id, at.path)
	}
	if !res.IsError {
		in.kick("")
	}
	return b.answerOrLeg(ctx, q, req, in, at, res), nil
}

// narrowTaskRef settles a continuation whose argument _task_id names
// another task than its _meta._task_id (the engine left the argument in
// the arguments, see taskrouter.ContinuationHandler). The handoff's
// arguments name the record a call performs: a workflow's item
// ("W#deploy[1]") or a step of its child workflow (the child's task id,
// or a record of it). A client that also puts the workflow's id in
// _meta._task_id, as the documented _meta form says, names the same
// workflow: the argument, the narrower of the two, is what the call
// continues, once it is found inside the workflow _meta names (the task
// itself, or a descendant by its parents). Anything else names two
// different tasks: -32602, recording nothing.
func (b *Bridge) narrowTaskRef(ctx context.Context, q *taskrouter.Request, req *mcp.CallToolRequest) error {
	meta := req.Params.GetMeta()
	outer, ok := meta[mcptask.MetaTaskID].(string)
	if !ok || !bytes.Contains(req.Params.Arguments, []byte(`"`+mcptask.ArgTaskID+`"`)) {
		return nil
	}
	var args map[string]json.RawMessage
	if json.Unmarshal(req.Params.Arguments, &args) != nil {
		return nil
	}
	raw, ok := args[mcptask.ArgTaskID]
	if !ok {
		return nil
	}
	var inner string
	if json.Unmarshal(raw, &inner) != nil || inner == "" {
		return mcptask.InvalidParams("argument %s must be a non-empty string: the id of the workflow task this call performs a step of", mcptask.ArgTaskID)
	}
	differ := func(why string) error {
		return mcptask.InvalidParams("argument %s (%q) and _meta.%s (%q) name different tasks (%s); nothing was recorded", mcptask.ArgTaskID, inner, mcptask.MetaTaskID, outer, why)
	}
	outerID, outerPath := splitTaskRef(outer)
	innerID, _ := splitTaskRef(inner)
	switch {
	case inner == outer:
	case outerPath != "":
		return differ("_meta names a record of a workflow; name the workflow's task id there, or leave _meta out")
	case innerID != outerID:
		t, err := b.engine.TaskFor(ctx, q, innerID)
		if err != nil {
			return differ("the argument's task is not found")
		}
		for depth := 0; t.Labels[LabelParent] != outerID; depth++ {
			if t.Labels[LabelParent] == "" || depth >= MaxDepth {
				return differ(fmt.Sprintf("task %s is not part of workflow task %s", innerID, outerID))
			}
			if t, err = b.engine.Task(ctx, t.Labels[LabelParent]); err != nil {
				return differ(fmt.Sprintf("task %s is not part of workflow task %s", innerID, outerID))
			}
		}
	}
	delete(args, mcptask.ArgTaskID)
	req.Params.Arguments = marshal(args)
	meta[mcptask.MetaTaskID] = inner
	return nil
}

// ---- claiming the step the call performs, and preparing its arguments ----

// target is what a continuation performs: the record at path (a step of
// the workflow, "review"; or a record a container keeps, "review[2]"),
// under the rules of step s (the container's body, for a record).
type target struct {
	path string
	s    *Step
}

// claimStep checks a continuation against the task as it stands and marks
// its record as being performed here (so a second call of the same record
// waits for the first, then gets its recorded result). path is the record
// the call names ("" for none: see match). It returns the target, with the
// recorded result when the call repeats a recorded step (replay), or a
// refusal.
func (in *instance) claimStep(ctx context.Context, t *store.Task, req *mcp.CallToolRequest, path string) (target, *mcp.CallToolResult, error) {
	tool := req.Params.Name
	for {
		var (
			at     target
			replay *mcp.CallToolResult
			err    error
			busy   chan struct{}
			done   bool
		)
		in.writing(func() { // the record is the turn's (the store is read and written here); the continuations here, mu's
			if t != nil && (in.task == nil || t.Version > in.task.Version) {
				in.locked(func() { in.adopt(t) })
			}
			t = nil
			if err = in.load(ctx); err != nil {
				err, done = storeErr(err), true
				return
			}
			if in.verr != nil {
				err, done = mcptask.InvalidParams("%v", in.unservedCall(ctx)), true
				return
			}
			cur, wf, p := in.task, in.wf, in.p
			if sl := replayable(wf, p, tool, path); sl != nil {
				if res, rerr, ok := recordedResult(cur, wf, p, sl, req, path); ok {
					at, replay, err, done = target{sl.path, sl.s}, res, rerr, true
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
			sl, cerr := checkStep(wf, p, cur.ID, tool, path, &in.b.opts)
			if cerr != nil {
				err, done = cerr, true
				return
			}
			at = target{sl.path, sl.s}
			in.locked(func() {
				if busy = in.clients[at.path]; busy == nil {
					in.clients[at.path] = make(chan struct{})
					done = true
				}
			})
		})
		if done {
			return at, replay, err
		}
		select {
		case <-busy:
			continue // it ended: look again (a replay, most likely)
		case <-ctx.Done():
			return target{}, nil, ctx.Err()
		}
	}
}

// releaseStep ends a continuation of the record at path.
func (in *instance) releaseStep(path string) {
	in.locked(func() {
		if ch := in.clients[path]; ch != nil {
			close(ch)
			delete(in.clients, path)
		}
	})
}

// prepareCall readies a continuation's arguments before anything runs.
// It refuses (a tool error, recording nothing) a value that is still the
// handoff's placeholder for it: a model that echoes "<true to publish>"
// must not have its step recorded. And it adds the values the server
// resolved that the call leaves out, so that a client sends only the task
// id and what it fills in (a value the call sends wins), also when it
// retries a recorded call. A call that matches no record is left as it is
// (claimStep refuses it).
func (in *instance) prepareCall(ctx context.Context, t *store.Task, req *mcp.CallToolRequest, path string) (refused *mcp.CallToolResult) {
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
	in.writing(func() {
		if in.p == nil {
			return
		}
		sl := match(wf, in.p, req.Params.Name, path)
		if sl == nil {
			sl = replayable(wf, in.p, req.Params.Name, path) // a retry: the same values
		}
		if sl == nil || callOf(sl.s) == nil {
			return
		}
		c := callOf(sl.s)
		resolved, _ := c.resolve(&resolver{w: wf.def, vars: in.vars, item: sl.item}, in.p, true, false)
		for _, name := range c.argNames() {
			src, got := c.args[name]
			sent, ok := args[name]
			switch {
			case ok && src.Kind == SourceClient:
				f := c.fillOf(&view{wf: wf}, name, src)
				if echoed(sent, placeholder(src, nil), f) {
					refused = refusal("argument %q still holds the handoff's placeholder %s: put %s there (%s), then call tool %q again with the task id as %s; nothing was recorded",
						name, shown(sent), article(f.Type), src.Description, c.tool, mcptask.ArgTaskID)
					return
				}
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

// echoed reports a value sent for an argument the client fills in that is
// one of the handoff's placeholders for it, sent back unchanged: the
// document's ("<true to publish>", doc) or the prose's ("<boolean>", as
// f.Placeholder writes it).
func echoed(sent, doc json.RawMessage, f handoff.Fill) bool {
	return sameJSON(sent, doc) || sameJSON(sent, marshal(f.Placeholder()))
}

// shown is a value as a message quotes it: compact JSON, without the
// escapes of <, > and & some encoders add.
func shown(v json.RawMessage) string {
	var x any
	if json.Unmarshal(v, &x) != nil {
		return string(v)
	}
	return string(marshal(x))
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

// ---- recording the call: the step's outcome written at its record ----

// recordClient records the outcome of the client step a continuation ran
// (at its target's record), durably, with the task variables it sets; the
// task is marked held by a client. It returns a replay answer when another
// call recorded the step first, and an error only when nothing was
// recorded.
func (in *instance) recordClient(ctx context.Context, at target, req *mcp.CallToolRequest, res *mcp.CallToolResult, setVars map[string]json.RawMessage, by string) (*mcp.CallToolResult, error) {
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, mcptask.InternalError("encoding the result of tool %q: %v", req.Params.Name, err)
	}
	meta := req.Params.GetMeta()
	var ans *mcp.CallToolResult
	var told []StepEvent
	in.writing(func() { ans, told, err = in.recordClientTurn(ctx, at, req, res, raw, meta, setVars, by) })
	in.b.tell(told) // after the write, holding nothing
	return ans, err
}

// recordClientTurn is recordClient; told is the attempt it recorded, for
// the observer. Call with the turn held.
func (in *instance) recordClientTurn(ctx context.Context, at target, req *mcp.CallToolRequest, res *mcp.CallToolResult, raw []byte, meta mcp.Meta, setVars map[string]json.RawMessage, by string) (_ *mcp.CallToolResult, told []StepEvent, err error) {
	b := in.b
	for attempt := 0; ; attempt++ {
		err = in.commit(ctx, func(p *Progress) (store.Update, error) {
			told = nil
			sl := in.wf.slotAt(p, at.path)
			if sl == nil || sl.sp.ended() || !reached(in.wf, p, in.wf.index[sl.root().s.Name]) || !clientSide(sl.s, sl.sp) {
				return store.Update{}, errStale
			}
			sp := sl.sp
			now := b.engine.Now()
			vars := maps.Clone(setVars)
			if vars == nil {
				vars = map[string]json.RawMessage{}
			}
			if res.IsError {
				fail(p, sl, by, toolError(res), now)
				p.PauseReason = clientFailedMessage(at.path, sl.s, toolError(res))
			} else {
				complete(p, sl, by, canonical(req.Params.Arguments), res, now)
				vars[VarResultPrefix+at.path] = raw
			}
			if sp.IdempotencyKey == "" {
				sp.IdempotencyKey = idempotencyKey(in.id, at.path)
			}
			sp.ReachedAt, sp.Deadline = nil, nil
			if e, ok := observed(in.id, p, sl, meta); ok {
				told = append(told, e)
			}
			if !res.IsError {
				markReached(in.wf, p, now)
				p.PauseReason = pauseReason(in.wf, p)
			}
			return store.Update{Variables: vars, Labels: map[string]string{LabelTouched: "1"}}, nil
		})
		switch {
		case err == nil:
			return nil, told, nil
		case errors.Is(err, errTakenOver) && attempt == 0:
			continue // the lease this process held is gone: record without it
		case errors.Is(err, errStale):
			// Another call recorded this step (or the workflow moved on):
			// answer as a repeated call would be answered.
			if ans, rerr, ok := in.recordedNow(ctx, at, req); ok {
				return ans, nil, rerr
			}
			return nil, nil, mcptask.InvalidParams("step %q of workflow task %s can no longer be performed: the workflow moved on while the tool ran; nothing was recorded", at.path, in.id)
		case errors.Is(err, errEnded):
			cur := in.task
			if cur == nil {
				cur, _ = b.engine.Task(ctx, in.id)
			}
			status := "ended"
			if cur != nil {
				status = string(cur.Status)
			}
			return nil, nil, mcptask.InvalidParams("workflow task %s %s while step %q ran; nothing was recorded", in.id, status, at.path)
		}
		// A store failure may hide a write that committed (the
		// connection broke before the store answered): when the step
		// reads as recorded with these arguments now, that is the answer.
		if ans, rerr, ok := in.recordedNow(ctx, at, req); ok {
			return ans, nil, rerr
		}
		return nil, nil, err
	}
}

// recordedNow reloads the task and returns the recorded result of the
// target's record when it was recorded with req's arguments (ok), as a
// repeated call is answered. Call with the turn held.
func (in *instance) recordedNow(ctx context.Context, at target, req *mcp.CallToolRequest) (*mcp.CallToolResult, error, bool) {
	in.invalidate()
	if err := in.load(ctx); err != nil || in.wf == nil {
		return nil, nil, false
	}
	sl := replayable(in.wf, in.p, toolOf(at.s), at.path)
	if sl == nil {
		return nil, nil, false
	}
	return recordedResult(in.task, in.wf, in.p, sl, req, at.path)
}

// ---- answering the call ----

// answerOrLeg answers a recorded continuation (see answer), or, for a
// client that takes tasks, makes the rest of it a leg when the workflow
// has nothing for the model yet (its server steps outlast PromptWait, or
// it waits for a person's decision): the leg's result is the same answer,
// once it has.
func (b *Bridge) answerOrLeg(ctx context.Context, q *taskrouter.Request, req *mcp.CallToolRequest, in *instance, at target, res *mcp.CallToolResult) mcp.Result {
	rd := readerOf(q)
	if !taskrouter.CanStartLeg(q) {
		return b.answer(ctx, in, at, res, rd, false)
	}
	cur, p := b.settle(ctx, in.id)
	answer := func(t *store.Task, p *Progress) (*mcp.CallToolResult, error) {
		return b.continuationResult(t, p, at, res, rd, false), nil
	}
	if leg, ok, err := b.legTail(ctx, q, req, cur, p, answer); ok && err == nil {
		return leg
	}
	if cur == nil || p == nil {
		return b.answer(ctx, in, at, res, rd, false) // reads what this process knows
	}
	return b.continuationResult(cur, p, at, res, rd, false)
}

// answer is a continuation's reply once its step is recorded (by this
// call, or by an earlier one it repeats): the step's result and where the
// workflow stands once it rests or Options.PromptWait has passed. It never
// fails: when the task cannot be read now (the store is down, the task was
// deleted), it shows the task as this process last knew it.
func (b *Bridge) answer(ctx context.Context, in *instance, at target, res *mcp.CallToolResult, rd reader, replayed bool) *mcp.CallToolResult {
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
	return b.continuationResult(cur, p, at, res, rd, replayed)
}

// continuationResult is the answer to a continuation call: the tool's
// result, then (what a model reads) the handoff of the workflow as it
// stands now, or its completion; the task and a summary in _meta. For a
// step of a child workflow, the handoff is its topmost parent's, once the
// parents took in the child's new state (rootOf).
func (b *Bridge) continuationResult(t *store.Task, p *Progress, at target, res *mcp.CallToolResult, rd reader, replayed bool) *mcp.CallToolResult {
	out := *res
	out.Meta = mcp.Meta{}
	maps.Copy(out.Meta, res.Meta)
	maps.Copy(out.Meta, mcptask.RelatedTaskMeta(t.ID))
	out.Meta[mcptask.MetaWorkflow] = b.summary(t, p, at.path, replayed)
	rt, rp := b.rootOf(context.WithoutCancel(b.ctx), t, p)
	doc := b.handoff(rt, rp, rd.d)
	out.Meta[mcptask.MetaHandoff] = doc
	// The structured content stays the tool's own (or none): a client
	// that checks it against the tool's outputSchema (the TypeScript
	// SDK's does, even on isError results) must accept every reply. The
	// handoff travels in _meta and in the text. isError stays the
	// tool's too: the reply is first the step's own result, which the
	// workflow's later end does not change (the text says how the
	// workflow stands; docs/INTEROP.md, "How a workflow's end reads").
	if text, err := renderTool(doc, rd); err == nil {
		out.Content = append(slices.Clone(res.Content), &mcp.TextContent{Text: nextText(t, at, res.IsError) + "\n\n" + text})
	}
	return &out
}

// nextText introduces the handoff appended to a continuation's result.
func nextText(t *store.Task, at target, failed bool) string {
	if failed && !t.Status.Terminal() {
		return fmt.Sprintf("That call failed (above), so step %q is not done: call tool %q again with corrected values, as Next says.", at.path, toolOf(at.s))
	}
	if parent := t.Labels[LabelParent]; parent != "" {
		return fmt.Sprintf("Step %q is recorded on workflow task %s, a child workflow of task %s. Where the workflow stands now:", at.path, t.ID, parent)
	}
	switch t.Status {
	case mcptask.StatusCompleted:
		return fmt.Sprintf("Step %q is recorded on workflow task %s, and the workflow has completed.", at.path, t.ID)
	case mcptask.StatusFailed, mcptask.StatusCancelled:
		return fmt.Sprintf("Step %q is recorded on workflow task %s, which has since %s.", at.path, t.ID, t.Status)
	}
	return fmt.Sprintf("Step %q is recorded on workflow task %s. Where the workflow stands now:", at.path, t.ID)
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

// ---- matching a call to a step, and answering a retried call from its
// record ----

// checkStep finds the record a client call of tool performs now (see
// match), or refuses the call, naming what the client may do instead
// (each step by the tool that performs it: the event tool of o for an
// event or a question).
func checkStep(wf *compiled, p *Progress, taskID, tool, path string, o *Options) (*slot, error) {
	toolOf := func(s *Step) string { return performedWith(s, o) }
	if sl := match(wf, p, tool, path); sl != nil {
		return sl, nil
	}
	open := clientSlots(wf, p)
	options := "none"
	if len(open) > 0 {
		var parts []string
		for _, sl := range open {
			parts = append(parts, fmt.Sprintf("%q (tool %q, %s %q)", sl.path, toolOf(sl.s), mcptask.ArgTaskID, TaskRef(taskID, sl.path)))
		}
		options = strings.Join(parts, ", ")
	}
	if path != "" {
		sl := wf.slotAt(p, path)
		switch {
		case sl == nil:
			return nil, mcptask.InvalidParams("workflow task %s has no step or record %q; steps the client may perform now: %s", taskID, path, options)
		case !sl.s.kind.performs(tool):
			return nil, mcptask.InvalidParams("%q of workflow task %s is performed with tool %q, not %q; steps the client may perform now: %s", path, taskID, toolOf(sl.s), tool, options)
		case sl.sp.ended():
			return nil, mcptask.InvalidParams("%q of workflow task %s has ended (%s); steps the client may perform now: %s", path, taskID, sl.sp.Status, options)
		case sl.parent != nil:
			return nil, mcptask.InvalidParams("%q of workflow task %s is not the client's to perform now (%s); steps the client may perform now: %s", path, taskID, sl.sp.Status, options)
		}
	} else {
		var named []string
		for _, sl := range open {
			if sl.parent != nil && sl.s.kind.performs(tool) {
				named = append(named, fmt.Sprintf("%q", TaskRef(taskID, sl.path)))
			}
		}
		if len(named) > 1 {
			return nil, mcptask.InvalidParams("%d records of workflow task %s wait for tool %q: name the one this call performs with %s set to one of %s", len(named), taskID, tool, mcptask.ArgTaskID, strings.Join(named, ", "))
		}
	}
	for i, s := range wf.steps {
		sp := &p.Steps[i]
		if !s.kind.performs(tool) || sp.ended() || path != "" && path != s.Name {
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

// performedWith is the tool a client performs step s with: its own, or
// for a step without one (an event, a question) the tool its kind names
// (the event tool of o).
func performedWith(s *Step, o *Options) string {
	if t := toolOf(s); t != "" {
		return t
	}
	if tools := s.kind.tools(o); len(tools) > 0 {
		return tools[0]
	}
	return ""
}

// match finds the record a client call of tool performs: the one at path
// when the call names one; else the first step of the workflow the call
// performs; else the only record a container keeps that waits for tool (a
// call that could perform several must name one). The record is one the
// client may perform now (see clientSlots), whose inputs exist.
func match(wf *compiled, p *Progress, tool, path string) *slot {
	var recs []*slot
	for _, sl := range clientSlots(wf, p) {
		if !sl.s.kind.performs(tool) || missingInputs(wf, p, sl.root().s) != "" {
			continue
		}
		switch {
		case path != "":
			if sl.path == path {
				return sl
			}
		case sl.parent == nil:
			return sl
		default:
			recs = append(recs, sl)
		}
	}
	if len(recs) == 1 {
		return recs[0]
	}
	return nil
}

// clientSlots are the records the client may perform now, in order: the
// reached steps of the workflow its kind gives the client (or the server
// handed over), and, inside a container, the records of its body that wait
// for the client.
func clientSlots(wf *compiled, p *Progress) []*slot {
	var out []*slot
	var walk func(sl *slot)
	walk = func(sl *slot) {
		switch {
		case sl.sp.ended():
		case clientSide(sl.s, sl.sp) && (sl.parent == nil || sl.sp.Status != mcptask.StepPending):
			out = append(out, sl)
		default:
			for _, c := range sl.children() {
				walk(c)
			}
		}
	}
	for i := range wf.steps {
		if i < len(p.Steps) && reached(wf, p, i) {
			walk(wf.slotOf(p, i))
		}
	}
	return out
}

// clientSteps names (by path) the records the client may perform now, as
// their progress says (no definition needed).
func clientSteps(p *Progress) []string {
	var out []string
	var walk func(sp *StepProgress)
	walk = func(sp *StepProgress) {
		if sp.ended() {
			return
		}
		if len(sp.Items) == 0 && (sp.Status == mcptask.StepAwaitingClient || sp.HandedToClient || (sp.Status == mcptask.StepFailed && sp.Execution == string(mcptask.ExecClient) && !sp.ServerTakeover)) {
			out = append(out, sp.Name)
			return
		}
		for i := range sp.Items {
			walk(&sp.Items[i])
		}
	}
	for i := range p.Steps {
		walk(&p.Steps[i])
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
		if sp == nil || sp.Status == mcptask.StepCompleted {
			continue
		}
		switch {
		case sp.HandedToClient:
			parts = append(parts, fmt.Sprintf("it needs the output of step %q, which the server could not perform (%s): perform that step first (tool %q), or resume the workflow", from.Name, oneLine(sp.Error), toolOf(from)))
		case from.Execution() == mcptask.ExecClient:
			parts = append(parts, fmt.Sprintf("it needs the output of step %q: perform that step first (tool %q)", from.Name, toolOf(from)))
		default:
			parts = append(parts, fmt.Sprintf("it needs the output of step %q, which the server has not completed (%s)", from.Name, sp.Status))
		}
	}
	return strings.Join(parts, "; ")
}

// replayable returns the completed record the client performed with tool
// (itself, or an outside system through the webhook), if any: a call of it
// is a retry of that record. A call that names a record (path) retries
// that one; one that names none, a step of the workflow.
func replayable(wf *compiled, p *Progress, tool, path string) *slot {
	done := func(sl *slot) bool {
		return sl != nil && sl.s.kind.performs(tool) && sl.sp.Status == mcptask.StepCompleted && (sl.sp.CompletedBy == string(mcptask.ExecClient) || sl.sp.CompletedBy == ByWebhook)
	}
	if path != "" {
		if sl := wf.slotAt(p, path); done(sl) {
			return sl
		}
		return nil
	}
	for i := range wf.steps {
		if i < len(p.Steps) {
			if sl := wf.slotOf(p, i); done(sl) {
				return sl
			}
		}
	}
	return nil
}

// recordedResult answers a retried continuation of the record at sl (the
// call named path): the recorded result when the arguments are the
// recorded ones, a clear refusal otherwise. ok is false when the call is
// not a retry after all (other arguments, and a remaining record takes the
// same tool).
func recordedResult(t *store.Task, wf *compiled, p *Progress, sl *slot, req *mcp.CallToolRequest, path string) (res *mcp.CallToolResult, err error, ok bool) {
	sp := sl.sp
	if !sameJSON(canonical(req.Params.Arguments), sp.Arguments) {
		if next := match(wf, p, toolOf(sl.s), path); next != nil && !t.Status.Terminal() {
			return nil, nil, false
		}
		return nil, mcptask.InvalidParams("step %q (tool %q) of workflow task %s is already done: it was recorded with arguments %s and result %s; a retry must repeat those arguments",
			sl.path, toolOf(sl.s), t.ID, sp.Arguments, truncate(string(sl.result(p)), 500)), true
	}
	raw, found := t.Variables[VarResultPrefix+sl.path]
	if !found {
		return nil, mcptask.InternalError("step %q of workflow task %s is done but its result was not kept", sl.path, t.ID), true
	}
	var ctr mcp.CallToolResult
	if err := json.Unmarshal(raw, &ctr); err != nil {
		return nil, mcptask.InternalError("decoding the recorded result of step %q: %v", sl.path, err), true
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

// ---- helpers ----

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
		return nil, mcptask.InvalidParams("_meta.%s must be an object of task variables", mcptask.MetaTaskVars)
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
