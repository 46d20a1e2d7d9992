package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// BenchUpdates measures Update on tasks that hold a 64 KiB variable, one
// sub-benchmark per kind of write: "update" sets the status message (a
// state write, no event), "update+event" does the same and appends one
// log line in the same write, "append" appends one log line alone (a pure
// append). Together they show what an event costs on top of a state
// write, and that a pure append neither copies nor rewrites the task's big
// parts.
func BenchUpdates(b *testing.B, s store.Store) {
	ctx := context.Background()
	prefix := fmt.Sprintf("upd-%d-", benchSeq.Add(1))
	big := json.RawMessage(`"` + strings.Repeat("x", 64<<10) + `"`)
	const n = 64
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%02d", prefix, i)
		t := newTask(ids[i], "updater", t0.Add(time.Duration(i)))
		t.Variables = map[string]json.RawMessage{"big": big}
		if _, err := s.Create(ctx, t); err != nil {
			b.Fatal(err)
		}
	}
	msg := "step 3 of 7"
	line, _ := json.Marshal(mcptask.LogEvent{Level: "info", Message: "compiled 12 of 40 packages"})
	ev := []store.Event{{Type: mcptask.EventLog, Data: line}}
	for _, c := range []struct {
		name string
		u    store.Update
	}{
		{"update", store.Update{StatusMessage: &msg}},
		{"update+event", store.Update{StatusMessage: &msg, Events: ev}},
		{"append", store.Update{Events: ev}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				if _, err := s.Update(ctx, ids[i%n], c.u); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
