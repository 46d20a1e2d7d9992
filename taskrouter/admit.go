package taskrouter

import (
	"context"
	"strings"
	"sync"

	"github.com/taskbridge/taskbridge/mcptask"
)

// Admission control. A task holds a pending slot from creation until its
// handler returns, counted three ways: per owner (Options.MaxPendingPerOwner;
// not for the shared LocalOwner, which is no single requestor), per request
// source (Options.MaxPendingPerSource: a session, or a remote address for
// stateless HTTP), and in total (Options.MaxPending). While it runs it also
// holds a running slot: per owner (Options.MaxConcurrentPerOwner) and in
// total (Options.MaxConcurrent); a task waiting for one stays working with a
// "queued" status message.

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
	// tokens); it is a channel, not guarded by mu.
	running chan struct{}

	mu      sync.Mutex
	owners  map[string]*slots // pending/running slots by owner
	sources map[string]int    // pending tasks by request source
	pending int               // pending tasks in total
	waiters int               // tasks/result requests waiting
}

func newQuotas(cfg Options) quotas {
	return quotas{
		maxPending:          cfg.MaxPending,
		maxPendingPerOwner:  cfg.MaxPendingPerOwner,
		maxPendingPerSource: cfg.MaxPendingPerSource,
		maxRunningPerOwner:  cfg.MaxConcurrentPerOwner,
		running:             make(chan struct{}, cfg.MaxConcurrent),
		owners:              map[string]*slots{},
		sources:             map[string]int{},
	}
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
func (r *Router) admit(a admission, recovered bool) error {
	if r.runs.isClosed() {
		return errShutdown
	}
	return r.quotas.admit(a, recovered)
}

func (q *quotas) admit(a admission, recovered bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.owners[a.owner]
	if s == nil {
		s = &slots{wake: make(chan struct{})}
		q.owners[a.owner] = s
	}
	if !recovered {
		switch {
		case a.owner != LocalOwner && s.pending >= q.maxPendingPerOwner:
			return mcptask.Errorf(mcptask.CodeTooManyTasks, "too many active tasks for this requestor: %d queued or running (limit MaxPendingPerOwner=%d); wait for some to finish", s.pending, q.maxPendingPerOwner)
		case q.sources[a.source] >= q.maxPendingPerSource:
			return mcptask.Errorf(mcptask.CodeTooManyTasks, "too many active tasks from this %s: %d queued or running (limit MaxPendingPerSource=%d); wait for some to finish", sourceKind(a.source), q.sources[a.source], q.maxPendingPerSource)
		case q.pending >= q.maxPending:
			return mcptask.Errorf(mcptask.CodeTooManyTasks, "the server has too many active tasks: %d queued or running (limit MaxPending=%d); retry later", q.pending, q.maxPending)
		}
	}
	s.pending++
	q.sources[a.source]++
	q.pending++
	return nil
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
	if q.sources[a.source]--; q.sources[a.source] <= 0 {
		delete(q.sources, a.source)
	}
	q.pending--
}

// wait counts a tasks/result request waiting (delta 1) or done waiting
// (delta -1).
func (q *quotas) wait(delta int) {
	q.mu.Lock()
	q.waiters += delta
	q.mu.Unlock()
}

// load returns the pending tasks, the running handlers and the waiting
// tasks/result requests.
func (q *quotas) load() (pending, running, waiters int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pending, len(q.running), q.waiters
}
