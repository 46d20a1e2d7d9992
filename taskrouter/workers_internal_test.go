package taskrouter

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWorkersReuseAndLeave: idle workers take the next work, and end once
// idle for a while; close ends them at once. The bounds are generous
// (conditions waited for, not times): the idle time is 10 ms where the
// test waits for workers to leave, and an hour where it waits for close to
// end them, so only close can.
func TestWorkersReuseAndLeave(t *testing.T) {
	w := workers{idleT: 10 * time.Millisecond}
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		w.run(func() { wg.Done() })
	}
	wg.Wait()
	// A worker past wg.Done is still deciding whether to stay idle or end:
	// the count settles at most maxIdleWorkers once all have decided.
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return int(w.live.Load()) <= maxIdleWorkers
	}, 30*time.Second, time.Millisecond, "at most %d workers stay", maxIdleWorkers)
	require.Eventually(t, func() bool { return w.live.Load() == 0 }, 30*time.Second, time.Millisecond, "idle workers end")

	w.mu.Lock()
	w.idleT = time.Hour
	w.mu.Unlock()
	w.run(func() {})
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.idle) == 1
	}, 30*time.Second, time.Millisecond, "the worker stays, idle")
	w.close()
	require.Eventually(t, func() bool { return w.live.Load() == 0 }, 30*time.Second, time.Millisecond, "close ended it")
}
