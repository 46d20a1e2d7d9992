package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Legs: a workflow for a host that runs tasks (one that declared the tasks
// extension, as Claude Code's CLI does, and shows its model only a task's
// final result). A workflow tool call or a continuation whose server
// steps outlast PromptWait becomes a task of its own, a leg, instead of an
// answer that tells the model to wait: the host polls the leg, and the
// leg ends at the workflow's next pause for the model (a step it calls)
// or at its end, with the handoff as its result. While the workflow waits
// only for a person's decision (an event), the leg asks for it with its
// own input request (input_required: the host shows the question to the
// user and answers with tasks/update), delivers the answer, and goes on.
// The workflow task keeps its id; each leg is a task of kind KindLeg,
// labelled with the workflow task it follows. A leg whose process stops
// runs again on the next (the workflow is durable; the leg only waits).
//
// What is whose: a step that calls a tool is the model's (the handoff
// tells it which call to make); an event is a person's decision (a host
// that runs tasks asks the user; any other host's model is told to ask
// the user, then deliver the answer with the event tool).

// KindLeg is the task kind of a workflow leg.
const KindLeg = "workflow_leg"

// LabelLegOf names the workflow task a leg follows.
const LabelLegOf = "workflow.leg_of"

// forModel reports whether workflow task t, at progress p, has something
// for the model: it ended, or a step waits for a tool call of the client
// (not only for a person's decision).
func forModel(t *store.Task, p *Progress) bool {
	if t.Status.Terminal() {
		return true
	}
	return waiting(p) && !p.waitsOnEventsOnly()
}

// legTail makes the rest of a call a leg when its client takes tasks, it
// is not a task already, and the workflow has nothing for the model yet.
// answer builds the leg's result once it has. ok is false when the call
// should answer now.
func (b *Bridge) legTail(ctx context.Context, q *taskrouter.Request, req *mcp.CallToolRequest, t *store.Task, p *Progress, answer func(t *store.Task, p *Progress) (*mcp.CallToolResult, error)) (mcp.Result, bool, error) {
	if t == nil || p == nil || !taskrouter.CanStartLeg(q) || forModel(t, p) {
		return nil, false, nil
	}
	if _, inTask := taskrouter.TaskID(ctx); inTask {
		return nil, false, nil
	}
	id := t.ID
	res, err := b.engine.StartLeg(ctx, q, req, KindLeg, map[string]string{LabelLegOf: id}, func(lctx context.Context) (mcp.Result, error) {
		return b.leg(lctx, id, answer)
	})
	return res, true, err
}

// leg waits until workflow task id has something for the model, asking for
// a person's decisions on the way, and returns answer's result then. It
// runs as the leg task's handler: a cancel of the leg stops the wait (and
// nothing of the workflow).
func (b *Bridge) leg(ctx context.Context, id string, answer func(t *store.Task, p *Progress) (*mcp.CallToolResult, error)) (mcp.Result, error) {
	for {
		var last *Progress
		t, err := b.engine.Await(ctx, id, func(t *store.Task) bool {
			p, err := decodeProgress(t)
			if err != nil {
				return true
			}
			last = p
			return forModel(t, p) || p.waitsOnEventsOnly() && rests(p, time.Time{})
		})
		if err != nil {
			return nil, err
		}
		if last == nil {
			return nil, mcptask.InternalError("workflow task %s has no readable progress", id)
		}
		if forModel(t, last) {
			return answer(t, last)
		}
		err = b.askPerson(ctx, t, last)
		switch {
		case errors.Is(err, errAskMoot) && ctx.Err() == nil:
			// The workflow ended, or the decision came another way (the
			// event tool, the webhook) while the person was asked: look
			// again.
		case err != nil:
			return answer(t, last) // the leg cannot ask: the handoff says how to deliver it
		}
	}
}

// errAskMoot is a leg's question withdrawn because the workflow no longer
// waits for its answer.
var errAskMoot = errors.New("workflow: the workflow no longer waits for the answer")

// whileAsked returns a context that ends when workflow task id ends or
// waits no longer for the input of step s (its answer came another way),
// with errAskMoot as its cause; stop releases it.
func (b *Bridge) whileAsked(ctx context.Context, id string, s *Step) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		_, err := b.engine.Await(ctx, id, func(t *store.Task) bool {
			if t.Status.Terminal() {
				return true
			}
			p, err := decodeProgress(t)
			if err != nil {
				return true
			}
			sp := p.step(s.Name)
			return sp == nil || s.kind.inputRequest(s, sp) == nil
		})
		if err == nil {
			cancel(errAskMoot)
		}
	}()
	return ctx, func() { cancel(nil) }
}

// askPerson asks, through the leg's own input request, for the first
// decision workflow task t waits for, and delivers the answer. Only a
// person's decision (an elicitation form) is asked so; any other input
// request (a sampling request) is an error: the model performs that step,
// as the handoff says.
func (b *Bridge) askPerson(ctx context.Context, t *store.Task, p *Progress) error {
	wf, err := b.compiledFor(t, p)
	if err != nil {
		return err
	}
	for i, s := range wf.steps {
		raw := s.kind.inputRequest(s, &p.Steps[i])
		if raw == nil {
			continue
		}
		var req struct {
			Method string           `json:"method"`
			Params mcp.ElicitParams `json:"params"`
		}
		if err := json.Unmarshal(raw, &req); err != nil {
			return err
		}
		if req.Method != mcptask.MethodElicit {
			return fmt.Errorf("step %q asks for %s, which is the model's to perform", s.Name, req.Method)
		}
		actx, stop := b.whileAsked(ctx, t.ID, s)
		res, err := taskrouter.Elicit(actx, nil, &req.Params)
		moot := errors.Is(context.Cause(actx), errAskMoot)
		stop()
		if moot {
			return errAskMoot
		}
		if err != nil {
			return err
		}
		ans, err := json.Marshal(res)
		if err != nil {
			return err
		}
		return b.respond(ctx, t.ID, s.Name, ans)
	}
	return fmt.Errorf("workflow task %s waits for no decision", t.ID)
}

// legHooks are the engine's hooks for legs: a leg whose process stopped
// waits again, on the process that recovers it.
type legHooks struct{ b *Bridge }

func (h legHooks) Recover(ctx context.Context, t *store.Task, reason string) error {
	id := t.Labels[LabelLegOf]
	d, _ := mcptask.ParseDialect(t.Labels[taskrouter.LabelDialect])
	rd := reader{d: d}
	return h.b.engine.ResumeLeg(ctx, t, reason, func(lctx context.Context) (mcp.Result, error) {
		return h.b.leg(lctx, id, func(wt *store.Task, p *Progress) (*mcp.CallToolResult, error) {
			return h.b.toolResult(wt, p, rd, "")
		})
	})
}
func (legHooks) Wake(context.Context, *store.Task) error { return nil }
func (legHooks) ExpiryMessage(*store.Task) string        { return "" }
func (legHooks) Touched(context.Context, *store.Task)    {}
