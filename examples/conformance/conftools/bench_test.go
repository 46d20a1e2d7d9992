package conftools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// BenchmarkShippedTaskRoundTrip is issue 43's task round trip on the
// server examples/conformance starts, with its shipped options: bbolt in
// a temporary directory, Streamable HTTP on 127.0.0.1, one session (so
// one owner) per client goroutine; each op is a tools/call of
// slow_compute with a task (ttl 10 minutes, as bench load sends), then
// tasks/result, which reads the record the router kept of the task it
// just ended (taskrouter's recently-ended cache). The client
// is minimal (request bodies built once per session, replies read into a
// reused buffer), so allocs/op and B/op are mostly the server's:
//
//	go test -run '^$' -bench ShippedTaskRoundTrip -benchmem -cpu 64 ./examples/conformance/conftools
func BenchmarkShippedTaskRoundTrip(b *testing.B) {
	st, err := builder.OpenStore(context.Background(), b.TempDir()+"/tasks.db", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	opts := &taskrouter.Options{Logger: slog.New(slog.DiscardHandler), PollInterval: time.Second, DefaultTTL: 5 * time.Minute}
	_, router, err := NewServer(st, opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := router.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = router.Close() })
	hs := httptest.NewServer(router.HTTPHandler(nil))
	b.Cleanup(hs.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	b.Cleanup(client.CloseIdleConnections)

	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		s := benchDial(b, client, hs.URL)
		var buf bytes.Buffer
		var created struct {
			Result struct {
				Task struct {
					TaskID string `json:"taskId"`
				} `json:"task"`
			} `json:"result"`
		}
		for pb.Next() {
			id := s.next.Add(1)
			body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow_compute","arguments":{"seconds":0,"label":"load"},"task":{"ttl":600000}}}`, id)
			s.post(b, body, &buf)
			created.Result.Task.TaskID = ""
			if err := json.Unmarshal(sseData(buf.Bytes()), &created); err != nil || created.Result.Task.TaskID == "" {
				b.Fatalf("create reply %s: %v", buf.Bytes(), err)
			}
			body = fmt.Appendf(body[:0], `{"jsonrpc":"2.0","id":%d,"method":"tasks/result","params":{"taskId":%q}}`, s.next.Add(1), created.Result.Task.TaskID)
			s.post(b, body, &buf)
			if !bytes.Contains(buf.Bytes(), []byte("Result: 42.")) {
				b.Fatalf("result reply %s", buf.Bytes())
			}
		}
	})
}

type benchSession struct {
	client *http.Client
	url    string
	id     string
	next   atomic.Int64
}

func benchDial(b *testing.B, client *http.Client, url string) *benchSession {
	s := &benchSession{client: client, url: url}
	var buf bytes.Buffer
	hdr := s.post(b, []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`), &buf)
	s.id = hdr.Get("Mcp-Session-Id")
	if s.id == "" {
		b.Fatalf("initialize: no session id: %s", buf.Bytes())
	}
	s.post(b, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`), &buf)
	return s
}

func (s *benchSession) post(b *testing.B, body []byte, buf *bytes.Buffer) http.Header {
	req, err := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if s.id != "" {
		req.Header.Set("Mcp-Session-Id", s.id)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := io.Copy(buf, resp.Body); err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode >= 300 {
		b.Fatalf("HTTP %d: %s", resp.StatusCode, buf.Bytes())
	}
	return resp.Header
}

// sseData is the data of a reply's first event (the whole body when it is
// plain JSON).
func sseData(body []byte) []byte {
	if i := bytes.Index(body, []byte("data: ")); i >= 0 {
		body = body[i+len("data: "):]
		if j := bytes.IndexByte(body, '\n'); j >= 0 {
			body = body[:j]
		}
	}
	return body
}
