package taskrouter

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
)

// TestSpawnAfterCloseStartsNothing: a task whose creation was under way
// when Close began (admitted, then its record written, then spawned) is
// not started, frees its slot, and answers a pending create that the
// server is shutting down. Before, spawn counted it in the WaitGroup
// after Close's Wait had begun (a panic, or a handler nothing stops).
func TestSpawnAfterCloseStartsNothing(t *testing.T) {
	r, err := NewRouter(memory.New(nil), nil)
	require.NoError(t, err)
	adm := admission{owner: LocalOwner, source: "test"}
	require.NoError(t, r.quotas.admit(adm, false))
	require.NoError(t, r.quotas.admit(adm, false))
	require.NoError(t, r.Close())

	var ran atomic.Int32
	exec := func(context.Context) (mcp.Result, error) { ran.Add(1); return &mcp.CallToolResult{}, nil }
	now := time.Now()
	stored := &store.Task{ID: NewTaskID(), Status: mcptask.StatusWorking, CreatedAt: now, UpdatedAt: now}
	ru := r.spawn(stored.ID, "", stored, adm, mcptask.Core, exec, nil)

	p := &pendingRecord{rec: stored, done: make(chan struct{}), ended: make(chan handlerOutcome, 1)}
	pt := &store.Task{ID: NewTaskID(), Status: mcptask.StatusWorking}
	r.spawn(pt.ID, "", pt, adm, mcptask.Core, exec, p)
	select {
	case o := <-p.ended:
		require.ErrorIs(t, o.cause, errShutdown)
	case <-time.After(30 * time.Second):
		t.Fatal("the pending create was not answered")
	}
	require.Zero(t, ran.Load(), "no handler starts after Close")
	require.Zero(t, r.Stats().Pending, "the slots are free again")
	require.Nil(t, r.runs.get(ru.id))
}

// TestCloseWhileSpawning races Close against spawns: every spawn either
// runs (and Close waits for it) or is refused, and nothing panics.
func TestCloseWhileSpawning(t *testing.T) {
	for range 20 {
		r, err := NewRouter(memory.New(nil), nil)
		require.NoError(t, err)
		adm := admission{owner: LocalOwner, source: "test"}
		var wg sync.WaitGroup
		for range 8 {
			require.NoError(t, r.quotas.admit(adm, false))
			wg.Add(1)
			go func() {
				defer wg.Done()
				now := time.Now()
				task := &store.Task{ID: NewTaskID(), Status: mcptask.StatusWorking, CreatedAt: now, UpdatedAt: now}
				r.spawn(task.ID, "", task, adm, mcptask.Core,
					func(ctx context.Context) (mcp.Result, error) { <-ctx.Done(); return nil, ctx.Err() }, nil)
			}()
		}
		require.NoError(t, r.Close())
		wg.Wait()
	}
}
