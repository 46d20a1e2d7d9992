package taskrouter_test

import (
	"context"
	"testing"

	"github.com/taskbridge/taskbridge/internal/tests/pushtest"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// BenchmarkEngineCreateCompletePush is BenchmarkEngineCreateComplete on a
// memory store with the engine started: without webhooks (what matching
// every write costs) and with one webhook for the owner's tasks, told of
// each end (a delivery record made, attempted and recorded per task, the
// POST to a receiver on 127.0.0.1 included: the time runs until every
// delivery arrived).
func BenchmarkEngineCreateCompletePush(b *testing.B) {
	for _, hooked := range []bool{false, true} {
		name := "none"
		if hooked {
			name = "webhook"
		}
		b.Run(name, func(b *testing.B) {
			r, err := taskrouter.NewRouter(memory.New(nil), nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := r.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			rc := pushtest.New(b)
			if hooked {
				if _, _, err := r.Webhooks().Register(ctx, &taskrouter.Request{Owner: "o"}, taskrouter.WebhookRegistration{URL: rc.URL}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				t, err := r.CreateTask(ctx, &taskrouter.Request{Owner: "o"}, store.Request{Method: "tools/call", Name: "x"}, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := r.Complete(ctx, t.ID, map[string]any{"content": []any{}}, nil, 0); err != nil {
					b.Fatal(err)
				}
			}
			if hooked {
				rc.Wait(b, b.N) // every end delivered, in the time measured
			}
			b.StopTimer()
		})
	}
}
