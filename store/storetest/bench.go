package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

var benchSeq atomic.Int64

// BenchCreateComplete measures the life of a short task: Create, then an
// Update to completed with a small result. writers is the number of
// goroutines issuing tasks concurrently (1 means a plain loop). It reports
// "ops/s" (tasks per second; each task is two writes).
func BenchCreateComplete(b *testing.B, s store.Store, writers int) {
	ctx := context.Background()
	prefix := fmt.Sprintf("bench-%d-", benchSeq.Add(1))
	var seq atomic.Int64
	result := json.RawMessage(`{"content":[{"type":"text","text":"ok"}]}`)
	one := func() error {
		i := seq.Add(1)
		id := fmt.Sprintf("%s%d", prefix, i)
		task := newTask(id, fmt.Sprintf("owner-%d", i%8), t0.Add(time.Duration(i)))
		if _, err := s.Create(ctx, task); err != nil {
			return err
		}
		_, err := s.Update(ctx, id, store.Update{Status: store.StatusCompleted, Result: result})
		return err
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if writers <= 1 {
		for range b.N {
			if err := one(); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((writers + procs - 1) / procs)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := one(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// preload creates n tasks of one owner and returns their ids.
func preload(b *testing.B, s store.Store, owner string, n int) []string {
	prefix := fmt.Sprintf("pre-%d-", benchSeq.Add(1))
	tasks := make([]*store.Task, n)
	out := make([]string, n)
	for i := range tasks {
		out[i] = fmt.Sprintf("%s%05d", prefix, i)
		tasks[i] = newTask(out[i], owner, t0.Add(time.Duration(i)*time.Millisecond))
		tasks[i].Variables = map[string]json.RawMessage{"v": json.RawMessage(`{"small": true}`)}
	}
	createMany(b, context.Background(), s, tasks, 64)
	return out
}

// BenchGet measures parallel Gets of random existing tasks (with a small
// variable each).
func BenchGet(b *testing.B, s store.Store) {
	ctx := context.Background()
	ids := preload(b, s, "getter", 1000)
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			i += 7919
			if _, err := s.Get(ctx, ids[i%len(ids)]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchListPage measures listing one page of store.DefaultPageSize tasks,
// walking an owner's 1000 tasks page by page (and starting over at the
// end).
func BenchListPage(b *testing.B, s store.Store) {
	ctx := context.Background()
	preload(b, s, "lister", 1000)
	b.ReportAllocs()
	b.ResetTimer()
	cursor := ""
	for range b.N {
		page, err := s.List(ctx, store.ListOptions{Owner: "lister", Cursor: cursor})
		if err != nil {
			b.Fatal(err)
		}
		cursor = page.NextCursor
	}
}
