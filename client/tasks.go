package client

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
)

// GetTask returns the task's current state (tasks/get). An unknown,
// foreign or expired task is ErrNotFound.
func (c *Client) GetTask(ctx context.Context, id string) (*Task, error) {
	raw, err := c.call(ctx, mcptask.MethodTasksGet, map[string]any{"taskId": id})
	if err != nil {
		return nil, err
	}
	t, err := decodeTask(raw)
	if err != nil {
		return nil, err
	}
	if t.ID != id {
		return nil, malformed("tasks/get %s returned task %s", id, t.ID)
	}
	c.observe(t)
	return t, nil
}

// TaskResult waits for the task to end and returns its result: exactly
// what the underlying request returned (for a tool task, a CallToolResult,
// which may have isError set). A task that ended with a JSON-RPC error
// returns that error as an *RPCError; a cancelled task returns
// ErrCancelled.
//
// In the core dialect this is one blocking tasks/result request, whose
// stream also carries the task's input requests (answered through
// Options.InputHandler). In the extension dialect, which has no
// tasks/result, tasks/get is polled until the task ends, answering input
// requests through Options.InputHandler (or, without one, the Receiver's
// handlers) with tasks/update.
func (c *Client) TaskResult(ctx context.Context, id string) (json.RawMessage, error) {
	if !c.dialect.HasMethod(mcptask.MethodTasksResult) {
		return c.waitExtension(ctx, id)
	}
	raw, err := c.call(ctx, mcptask.MethodTasksResult, map[string]any{"taskId": id})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, c.taskFailure(ctx, id, err, nil)
	}
	c.retrieved(id)
	return raw, nil
}

// waitExtension polls an extension-dialect task until it ends.
func (c *Client) waitExtension(ctx context.Context, id string) (json.RawMessage, error) {
	t, err := c.GetTask(ctx, id)
	if err != nil {
		return nil, err
	}
	pol := newPoller(c, t)
	answered := map[string]bool{}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-timer.C:
			}
			prev := t.Status
			if t, err = c.GetTask(ctx, id); err != nil {
				return nil, err
			}
			pol.base(t)
			resetTimer(timer, pol.next(t.Status != prev))
		} else {
			resetTimer(timer, pol.delay)
		}
		switch t.Status {
		case mcptask.StatusCompleted, mcptask.StatusFailed:
			c.retrieved(id)
			if t.Error != nil {
				return nil, t.Error
			}
			if !isAbsent(t.Result) {
				return t.Result, nil
			}
			if t.Status == mcptask.StatusFailed {
				return nil, &RPCError{Code: mcptask.CodeInternalError, Message: "task failed: " + t.StatusMessage}
			}
			return nil, malformed("task %s is completed but tasks/get carries no result", id)
		case mcptask.StatusCancelled:
			c.retrieved(id)
			return nil, cancelledError(t)
		case mcptask.StatusInputRequired:
			if c.opts.InputHandler != nil || c.opts.Receiver != nil {
				n, err := c.answerInputs(ctx, t, answered, nil)
				if err != nil {
					return nil, err
				}
				if n > 0 {
					resetTimer(timer, pol.next(true))
				}
			}
		}
	}
}

// ListTasks iterates over every task the server lists for this client
// (tasks/list, all pages). It is core-dialect only: in the extension
// dialect, and on a server that does not declare tasks.list, the sequence
// is a single ErrCapability error.
func (c *Client) ListTasks(ctx context.Context) iter.Seq2[*Task, error] {
	return func(yield func(*Task, error) bool) {
		if !c.dialect.HasMethod(mcptask.MethodTasksList) {
			yield(nil, capabilityError("tasks/list is not part of the %s extension", mcptask.ExtensionID))
			return
		}
		if !c.support.List {
			yield(nil, capabilityError("the server does not declare tasks.list"))
			return
		}
		cursor := ""
		seen := map[string]bool{}
		for {
			params := map[string]any{}
			if cursor != "" {
				params["cursor"] = cursor
			}
			raw, err := c.call(ctx, mcptask.MethodTasksList, params)
			if err != nil {
				yield(nil, err)
				return
			}
			var page struct {
				Tasks      []json.RawMessage `json:"tasks"`
				NextCursor string            `json:"nextCursor"`
			}
			if err := json.Unmarshal(raw, &page); err != nil {
				yield(nil, malformed("tasks/list: %v", err))
				return
			}
			for _, rt := range page.Tasks {
				t, err := decodeTask(rt)
				if err != nil {
					yield(nil, err)
					return
				}
				c.observe(t)
				if !yield(t, nil) {
					return
				}
			}
			if page.NextCursor == "" {
				return
			}
			if seen[page.NextCursor] {
				yield(nil, malformed("tasks/list returned cursor %q twice", page.NextCursor))
				return
			}
			seen[page.NextCursor] = true
			cursor = page.NextCursor
		}
	}
}

// CancelTask asks the server to cancel the task and returns its state
// afterwards.
//
// In the core dialect, tasks/cancel returns the cancelled task. Servers
// answer -32602 both for an unknown task and for one that has already
// ended; CancelTask then asks tasks/get and returns an *RPCError that
// errors.Is reports as ErrTerminal when the task exists and has ended, or
// ErrNotFound otherwise. A server that does not declare tasks.cancel is
// refused with ErrCapability before anything is sent.
//
// In the extension dialect, tasks/cancel is a cooperative request that is
// only acknowledged (even for a task that has already ended); CancelTask
// follows it with one tasks/get and returns that state, which may not be
// cancelled yet, or not at all.
func (c *Client) CancelTask(ctx context.Context, id string) (*Task, error) {
	if c.dialect.ServerDeclaresTaskMethods() && !c.support.Cancel {
		return nil, capabilityError("the server does not declare tasks.cancel")
	}
	raw, err := c.call(ctx, mcptask.MethodTasksCancel, map[string]any{"taskId": id})
	if err != nil {
		var re *RPCError
		if errors.As(err, &re) && re.Code == mcptask.CodeInvalidParams {
			out := *re
			t, gerr := c.GetTask(ctx, id)
			switch {
			case gerr == nil && t.Status.Terminal():
				out.kind = ErrTerminal
			case gerr == nil:
				out.kind = nil
			default:
				out.kind = ErrNotFound
			}
			return nil, &out
		}
		return nil, err
	}
	if c.dialect.AcksCancel() {
		return c.GetTask(ctx, id)
	}
	t, err := decodeTask(raw)
	if err != nil {
		return nil, err
	}
	c.observe(t)
	return t, nil
}
