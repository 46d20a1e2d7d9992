package taskrouter

import (
	"context"
	"errors"
	"github.com/taskbridge/taskbridge/mcptask"
	"sync"

	"github.com/taskbridge/taskbridge/store"
)

// The runs table (the handler runs and tracked work of this process) and
// stopping work: Track, Stopped, cancel.

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

// stepKey marks a context from Track: a tool RunTool runs with it is a
// step of the task and takes a step slot (Options.MaxConcurrentSteps),
// unless the value says a slot is held already (a tool the step's tool
// calls in process).
type stepKey struct{}

// stepMark is the value under stepKey.
type stepMark struct {
	task    string
	holding bool // a step slot is held for this context
}

// Track registers in-process work on task id that is not a tool handler
// run (the workflow bridge running server steps inside a request): the
// returned context is cancelled when the task is cancelled, expires, or the
// router closes, with the reason as its cause (see Stopped). What the work
// reports through the context (Progress, Logger, Output, a tool's
// notifications/progress) becomes events of task id. Call done when the
// work ends. A tool RunTool runs with the context (or one derived from it)
// is a step of the task: it waits for a step slot
// (Options.MaxConcurrentSteps) first.
func (r *Router) Track(ctx context.Context, id string) (context.Context, func()) {
	if m, ok := ctx.Value(stepKey{}).(stepMark); !ok || m.task != id {
		ctx = context.WithValue(ctx, stepKey{}, stepMark{task: id})
	}
	ctx, cancel := context.WithCancelCause(ctx)
	ctx = context.WithValue(ctx, trackKey{}, &trackedTask{sinks: &r.sinks, id: id}) // its reported events (events.go)
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

// stop cancels the handler run and the tracked work of task id (each
// cancelled after the table's lock is let go).
func (t *runTable) stop(id string, cause error) {
	ru, trs := t.workOn(id)
	if ru != nil {
		ru.cancel(cause)
	}
	for _, tr := range trs {
		tr.cancel(cause)
	}
}

// cancelTask marks a task cancelled (its kind may word the message and
// close its own record in the same write: EndWriter), then stops its
// work.
func (r *Router) cancelTask(ctx context.Context, t *store.Task, message string) (*store.Task, error) {
	for attempt := 0; ; attempt++ {
		msg := message
		u := store.Update{Status: mcptask.StatusCancelled, StatusMessage: &msg}
		if r.kinds.endWrite(t, &u) {
			u.IfVersion = t.Version // what the kind wrote is of this version of the task
		}
		nt, err := r.endTask(ctx, t, u, errCanceled)
		if errors.Is(err, store.ErrConflict) && attempt < endWriteTries {
			if t, err = r.Task(ctx, t.ID); err != nil {
				return nil, err
			}
			continue
		}
		return nt, err
	}
}

// endWriteTries bounds the reads again of a cancel whose conditional
// write met another write (the task's own work moving on).
const endWriteTries = 16

// CancelTask cancels task id whoever owns it, with message as its status
// message (a workflow cancelling the child workflows it started): the
// task is marked cancelled before its work's context is cancelled.
func (r *Router) CancelTask(ctx context.Context, id, message string) (*store.Task, error) {
	t, err := r.Task(ctx, id)
	if err != nil {
		return nil, err
	}
	return r.cancelTask(ctx, t, message)
}

// spawn runs exec in the background for task id of tool: t is its stored
// record, created (or re-run) in dialect d, or nil when pending holds the
// record about to be created. The caller has admitted it.
func (r *Router) spawn(id, tool string, t *store.Task, adm admission, d mcptask.Dialect, exec execFunc, pending *pendingRecord) *run {
	ctx, cancel := context.WithCancelCause(context.Background())
	ru := &run{r: r, id: id, adm: adm, dialect: d, tool: tool, cancel: cancel, inputs: map[string]*pendingInput{}, pending: pending}
	if t != nil && t.LeaseHolder == r.opts.ReplicaID {
		ru.lease = &heldLease{fence: t.Fence(), stop: cancel}
		r.leases.add(t.ID, ru.lease)
	}
	if !r.runs.add(ru, &r.runsDone) {
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
		defer r.runsDone.Done()
		defer cancel(nil)
		res, err := ru.execute(ctx, exec)
		ru.finish(ctx, res, err)
	})
	return ru
}
