package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/tracing"
)

// syncBuffer is a bytes.Buffer the span exporter and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeObservability wires serve's observers the way serve does:
// /metrics counts the workflow, the prompt result carries the traceparent,
// -trace stdout writes the step spans, and the dashboard shows the admin
// every task and a token user only their own.
func TestServeObservability(t *testing.T) {
	var spans syncBuffer
	srv, obs, res, doc := releaseNotesObserved(t, "stdout", &spans)
	dash, err := newDashboard(srv, obs.feed, "admin-token", map[string]string{"alice-token": "alice"})
	require.NoError(t, err)
	defer dash.Close()
	mux := http.NewServeMux()
	mux.Handle("/metrics", obs.metrics.Handler())
	mux.Handle("/dashboard/", dash)
	web := httptest.NewServer(mux)
	defer web.Close()
	require.Equal(t, tracing.TraceParent(doc.TaskID), res.Meta["traceparent"])

	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, web.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := web.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	_, text := get("/metrics", "")
	require.Contains(t, text, `taskbridge_tasks_created_total{kind="workflow",name="release_notes"} 1`)
	require.Contains(t, text, `taskbridge_workflow_step_attempts_total{by="server",outcome="ok",step="fetch",workflow="release_notes"} 1`)

	code, page := get("/dashboard/", "admin-token")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, doc.TaskID)
	code, page = get("/dashboard/", "alice-token")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, page, doc.TaskID, "alice owns none of the local tasks")
	code, _ = get("/dashboard/", "")
	require.Equal(t, http.StatusUnauthorized, code)

	obs.shutdown() // flushes the batched spans
	require.True(t, strings.Contains(spans.String(), "taskbridge.step release_notes/fetch"), spans.String())
}

// TestDashboardOffWithoutTokens: no admin token and no user tokens, no
// dashboard.
func TestDashboardOffWithoutTokens(t *testing.T) {
	b, err := newBuilder(options{DB: filepath.Join(t.TempDir(), "tasks.db")})
	require.NoError(t, err)
	obs, err := observe(b, "none", io.Discard)
	require.NoError(t, err)
	defer obs.shutdown()
	srv, err := b.Build(t.Context())
	require.NoError(t, err)
	defer srv.Close()
	dash, err := newDashboard(srv, obs.feed, "", nil)
	require.NoError(t, err)
	defer dash.Close()
	rec := httptest.NewRecorder()
	dash.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/dashboard/", nil))
	require.Equal(t, http.StatusNotFound, rec.Code)
	_, err = observe(b, "jaeger", io.Discard)
	require.ErrorContains(t, err, "want none or stdout")
}

// releaseNotesObserved builds the server with serve's observers (spans
// as traceTo says, written to spans), starts release_notes on it from a
// client, and returns the server, the observers and the prompt's result.
func releaseNotesObserved(t *testing.T, traceTo string, spans io.Writer) (*builder.Server, *observers, *mcp.GetPromptResult, *handoff.Document) {
	b, err := newBuilder(options{DB: filepath.Join(t.TempDir(), "tasks.db")})
	require.NoError(t, err)
	obs, err := observe(b, traceTo, spans)
	require.NoError(t, err)
	srv, err := b.Build(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	tr, err := srv.Connect(t.Context())
	require.NoError(t, err)
	c, err := client.Dial(t.Context(), tr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	res, doc, err := c.GetPrompt(t.Context(), "release_notes", map[string]string{"repo": "taskbridge"})
	require.NoError(t, err)
	return srv, obs, res, doc
}

// TestTraceNoneHandsOutTheTraceparent: -trace none makes no spans, and a
// workflow's prompt result still carries its task's traceparent.
func TestTraceNoneHandsOutTheTraceparent(t *testing.T) {
	var spans syncBuffer
	_, obs, res, doc := releaseNotesObserved(t, "none", &spans)
	require.Nil(t, obs.provider, "no tracer provider, no spans")
	require.Equal(t, tracing.TraceParent(doc.TaskID), res.Meta["traceparent"])
	obs.shutdown()
	require.Empty(t, spans.String())
}
