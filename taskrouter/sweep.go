package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// every runs f every d until Close, in a goroutine Close waits for. The
// engine's periodic work runs this way: the ttl sweep, and on a shared
// store lease renewal (three times per lease duration; work whose lease
// was not renewed is stopped) and the takeover of expired leases.
func (r *Router) every(d time.Duration, f func(ctx context.Context)) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-r.stopSweep:
				return
			case <-tick.C:
				f(context.Background())
			}
		}
	}()
}

func (r *Router) sweep(ctx context.Context) {
	if _, err := r.Sweep(ctx); err != nil {
		r.log.Warn("ttl sweep", "error", err)
	}
}

func (r *Router) takeover(ctx context.Context) {
	if _, err := r.Takeover(ctx); err != nil {
		r.log.Warn("taking over expired leases", "error", err)
	}
}

// ExpiryHook decides what happens to a task that is still active when its
// expiry time passes. It returns the message to fail the task with, or ""
// to keep the default ("expired: ttl of ... elapsed").
type ExpiryHook func(t *store.Task) string

// Sweep handles every task whose expiry has passed: finished tasks are
// deleted; tasks still active are cancelled and marked failed with a
// status message saying why, and kept readable for Config.ExpiredGrace.
// It returns how many tasks it deleted or marked.
func (r *Router) Sweep(ctx context.Context) (int, error) {
	n := 0
	for {
		now := r.cfg.Now()
		batch, err := r.st.Expired(ctx, now, 256)
		if err != nil {
			return n, err
		}
		if len(batch) == 0 {
			return n, nil
		}
		progressed := false
		for _, t := range batch {
			if t.Status.Terminal() {
				r.forgetTask(t.ID)
				if err := r.st.Delete(ctx, t.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
					return n, err
				}
				r.watches.drop(t.ID)
				r.observe(TaskDeleted, t, nil)
				n++
				progressed = true
				continue
			}
			msg := fmt.Sprintf("expired: ttl of %s elapsed before the task finished; it was cancelled", t.TTL)
			if _, _, hook, _ := r.kinds.of(t); hook != nil {
				if m := hook(t); m != "" {
					msg = m
				}
			}
			grace := now.Add(r.cfg.ExpiredGrace)
			u := store.Update{IfVersion: t.Version, Status: store.StatusFailed, StatusMessage: &msg,
				Error: &store.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg}, ExpiresAt: &grace}
			nt, err := r.st.Update(ctx, t.ID, u)
			if err != nil {
				if errors.Is(err, store.ErrTerminal) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
					continue
				}
				return n, err
			}
			r.stopRun(t.ID, errExpired)
			r.observe(TaskUpdated, nt, &u)
			r.changed(nt)
			n++
			progressed = true
		}
		if !progressed {
			return n, nil
		}
	}
}
