package integration

// Task event logs, end to end (issue 30): a reader of a task's events
// (tasks/stream) resumes after a SIGKILL of the server from its last
// sequence number and gets every later event exactly once, in order; a
// reader on one PostgreSQL replica follows a task another replica runs.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store/postgres"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// dialClient connects the Go client to url in dialect d.
func dialClient(t *testing.T, url string, d mcptask.Dialect) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.HTTPTransport(url, nil), &client.Options{Dialect: d})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// requireOnce checks that evs hold every number from 1 to the last once,
// in order (a dropped marker standing for the numbers it covers), ending
// with the task's terminal status.
func requireOnce(t *testing.T, evs []client.TaskEvent) {
	t.Helper()
	require.NotEmpty(t, evs)
	want := uint64(1)
	for _, ev := range evs {
		if ev.Type == mcptask.EventDropped {
			var d mcptask.DroppedEvent
			require.NoError(t, json.Unmarshal(ev.Data, &d))
			want = d.Next - 1
		}
		require.Equal(t, want, ev.Seq, "%s", ev.Line())
		want++
	}
	last := evs[len(evs)-1]
	require.Equal(t, mcptask.EventStatus, last.Type, last.Line())
}

// TestEventsAcrossSIGKILL: example 62's generate_report reports once a
// second; its reader reads some events, the server is killed (SIGKILL)
// and started again on the same store (the task, retryable, runs again),
// and the reader, over a new connection, resumes after the last number
// it had: it gets every event once, in order, through the task's end. A
// second reader resumes the broken SSE stream itself with a GET carrying
// Last-Event-ID, as Streamable HTTP clients do, and gets the same events.
func TestEventsAcrossSIGKILL(t *testing.T) {
	bin := exampleBinary(t, "./examples/62_tasks_workflow")
	db := filepath.Join(t.TempDir(), "events.db")
	addr := crashFreeAddr(t)
	start := func() *proc { return startProcAt(t, addr, bin, nil, "serve", "-http", "ADDR", "-db", db) } // owned by the whole test
	p := start()
	for _, d := range []mcptask.Dialect{mcptask.Core, mcptask.Extension} {
		t.Run(d.String(), func(t *testing.T) {
			c := dialClient(t, p.url, d)
			ctx := relCtx(t, 2*time.Minute)
			var id string
			for ev, err := range c.CallTool(ctx, "generate_report", map[string]any{"topic": "crash", "seconds": 6}, nil) {
				require.NoError(t, err)
				if ev.Kind == client.EventCreated {
					id = ev.Task.ID
					break
				}
			}
			require.NotEmpty(t, id)

			// Reader 1, the Go client; reader 2, raw SSE.
			var got []client.TaskEvent
			for ev, err := range c.StreamEvents(ctx, id, nil) {
				require.NoError(t, err)
				got = append(got, ev)
				if ev.Type == mcptask.EventLog { // a section was written: kill now
					break
				}
			}
			sse := openSSE(t, p.url, d, id)
			firstSSE := sse.next(t)
			require.EqualValues(t, 1, firstSSE.seq)
			p.kill()
			_ = sse.body.Close()

			p = start()
			c2 := dialClient(t, p.url, d)
			for ev, err := range c2.StreamEvents(ctx, id, &client.StreamOptions{After: got[len(got)-1].Seq}) {
				require.NoError(t, err)
				got = append(got, ev)
			}
			requireOnce(t, got)
			firstSections := 0
			for _, ev := range got {
				if strings.HasPrefix(ev.Line(), "1/6 (16%)") {
					firstSections++
				}
			}
			require.Equal(t, 2, firstSections, "the task ran again after the restart: %v", lines(got))
			require.Contains(t, got[len(got)-1].Line(), "status completed")

			// Reader 2 resumes its broken stream after its last event.
			resumed := resumeSSE(t, p.url, firstSSE.id)
			require.Len(t, resumed, len(got)-1)
			for i, ev := range resumed {
				require.Equal(t, got[i+1].Seq, ev.seq)
				require.Equal(t, string(got[i+1].Type.Wire()), ev.typ)
			}
		})
	}
	p.kill()
}

// lines renders events for a failure message.
func lines(evs []client.TaskEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%d %s", ev.Seq, ev.Line()))
	}
	return out
}

// sseStream is a raw tasks/stream response.
type sseStream struct {
	body interface{ Close() error }
	r    *bufio.Reader
}

// sseEvent is one event of it: its SSE id, and the JSON-RPC message.
type sseEvent struct {
	id     string
	seq    uint64
	typ    string
	result bool
}

// openSSE posts tasks/stream for task id and returns the open stream,
// past its first (id-only) event.
func openSSE(t *testing.T, url string, d mcptask.Dialect, id string) *sseStream {
	t.Helper()
	params := map[string]any{"taskId": id}
	hdr := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}
	if d == mcptask.Extension {
		params["_meta"] = map[string]any{
			mcptask.MetaProtocolVersion:    mcptask.ExtensionVersion,
			mcptask.MetaClientCapabilities: map[string]any{"extensions": map[string]any{mcptask.ExtensionID: map[string]any{}}},
		}
		hdr.Set("Mcp-Protocol-Version", mcptask.ExtensionVersion)
		hdr.Set("Mcp-Method", mcptask.MethodTasksStream)
		hdr.Set("Mcp-Name", id)
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": mcptask.MethodTasksStream, "params": params})
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(string(body)))
	require.NoError(t, err)
	req.Header = hdr
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	s := &sseStream{body: resp.Body, r: bufio.NewReader(resp.Body)}
	require.Empty(t, s.raw(t).data, "the stream opens with an id-only event")
	return s
}

type rawSSE struct{ id, data string }

func (s *sseStream) raw(t *testing.T) rawSSE {
	t.Helper()
	var ev rawSSE
	for {
		line, err := s.r.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			return ev
		case strings.HasPrefix(line, "id:"):
			ev.id = strings.TrimSpace(line[3:])
		case strings.HasPrefix(line, "data:"):
			ev.data += strings.TrimSpace(line[5:])
		}
	}
}

func (s *sseStream) next(t *testing.T) sseEvent {
	t.Helper()
	ev := s.raw(t)
	var msg struct {
		Params mcptask.TaskEventParams `json:"params"`
		Result json.RawMessage         `json:"result"`
	}
	require.NoError(t, json.Unmarshal([]byte(ev.data), &msg), ev.data)
	return sseEvent{id: ev.id, seq: msg.Params.Seq, typ: msg.Params.Type, result: msg.Result != nil}
}

// resumeSSE resumes a tasks/stream with a GET carrying Last-Event-ID and
// returns its events up to its result.
func resumeSSE(t *testing.T, url, lastID string) []sseEvent {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", lastID)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	s := &sseStream{body: resp.Body, r: bufio.NewReader(resp.Body)}
	require.Empty(t, s.raw(t).data)
	var out []sseEvent
	for {
		ev := s.next(t)
		if ev.result {
			return out
		}
		out = append(out, ev)
	}
}

// eventReplica is an in-process server on a shared PostgreSQL store with
// a tool that logs a line every few milliseconds.
func eventReplica(t *testing.T, dsn, name string) string {
	t.Helper()
	st, err := postgres.Open(context.Background(), dsn, nil)
	require.NoError(t, err)
	b := builder.New("events-replica", "1").WithStore(st).WithoutEnv().WithRouterOptions(taskrouter.Options{
		ReplicaID: name, LeaseDuration: replicaLease, ChangePollInterval: time.Minute, PollInterval: 20 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "ticks"}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
		N int `json:"n"`
	}) (*mcp.CallToolResult, any, error) {
		log := taskrouter.Logger(ctx)
		for i := 1; i <= in.N; i++ {
			select {
			case <-time.After(150 * time.Millisecond): // apart from each other (EventInterval)
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			log.Info(fmt.Sprintf("tick %d on %s", i, name))
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ticked"}}}, nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close(); _ = st.Close() })
	return serveReplica(t, srv)
}

// serveReplica serves srv on 127.0.0.1 and returns its MCP URL.
func serveReplica(t *testing.T, srv *builder.Server) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.HTTPHandler(nil))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String() + "/mcp"
}

// TestEventsAcrossReplicas: a task runs on replica A; readers on replica
// B (which runs nothing of it) get its events as A writes them, through
// PostgreSQL's notifications (the poll is a minute: too slow to matter),
// each once and in order, in both dialects.
func TestEventsAcrossReplicas(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := eventReplica(t, dsn, "a")
	b := eventReplica(t, dsn, "b")
	for _, d := range []mcptask.Dialect{mcptask.Core, mcptask.Extension} {
		t.Run(d.String(), func(t *testing.T) {
			ca, cb := dialClient(t, a, d), dialClient(t, b, d)
			ctx := relCtx(t, time.Minute)
			var id string
			for ev, err := range ca.CallTool(ctx, "ticks", map[string]any{"n": 12}, nil) {
				require.NoError(t, err)
				if ev.Kind == client.EventCreated {
					id = ev.Task.ID
					break
				}
			}
			var mu sync.Mutex
			var lateness []time.Duration
			var got []client.TaskEvent
			for ev, err := range cb.StreamEvents(ctx, id, nil) {
				require.NoError(t, err)
				got = append(got, ev)
				if ev.Type == mcptask.EventLog {
					mu.Lock()
					lateness = append(lateness, time.Since(ev.At))
					mu.Unlock()
					require.Contains(t, ev.Line(), "on a", "written on A")
				}
			}
			requireOnce(t, got)
			require.Len(t, lateness, 12)
			sort.Slice(lateness, func(i, j int) bool { return lateness[i] < lateness[j] })
			t.Logf("an event logged on A reached the reader on B after %v (p50), %v (max)", lateness[len(lateness)/2], lateness[len(lateness)-1])
		})
	}
}
