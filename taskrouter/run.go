package taskrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// run is the in-memory side of a task whose handler is executing here.
type run struct {
	r       *Router
	id      string
	adm     admission
	dialect mcptask.Dialect
	tool    string
	cancel  context.CancelCauseFunc
	lease   *heldLease // the task's lease, when this process holds one

	// pending is the task's record while it is not stored yet (see
	// startInstant); nil for tasks stored before their handler started.
	pending *pendingRecord

	mu     sync.Mutex
	inputs map[string]*pendingInput
	seq    int
}

// execFunc runs a task's work and returns its MCP result or error.
type execFunc func(ctx context.Context) (mcp.Result, error)

// taskCtxKey carries the running task into handler contexts.
type taskCtxKey struct{}

// TaskID returns the id of the task whose handler ctx belongs to. The task
// exists in the store once TaskID returns (a handler that returns at once
// may otherwise have its task stored only with its outcome; see
// Options.InstantWindow), so the handler may pass the id to Router methods.
func TaskID(ctx context.Context) (string, bool) {
	ru, ok := ctx.Value(taskCtxKey{}).(*run)
	if !ok {
		return "", false
	}
	if ru.pending != nil {
		_, _ = ru.materialize()
	}
	return ru.id, true
}

// execute waits for running slots, then runs exec with the task's handler
// context: cancellable by tasks/cancel, ttl expiry and Close, bounded by
// Options.TaskTimeout, and carrying the task for TaskID and Elicit.
func (ru *run) execute(ctx context.Context, exec execFunc) (res mcp.Result, err error) {
	r := ru.r
	queued := false
	admitted := time.Now()
	err = r.quotas.acquire(ctx, ru.adm.owner, func() {
		queued = true
		msg := fmt.Sprintf("queued: waiting for a free slot (at most %d handlers run at once, %d per requestor)", r.opts.MaxConcurrent, r.opts.MaxConcurrentPerOwner)
		_, _ = ru.fenced(ctx, store.Update{StatusMessage: &msg})
	})
	if err != nil {
		r.quotas.release(ru.adm, false)
		return nil, err
	}
	defer r.quotas.release(ru.adm, true)
	if queued {
		_, _ = ru.fenced(ctx, store.Update{StatusMessage: ptr("")})
	}
	started := time.Now()
	r.obs.handler(HandlerEvent{TaskID: ru.id, Tool: ru.tool, Running: true, Queued: started.Sub(admitted)})
	defer func() {
		r.obs.handler(HandlerEvent{TaskID: ru.id, Tool: ru.tool, Duration: time.Since(started)})
	}()
	ctx = context.WithValue(ctx, taskCtxKey{}, ru)
	if r.opts.TaskTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, r.opts.TaskTimeout, fmt.Errorf("%w after %s", errTimeout, r.opts.TaskTimeout))
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("task handler panicked", "task", ru.id, "panic", p, "stack", string(debug.Stack()))
			res, err = nil, mcptask.InternalError("task handler panicked: %v", p)
		}
	}()
	res, err = exec(ctx)
	if err == nil && res == nil {
		err = mcptask.InternalError("task handler returned no result")
	}
	if cause := context.Cause(ctx); cause != nil {
		// The context ended (cancel, ttl, timeout, shutdown): report why,
		// whatever the handler made of it.
		res, err = nil, cause
	}
	return res, err
}

// finish records the outcome of a run unless the task was ended by
// someone else (cancel, ttl) or the server is shutting down.
func (ru *run) finish(ctx context.Context, res mcp.Result, err error) {
	r := ru.r
	cause := context.Cause(ctx)
	r.runs.remove(ru.id)
	if ru.pending != nil {
		// Either the request creates the task with this outcome, or the
		// record could not be created (the request reported that); with
		// no record there is no lease and no input request either.
		if folded, stored := ru.pending.settled(handlerOutcome{res: res, err: err, cause: cause}); folded || !stored {
			return
		}
	}
	if ru.lease != nil {
		r.leases.remove(ru.id, ru.lease)
	}
	ru.failInputs(errCanceled)
	switch {
	case errors.Is(cause, errEnded):
		r.log.Info("stopped a task's handler without recording its outcome: the task ended in another process", "task", ru.id)
		return
	case errors.Is(cause, errLeaseLost):
		r.log.Info("stopped a task's handler without recording its outcome: another process took the task over", "task", ru.id)
		return
	case errors.Is(cause, errShutdown) || errors.Is(cause, errCanceled) || errors.Is(cause, errExpired):
		return
	}
	u := outcome(res, err)
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A fenced write refused because the lease is gone has read the task
	// to tell why (fenceLost): ended (the store checks the fence before
	// the terminal status, and an ended task has no holder), or taken
	// over. Without a lease (an exclusive store) an ended task is
	// ErrTerminal.
	switch uerr := ru.record(wctx, u); {
	case errors.Is(uerr, errEnded) || errors.Is(uerr, store.ErrTerminal) || errors.Is(uerr, store.ErrNotFound):
		r.log.Info("not recording a task's outcome: the task ended meanwhile (cancelled, expired, or ended in another process)", "task", ru.id)
	case errors.Is(uerr, errLeaseLost):
		r.log.Warn("not recording a task's outcome: another process took the task over", "task", ru.id)
	case uerr != nil:
		r.log.Error("recording task outcome", "task", ru.id, "error", uerr)
		if errors.Is(uerr, store.ErrTooLarge) {
			if _, ferr := ru.fenced(wctx, tooLargeFailure(uerr)); ferr != nil {
				r.log.Error("failing a task whose result is too large", "task", ru.id, "error", ferr)
			}
		}
	}
}

// record writes a run's outcome u. A write the store refuses for a
// reason that may pass (down, busy) is tried again, at once, then after
// 100ms, doubling, until ctx ends: the outcome is the task's end, and a
// task left working would wait for its ttl (simulation seed 341: a
// workflow's leg whose end was refused once).
func (ru *run) record(ctx context.Context, u store.Update) error {
	_, err := ru.fenced(ctx, u)
	for wait := time.Duration(0); err != nil && mayPass(err); wait = max(100*time.Millisecond, 2*wait) {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		_, err = ru.fenced(ctx, u)
	}
	return err
}

// mayPass reports a refused write that trying again may get past.
func mayPass(err error) bool {
	for _, gone := range []error{errEnded, errLeaseLost, store.ErrTerminal, store.ErrNotFound, store.ErrTooLarge, store.ErrInvalid, store.ErrFenced, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, gone) {
			return false
		}
	}
	return true
}

// tooLargeFailure is the update that fails a task whose outcome the store
// refused as too large (err matches store.ErrTooLarge).
func tooLargeFailure(err error) store.Update {
	msg := "task result too large to store: " + err.Error()
	return store.Update{Status: mcptask.StatusFailed, StatusMessage: &msg,
		Error: &mcptask.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg}}
}

// outcome maps a handler's return to the update that ends the task. A
// JSON-RPC error fails the task with it; a tool result with isError fails
// it with that result, which each dialect shows in its own status
// (statusIn: failed in the core dialect, completed in the extension).
func outcome(res mcp.Result, err error) store.Update {
	if err != nil {
		info := errorInfo(err)
		msg := info.Message
		return store.Update{Status: mcptask.StatusFailed, StatusMessage: &msg, Error: info}
	}
	raw, merr := encodeResult(res)
	if merr != nil {
		msg := "encoding task result: " + merr.Error()
		return store.Update{Status: mcptask.StatusFailed, StatusMessage: &msg, Error: &mcptask.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg}}
	}
	if ctr, ok := res.(*mcp.CallToolResult); ok && ctr.IsError {
		msg := toolErrorText(ctr)
		return store.Update{Status: mcptask.StatusFailed, StatusMessage: &msg, Result: raw}
	}
	return store.Update{Status: mcptask.StatusCompleted, Result: raw, StatusMessage: ptr("")}
}

// encodeResult is json.Marshal(res), without its second pass over a tool
// result: a *mcp.CallToolResult encodes itself with json.Marshal (so its
// bytes are compact, with HTML characters escaped), and json.Marshal
// would then check and compact that encoding again, copying it (a third
// of encoding an instant tool's result). The bytes, and the error when
// there is one, are json.Marshal's (TestEncodeResultIsJSONMarshal).
func encodeResult(res mcp.Result) ([]byte, error) {
	ctr, ok := res.(*mcp.CallToolResult)
	if !ok || ctr == nil {
		return json.Marshal(res)
	}
	b, err := ctr.MarshalJSON()
	if err != nil {
		return nil, &json.MarshalerError{Type: reflect.TypeOf(ctr), Err: err}
	}
	return b, nil
}

// toolErrorText is the status message of a task whose tool reported an
// error: the result's text, bounded.
func toolErrorText(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok && tc.Text != "" {
			parts = append(parts, tc.Text)
		}
	}
	if len(parts) == 0 {
		return "tool reported an error"
	}
	msg := strings.Join(parts, "\n")
	if len(msg) > 1024 {
		msg = msg[:1024] + "…"
	}
	return msg
}

// errorInfo converts an error into the JSON-RPC error stored on a task.
func errorInfo(err error) *mcptask.ErrorInfo {
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return &mcptask.ErrorInfo{Code: je.Code, Message: je.Message, Data: je.Data}
	}
	switch {
	case errors.Is(err, errTimeout):
		return &mcptask.ErrorInfo{Code: mcptask.CodeInternalError, Message: strings.TrimPrefix(err.Error(), "taskrouter: ")}
	case errors.Is(err, store.ErrTooLarge):
		return &mcptask.ErrorInfo{Code: mcptask.CodeInvalidParams, Message: err.Error()}
	}
	return &mcptask.ErrorInfo{Code: mcptask.CodeInternalError, Message: err.Error()}
}

// ---- the run's writes: fenced by its lease ----

// fenceOf returns the fence of a handler run's lease, if it holds one.
func (ru *run) fenceOf() *store.Fence {
	if ru.lease == nil {
		return nil
	}
	f := ru.lease.fence
	return &f
}

// fenced applies u to the task this run holds, with the run's fence. A
// refused fence becomes errEnded or errLeaseLost (see fenceLost).
func (ru *run) fenced(ctx context.Context, u store.Update) (*store.Task, error) {
	if ru.pending != nil {
		if _, err := ru.materialize(); err != nil {
			return nil, err
		}
	}
	u.Fence = ru.fenceOf()
	t, err := ru.r.Update(ctx, ru.id, u)
	if errors.Is(err, store.ErrFenced) {
		return nil, fenceLost(ctx, ru.r.st, ru.id, err)
	}
	return t, err
}

// fenceLost tells why a fenced write to task id failed with
// store.ErrFenced (err). The store checks the fence before the terminal
// status, and a move to a terminal status clears the lease holder, so a
// fenced write to a task that has ended is refused as fenced too:
// fenceLost reads the task and returns err wrapped in errEnded when the
// task has ended or is gone (cancelled or expired in another process, or
// finished by the replica that took it over), and in errLeaseLost when
// another process holds it now (or the read failed and it cannot tell).
func fenceLost(ctx context.Context, st store.Store, id string, err error) error {
	t, gerr := st.Get(context.WithoutCancel(ctx), id)
	if errors.Is(gerr, store.ErrNotFound) || (gerr == nil && t.Status.Terminal()) {
		return fmt.Errorf("%w: %w", errEnded, err)
	}
	return fmt.Errorf("%w: %w", errLeaseLost, err)
}

func (ru *run) addInput(method string, params json.RawMessage) *pendingInput {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	ru.seq++
	in := &pendingInput{key: fmt.Sprintf("input-%d", ru.seq), method: method, params: params, reply: make(chan inputAnswer, 1)}
	ru.inputs[in.key] = in
	return in
}

// removeInput drops an input and reports how many remain.
func (ru *run) removeInput(key string) int {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	delete(ru.inputs, key)
	return len(ru.inputs)
}

// answer delivers a response to a pending input; it reports whether the key
// was pending.
func (ru *run) answer(key string, a inputAnswer) bool {
	ru.mu.Lock()
	in, ok := ru.inputs[key]
	if ok {
		delete(ru.inputs, key)
	}
	ru.mu.Unlock()
	if ok {
		in.reply <- a
	}
	return ok
}

// inputRequests returns the pending inputs in the extension's wire shape:
// key -> {"method", "params"}.
func (ru *run) inputRequests() map[string]json.RawMessage {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	if len(ru.inputs) == 0 {
		return nil
	}
	out := make(map[string]json.RawMessage, len(ru.inputs))
	for k, in := range ru.inputs {
		out[k] = in.wire()
	}
	return out
}

// hasUnclaimedInput reports whether the run has an input request no
// tasks/result stream is delivering yet.
func (ru *run) hasUnclaimedInput() bool {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	for _, in := range ru.inputs {
		if !in.inFlight {
			return true
		}
	}
	return false
}

// claimInputs marks every undelivered input in flight and returns them.
func (ru *run) claimInputs() []*pendingInput {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	var out []*pendingInput
	for _, in := range ru.inputs {
		if !in.inFlight {
			in.inFlight = true
			out = append(out, in)
		}
	}
	return out
}

func (ru *run) release(in *pendingInput) {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	in.inFlight = false
}

func (ru *run) failInputs(err error) {
	ru.mu.Lock()
	inputs := ru.inputs
	ru.inputs = map[string]*pendingInput{}
	ru.mu.Unlock()
	for _, in := range inputs {
		in.reply <- inputAnswer{err: err}
	}
}

// runOf finds the run of a task handler context.
func runOf(ctx context.Context) *run {
	ru, _ := ctx.Value(taskCtxKey{}).(*run)
	return ru
}
