package client

// The core dialect (2025-11-25) side of CallTool: the task is created with
// params.task, watched with tasks/get and status notifications, and its
// outcome (and its input requests) arrive on a tasks/result stream.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
)

func (r *callRun) runCore(ctx context.Context, asTask bool) {
	params := map[string]any{"name": r.name}
	if r.args != nil {
		params["arguments"] = r.args
	}
	if asTask {
		task := map[string]any{}
		if r.opts.TTL > 0 {
			task["ttl"] = r.opts.TTL.Milliseconds()
		}
		params["task"] = task
	}
	rep, ok := r.send(ctx, params, asTask)
	if !ok {
		return
	}
	switch {
	case rep.result != nil:
		r.finish(rep.result)
	case rep.task != nil:
		r.created(rep)
		if !r.ended {
			r.followCore(ctx)
		}
	default:
		r.fail(malformed("tools/call: a %s server asked for input with a result (resultType input_required)", mcptask.CoreVersion))
	}
}

// created records and reports a new task.
func (r *callRun) created(rep *callReply) {
	r.taskID, r.cur = rep.task.ID, rep.task
	r.terminal = rep.task.Status.Terminal()
	r.c.track(rep.task, r.name)
	r.emit(Event{Kind: EventCreated, Task: rep.task.clone(), ImmediateResponse: rep.immediate})
}

// see takes a new observation of the task. It reports whether the status
// changed; it emits EventStatus for a change.
func (r *callRun) see(t *Task) bool {
	r.c.observe(t)
	if r.cur.Status.Terminal() && !t.Status.Terminal() {
		return false // a stale observation
	}
	changed := t.Status != r.cur.Status || t.StatusMessage != r.cur.StatusMessage
	r.cur = t
	r.terminal = t.Status.Terminal()
	if changed {
		r.emit(Event{Kind: EventStatus, Task: t.clone()})
	}
	return changed
}

type rawOutcome struct {
	raw json.RawMessage
	err error
}

func (r *callRun) followCore(ctx context.Context) {
	c := r.c
	w := c.addWatcher(r.taskID, true)
	defer c.removeWatcher(w)
	pol := newPoller(c, r.cur)
	delay := pol.delay
	// A status pushed before the watcher existed only reached the record.
	if tt, ok := c.trackedStatus(r.taskID); ok && tt.Status != r.cur.Status {
		delay = 0
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	var results chan rawOutcome
	for !r.ended {
		if results == nil && (r.cur.Status == mcptask.StatusInputRequired || (r.cur.Status.Terminal() && r.cur.Status != mcptask.StatusCancelled)) {
			results = make(chan rawOutcome, 1)
			go func() {
				raw, err := c.call(rctx, mcptask.MethodTasksResult, map[string]any{"taskId": r.taskID})
				results <- rawOutcome{raw, err}
			}()
		}
		if results == nil && r.cur.Status == mcptask.StatusCancelled {
			r.failTask(cancelledError(r.cur))
			return
		}
		select {
		case <-ctx.Done():
			r.fail(ctx.Err())
			return
		case t := <-w.status:
			// A pushed status stands in for a poll: the next poll is
			// pushed back, not brought forward.
			pol.base(t)
			if r.see(t) {
				resetTimer(timer, pol.next(true))
			} else {
				resetTimer(timer, pol.delay)
			}
		case ask := <-w.inputs:
			r.answer(ctx, ask)
		case <-timer.C:
			t, err := c.GetTask(ctx, r.taskID)
			if err != nil {
				if ctx.Err() != nil {
					r.fail(ctx.Err())
				} else {
					r.fail(err)
				}
				return
			}
			pol.base(t)
			resetTimer(timer, pol.next(r.see(t)))
		case out := <-results:
			r.coreOutcome(ctx, out)
			return
		}
	}
}

// answer reports an input request and answers it with InputHandler.
func (r *callRun) answer(ctx context.Context, ask *inputAsk) {
	req := ask.req
	r.emit(Event{Kind: EventInput, Task: r.cur.clone(), Input: &req})
	res, err := r.c.answerDirect(ctx, ask.taskID, ask.req)
	ask.reply <- inputAnswer{result: res, err: err}
}

// coreOutcome turns the reply of tasks/result into the last event.
func (r *callRun) coreOutcome(ctx context.Context, out rawOutcome) {
	if out.err == nil {
		res, err := decodeToolResult(out.raw)
		if err != nil {
			r.fail(err)
			return
		}
		if !r.cur.Status.Terminal() {
			// Report the final status before the result.
			if t, err := r.c.GetTask(ctx, r.taskID); err == nil {
				r.see(t)
			}
		}
		r.terminal = true
		r.finish(res)
		return
	}
	if ctx.Err() != nil {
		r.fail(ctx.Err())
		return
	}
	r.failTask(r.c.taskFailure(ctx, r.taskID, out.err, r.see))
}

// taskFailure interprets an error from tasks/result: the task's own
// failure (kept as the server sent it), a cancellation, or a missing task.
// see, when set, receives the task's current state.
func (c *Client) taskFailure(ctx context.Context, id string, err error, see func(*Task) bool) error {
	var re *RPCError
	if !errors.As(err, &re) {
		return err
	}
	t, gerr := c.GetTask(ctx, id)
	if gerr != nil {
		return err // the task is gone: keep the classification (ErrNotFound)
	}
	if see != nil {
		see(t)
	} else {
		c.observe(t)
	}
	switch t.Status {
	case mcptask.StatusCancelled:
		if t.StatusMessage != "" && strings.Contains(re.Message, t.StatusMessage) {
			// The server's error only restates the status message.
			return cancelledError(t)
		}
		return fmt.Errorf("%w: %s", cancelledError(t), re.Message)
	case mcptask.StatusFailed, mcptask.StatusCompleted:
		// The error is what the tool call itself ended with.
		out := *re
		out.kind = nil
		return &out
	}
	return err
}

func cancelledError(t *Task) error {
	if t.StatusMessage != "" {
		return fmt.Errorf("%w: task %s: %s", ErrCancelled, t.ID, t.StatusMessage)
	}
	return fmt.Errorf("%w: task %s", ErrCancelled, t.ID)
}
