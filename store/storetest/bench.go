package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
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
		_, err := s.Update(ctx, id, store.Update{Status: mcptask.StatusCompleted, Result: result})
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

// PreloadQuery fills s with n tasks for BenchQueryPage: 97 owners
// ("owner-0".."owner-96"), 10 request names ("tool-0".."tool-9"), created
// a millisecond apart; 10% left input_required, 30% left working, 60%
// completed. It writes concurrently (64 writers) so that group-committing
// backends batch.
func PreloadQuery(tb testing.TB, s store.Store, n int) {
	tb.Helper()
	ctx := context.Background()
	prefix := fmt.Sprintf("q-%d-", benchSeq.Add(1))
	tasks := make([]*store.Task, n)
	for i := range tasks {
		t := newTask(fmt.Sprintf("%s%07d", prefix, i), fmt.Sprintf("owner-%d", i%97), t0.Add(time.Duration(i)*time.Millisecond))
		t.Request.Name = fmt.Sprintf("tool-%d", (i/7)%10)
		if i%10 == 0 {
			t.Status = mcptask.StatusInputRequired
		}
		tasks[i] = t
	}
	createMany(tb, ctx, s, tasks, 64)
	var done []string
	for i, t := range tasks {
		if i%10 >= 4 {
			done = append(done, t.ID)
		}
	}
	work := make(chan string)
	errc := make(chan error, 64)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				if _, err := s.Update(ctx, id, store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`{"ok":true}`)}); err != nil {
					errc <- err
					for range work {
					}
					return
				}
			}
		}()
	}
	for _, id := range done {
		work <- id
	}
	close(work)
	wg.Wait()
	close(errc)
	for err := range errc {
		tb.Fatal(err)
	}
}

// QueryBenchCase is one query BenchQueryPage measures.
type QueryBenchCase struct {
	// Name names the sub-benchmark.
	Name string
	// Query is the query measured (its Limit and Cursor are zero).
	Query store.Query
}

// QueryBenchCases are the operator queries measured over PreloadQuery's
// tasks: unfiltered; by status (covered by the status index); by owner;
// owner and status (owner index, status filtered); owner and name (owner
// index, name filtered).
func QueryBenchCases() []QueryBenchCase {
	return []QueryBenchCase{
		{"all", store.Query{}},
		{"status", store.Query{Statuses: []mcptask.Status{mcptask.StatusInputRequired}}},
		{"two-statuses", store.Query{Statuses: []mcptask.Status{mcptask.StatusInputRequired, mcptask.StatusWorking}}},
		{"owner", store.Query{Owner: "owner-7"}},
		{"owner+status", store.Query{Owner: "owner-7", Statuses: []mcptask.Status{mcptask.StatusWorking}}},
		{"owner+name", store.Query{Owner: "owner-7", Name: "tool-3"}},
	}
}

// BenchQueryPage measures one Query page of store.DefaultPageSize tasks,
// walking q's pages (and starting over at the end). It reports the mean
// number of tasks per page.
func BenchQueryPage(b *testing.B, s store.Store, q store.Query) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	total := 0
	for range b.N {
		page, err := s.Query(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		total += len(page.Tasks)
		q.Cursor = page.NextCursor
	}
	b.ReportMetric(float64(total)/float64(b.N), "tasks/page")
}
