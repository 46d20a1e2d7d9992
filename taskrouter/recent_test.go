package taskrouter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// TestRecentEndedSameAsStore: the record the router keeps of a task it
// ended is the one the store returns, and a deleted task is not kept.
func TestRecentEndedSameAsStore(t *testing.T) {
	stores := map[string]func(t *testing.T) store.Store{
		"memory": func(*testing.T) store.Store { return memory.New(nil) },
		"bbolt": func(t *testing.T) store.Store {
			st, err := bboltstore.Open(t.TempDir()+"/r.db", nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			return st
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			// The router's loops read the clock while the test moves it.
			var now atomic.Int64
			now.Store(time.Now().UnixNano())
			clock := func() time.Time { return time.Unix(0, now.Load()) }
			h := newHarnessOn(t, open(t), func(c *taskrouter.Options) { c.Now = clock })
			go func() {
				for range h.started {
				}
			}()
			p := h.dial(inMemory, core, nil)
			ctx := context.Background()
			// Created ended (an instant tool), and ended by an update.
			instant := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0}, "task": map[string]any{"ttl": 120000}})["task"].(map[string]any)["taskId"].(string)
			slow := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 30}, "task": map[string]any{"ttl": 120000}})["task"].(map[string]any)["taskId"].(string)
			p.mustCall("tasks/result", map[string]any{"taskId": slow})
			failed := p.mustCall("tools/call", map[string]any{"name": "rpcerr", "arguments": map[string]any{}, "task": map[string]any{"ttl": 120000}})["task"].(map[string]any)["taskId"].(string)
			for _, id := range []string{instant, slow, failed} {
				require.Eventually(t, func() bool { return taskrouter.RecentTask(h.r, id) != nil }, 30*time.Second, time.Millisecond)
				got, err := h.st.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, got, taskrouter.RecentTask(h.r, id), "task %s", id)
			}
			// Never within a minute of the expiry, and never past it.
			now.Add(int64(61 * time.Second))
			require.Nil(t, taskrouter.RecentTask(h.r, instant))
			// Swept: gone.
			now.Add(int64(5 * time.Minute))
			_, err := taskrouter.Sweep(ctx, h.r)
			require.NoError(t, err)
			_, err = h.r.TaskFor(ctx, &taskrouter.Request{Owner: taskrouter.LocalOwner}, instant)
			require.ErrorIs(t, err, store.ErrNotFound)
		})
	}
}
