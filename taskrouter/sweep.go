package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/service"
)

// The ttl sweeper: every Options.SweepInterval it reads the tasks whose
// expiry has passed from the store's expiry index (store.Expired) and
// deletes the finished ones, many at once (sweepDeleters); one still
// active is cancelled, marked failed with a reason, and kept readable for
// Options.ExpiredGrace.

// sweeperConfig configures the sweeper.
type sweeperConfig struct {
	// Interval is how often it sweeps.
	Interval time.Duration
	// Grace is how long a task that was still active when its ttl ran
	// out stays readable, as failed.
	Grace time.Duration
	// Batch is how many expired tasks one read takes; zero means 256.
	Batch int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c sweeperConfig) withDefaults() sweeperConfig {
	if c.Batch == 0 {
		c.Batch = 256
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c sweeperConfig) validate() error {
	check := service.Check{Service: "sweeper"}
	check.Positive("Interval", c.Interval)
	check.NotNegative("Grace", c.Grace)
	check.Count("Batch", c.Batch)
	return check.Err()
}

// sweeperSignals are the sweeper's test signals.
type sweeperSignals struct {
	// Swept: a periodic sweep ended (how many tasks it deleted or
	// marked).
	Swept service.Signal[int]
}

// sweeper is the engine's ttl sweeper service.
type sweeper struct {
	e       sweepEngine
	gone    deleter     // deletes an ended task and forgets it here (the fanout)
	kinds   expiryWords // the kinds' wording of an expiry (*kinds)
	cfg     sweeperConfig
	loop    service.Loop
	signals sweeperSignals
	// stopping is set by Stop: a sweep ends after the batch in hand.
	stopping atomic.Bool
}

// sweepEngine is what the sweeper needs of the engine; *Router has it.
type sweepEngine interface {
	engineBase
	// endTask writes u, which fails active task t, stops its work with
	// cause and tells its kind.
	endTask(ctx context.Context, t *store.Task, u store.Update, cause error) (*store.Task, error)
}

// deleter deletes ended task t and forgets it here (the fanout, watch.go).
type deleter interface {
	delete(ctx context.Context, t *store.Task) error
}

// expiryWords words the failure of an expired task (*kinds).
type expiryWords interface {
	expiryMessage(t *store.Task) string
	endWrite(t *store.Task, u *store.Update) bool
}

func newSweeper(e sweepEngine, gone deleter, kinds expiryWords, cfg sweeperConfig) (*sweeper, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &sweeper{e: e, gone: gone, kinds: kinds, cfg: cfg}, nil
}

// Name names the service.
func (s *sweeper) Name() string { return "ttl sweeper" }

// Start sweeps every Interval, the first time one Interval from now.
func (s *sweeper) Start(ctx context.Context) error {
	s.loop.Start(ctx, s.cfg.Interval, service.Every(s.cfg.Interval, func(ctx context.Context) {
		n, err := s.sweep(ctx)
		if err != nil {
			s.e.Logger().Warn("ttl sweep", "error", err)
		}
		s.signals.Swept.Send(n)
	}))
	return nil
}

// Stop ends the sweeps: one in progress finishes the read of the expiry
// index it is handling, and stops there (an expiry wave of many thousands
// of tasks does not hold a graceful stop for minutes).
func (s *sweeper) Stop() {
	s.stopping.Store(true)
	s.loop.Stop()
}

// sweep handles every task whose expiry has passed: finished tasks are
// deleted; tasks still active are cancelled and marked failed with a
// status message saying why, and kept readable for Options.ExpiredGrace.
// It returns how many tasks it deleted or marked.
func (s *sweeper) sweep(ctx context.Context) (int, error) {
	n := 0
	for {
		batch, err := s.e.Store().Expired(ctx, s.cfg.Now(), s.cfg.Batch)
		if err != nil {
			return n, err
		}
		if len(batch) == 0 {
			return n, nil
		}
		progressed := false
		var ended []*store.Task
		for _, t := range batch {
			if t.Status.Terminal() {
				ended = append(ended, t)
				continue
			}
			done, err := s.sweepOne(ctx, t)
			if err != nil {
				return n, err
			}
			if done {
				n++
				progressed = true
			}
		}
		deleted, err := s.deleteEnded(ctx, ended)
		n += deleted
		if err != nil {
			return n, err
		}
		if !progressed && deleted == 0 || s.stopping.Load() {
			return n, nil
		}
	}
}

// sweepDeleters is how many deletions of ended tasks one sweep keeps in
// flight: a group-committing store (bbolt) commits them together, one
// commit and its fsyncs for many tasks instead of one each; a shared
// store (PostgreSQL) runs them on as many connections.
const sweepDeleters = 32

// deleteEnded deletes the ended tasks of one read of the expiry index,
// sweepDeleters at a time, and returns how many it deleted and the first
// error.
func (s *sweeper) deleteEnded(ctx context.Context, ended []*store.Task) (int, error) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		deleted int
		first   error
	)
	slots := make(chan struct{}, sweepDeleters)
	for _, t := range ended {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			done, err := s.sweepOne(ctx, t)
			mu.Lock()
			defer mu.Unlock()
			if done {
				deleted++
			}
			if err != nil && first == nil {
				first = err
			}
		}()
	}
	wg.Wait()
	return deleted, first
}

// sweepOne deletes expired task t if it finished, or fails it; done
// reports whether it did either (false: another write got there first).
func (s *sweeper) sweepOne(ctx context.Context, t *store.Task) (done bool, err error) {
	if t.Status.Terminal() {
		if err := s.gone.delete(ctx, t); err != nil {
			return false, err
		}
		return true, nil
	}
	msg := fmt.Sprintf("expired: ttl of %s elapsed before the task finished; it was cancelled", t.TTL)
	if m := s.kinds.expiryMessage(t); m != "" {
		msg = m
	}
	grace := s.cfg.Now().Add(s.cfg.Grace)
	u := store.Update{IfVersion: t.Version, Status: mcptask.StatusFailed, StatusMessage: &msg,
		Error: &mcptask.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg}, ExpiresAt: &grace}
	s.kinds.endWrite(t, &u) // conditional already: a conflict is swept again
	if _, err := s.e.endTask(ctx, t, u, errExpired); err != nil {
		if errors.Is(err, store.ErrTerminal) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
