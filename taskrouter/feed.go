package taskrouter

import (
	"context"
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
// reach subscriptions/listen streams. A periodic re-read (Config.
// ChangePollInterval) covers notifications that were lost.

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
	stop, err := f.notifier.Subscribe(context.WithoutCancel(ctx), f.onChange)
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
// write, which is harmless: waking a waiter twice makes it re-read once
// more).
func (f *changeFeed) onChange(c store.Change) {
	r := f.r
	switch {
	case c.Resync:
		// The feed's connection was lost: wake everyone to re-read, and
		// stop the work of tasks that ended elsewhere meanwhile.
		r.watches.wakeAll()
		r.listeners.changedAll()
		f.checkRuns()
	default:
		if c.Deleted {
			r.recent.forget(c.ID)
		}
		r.watches.wake(c.ID)
		if c.Deleted || c.Status.Terminal() {
			r.stopRun(c.ID, errEnded)
		}
		r.listeners.changed(c.ID)
	}
	f.signals.Changed.Send(c)
}

// checkRuns re-reads the tasks this process runs work for and stops the
// work of those that ended elsewhere.
func (f *changeFeed) checkRuns() {
	r := f.r
	for _, id := range r.runs.workingOn() {
		t, err := r.st.Get(context.Background(), id)
		if err == nil && !t.Status.Terminal() {
			continue
		}
		r.stopRun(id, errEnded)
	}
}

// listeners are the subscriptions/listen streams of this process, by the
// task ids they follow.
type listeners struct {
	mu     sync.Mutex
	byTask map[string]map[*listener]struct{}
}

// listener is one subscriptions/listen stream: changed is signalled (never
// blocking) when a task it follows may have changed.
type listener struct {
	tasks   []string
	changed chan string
	done    chan struct{}
}

func (l *listeners) add(ln *listener) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byTask == nil {
		l.byTask = map[string]map[*listener]struct{}{}
	}
	for _, id := range ln.tasks {
		set := l.byTask[id]
		if set == nil {
			set = map[*listener]struct{}{}
			l.byTask[id] = set
		}
		set[ln] = struct{}{}
	}
}

func (l *listeners) remove(ln *listener) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ln.tasks {
		delete(l.byTask[id], ln)
		if len(l.byTask[id]) == 0 {
			delete(l.byTask, id)
		}
	}
}

// changed signals the listeners of task id.
func (l *listeners) changed(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ln := range l.byTask[id] {
		select {
		case ln.changed <- id:
		default: // a signal is pending; the listener re-reads everything it follows
		}
	}
}

// changedAll signals every listener.
func (l *listeners) changedAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, set := range l.byTask {
		for ln := range set {
			select {
			case ln.changed <- "":
			default:
			}
		}
	}
}

// closeAll ends every listener (the router is closing).
func (l *listeners) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[*listener]bool{}
	for _, set := range l.byTask {
		for ln := range set {
			if !seen[ln] {
				seen[ln] = true
				close(ln.done)
			}
		}
	}
	l.byTask = nil
}
