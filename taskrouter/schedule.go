package taskrouter

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/service"
)

// The scheduler: time has a home in the engine. A task that has work due
// at a later time (a workflow step's retry backoff, a client's wait that
// runs out) carries that time in store.Task.WakeAt, in the store's wake
// index, durably. One loop per process waits for the earliest wake-up it
// knows of (every wake time written through this router is noted at
// once), reads the due tasks from the index (store.Due) and hands each to
// its kind's Wake hook, which claims the task's lease for the work it runs
// (so exactly one replica runs it). On a shared store the loop also polls
// the index every ChangePollInterval for wake times other replicas wrote;
// a task this process holds the lease of is left to the work holding it.
// Wake-ups survive a restart (Start notes the wake times of the tasks it
// finds) and a takeover.

// schedulerConfig configures the scheduler.
type schedulerConfig struct {
	// Poll is how long the loop waits at most before it reads the wake
	// index again: Options.ChangePollInterval on a shared store (other
	// replicas write wake times it is not told of), SweepInterval
	// otherwise.
	Poll time.Duration
	// MaxWakers bounds the wake-ups run at once; zero means 64.
	MaxWakers int
	// Batch is how many due tasks one read of the index takes; zero
	// means 256.
	Batch int
	// Shared is set on a store other processes share: a task this
	// process holds the lease of (ReplicaID) is not woken, its work runs
	// here already.
	Shared    bool
	ReplicaID string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c schedulerConfig) withDefaults() schedulerConfig {
	if c.MaxWakers == 0 {
		c.MaxWakers = 64
	}
	if c.Batch == 0 {
		c.Batch = 256
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c schedulerConfig) validate() error {
	check := service.Check{Service: "scheduler"}
	check.Positive("Poll", c.Poll)
	check.Count("MaxWakers", c.MaxWakers)
	check.Count("Batch", c.Batch)
	return check.Err()
}

// schedulerSignals are the scheduler's test signals (see service.Signal).
type schedulerSignals struct {
	// Woken: a task's wake-up ran without an error (its id).
	Woken service.Signal[string]
	// Retry: a task's wake-up failed; it is tried again later (its id).
	Retry service.Signal[string]
}

// scheduler is the engine's service that runs due wake-ups. Its lock is a
// leaf: it guards the fields below it and nothing is called while it is
// held.
type scheduler struct {
	e       engineBase
	held    leaseHolder // this process's leases (*leases)
	place   placement   // the replicas' registry (*registry)
	kinds   wakeHooks   // the kinds' Wake hooks (*kinds)
	cfg     schedulerConfig
	loop    service.Loop
	wakers  sync.WaitGroup // wake-ups running
	sem     chan struct{}  // one token per wake-up running
	signals schedulerSignals

	mu       sync.Mutex
	next     time.Time // earliest wake time noted since the last round; zero: none
	expect   time.Time // earliest wake time the index held after the last round; zero: none
	inflight map[string]bool
	backoff  map[string]time.Time // tasks whose last wake-up failed: not before
	fails    map[string]int
}

// leaseHolder says whether this process holds task id's lease (*leases).
type leaseHolder interface{ has(id string) bool }

// placement says whether a live replica that serves what task t needs,
// while this process does not, is the one to work on it (*registry).
type placement interface{ elsewhere(t *store.Task) bool }

// wakeHooks are the kinds' Wake hooks (*kinds).
type wakeHooks interface {
	wakeHook(t *store.Task) func(ctx context.Context, t *store.Task) error
}

func newScheduler(e engineBase, held leaseHolder, place placement, kinds wakeHooks, cfg schedulerConfig) (*scheduler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &scheduler{e: e, held: held, place: place, kinds: kinds, cfg: cfg, sem: make(chan struct{}, cfg.MaxWakers),
		inflight: map[string]bool{}, backoff: map[string]time.Time{}, fails: map[string]int{}}, nil
}

// Name names the service.
func (s *scheduler) Name() string { return "scheduler" }

// Start starts the loop: a first round at once.
func (s *scheduler) Start(ctx context.Context) error {
	s.loop.Start(ctx, 0, s.round)
	return nil
}

// Stop ends the loop and waits for the wake-ups running.
func (s *scheduler) Stop() {
	s.loop.Stop()
	s.wakers.Wait()
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
		s.loop.Poke()
	}
}

// round wakes the due tasks if a noted time came, and returns how long to
// wait for the next round.
func (s *scheduler) round(ctx context.Context) time.Duration {
	now := s.cfg.Now()
	s.mu.Lock()
	next := s.next
	// Due when no note came since the last round (the index is read), a
	// noted time came, or the time the index held came (a note of a later
	// time, made since, must not make this round pass over it).
	due := next.IsZero() || !next.After(now) || !s.expect.IsZero() && !s.expect.After(now)
	if due {
		s.next, s.expect = time.Time{}, time.Time{}
	}
	s.mu.Unlock()
	wait := s.cfg.Poll
	if due {
		s.wakeDue(ctx)
	} else if d := next.Sub(now); d < wait {
		wait = d
	}
	// The notes keep only the earliest time: after a round, the index
	// says when the next wake-up is due, and whether one is due now that
	// no note announced (a later time was noted since the round that
	// forgot it, or another writer set it): it runs now.
	up, missed := s.upcoming(ctx, now, wait)
	if missed && !due {
		s.wakeDue(ctx)
	}
	if !up.IsZero() {
		wait = min(wait, max(0, up.Sub(s.cfg.Now())))
		s.mu.Lock()
		if s.expect.IsZero() || up.Before(s.expect) {
			s.expect = up
		}
		s.mu.Unlock()
	}
	return wait
}

// upcoming returns the earliest wake time after now in the store's wake
// index, within horizon (zero when there is none), and whether a task is
// due by now that this process does not wake already (missed). Tasks due
// already (being woken now, backing off, or held by this process) are
// passed over.
func (s *scheduler) upcoming(ctx context.Context, now time.Time, horizon time.Duration) (up time.Time, missed bool) {
	s.mu.Lock()
	limit := 16 + len(s.inflight)
	s.mu.Unlock()
	ts, err := s.e.Store().Due(ctx, now.Add(horizon), limit)
	if err != nil {
		return time.Time{}, false
	}
	for _, t := range ts {
		if t.WakeAt.After(now) {
			return t.WakeAt, missed
		}
		missed = missed || s.waiting(t, now)
	}
	return time.Time{}, missed
}

// waiting reports a due task that no wake-up of this process runs or
// waits to retry.
func (s *scheduler) waiting(t *store.Task, now time.Time) bool {
	if s.worksOn(t, now) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.inflight[t.ID] && !s.backoff[t.ID].After(now)
}

// worksOn reports whether, on a shared store, this process works on
// task t already: it holds t's lease (or claimed it, by t's record).
func (s *scheduler) worksOn(t *store.Task, now time.Time) bool {
	return s.cfg.Shared && (s.held.has(t.ID) || t.LeaseHolder == s.cfg.ReplicaID && t.LeaseUntil.After(now))
}

// wakeDue hands every due task to its kind's Wake hook.
func (s *scheduler) wakeDue(ctx context.Context) {
	for {
		now := s.cfg.Now()
		due, err := s.e.Store().Due(ctx, now, s.cfg.Batch)
		if err != nil {
			s.e.Logger().Warn("reading due wake-ups", "error", err)
			return
		}
		started := 0
		for _, t := range due {
			if s.worksOn(t, now) {
				continue // this process works on it already (a re-claim would fence that work)
			}
			if s.place.elsewhere(t) {
				continue // a live replica that serves it wakes it (replicas.go)
			}
			if !s.begin(t.ID, now) {
				continue
			}
			started++
			s.sem <- struct{}{}
			s.wakers.Add(1)
			go func() {
				defer s.wakers.Done()
				defer func() { <-s.sem }()
				s.end(t.ID, s.wakeOne(ctx, t))
			}()
		}
		if len(due) < s.cfg.Batch || started == 0 {
			return
		}
	}
}

// begin marks task id's wake-up in progress, unless it is already or its
// backoff has not run out.
func (s *scheduler) begin(id string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight[id] || s.backoff[id].After(now) {
		return false
	}
	s.inflight[id] = true
	return true
}

// end records the outcome of task id's wake-up: a failure is tried again
// after a backoff that doubles up to a minute.
func (s *scheduler) end(id string, err error) {
	now := s.cfg.Now()
	s.mu.Lock()
	delete(s.inflight, id)
	if err == nil {
		delete(s.backoff, id)
		delete(s.fails, id)
		s.mu.Unlock()
		s.signals.Woken.Send(id)
		return
	}
	s.fails[id]++
	d := min(time.Second<<min(s.fails[id], 6), time.Minute)
	at := now.Add(d)
	s.backoff[id] = at
	s.mu.Unlock()
	s.note(at) // the loop looks again then, whatever its poll
	s.e.Logger().Warn("waking a task failed; trying again later", "task", id, "retry_in", d, "error", err)
	s.signals.Retry.Send(id)
}

// wakeOne claims (on a shared store) and wakes one due task.
func (s *scheduler) wakeOne(ctx context.Context, t *store.Task) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.e.Logger().Error("panic waking a task", "task", t.ID, "panic", p, "stack", string(debug.Stack()))
			err = errors.New("panic")
		}
	}()
	wake := s.kinds.wakeHook(t)
	if wake == nil {
		// Nothing drives this kind here: clear the wake-up rather than
		// look at it again forever.
		zero := time.Time{}
		_, err := s.e.Store().Update(ctx, t.ID, store.Update{IfVersion: t.Version, WakeAt: &zero})
		if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrTerminal) && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	}
	if s.cfg.Shared && s.held.has(t.ID) {
		return nil // this process took it up meanwhile
	}
	return wake(ctx, t)
}
