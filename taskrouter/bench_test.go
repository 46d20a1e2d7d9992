package taskrouter_test

import (
	"context"
	"encoding/json"
	"github.com/taskbridge/taskbridge/mcptask"
	"testing"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Engine hot paths over the in-memory transport (no HTTP), so a profile
// shows the engine and the SDK's dispatch rather than the network:
//
//	go test -run '^$' -bench . -cpuprofile cpu.out ./taskrouter

func benchStores(b *testing.B) map[string]func() store.Store {
	return map[string]func() store.Store{
		"memory": func() store.Store { return memory.New(nil) },
		"bbolt": func() store.Store {
			st, err := bboltstore.Open(b.TempDir()+"/bench.db", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = st.Close() })
			return st
		},
	}
}

// BenchmarkTaskRoundTrip: a task-augmented tools/call, then tasks/result.
func BenchmarkTaskRoundTrip(b *testing.B) {
	for name, open := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			h := newHarnessOn(b, open(), func(c *taskrouter.Options) { c.MaxConcurrentPerOwner = 1024 })
			go func() {
				for range h.started {
				}
			}()
			p := h.dial(inMemory, core, nil)
			ctx := context.Background()
			params := map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0}, "task": map[string]any{}}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					var created struct {
						Task mcptask.CoreTask `json:"task"`
					}
					if err := p.c.Call(ctx, "tools/call", params, &created); err != nil {
						b.Fatal(err)
					}
					if err := p.c.Call(ctx, "tasks/result", map[string]any{"taskId": created.Task.TaskID}, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkPlainCall is the same tool without a task, for the ratio.
func BenchmarkPlainCall(b *testing.B) {
	h := newHarness(b, nil)
	go func() {
		for range h.started {
		}
	}()
	p := h.dial(inMemory, core, nil)
	ctx := context.Background()
	params := map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := p.c.Call(ctx, "tools/call", params, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTasksGet reads one task's status.
func BenchmarkTasksGet(b *testing.B) {
	h := newHarness(b, nil)
	p := h.dial(inMemory, core, nil)
	ctx := context.Background()
	var created struct {
		Task mcptask.CoreTask `json:"task"`
	}
	if err := p.c.Call(ctx, "tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0}, "task": map[string]any{}}, &created); err != nil {
		b.Fatal(err)
	}
	params := map[string]any{"taskId": created.Task.TaskID}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var res json.RawMessage
		if err := p.c.Call(ctx, "tasks/get", params, &res); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEngineCreateComplete is the engine without MCP: CreateTask then
// Complete, as the workflow bridge uses it.
func BenchmarkEngineCreateComplete(b *testing.B) {
	for name, open := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			r, err := taskrouter.NewRouter(open(), nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					t, err := r.CreateTask(ctx, &taskrouter.Request{Owner: "o"}, store.Request{Method: "tools/call", Name: "x"}, nil)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := r.Complete(ctx, t.ID, map[string]any{"content": []any{}}, nil, 0); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
