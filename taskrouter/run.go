package taskrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// Config.InstantWindow), so the handler may pass the id to Router methods.
func TaskID(ctx context.Context) (string, bool) {
	ru, ok := ctx.Value(taskCtxKey{}).(*run)
	if !ok {
		return "", false
	}
	if ru.pending != nil {
		_, _ = ru.r.materialize(ru)
	}
	return ru.id, true
}

// spawn runs exec in the background for task t, which was created (or is
// re-run) in dialect d, or, when pending is set, is about to be created
// from pending's record. The caller has admitted it.
func (r *Router) spawn(t *store.Task, adm admission, d mcptask.Dialect, exec execFunc, pending *pendingRecord) *run {
	ctx, cancel := context.WithCancelCause(context.Background())
	ru := &run{r: r, id: t.ID, adm: adm, dialect: d, tool: t.Request.Name, cancel: cancel, inputs: map[string]*pendingInput{}, pending: pending}
	if pending == nil && t.LeaseHolder == r.cfg.ReplicaID {
		ru.lease = &heldLease{fence: t.Fence(), stop: cancel}
		r.leases.add(t.ID, ru.lease)
	}
	if !r.runs.add(ru, &r.wg) {
		// Close began while the task was being created: it is not started
		// here. Its record, if stored, stays working for the next Start's
		// recovery (or another replica's takeover), like a task whose
		// process stopped just after creating it; a record not stored yet
		// is not stored (the request is answered that the server is
		// shutting down).
		cancel(errShutdown)
		if ru.lease != nil {
			r.leases.remove(ru.id, ru.lease)
		}
		r.quotas.release(adm, false)
		if pending != nil {
			pending.settled(handlerOutcome{cause: errShutdown})
		}
		return ru
	}
	r.workers.run(func() { // workers.go
		defer r.wg.Done()
		defer cancel(nil)
		res, err := r.execute(ctx, ru, exec)
		r.finish(ctx, ru, res, err)
	})
	return ru
}

// execute waits for running slots, then runs exec with the task's handler
// context: cancellable by tasks/cancel, ttl expiry and Close, bounded by
// Config.TaskTimeout, and carrying the task for TaskID and Elicit.
func (r *Router) execute(ctx context.Context, ru *run, exec execFunc) (res mcp.Result, err error) {
	queued := false
	admitted := time.Now()
	err = r.quotas.acquire(ctx, ru.adm.owner, func() {
		queued = true
		msg := fmt.Sprintf("queued: waiting for a free slot (at most %d handlers run at once, %d per requestor)", r.cfg.MaxConcurrent, r.cfg.MaxConcurrentPerOwner)
		_, _ = r.fenced(ctx, ru, store.Update{StatusMessage: &msg})
	})
	if err != nil {
		r.quotas.release(ru.adm, false)
		return nil, err
	}
	defer r.quotas.release(ru.adm, true)
	if queued {
		_, _ = r.fenced(ctx, ru, store.Update{StatusMessage: ptr("")})
	}
	started := time.Now()
	r.observeHandler(HandlerEvent{TaskID: ru.id, Tool: ru.tool, Running: true, Queued: started.Sub(admitted)})
	defer func() {
		r.observeHandler(HandlerEvent{TaskID: ru.id, Tool: ru.tool, Duration: time.Since(started)})
	}()
	ctx = context.WithValue(ctx, taskCtxKey{}, ru)
	if r.cfg.TaskTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, r.cfg.TaskTimeout, fmt.Errorf("%w after %s", errTimeout, r.cfg.TaskTimeout))
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
func (r *Router) finish(ctx context.Context, ru *run, res mcp.Result, err error) {
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
	u := outcome(res, err, ru.dialect)
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A fenced write refused because the lease is gone has read the task
	// to tell why (fenceLost): ended (the store checks the fence before
	// the terminal status, and an ended task has no holder), or taken
	// over. Without a lease (an exclusive store) an ended task is
	// ErrTerminal.
	switch _, uerr := r.fenced(wctx, ru, u); {
	case errors.Is(uerr, errEnded) || errors.Is(uerr, store.ErrTerminal) || errors.Is(uerr, store.ErrNotFound):
		r.log.Info("not recording a task's outcome: the task ended meanwhile (cancelled, expired, or ended in another process)", "task", ru.id)
	case errors.Is(uerr, errLeaseLost):
		r.log.Warn("not recording a task's outcome: another process took the task over", "task", ru.id)
	case uerr != nil:
		r.log.Error("recording task outcome", "task", ru.id, "error", uerr)
		if errors.Is(uerr, store.ErrTooLarge) {
			if _, ferr := r.fenced(wctx, ru, tooLargeFailure(uerr)); ferr != nil {
				r.log.Error("failing a task whose result is too large", "task", ru.id, "error", ferr)
			}
		}
	}
}

// tooLargeFailure is the update that fails a task whose outcome the store
// refused as too large (err matches store.ErrTooLarge).
func tooLargeFailure(err error) store.Update {
	msg := "task result too large to store: " + err.Error()
	return store.Update{Status: store.StatusFailed, StatusMessage: &msg,
		Error: &store.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg}}
}

// outcome maps a handler's return to the update that ends the task. A
// JSON-RPC error fails the task; a tool result with isError ends it in the
// status the dialect prescribes (mcptask.Dialect.ToolErrorStatus).
func outcome(res mcp.Result, err error, d mcptask.Dialect) store.Update {
	if err != nil {
		info := errorInfo(err)
		msg := info.Message
		return store.Update{Status: store.StatusFailed, StatusMessage: &msg, Error: info}
	}
	raw, merr := json.Marshal(res)
	if merr != nil {
		msg := "encoding task result: " + merr.Error()
		return store.Update{Status: store.StatusFailed, StatusMessage: &msg, Error: &store.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg}}
	}
	if ctr, ok := res.(*mcp.CallToolResult); ok && ctr.IsError {
		msg := toolErrorText(ctr)
		return store.Update{Status: d.ToolErrorStatus(), StatusMessage: &msg, Result: raw}
	}
	return store.Update{Status: store.StatusCompleted, Result: raw, StatusMessage: ptr("")}
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
func errorInfo(err error) *store.ErrorInfo {
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return &store.ErrorInfo{Code: je.Code, Message: je.Message, Data: je.Data}
	}
	switch {
	case errors.Is(err, errTimeout):
		return &store.ErrorInfo{Code: mcptask.CodeInternalError, Message: strings.TrimPrefix(err.Error(), "taskrouter: ")}
	case errors.Is(err, store.ErrTooLarge):
		return &store.ErrorInfo{Code: mcptask.CodeInvalidParams, Message: err.Error()}
	}
	return &store.ErrorInfo{Code: mcptask.CodeInternalError, Message: err.Error()}
}

// ---- the runs table ----

// runTable is the work this process runs for tasks: handler runs and the
// in-request work registered with Track, by task id, and whether the
// router is closed (Close flips it and collects the work to stop in one
// critical section, so Track either refuses or its work is stopped). Its
// lock is a leaf: nothing else is locked while it is held.
type runTable struct {
	mu      sync.Mutex
	byID    map[string]*run                  // handler runs by task id
	tracked map[string]map[*tracker]struct{} // task id -> work registered with Track
	closed  bool
}

// add registers ru and counts it in wg, or refuses (false) once the
// router is closed. Both happen under the lock Close takes to flip closed
// and collect the runs to stop: a run added is stopped by Close and
// waited for (wg.Add happens before Close's wg.Wait), a run refused never
// starts.
func (t *runTable) add(ru *run, wg *sync.WaitGroup) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.byID == nil {
		t.byID = map[string]*run{}
	}
	t.byID[ru.id] = ru
	wg.Add(1)
	return true
}

func (t *runTable) remove(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byID, id)
}

// get returns the handler run of task id, or nil.
func (t *runTable) get(id string) *run {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

// track registers tr as work on task id; false once the router is closed.
func (t *runTable) track(id string, tr *tracker) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.tracked == nil {
		t.tracked = map[string]map[*tracker]struct{}{}
	}
	set := t.tracked[id]
	if set == nil {
		set = map[*tracker]struct{}{}
		t.tracked[id] = set
	}
	set[tr] = struct{}{}
	return true
}

func (t *runTable) untrack(id string, tr *tracker) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.tracked[id], tr)
	if len(t.tracked[id]) == 0 {
		delete(t.tracked, id)
	}
}

// workOn returns the handler run (or nil) and the tracked work of task id.
func (t *runTable) workOn(id string) (*run, []*tracker) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var trs []*tracker
	for tr := range t.tracked[id] {
		trs = append(trs, tr)
	}
	return t.byID[id], trs
}

// workingOn returns the ids of the tasks this process runs work for:
// tool handlers and tracked work (workflow passes).
func (t *runTable) workingOn() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.workingOnLocked()
}

func (t *runTable) workingOnLocked() []string {
	ids := make([]string, 0, len(t.byID)+len(t.tracked))
	for id := range t.byID {
		ids = append(ids, id)
	}
	for id := range t.tracked {
		ids = append(ids, id)
	}
	return ids
}

// close marks the router closed and returns the ids of the tasks whose
// work to stop; ok is false when it was closed already.
func (t *runTable) close() (ids []string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, false
	}
	t.closed = true
	return t.workingOnLocked(), true
}

func (t *runTable) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// trackedCount is the number of pieces of tracked work.
func (t *runTable) trackedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, set := range t.tracked {
		n += len(set)
	}
	return n
}

// ---- in-process work on a task that is not a handler run ----

// tracker is in-process work on a task registered with Track.
type tracker struct {
	cancel context.CancelCauseFunc
}

// Track registers in-process work on task id that is not a tool handler
// run (the workflow bridge running server steps inside a request): the
// returned context is cancelled when the task is cancelled, expires, or the
// router closes, with the reason as its cause (see Stopped). Call done when
// the work ends.
func (r *Router) Track(ctx context.Context, id string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	tr := &tracker{cancel: cancel}
	if !r.runs.track(id, tr) {
		cancel(errShutdown)
		return ctx, func() {}
	}
	return ctx, func() {
		r.runs.untrack(id, tr)
		cancel(nil)
	}
}

// StopReason says why a task's work was stopped (Stopped). It is a
// string: the values read as words in messages ("task X was cancelled").
type StopReason string

// The stop reasons. The zero value "" means the work was not stopped
// because of its task.
const (
	// StopCancelled: the task was cancelled.
	StopCancelled StopReason = "cancelled"
	// StopExpired: the task's ttl elapsed.
	StopExpired StopReason = "expired"
	// StopEnded: another process ended the task.
	StopEnded StopReason = "ended"
	// StopLeaseLost: another process took the work over.
	StopLeaseLost StopReason = "lease lost"
	// StopShutdown: the server is shutting down.
	StopShutdown StopReason = "shutdown"
)

// String returns the reason as a string.
func (s StopReason) String() string { return string(s) }

// Stopped reports why a context from Track or a handler context ended
// because of its task: StopCancelled, StopExpired, StopEnded (another
// process ended the task), StopLeaseLost (another process took the work
// over) or StopShutdown; "" when it did not end for one of those reasons.
func Stopped(ctx context.Context) StopReason {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errCanceled):
		return StopCancelled
	case errors.Is(cause, errExpired):
		return StopExpired
	case errors.Is(cause, errEnded):
		return StopEnded
	case errors.Is(cause, errLeaseLost):
		return StopLeaseLost
	case errors.Is(cause, errShutdown):
		return StopShutdown
	}
	return ""
}

// stopRun cancels the handler run and the tracked work of task id.
func (r *Router) stopRun(id string, cause error) {
	ru, trs := r.runs.workOn(id)
	if ru != nil {
		ru.cancel(cause)
	}
	for _, tr := range trs {
		tr.cancel(cause)
	}
}

// cancelTask marks a task cancelled, then stops its work.
func (r *Router) cancelTask(ctx context.Context, t *store.Task, message string) (*store.Task, error) {
	nt, err := r.Update(ctx, t.ID, store.Update{Status: store.StatusCancelled, StatusMessage: &message})
	if err != nil {
		return nil, err
	}
	r.stopRun(t.ID, errCanceled)
	return nt, nil
}

// Cancel cancels a task on behalf of a requestor: the task is marked
// cancelled before its work's context is cancelled.
func (r *Router) Cancel(ctx context.Context, req *Request, id string) (*store.Task, error) {
	t, err := r.TaskFor(ctx, req, id)
	if err != nil {
		return nil, err
	}
	return r.cancelTask(ctx, t, "cancelled by request")
}
