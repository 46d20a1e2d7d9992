package taskrouter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Every wake-up comes, not only the earliest one noted: after a round the
// scheduler reads the next due time from the store's wake index rather
// than waiting for its poll (an hour here).
func TestSchedulerWakesEveryTaskNotOnlyTheFirst(t *testing.T) {
	h := newHarness(t, func(c *taskrouter.Options) { c.SweepInterval = time.Hour })
	var mu sync.Mutex
	woken := map[string]time.Time{}
	h.r.HandleKind("nap", napKind{wake: func(ctx context.Context, task *store.Task) error {
		mu.Lock()
		woken[task.ID] = time.Now()
		mu.Unlock()
		zero := time.Time{}
		_, err := h.r.Update(ctx, task.ID, store.Update{WakeAt: &zero})
		return err
	}})
	start := time.Now()
	due := map[string]time.Time{}
	for i := range 5 {
		at := start.Add(time.Duration(200*(i+1)) * time.Millisecond)
		task, err := h.r.CreateTask(t.Context(), nil, store.Request{Method: "tools/call", Name: "nap"},
			&taskrouter.CreateOptions{Kind: "nap", WakeAt: at})
		require.NoError(t, err)
		due[task.ID] = at
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(woken) == len(due)
	}, 30*time.Second, 10*time.Millisecond, "every task is woken long before the poll")
	mu.Lock()
	defer mu.Unlock()
	for id, at := range due {
		require.False(t, woken[id].Before(at), "not before its time")
	}
}

// napKind is a task kind that only wakes.
type napKind struct {
	wake func(ctx context.Context, t *store.Task) error
}

func (k napKind) Recover(context.Context, *store.Task, string) error { return nil }
func (k napKind) Wake(ctx context.Context, t *store.Task) error      { return k.wake(ctx, t) }
func (k napKind) ExpiryMessage(*store.Task) string                   { return "" }
func (k napKind) Touched(context.Context, *store.Task)               {}

// A wake-up the index announced is not passed over when a later time is
// noted before it comes (a delivery put off, a retry's backoff): the
// round its time wakes runs it. Before, a round that ran due tasks
// cleared its notes and learnt the next due time from the index without
// keeping it; a later note then stood for the next due time, the round
// the announced time woke ran nothing, and the task slept until the poll
// (a restarted server's durable sleep among webhook deliveries put off:
// TestHostileSilentReceiverDelaysNoTimer).
func TestSchedulerLaterNoteDoesNotHideADueWakeUp(t *testing.T) {
	h := newHarness(t, func(c *taskrouter.Options) { c.SweepInterval = time.Hour })
	woken := make(chan string, 4)
	h.r.HandleKind("nap", napKind{wake: func(ctx context.Context, task *store.Task) error {
		woken <- task.ID
		zero := time.Time{}
		_, err := h.r.Update(ctx, task.ID, store.Update{WakeAt: &zero})
		return err
	}})
	create := func(at time.Time) string {
		task, err := h.r.CreateTask(t.Context(), nil, store.Request{Method: "tools/call", Name: "nap"},
			&taskrouter.CreateOptions{Kind: "nap", WakeAt: at})
		require.NoError(t, err)
		return task.ID
	}
	next := func(what string) string {
		select {
		case id := <-woken:
			return id
		case <-time.After(30 * time.Second):
			t.Fatalf("%s was never woken (the poll is an hour)", what)
			return ""
		}
	}
	// soon is 5 s away: the task due now must be woken, and the hour's
	// note made, before soon is due, however slow the machine.
	soon := create(time.Now().Add(5 * time.Second))
	// A task due now: the round that runs it clears the notes and reads
	// the next due time, soon's, from the index.
	now := create(time.Now())
	require.Equal(t, now, next("the task due now"))
	create(time.Now().Add(time.Hour)) // noted before soon comes
	require.Equal(t, soon, next("the task due first"))
}
