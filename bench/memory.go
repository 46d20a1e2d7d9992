package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// 17. Memory per task: the server's live heap (after a collection) and
// goroutine stacks per task that stays alive, with 1k and o.memScale of
// them, on bbolt, each kind on a fresh server: a task whose handler runs
// (an hour-long tool), a workflow waiting for its client to call a tool,
// and a workflow asleep for an hour. What a task costs in memory should
// not grow with how many there are: flat per task, as the heap stays flat
// with the number of stored tasks (row 5).
func memoryPerTask(o options, tmp string, rep *report) error {
	// A live task's handler runs (a goroutine, its context): its memory
	// grows with their number, and must stay the same per task; a waiting
	// workflow is stored, and keeps only its bookkeeping in memory: the
	// same per workflow however many wait.
	kinds := []struct {
		name, file string
		running    bool
		create     func(context.Context, *session) error
	}{
		{"live tasks (handlers running)", "live", true, func(ctx context.Context, s *session) error {
			_, err := createTask(ctx, s, "work", int(time.Hour/time.Millisecond))
			return err
		}},
		{"workflows waiting for their client", "await", false, func(ctx context.Context, s *session) error {
			_, err := s.call(ctx, "prompts/get", map[string]any{"name": "await_client"})
			return err
		}},
		{"workflows asleep (a durable sleep)", "nap", false, func(ctx context.Context, s *session) error {
			_, err := s.call(ctx, "prompts/get", map[string]any{"name": "nap"})
			return err
		}},
	}
	for i, k := range kinds {
		srv, err := startOurs("bbolt", filepath.Join(tmp, fmt.Sprintf("memory-%d.db", i)), "-max-tasks", strconv.Itoa(2*o.memScale))
		if err != nil {
			return err
		}
		small, big, err := memoryPoints(srv, k.file, k.create, 1000, o.memScale)
		srv.stop()
		if err != nil {
			return fmt.Errorf("%s: %w", k.name, err)
		}
		what := fmt.Sprintf("server memory with %s %s vs 1k of them alive (bbolt): live heap after GC, goroutine stacks; per task over a server with %d alive", count(o.memScale), k.name, memWarm)
		// Per task, flat in how many there are (issue 43). A waiting
		// workflow holds no goroutine, only its admission under the
		// pending limits and its client's binding: ~0.2 KiB of heap.
		r := big.heap / small.heap
		rep.add(row{"17", what, big.String(), small.String(), fmt.Sprintf("%.2f (heap per task)", r), "per task flat (≤ 2, as row 5)", met(r <= 2)})
	}
	return nil
}

// memPoint is the server's memory with n tasks alive over the baseline.
type memPoint struct {
	n                      int
	totalHeap, totalStacks float64 // bytes, the whole server
	heap, stacks           float64 // bytes per task, over the baseline
	goroutines             float64 // per task
}

func (m memPoint) String() string {
	return fmt.Sprintf("heap %.1f MiB (%+.2f KiB per task), stacks %.1f MiB (%+.2f KiB, %.2f goroutines per task)",
		m.totalHeap/(1<<20), m.heap/1024, m.totalStacks/(1<<20), m.stacks/1024, m.goroutines)
}

// memWarm is how many tasks memoryPoints creates before its baseline, so
// that what the first tasks grow once (pools, the store's file, the
// handler goroutines kept for reuse) is not counted per task.
const memWarm = 200

// memoryPoints creates memWarm tasks with create and reads srv's
// baseline, then creates small more and reads again, then more up to big
// over the baseline and reads again. With -cpuprofile it saves a heap
// profile at big into that directory as well.
func memoryPoints(srv *proc, name string, create func(context.Context, *session) error, small, big int) (memPoint, memPoint, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	const conc = 64
	client := newHTTPClient(conc)
	defer client.CloseIdleConnections()
	sessions := make([]*session, conc)
	for i := range sessions {
		s, err := dial(ctx, client, srv.url)
		if err != nil {
			return memPoint{}, memPoint{}, err
		}
		sessions[i] = s
	}
	if err := createN(ctx, sessions, memWarm, create); err != nil {
		return memPoint{}, memPoint{}, err
	}
	time.Sleep(3 * time.Second) // idle handler goroutines end after 2 s
	base := srv.debugStats(true)
	if base == nil {
		return memPoint{}, memPoint{}, fmt.Errorf("no /debug/bench on %s", srv.name)
	}
	made := 0
	point := func(n int) (memPoint, error) {
		t0 := time.Now()
		if err := createN(ctx, sessions, n-made, create); err != nil {
			return memPoint{}, err
		}
		made = n
		time.Sleep(3 * time.Second)
		st := srv.debugStats(true)
		if st == nil {
			return memPoint{}, fmt.Errorf("no /debug/bench on %s", srv.name)
		}
		fmt.Fprintf(os.Stderr, "  %d alive over %d (%s to create): heap %.1f MiB, stacks %.1f MiB, %d goroutines\n", n, memWarm,
			time.Since(t0).Round(time.Millisecond), float64(st.HeapAlloc)/(1<<20), float64(st.StackInuse)/(1<<20), st.Goroutines)
		return memPoint{n: n, totalHeap: float64(st.HeapAlloc), totalStacks: float64(st.StackInuse), heap: (float64(st.HeapAlloc) - float64(base.HeapAlloc)) / float64(n),
			stacks:     (float64(st.StackInuse) - float64(base.StackInuse)) / float64(n),
			goroutines: float64(st.Goroutines-base.Goroutines) / float64(n)}, nil
	}
	a, err := point(small)
	if err != nil {
		return memPoint{}, memPoint{}, err
	}
	b, err := point(big)
	if err == nil && profiling.dir != "" {
		saveHeapProfile(srv, filepath.Join(profiling.dir, fmt.Sprintf("row17-%s-%d-heap.pprof", name, big)))
	}
	return a, b, err
}

// saveHeapProfile writes srv's heap profile (after a collection) to path.
func saveHeapProfile(srv *proc, path string) {
	resp, err := http.Get(baseURL(srv.url) + "/debug/pprof/heap?gc=1")
	if err == nil {
		defer resp.Body.Close()
		var f *os.File
		if f, err = os.Create(path); err == nil {
			_, err = io.Copy(f, resp.Body)
			_ = f.Close()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "  heap profile:", err)
	}
}

// createN runs create n times spread over the sessions, concurrently.
func createN(ctx context.Context, sessions []*session, n int, create func(context.Context, *session) error) error {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := create(ctx, s); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
