package rrproxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/internal/rrproxy"
)

// backend is a fake MCP server: a POST without a session creates one
// (answering with its Mcp-Session-Id), a request for a session it does
// not hold gets 404, DELETE ends a session, and every answer names the
// backend. It records the last request's headers and body.
type backend struct {
	name string
	srv  *httptest.Server

	mu       sync.Mutex
	sessions map[string]bool
	last     http.Header
	lastHost string
	lastBody string
	lastPath string
	seq      atomic.Int64
	stream   chan string // events for GET /sse, written one by one
}

func newBackend(t *testing.T, name string) *backend {
	t.Helper()
	b := &backend{name: name, sessions: map[string]bool{}, stream: make(chan string)}
	b.srv = httptest.NewServer(http.HandlerFunc(b.serve))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.last, b.lastHost, b.lastBody, b.lastPath = r.Header.Clone(), r.Host, string(body), r.URL.Path
	sid := r.Header.Get(rrproxy.SessionHeader)
	known := b.sessions[sid]
	b.mu.Unlock()
	w.Header().Set("X-Backend", b.name)
	if r.URL.Path == "/sse" {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case ev, ok := <-b.stream:
				if !ok {
					return
				}
				fmt.Fprintf(w, "data: %s\n\n", ev)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	}
	switch {
	case sid == "" && r.Method == http.MethodPost:
		id := fmt.Sprintf("%s-s%d", b.name, b.seq.Add(1))
		b.mu.Lock()
		b.sessions[id] = true
		b.mu.Unlock()
		w.Header().Set(rrproxy.SessionHeader, id)
	case sid == "":
	case !known:
		http.Error(w, "session not found", http.StatusNotFound)
		return
	case r.Method == http.MethodDelete:
		b.mu.Lock()
		delete(b.sessions, sid)
		b.mu.Unlock()
	}
	w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
	fmt.Fprint(w, b.name)
}

func (b *backend) lastRequest() (http.Header, string, string, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last, b.lastHost, b.lastBody, b.lastPath
}

// deadURL returns the URL of a loopback port that refuses connections.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr
}

func listen(t *testing.T, backends ...string) *rrproxy.Server {
	t.Helper()
	p, err := rrproxy.Listen("", backends...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

var client = &http.Client{Timeout: 10 * time.Second}

// do sends a request through the proxy and returns the status, the
// answering backend's name (the body) and the response headers.
func do(t *testing.T, method, url, session string, header ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	require.NoError(t, err)
	if session != "" {
		req.Header.Set(rrproxy.SessionHeader, session)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, strings.TrimSpace(string(body)), resp.Header
}

func TestRoundRobin(t *testing.T) {
	a, b, c := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")
	p := listen(t, a.srv.URL, b.srv.URL, c.srv.URL)
	var got []string
	for range 6 {
		code, name, _ := do(t, http.MethodGet, p.URL+"/mcp", "")
		require.Equal(t, http.StatusOK, code)
		got = append(got, name)
	}
	require.Equal(t, []string{"a", "b", "c", "a", "b", "c"}, got)
	require.Equal(t, []int64{2, 2, 2}, p.Served())
	require.Equal(t, []string{a.srv.URL, b.srv.URL, c.srv.URL}, p.Backends())
}

// TestHeadersAndBodyPassThrough: the MCP headers and the body reach the
// backend, the backend's headers reach the client, the path is kept, and
// the backend sees its own (loopback) address as Host, as go-sdk's DNS
// rebinding protection wants.
func TestHeadersAndBodyPassThrough(t *testing.T) {
	a := newBackend(t, "a")
	p := listen(t, a.srv.URL+"/base")
	code, name, h := do(t, http.MethodPost, p.URL+"/mcp?x=1", "",
		"Authorization", "Bearer tok", "Mcp-Protocol-Version", "2025-11-25", "Mcp-Name", "tools/call", "Last-Event-ID", "ev-7")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "a", name)
	require.Equal(t, "a-s1", h.Get(rrproxy.SessionHeader))
	require.Equal(t, "Bearer tok", h.Get("X-Echo-Auth"))
	in, host, body, path := a.lastRequest()
	require.Equal(t, "Bearer tok", in.Get("Authorization"))
	require.Equal(t, "2025-11-25", in.Get("Mcp-Protocol-Version"))
	require.Equal(t, "tools/call", in.Get("Mcp-Name"))
	require.Equal(t, "ev-7", in.Get("Last-Event-ID"))
	require.Empty(t, in.Get("X-Forwarded-For"))
	require.Equal(t, strings.TrimPrefix(a.srv.URL, "http://"), host)
	require.Equal(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, body)
	require.Equal(t, "/base/mcp", path)

	do(t, http.MethodGet, p.URL+"/mcp", "a-s1", "Mcp-Session-Id", "a-s1")
	in, _, _, _ = a.lastRequest()
	require.Equal(t, "a-s1", in.Get(rrproxy.SessionHeader))
}

// TestStickySessions: a session's requests go to the backend that issued
// it; DELETE and a 404 make the proxy forget it; an unknown session goes
// round-robin.
func TestStickySessions(t *testing.T) {
	a, b, c := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")
	p := listen(t, a.srv.URL, b.srv.URL, c.srv.URL)
	_, name, h := do(t, http.MethodPost, p.URL+"/mcp", "") // initialize
	require.Equal(t, "a", name)
	sa := h.Get(rrproxy.SessionHeader)
	_, name, h = do(t, http.MethodPost, p.URL+"/mcp", "")
	require.Equal(t, "b", name)
	sb := h.Get(rrproxy.SessionHeader)
	i, ok := p.SessionBackend(sa)
	require.True(t, ok)
	require.Equal(t, 0, i)

	for range 4 {
		for _, s := range []struct{ id, want string }{{sa, "a"}, {sb, "b"}} {
			for _, m := range []string{http.MethodPost, http.MethodGet} {
				code, name, _ := do(t, m, p.URL+"/mcp", s.id)
				require.Equal(t, http.StatusOK, code)
				require.Equal(t, s.want, name)
			}
		}
	}
	require.Equal(t, []int64{9, 9, 0}, p.Served())

	// DELETE ends the session: the proxy forgets it, and a later request
	// with it goes round-robin (the next backend, c, answers 404).
	code, name, _ := do(t, http.MethodDelete, p.URL+"/mcp", sa)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "a", name)
	_, ok = p.SessionBackend(sa)
	require.False(t, ok)
	code, _, _ = do(t, http.MethodPost, p.URL+"/mcp", sa)
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, []int64{10, 9, 1}, p.Served())

	// A backend that answers 404 for a session it issued (it restarted,
	// say) makes the proxy forget it.
	b.mu.Lock()
	delete(b.sessions, sb)
	b.mu.Unlock()
	code, _, _ = do(t, http.MethodPost, p.URL+"/mcp", sb)
	require.Equal(t, http.StatusNotFound, code)
	_, ok = p.SessionBackend(sb)
	require.False(t, ok)
}

// TestStreamsAreNotBuffered: each event a backend flushes reaches the
// client before the backend writes the next.
func TestStreamsAreNotBuffered(t *testing.T) {
	a := newBackend(t, "a")
	p := listen(t, a.srv.URL)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/sse", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "the headers come through before the first event")
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if l := sc.Text(); l != "" {
				lines <- l
			}
		}
		close(lines)
	}()
	for i := range 3 {
		ev := fmt.Sprint("event-", i)
		select {
		case a.stream <- ev:
		case <-time.After(30 * time.Second):
			t.Fatal("the backend's stream is stuck")
		}
		select {
		case got := <-lines:
			require.Equal(t, "data: "+ev, got)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not come through while the stream stays open: buffered", ev)
		}
	}
	close(a.stream)
	_, open := <-lines
	require.False(t, open, "the stream ends when the backend's does")
}

// TestDeadBackendSkipped: a backend that refuses connections is skipped,
// and the request (body included) goes to the next one.
func TestDeadBackendSkipped(t *testing.T) {
	a, c := newBackend(t, "a"), newBackend(t, "c")
	p := listen(t, deadURL(t), a.srv.URL, c.srv.URL)
	var got []string
	for range 6 {
		code, name, _ := do(t, http.MethodPost, p.URL+"/mcp", "")
		require.Equal(t, http.StatusOK, code)
		got = append(got, name)
	}
	require.Equal(t, []string{"a", "a", "c", "a", "a", "c"}, got, "the dead backend's turns go to the next one")
	require.Equal(t, []int64{0, 4, 2}, p.Served())
	_, _, body, _ := a.lastRequest()
	require.Equal(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, body, "the body is sent again in full")
}

// TestAllDead502: when every backend refuses, the client gets 502.
func TestAllDead502(t *testing.T) {
	p := listen(t, deadURL(t), deadURL(t))
	code, body, _ := do(t, http.MethodPost, p.URL+"/mcp", "")
	require.Equal(t, http.StatusBadGateway, code)
	require.Contains(t, body, "refused")
	require.Equal(t, []int64{0, 0}, p.Served())
}

// TestSessionOnDeadBackend: a session whose backend went away is answered
// 404 (start a new session) and forgotten; new sessions go elsewhere.
func TestSessionOnDeadBackend(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	p := listen(t, a.srv.URL, b.srv.URL)
	_, _, h := do(t, http.MethodPost, p.URL+"/mcp", "")
	sa := h.Get(rrproxy.SessionHeader)
	require.Equal(t, "a-s1", sa)
	a.srv.Close()
	code, body, _ := do(t, http.MethodPost, p.URL+"/mcp", sa)
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, "start a new session")
	_, ok := p.SessionBackend(sa)
	require.False(t, ok)
	for range 2 {
		code, name, _ := do(t, http.MethodPost, p.URL+"/mcp", "")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "b", name)
	}
}

func TestListenAndNew(t *testing.T) {
	_, err := rrproxy.Listen("0.0.0.0:0", "http://127.0.0.1:1")
	require.ErrorContains(t, err, "loopback")
	_, err = rrproxy.Listen("127.0.0.1:0")
	require.ErrorContains(t, err, "no backends")
	_, err = rrproxy.New("ftp://x")
	require.Error(t, err)
	_, err = rrproxy.New("127.0.0.1:80")
	require.Error(t, err)
	p, err := rrproxy.Listen("localhost:0", "http://127.0.0.1:1")
	require.NoError(t, err)
	require.NoError(t, p.Close())
}
