package taskrouter

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
)

// BenchmarkReplies: the two replies of an instant task's round trip,
// encoded as the fast path encodes them (wire.Response then
// wire.EncodeResponse): tools/call's task, and tasks/result's stored
// result with its related-task _meta.
func BenchmarkReplies(b *testing.B) {
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	t := &store.Task{ID: "019ac4f1d2e37a4b8c9d0e1f2a3b4c5d", Status: mcptask.StatusCompleted, CreatedAt: now, UpdatedAt: now,
		TTL: 10 * time.Minute, PollInterval: time.Second,
		Result: []byte(`{"content":[{"type":"text","text":"Computation \"load\" completed instantly. Result: 42."}]}`)}
	id, err := jsonrpc.MakeID(float64(7))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("create", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			resp, ok := wire.Response(id, mcptask.MethodToolsCall, createReply(mcptask.Core, "slow_compute", t, nil), nil)
			if _, err := wire.EncodeResponse(resp); !ok || err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("result", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			res, err := finalResult(t)
			if err != nil {
				b.Fatal(err)
			}
			resp, ok := wire.Response(id, mcptask.MethodTasksResult, res, nil)
			if _, err := wire.EncodeResponse(resp); !ok || err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestResultReplyIsEncodersOutput: the fast path's tasks/result reply
// carries the bytes encoding/json without HTML escaping writes for the
// result (what it wrote before rawResult encoded itself), for stored
// results as bbolt keeps them (compact) and as PostgreSQL's jsonb gives
// them back (with spaces), with and without a _meta of their own, of
// other kinds than an object, and for task ids that need escaping.
func TestResultReplyIsEncodersOutput(t *testing.T) {
	raws := []string{
		`{"content":[{"type":"text","text":"Computation \"load\" completed instantly. Result: 42."}]}`,
		`{"content": [{"type": "text", "text": "a b <&> \u2028"}], "isError": true}`,
		"{\n  \"content\" : [ ],\n\t\"structuredContent\": {\"k\": \"v \\\" w\\\\\"}\r\n}",
		`{"_meta":{"k":"v"},"content":[]}`,
		`{"content":[{"_meta":{"x":1}}]}`,
		`{}`, `{ }`, `[1, 2]`, `"text"`, `null`,
	}
	ids := []string{"019ac4f1d2e37a4b8c9d0e1f2a3b4c5d", "a<b>&", `q"`, "é"}
	id, err := jsonrpc.MakeID(float64(1))
	require.NoError(t, err)
	for _, raw := range raws {
		for _, tid := range ids {
			task := &store.Task{ID: tid, Status: mcptask.StatusCompleted, Result: []byte(raw)}
			res, err := finalResult(task)
			require.NoError(t, err)
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			require.NoError(t, enc.Encode(res))
			resp, ok := wire.Response(id, mcptask.MethodTasksResult, res, nil)
			require.True(t, ok)
			require.Equal(t, strings.TrimRight(want.String(), "\n"), string(resp.Result), "%s, task %q", raw, tid)
		}
	}
}
