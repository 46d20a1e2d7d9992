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
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.idle) > 0
	}, time.Second, time.Millisecond)
	require.LessOrEqual(t, int(w.live.Load()), maxIdleWorkers)
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
