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
			taskrouter.CreateOptions{Kind: "nap", WakeAt: at})
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
