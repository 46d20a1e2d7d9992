//go:build unix

package bboltstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// shippedTask is the record one task round trip of examples/conformance
// writes (bench row 23): a tool task created already completed, with its
// result, one status event, a TTL, and one owner per client session; ids
// as taskrouter.NewTaskID makes them (time prefix, random tail).
func shippedTask(client int, now time.Time) *store.Task {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	return &store.Task{
		ID: hex.EncodeToString(b[:]), Owner: fmt.Sprintf("session:%026d", client), Status: mcptask.StatusCompleted,
		CreatedAt: now, TTL: 10 * time.Minute, PollInterval: time.Second,
		Request: store.Request{Method: "tools/call", Name: "slow_compute", Arguments: json.RawMessage(`{"label":"load","seconds":0}`)},
		Labels:  map[string]string{"access": "id", "dialect": "core", "kind": "tool"},
		Result:  json.RawMessage(`{"content":[{"type":"text","text":"Computation \"load\" completed instantly. Result: 42."}]}`),
		Events:  []store.Event{{Type: mcptask.EventType("status"), Data: json.RawMessage(`{"status":"completed"}`)}},
	}
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkShippedTaskWrite measures what bench row 23's task write costs
// the store: 1 or 64 clients each creating completed tasks (shippedTask)
// on a file already holding 20,000 of them, with real fsyncs. It reports
// bbolt's TxStats: the pages written per group commit, the pwrite calls
// per task (pages and meta page), the bytes written per task; and the
// process's CPU time per task. docs/PERFORMANCE.md ("One B+tree per task
// instead of nine") used it to weigh layouts.
func BenchmarkShippedTaskWrite(b *testing.B) {
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchShippedTaskWrite(b, clients) })
	}
}

func benchShippedTaskWrite(b *testing.B, clients int) {
	s, err := Open(filepath.Join(b.TempDir(), "tasks.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	run := func(n, clients int) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					if _, err := s.Create(ctx, shippedTask(c, time.Now())); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	run(20_000, 64)
	before, commits := s.db.Stats().TxStats, s.stats.commits.Load()
	cpu := cpuNow()
	b.ResetTimer()
	run(b.N, clients)
	b.StopTimer()
	cpu = cpuNow() - cpu
	after := s.db.Stats().TxStats
	d := after.Sub(&before)
	nc := float64(s.stats.commits.Load() - commits)
	b.ReportMetric(float64(d.GetPageCount())/nc, "pages/commit")
	b.ReportMetric(float64(d.GetWrite())/float64(b.N), "pwrites/task")
	b.ReportMetric(float64(d.GetPageAlloc())/float64(b.N), "bytes/task")
	b.ReportMetric(float64(b.N)/nc, "tasks/commit")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/task")
}
