package taskrouter_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
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
			// Kept a few seconds at most (and never past the expiry).
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

// TestTasksResultFromRecentRecord: tasks/result of a task this process
// ended moments ago is answered from the kept record itself: the answer
// is the one the store's record gives (a result, a JSON-RPC error),
// concurrent readers all get it, the kept record is left as the store
// has it, and another session over HTTP (its own owner, the router
// SessionBound) is still refused.
func TestTasksResultFromRecentRecord(t *testing.T) {
	for _, k := range []transportKind{inMemory, overHTTP} {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, func(c *taskrouter.Options) { c.SessionBound = true })
			go func() {
				for range h.started {
				}
			}()
			a := h.dial(k, core, nil)
			b := h.dial(k, core, nil)
			ctx := context.Background()
			create := func(tool string, args map[string]any) string {
				res := a.mustCall("tools/call", map[string]any{"name": tool, "arguments": args, "task": map[string]any{"ttl": 120000}})
				id := taskOf(t, res)["taskId"].(string)
				require.Eventually(t, func() bool { return taskrouter.RecentTask(h.r, id) != nil }, 30*time.Second, time.Millisecond)
				return id
			}
			instant := create("sleepy", map[string]any{"ms": 0, "label": "<kept & shared>"})
			failed := create("rpcerr", map[string]any{})

			first, err := a.call("tasks/result", map[string]any{"taskId": instant})
			require.NoError(t, err)
			require.Equal(t, instant, first["_meta"].(map[string]any)["io.modelcontextprotocol/related-task"].(map[string]any)["taskId"])
			_, ferr := a.call("tasks/result", map[string]any{"taskId": failed})
			require.Error(t, ferr)
			code := rpcCode(t, ferr)

			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 4 {
						res, err := a.call("tasks/result", map[string]any{"taskId": instant})
						if err != nil {
							errs <- err
							return
						}
						if !reflect.DeepEqual(first, res) {
							errs <- fmt.Errorf("tasks/result %v, want %v", res, first)
							return
						}
						_, err = a.call("tasks/result", map[string]any{"taskId": failed})
						if err == nil || err.Error() != ferr.Error() {
							errs <- fmt.Errorf("tasks/result of the failed task: %v, want %v", err, ferr)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.EqualValues(t, rpcCode(t, ferr), code)

			for _, id := range []string{instant, failed} {
				stored, err := h.st.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, stored, taskrouter.RecentTask(h.r, id), "task %s", id)
				if k == overHTTP { // (in memory, as over stdio, every session is the one local owner)
					_, err = b.call("tasks/result", map[string]any{"taskId": id})
					require.EqualValues(t, -32602, rpcCode(t, err))
					require.ErrorContains(t, err, "not found")
				}
			}
		})
	}
}
