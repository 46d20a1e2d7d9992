package taskrouter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
)

// woken reports whether c was closed.
func woken(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestFeedEchoWakesNoOne: on a shared store a version this router wrote
// wakes its waiters when written; the change feed's echo of it wakes no
// one again, while another process's newer version, a deletion, or an
// echo the router forgot still wake them.
func TestFeedEchoWakesNoOne(t *testing.T) {
	var w watches
	c := w.watch("t")
	w.wakeOwn("t", 5)
	require.True(t, woken(c), "the write wakes its waiters")

	c = w.watch("t")
	w.wakeFeed("t", 5)
	require.False(t, woken(c), "the echo of the write wakes no one")
	w.wakeFeed("t", 6)
	require.True(t, woken(c), "another process's version wakes them")

	c = w.watch("t")
	w.wakeOwn("t", 7)
	require.True(t, woken(c))
	c = w.watch("t")
	w.wakeFeed("t", 0)
	require.True(t, woken(c), "a deletion wakes them")

	c = w.watch("u")
	w.wakeFeed("u", 3)
	require.True(t, woken(c), "a change of a task this router never wrote wakes them")

	for i := range maxOwn + 1 {
		w.wakeOwn(string(rune('a'+i%26))+string(rune(i)), 1)
	}
	require.LessOrEqual(t, len(w.own), maxOwn)
}

// TestAwaitersShareAWatch: two waiters of one task share its watch; the
// first one done must not take the watch from the other, which still
// wakes at the next change. The simulation found it (seed 1): a
// continuation's own wait ended and left its leg, waiting on the same
// workflow task, asleep through the workflow's cancel.
func TestAwaitersShareAWatch(t *testing.T) {
	r, err := NewRouter(memory.New(nil), nil)
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { _ = r.Close() })
	task, err := r.CreateTask(ctx, nil, store.Request{Method: "tools/call", Name: "x"}, nil)
	require.NoError(t, err)

	ended := make(chan error, 1)
	go func() {
		_, err := r.Await(ctx, task.ID, func(t *store.Task) bool { return t.Status.Terminal() })
		ended <- err
	}()
	require.Eventually(t, func() bool {
		r.watches.mu.Lock()
		defer r.watches.mu.Unlock()
		return r.watches.byTask[task.ID] != nil
	}, 5*time.Second, time.Millisecond, "the first waiter watches")
	// A second waiter, done at once.
	_, err = r.Await(ctx, task.ID, func(*store.Task) bool { return true })
	require.NoError(t, err)

	_, err = r.CancelTask(context.Background(), task.ID, "done")
	require.NoError(t, err)
	select {
	case err := <-ended:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the first waiter slept through the task's end")
	}
}
