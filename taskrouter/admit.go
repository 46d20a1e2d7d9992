package taskrouter

import (
	"context"
	"strings"
	"sync"

	"github.com/taskbridge/taskbridge/mcptask"
)

// Admission control: the one door every task the engine creates passes
// (admit). A task holds a pending slot from creation until its work is
// done, counted three ways: per owner (Options.MaxPendingPerOwner; not for
// the shared LocalOwner, which is no single requestor), per request source
// (Options.MaxPendingPerSource: a session, or a remote address for
// stateless HTTP; tasks created outside a request have no source), and in
// total (Options.MaxPending). A refusal is a -32000 (CodeTooManyTasks)
// naming the limit.
//
// A tool task's work is its handler: the slot is given back when the
// handler returns. A task created through CreateTask (a workflow from a
// prompt or a tool, a fork, any kind a component drives) is worked on by
// its component until it ends, on whichever process: it holds its slot
// (held, by task id) until this process sees it end (Router.Update, the
// sweeper, or the change feed for another process's write). Start counts
// again the tasks a previous process left active on an exclusive store,
// and a takeover counts the tasks it takes, without refusing them.
//
// While a tool task's handler runs it also holds a running slot: per owner
// (Options.MaxConcurrentPerOwner) and in total (Options.MaxConcurrent); a
// task waiting for one stays working with a "queued" status message. The
// tools a component runs for a task's steps (Track, then RunTool) take a
// step slot of their own (Options.MaxConcurrentSteps): a separate pool,
// so that a tool task waiting on a workflow never holds the slot the
// workflow's step needs, and a step whose tool calls another tool in
// process (with the step's context) takes no second slot.

// admission identifies whose quotas a task counts against.
type admission struct {
	owner  string
	source string
}

// slots are one owner's pending (queued plus running) and running tasks.
type slots struct {
	pending int
	running int
	wake    chan struct{} // closed when a running slot frees up
	owner   string        // the owner, the copy held tasks keep (admitTask)
}

// sourceSlots are one request source's pending tasks.
type sourceSlots struct {
	pending int
	source  string // the source, the copy held tasks keep (admitTask)
}

// quotas are the slots tasks hold: pending slots by owner, by source and
// in total, running slots by owner and in total (the semaphore running),
// and the count of tasks/result requests waiting. Its lock is a leaf:
// nothing else is locked while it is held. The limits are copied from
// Config at New and never change.
type quotas struct {
	maxPending, maxPendingPerOwner, maxPendingPerSource int
	maxRunningPerOwner                                  int

	// running holds one token per running handler (Options.MaxConcurrent
	// tokens); steps one per step tool running (Options.MaxConcurrentSteps
	// tokens). They are channels, not guarded by mu.
	running chan struct{}
	steps   chan struct{}

	mu          sync.Mutex
	owners      map[string]*slots               // pending/running slots by owner
	sources     map[string]*sourceSlots         // pending tasks by request source
	pending     int                             // pending tasks in total
	waiters     int                             // tasks/result requests waiting
	held        map[string]admission            // tasks holding a pending slot until they end, by id
	stepsQueued int                             // step tools waiting for a step slot
	waiting     map[string]map[*waiter]struct{} // tasks/result requests waiting, by source
}

func newQuotas(cfg Options) quotas {
	return quotas{
		maxPending:          cfg.MaxPending,
		maxPendingPerOwner:  cfg.MaxPendingPerOwner,
		maxPendingPerSource: cfg.MaxPendingPerSource,
		maxRunningPerOwner:  cfg.MaxConcurrentPerOwner,
		running:             make(chan struct{}, cfg.MaxConcurrent),
		steps:               make(chan struct{}, cfg.MaxConcurrentSteps),
		owners:              map[string]*slots{},
		sources:             map[string]*sourceSlots{},
		held:                map[string]admission{},
	}
}

// door is where every task is admitted (create.go's, recovery's): the
// quotas, shut once the runs table is closed. It has no state of its
// own; it calls each part in turn.
type door struct {
	runs   *runTable
	quotas *quotas
}

// admit reserves a pending slot, or refuses with CodeTooManyTasks naming
// the limit that was hit, or errShutdown once the router is closed. With
// recovered set it skips the caps: a task re-run after a restart was
// admitted before the crash, and refusing it now would leave it working
// forever.
//
// The closed check and the reservation take different locks (runs, then
// quotas), so Close may slip in between them. That changes nothing: Close
// could always come between admit and the spawn that registers the run,
// and a task admitted then is, as before, either started and then
// resolved by policy on the next Start or released by its caller.
func (d door) admit(a admission, recovered bool) error {
	if d.runs.isClosed() {
		return errShutdown
	}
	return d.quotas.admit(a, recovered)
}

func (q *quotas) admit(a admission, recovered bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.admitLocked(a, recovered)
}

func (q *quotas) admitLocked(a admission, recovered bool) error {
	s := q.owners[a.owner]
	if s == nil {
		s = &slots{wake: make(chan struct{}), owner: a.owner}
		q.owners[a.owner] = s
	}
	if !recovered {
		switch {
		case a.owner != LocalOwner && s.pending >= q.maxPendingPerOwner:
			return mcptask.Errorf(mcptask.CodeTooManyTasks, "too many active tasks for this requestor: %d queued or running (limit MaxPendingPerOwner=%d); wait for some to finish", s.pending, q.maxPendingPerOwner)
		case a.source != "" && q.sources[a.source] != nil && q.sources[a.source].pending >= q.maxPendingPerSource:
			return mcptask.Errorf(mcptask.CodeTooManyTasks, "too many active tasks from this %s: %d queued or running (limit MaxPendingPerSource=%d); wait for some to finish", sourceKind(a.source), q.sources[a.source].pending, q.maxPendingPerSource)
		case q.pending >= q.maxPending:
			return mcptask.Errorf(mcptask.CodeTooManyTasks, "the server has too many active tasks: %d queued or running (limit MaxPending=%d); retry later", q.pending, q.maxPending)
		}
	}
	s.pending++
	if a.source != "" {
		src := q.sources[a.source]
		if src == nil {
			src = &sourceSlots{source: a.source}
			q.sources[a.source] = src
		}
		src.pending++
	}
	q.pending++
	return nil
}

// admitTask admits task id, which holds its pending slot until it ends
// (releaseTask). A task held already is not counted twice. recovered is as
// for admit.
func (d door) admitTask(id string, a admission, recovered bool) error {
	if d.runs.isClosed() {
		return errShutdown
	}
	return d.quotas.admitHeld(id, a, recovered)
}

// admitHeld is admitTask's reservation.
func (q *quotas) admitHeld(id string, a admission, recovered bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.held[id]; ok {
		return nil
	}
	if err := q.admitLocked(a, recovered); err != nil {
		return err
	}
	// A held task keeps its admission until it ends, which may be days
	// (a workflow waiting for its client): keep the copies of the owner
	// and source the maps already hold, not each request's own.
	a.owner = q.owners[a.owner].owner
	if a.source != "" {
		a.source = q.sources[a.source].source
	}
	q.held[id] = a
	return nil
}

// releaseTask gives back the pending slot task id holds (admitTask), if
// it holds one: the task ended, was deleted, or was never stored.
func (q *quotas) releaseTask(id string) {
	q.mu.Lock()
	a, ok := q.held[id]
	delete(q.held, id)
	q.mu.Unlock()
	if ok {
		q.release(a, false)
	}
}

// heldTasks returns the ids of the tasks holding a pending slot until
// they end.
func (q *quotas) heldTasks() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids := make([]string, 0, len(q.held))
	for id := range q.held {
		ids = append(ids, id)
	}
	return ids
}

// ended gives back what task id held, when it has ended: called after
// every write this process makes and every change the feed reports.
func (q *quotas) ended(id string, status mcptask.Status, deleted bool) {
	if deleted || status.Terminal() {
		q.releaseTask(id)
	}
}

// acquireStep waits for a step slot (Options.MaxConcurrentSteps) or ctx's
// end; it returns the function that gives the slot back.
func (q *quotas) acquireStep(ctx context.Context) (func(), error) {
	release := func() { <-q.steps }
	select {
	case q.steps <- struct{}{}:
		return release, nil
	default:
	}
	q.mu.Lock()
	q.stepsQueued++
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.stepsQueued--
		q.mu.Unlock()
	}()
	select {
	case q.steps <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func sourceKind(source string) string {
	kind, _, _ := strings.Cut(source, ":")
	switch kind {
	case "session":
		return "session"
	case "addr":
		return "address"
	}
	return "client"
}

// acquire waits for an owner running slot and a global one. queued is
// called once, before the first wait, when a slot is not free at once.
func (q *quotas) acquire(ctx context.Context, owner string, queued func()) error {
	for first := true; ; first = false {
		q.mu.Lock()
		s := q.owners[owner]
		if s.running < q.maxRunningPerOwner {
			s.running++
			q.mu.Unlock()
			break
		}
		wake := s.wake
		q.mu.Unlock()
		if first && queued != nil {
			queued()
			queued = nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	select {
	case q.running <- struct{}{}:
		return nil
	default:
	}
	if queued != nil {
		queued()
	}
	select {
	case q.running <- struct{}{}:
		return nil
	case <-ctx.Done():
		q.releaseRunning(owner)
		return context.Cause(ctx)
	}
}

// releaseRunning gives back an owner's running slot and wakes its waiters.
func (q *quotas) releaseRunning(owner string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.owners[owner]
	s.running--
	close(s.wake)
	s.wake = make(chan struct{})
}

// release gives back a pending slot and, when running is set, the running
// slots acquire took (the global one first, then the owner's).
func (q *quotas) release(a admission, running bool) {
	if running {
		<-q.running
		q.releaseRunning(a.owner)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.owners[a.owner]
	s.pending--
	if s.pending == 0 && s.running == 0 {
		delete(q.owners, a.owner)
	}
	if src := q.sources[a.source]; a.source != "" && src != nil {
		if src.pending--; src.pending <= 0 {
			delete(q.sources, a.source)
		}
	}
	q.pending--
}

// wait counts a tasks/result request waiting. One from a stateful HTTP
// session (source names it: "session:<id>") is also registered under it,
// so that deleting the session ends the wait (endWaits closes the
// waiter's ended channel); source "" registers nothing. Call doneWaiting
// with the result when the request stops waiting.
func (q *quotas) wait(source string) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waiters++
	if source == "" {
		return nil
	}
	w := &waiter{source: source, ended: make(chan struct{})}
	if q.waiting == nil {
		q.waiting = map[string]map[*waiter]struct{}{}
	}
	if q.waiting[source] == nil {
		q.waiting[source] = map[*waiter]struct{}{}
	}
	q.waiting[source][w] = struct{}{}
	return w
}

// doneWaiting ends the count (and registration) wait made.
func (q *quotas) doneWaiting(w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waiters--
	if w == nil {
		return
	}
	delete(q.waiting[w.source], w)
	if len(q.waiting[w.source]) == 0 {
		delete(q.waiting, w.source)
	}
}

// waiter is a tasks/result request waiting on a stateful HTTP session
// (quotas.wait).
type waiter struct {
	source string
	ended  chan struct{} // closed by endWaits
}

// endedC is the channel closed when the waiter's session was deleted;
// nil (never ready) for a request that is not registered.
func (w *waiter) endedC() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.ended
}

// endWaits ends the waits of the tasks/result requests of source (a
// session that was deleted).
func (q *quotas) endWaits(source string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for w := range q.waiting[source] {
		close(w.ended)
	}
	delete(q.waiting, source)
}

// load returns the engine's load as Stats reports it (Tracked aside).
func (q *quotas) load() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return Stats{Pending: q.pending, Running: len(q.running), Waiters: q.waiters, Steps: len(q.steps), StepsQueued: q.stepsQueued}
}
