package taskrouter

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// The scheduler: time has a home in the engine. A task that has work due
// at a later time (a workflow step's retry backoff, a client's wait that
// runs out) carries that time in store.Task.WakeAt, in the store's wake
// index, durably. One loop per process waits for the earliest wake-up it
// knows of (every wake time written through this router is noted at
// once), reads the due tasks from the index (store.Due) and hands each to
// its kind's WakeFunc, which claims the task's lease for the work it runs
// (so exactly one replica runs it). On a shared store the loop also polls
// the index every ChangePollInterval for wake times other replicas wrote;
// a task this process holds the lease of is left to the work holding it. Wake-ups survive a
// restart (Start notes the wake times of the tasks it finds) and a
// takeover.

// maxWakers bounds the wake-ups handled at once by one process.
const maxWakers = 64

// scheduler is the loop's state.
type scheduler struct {
	mu       sync.Mutex
	next     time.Time // earliest wake time noted since the last round; zero: none
	poke     chan struct{}
	inflight map[string]bool
	backoff  map[string]time.Time // tasks whose last wake-up failed: not before
	fails    map[string]int
	sem      chan struct{}
}

func (s *scheduler) init() {
	s.poke = make(chan struct{}, 1)
	s.inflight = map[string]bool{}
	s.backoff = map[string]time.Time{}
	s.fails = map[string]int{}
	s.sem = make(chan struct{}, maxWakers)
}

// note makes the loop look at the index by at.
func (s *scheduler) note(at time.Time) {
	if at.IsZero() {
		return
	}
	s.mu.Lock()
	sooner := s.next.IsZero() || at.Before(s.next)
	if sooner {
		s.next = at
	}
	s.mu.Unlock()
	if sooner {
		select {
		case s.poke <- struct{}{}:
		default:
		}
	}
}

// runScheduler is the loop; Start runs it until Close.
func (r *Router) runScheduler() {
	s := &r.sched
	poll := r.cfg.SweepInterval
	if r.shared {
		poll = r.cfg.ChangePollInterval
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-r.stopSweep:
				return
			case <-timer.C:
			case <-s.poke:
			}
			now := r.cfg.Now()
			s.mu.Lock()
			next := s.next
			due := next.IsZero() || !next.After(now)
			if due {
				s.next = time.Time{}
			}
			s.mu.Unlock()
			wait := poll
			if due {
				r.wakeDue(context.Background())
			} else if d := next.Sub(now); d < wait {
				wait = d
			}
			// The notes keep only the earliest time: after a round, the
			// index says when the next wake-up is due.
			if up := r.upcoming(context.Background(), now, wait); !up.IsZero() {
				wait = min(wait, max(0, up.Sub(r.cfg.Now())))
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(wait)
		}
	}()
}

// upcoming returns the earliest wake time after now in the store's wake
// index, within horizon; zero when there is none. Tasks due already (being
// woken now, or held by this process) are passed over.
func (r *Router) upcoming(ctx context.Context, now time.Time, horizon time.Duration) time.Time {
	s := &r.sched
	s.mu.Lock()
	limit := 16 + len(s.inflight)
	s.mu.Unlock()
	ts, err := r.st.Due(ctx, now.Add(horizon), limit)
	if err != nil {
		return time.Time{}
	}
	for _, t := range ts {
		if t.WakeAt.After(now) {
			return t.WakeAt
		}
	}
	return time.Time{}
}

// wakeDue hands every due task to its kind's WakeFunc.
func (r *Router) wakeDue(ctx context.Context) {
	s := &r.sched
	for {
		now := r.cfg.Now()
		due, err := r.st.Due(ctx, now, 256)
		if err != nil {
			r.log.Warn("reading due wake-ups", "error", err)
			return
		}
		started := 0
		for _, t := range due {
			if r.shared && (r.leases.has(t.ID) || t.LeaseHolder == r.cfg.ReplicaID && t.LeaseUntil.After(now)) {
				continue // this process works on it already (a re-claim would fence that work)
			}
			s.mu.Lock()
			skip := s.inflight[t.ID] || s.backoff[t.ID].After(now)
			if !skip {
				s.inflight[t.ID] = true
			}
			s.mu.Unlock()
			if skip {
				continue
			}
			started++
			s.sem <- struct{}{}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer func() { <-s.sem }()
				r.wakeOne(ctx, t)
			}()
		}
		if len(due) < 256 || started == 0 {
			return
		}
	}
}

// wakeOne claims (on a shared store) and wakes one due task.
func (r *Router) wakeOne(ctx context.Context, t *store.Task) {
	s := &r.sched
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				r.log.Error("panic waking a task", "task", t.ID, "panic", p, "stack", string(debug.Stack()))
				err = errors.New("panic")
			}
		}()
		_, wake, _, _ := r.kinds.of(t)
		if wake == nil {
			// Nothing drives this kind here: clear the wake-up rather than
			// look at it again forever.
			zero := time.Time{}
			_, err := r.st.Update(ctx, t.ID, store.Update{IfVersion: t.Version, WakeAt: &zero})
			if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrTerminal) && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			return nil
		}
		if r.shared && r.leases.has(t.ID) {
			return nil // this process took it up meanwhile
		}
		return wake(ctx, t)
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inflight, t.ID)
	if err == nil {
		delete(s.backoff, t.ID)
		delete(s.fails, t.ID)
		return
	}
	s.fails[t.ID]++
	d := min(time.Second<<min(s.fails[t.ID], 6), time.Minute)
	s.backoff[t.ID] = r.cfg.Now().Add(d)
	r.log.Warn("waking a task failed; trying again later", "task", t.ID, "retry_in", d, "error", err)
	if s.next.IsZero() || s.backoff[t.ID].Before(s.next) {
		s.next = s.backoff[t.ID]
	}
}
