package taskrouter

import (
	"context"
	"strings"

	"github.com/taskbridge/taskbridge/mcptask"
)

// Admission control. A task holds a pending slot from creation until its
// handler returns, counted three ways: per owner (Config.MaxPendingPerOwner;
// not for the shared LocalOwner, which is no single requestor), per request
// source (Config.MaxPendingPerSource: a session, or a remote address for
// stateless HTTP), and in total (Config.MaxPending). While it runs it also
// holds a running slot: per owner (Config.MaxConcurrentPerOwner) and in
// total (Config.MaxConcurrent); a task waiting for one stays working with a
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

// admit reserves a pending slot, or refuses with CodeTooManyTasks naming
// the limit that was hit. With recovered set it skips the caps: a task
// re-run after a restart was admitted before the crash, and refusing it now
// would leave it working forever.
func (r *Router) admit(a admission, recovered bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errShutdown
	}
	s := r.owners[a.owner]
	if s == nil {
		s = &slots{wake: make(chan struct{})}
		r.owners[a.owner] = s
	}
	if !recovered {
		switch {
		case a.owner != LocalOwner && s.pending >= r.cfg.MaxPendingPerOwner:
			return mcptask.Errorf(mcptask.CodeTooManyTasks, "too many active tasks for this requestor: %d queued or running (limit MaxPendingPerOwner=%d); wait for some to finish", s.pending, r.cfg.MaxPendingPerOwner)
		case r.sources[a.source] >= r.cfg.MaxPendingPerSource:
			return mcptask.Errorf(mcptask.CodeTooManyTasks, "too many active tasks from this %s: %d queued or running (limit MaxPendingPerSource=%d); wait for some to finish", sourceKind(a.source), r.sources[a.source], r.cfg.MaxPendingPerSource)
		case r.pending >= r.cfg.MaxPending:
			return mcptask.Errorf(mcptask.CodeTooManyTasks, "the server has too many active tasks: %d queued or running (limit MaxPending=%d); retry later", r.pending, r.cfg.MaxPending)
		}
	}
	s.pending++
	r.sources[a.source]++
	r.pending++
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
func (r *Router) acquire(ctx context.Context, owner string, queued func()) error {
	for first := true; ; first = false {
		r.mu.Lock()
		s := r.owners[owner]
		if s.running < r.cfg.MaxConcurrentPerOwner {
			s.running++
			r.mu.Unlock()
			break
		}
		wake := s.wake
		r.mu.Unlock()
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
	case r.sem <- struct{}{}:
		return nil
	default:
	}
	if queued != nil {
		queued()
	}
	select {
	case r.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		r.releaseRunning(owner)
		return context.Cause(ctx)
	}
}

// releaseRunning gives back an owner's running slot and wakes its waiters.
func (r *Router) releaseRunning(owner string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.owners[owner]
	s.running--
	close(s.wake)
	s.wake = make(chan struct{})
}

// release gives back a pending slot, and the owner's running slot when
// running is set.
func (r *Router) release(a admission, running bool) {
	if running {
		r.releaseRunning(a.owner)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.owners[a.owner]
	s.pending--
	if s.pending == 0 && s.running == 0 {
		delete(r.owners, a.owner)
	}
	if r.sources[a.source]--; r.sources[a.source] <= 0 {
		delete(r.sources, a.source)
	}
	r.pending--
}
