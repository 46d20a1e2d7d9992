package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/service"
)

// The change feed. Every write this process makes wakes its own waiters
// at once (Router.changed). On a shared store the writes of other
// processes arrive through the store's Notifier: they wake waiters here,
// stop work here on a task another process ended (a tasks/cancel that
// landed on another replica stops the handler running on this one), and
// reach subscriptions/listen streams. Waiters re-read every
// Options.ChangePollInterval in case a notification was lost.

// changeFeedSignals are the change feed's test signals.
type changeFeedSignals struct {
	// Changed: a change from the feed was handled.
	Changed service.Signal[store.Change]
}

// changeFeed is the engine's service that follows the store's change
// feed, on a store that has one (store.Notifier). Its one setting is the
// notifier; a store without one needs no feed (every change is this
// process's own).
type changeFeed struct {
	r        *Router
	notifier store.Notifier
	signals  changeFeedSignals

	mu   sync.Mutex
	stop func() // ends the subscription; nil when not subscribed
}

func newChangeFeed(r *Router, n store.Notifier) *changeFeed { return &changeFeed{r: r, notifier: n} }

// Name names the service.
func (f *changeFeed) Name() string { return "change feed" }

// Start subscribes to the store's changes.
func (f *changeFeed) Start(ctx context.Context) error {
	if f.notifier == nil {
		return nil
	}
	subscribe := f.notifier.Subscribe
	if en, ok := f.notifier.(store.EventNotifier); ok {
		subscribe = en.SubscribeEvents // appends too, for the readers of task events (stream.go)
	}
	stop, err := subscribe(context.WithoutCancel(ctx), f.onChange)
	if err != nil {
		return fmt.Errorf("taskrouter: subscribing to the store's changes: %w", err)
	}
	f.mu.Lock()
	f.stop = stop
	f.mu.Unlock()
	return nil
}

// Stop ends the subscription.
func (f *changeFeed) Stop() {
	f.mu.Lock()
	stop := f.stop
	f.stop = nil
	f.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// onChange handles one change from the feed (it may be this process's own
// write: its waiters were woken when it was written, and its echo wakes
// them no more, see watches.own).
func (f *changeFeed) onChange(c store.Change) {
	r := f.r
	switch {
	case c.Events > 0:
		r.streams.notify(c.ID) // an append: only event readers care
	case c.Resync:
		// The feed's connection was lost: wake everyone to re-read, and
		// stop the work of tasks that ended elsewhere meanwhile.
		r.watches.wakeAll()
		r.listeners.changedAll()
		r.streams.notifyAll()
		f.checkRuns()
	default:
		if c.Deleted {
			r.recent.forget(c.ID)
		}
		r.watches.wakeFeed(c.ID, c.Version)
		if c.Deleted || c.Status.Terminal() {
			r.stopRun(c.ID, errEnded)
			r.quotas.ended(c.ID, c.Status, c.Deleted)
		}
		r.listeners.changed(c.ID)
		r.hooks.feedChange(c)
		r.streams.notify(c.ID)
	}
	f.signals.Changed.Send(c)
}

// checkRuns re-reads the tasks this process runs work for, or counts
// against its quotas, and stops the work (and gives back the slots) of
// those that ended elsewhere.
func (f *changeFeed) checkRuns() {
	r := f.r
	for _, id := range r.runs.workingOn() {
		t, err := r.st.Get(context.Background(), id)
		if err == nil && !t.Status.Terminal() {
			continue
		}
		r.stopRun(id, errEnded)
	}
	for _, id := range r.quotas.heldTasks() {
		t, err := r.st.Get(context.Background(), id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			r.quotas.ended(id, "", true)
		case err == nil:
			r.quotas.ended(id, t.Status, false)
		}
	}
}
