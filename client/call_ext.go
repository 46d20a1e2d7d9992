package client

// The extension dialect (2026-07-28) side of CallTool: the server decides
// whether the call becomes a task, input is asked for with input_required
// (before a task) or inputRequests (during one) and answered with
// tasks/update, and the outcome is inline in tasks/get.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
)

// maxInputRounds bounds the input_required round trips of one tools/call.
const maxInputRounds = 10

func (r *callRun) runExtension(ctx context.Context) {
	params := map[string]any{"name": r.name}
	if r.args != nil {
		params["arguments"] = r.args
	}
	for round := 0; ; round++ {
		rep, ok := r.send(ctx, params, true)
		if !ok {
			return
		}
		switch {
		case rep.result != nil:
			r.finish(rep.result)
			return
		case rep.task != nil:
			r.created(rep)
			if !r.ended {
				r.followExtension(ctx)
			}
			return
		}
		// input_required: answer and retry the call.
		if round+1 >= maxInputRounds {
			r.fail(fmt.Errorf("client: tools/call %q still needs input after %d rounds", r.name, maxInputRounds))
			return
		}
		responses := map[string]json.RawMessage{}
		for _, key := range slices.Sorted(maps.Keys(rep.inputs)) {
			req := rep.inputs[key]
			r.emit(Event{Kind: EventInput, Input: &req})
			res, err := r.c.answerDirect(ctx, "", req)
			if err != nil {
				r.fail(fmt.Errorf("client: answering input request %q of %s: %w", key, r.name, err))
				return
			}
			responses[key] = res
			if r.ended {
				return
			}
		}
		params["inputResponses"] = responses
		if rep.requestState != "" {
			params["requestState"] = rep.requestState
		} else {
			delete(params, "requestState")
		}
	}
}

func (r *callRun) followExtension(ctx context.Context) {
	c := r.c
	pol := newPoller(c, r.cur)
	// The creation reply carries no outcome: poll at once if it is
	// already terminal.
	delay := pol.delay
	if r.cur.Status.Terminal() || r.cur.Status == mcptask.StatusInputRequired {
		delay = 0
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	answered := map[string]bool{}
	for !r.ended {
		select {
		case <-ctx.Done():
			r.fail(ctx.Err())
			return
		case <-timer.C:
		}
		t, err := c.GetTask(ctx, r.taskID)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			r.fail(err)
			return
		}
		pol.base(t)
		changed := r.see(t)
		if r.ended {
			return
		}
		switch t.Status {
		case mcptask.StatusCompleted, mcptask.StatusFailed:
			r.extOutcome(t)
			return
		case mcptask.StatusCancelled:
			r.failTask(cancelledError(t))
			return
		case mcptask.StatusInputRequired:
			n, err := c.answerInputs(ctx, t, answered, func(req InputRequest) bool {
				return r.emit(Event{Kind: EventInput, Task: t.clone(), Input: &req})
			})
			if err != nil {
				r.fail(err)
				return
			}
			if n > 0 {
				changed = true
			}
		}
		resetTimer(timer, pol.next(changed))
	}
}

// extOutcome ends the call with an extension-dialect terminal task.
func (r *callRun) extOutcome(t *Task) {
	r.terminal = true
	switch {
	case t.Error != nil:
		r.failTask(t.Error)
	case !isAbsent(t.Result):
		res, err := decodeToolResult(t.Result)
		if err != nil {
			r.fail(err)
			return
		}
		r.finish(res)
	case t.Status == mcptask.StatusFailed:
		msg := t.StatusMessage
		if msg == "" {
			msg = "task failed"
		}
		r.failTask(&RPCError{Code: mcptask.CodeInternalError, Message: msg})
	default:
		r.fail(malformed("task %s is completed but tasks/get carries no result", t.ID))
	}
}

// answerInputs answers, through InputHandler, the input requests of an
// extension-dialect task not answered yet, and sends them with
// tasks/update. report is called before each answer (it may return false
// when nobody listens any more; the request is answered anyway). It returns
// how many requests it answered.
func (c *Client) answerInputs(ctx context.Context, t *Task, answered map[string]bool, report func(InputRequest) bool) (int, error) {
	responses := map[string]json.RawMessage{}
	for _, key := range slices.Sorted(maps.Keys(t.InputRequests)) {
		if answered[key] {
			continue
		}
		req := t.InputRequests[key]
		if report != nil {
			report(req)
		}
		res, err := c.durableAnswer(ctx, t.ID, key, req)
		if err != nil {
			return 0, fmt.Errorf("client: answering input request %q of task %s: %w", key, t.ID, err)
		}
		responses[key] = res
	}
	if len(responses) == 0 {
		return 0, nil
	}
	if _, err := c.call(ctx, mcptask.MethodTasksUpdate, map[string]any{"taskId": t.ID, "inputResponses": responses}); err != nil {
		return 0, err
	}
	for key := range responses {
		answered[key] = true
	}
	c.answersTaken(t.ID, slices.Sorted(maps.Keys(responses)))
	return len(responses), nil
}
