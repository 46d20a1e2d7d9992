package taskrouter

import (
	"context"
	"fmt"
	"sync"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/service"
)

// The change feed. Every write this process makes wakes its own waiters
// at once (the fanout's changed). On a shared store the writes of other
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
	e        feedEngine
	notifier store.Notifier
	signals  changeFeedSignals

	mu   sync.Mutex
	stop func() // ends the subscription; nil when not subscribed
}

// feedEngine is what the change feed needs of the engine: the fanout
// (watch.go) has it.
type feedEngine interface {
	// announced takes a change the store's feed announced (another
	// process's write, or this one's echoed).
	announced(c store.Change)
}

func newChangeFeed(e feedEngine, n store.Notifier) *changeFeed { return &changeFeed{e: e, notifier: n} }

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

// onChange hands one change from the feed to the engine.
func (f *changeFeed) onChange(c store.Change) {
	f.e.announced(c)
	f.signals.Changed.Send(c)
}
