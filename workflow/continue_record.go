// Recording a continuation call (continue.go matches it to a step): the
// step's outcome written at its record, and a retried call answered from
// what was recorded.

package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// releaseStep ends a continuation of the record at path.
func (in *instance) releaseStep(path string) {
	in.locked(func() {
		if ch := in.clients[path]; ch != nil {
			close(ch)
			delete(in.clients, path)
		}
	})
}

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
