package taskrouter

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWorkersReuseAndLeave: idle workers take the next work, and end once
// idle for a while; close ends them at once.
func TestWorkersReuseAndLeave(t *testing.T) {
	var w workers
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
		return len(w.idle) > 0 && int(w.live.Load()) <= maxIdleWorkers
	}, 5*time.Second, time.Millisecond, "at most %d workers stay", maxIdleWorkers)
	require.Eventually(t, func() bool { return w.live.Load() == 0 }, 3*workerIdle, 10*time.Millisecond, "idle workers end")
	w.run(func() {})
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.idle) == 1
	}, time.Second, time.Millisecond)
	w.close()
	require.Eventually(t, func() bool { return w.live.Load() == 0 }, time.Second, time.Millisecond)
}
