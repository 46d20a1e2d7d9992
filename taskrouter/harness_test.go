package taskrouter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/internal/rpcconn"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// harness is a real go-sdk server with a router and a set of test tools.
type harness struct {
	t       testing.TB
	st      store.Store
	r       *taskrouter.Router
	srv     *mcp.Server
	httpURL string

	mu        sync.Mutex
	cancelled map[string]bool // label -> handler saw ctx cancellation
	started   chan string
}

type sleepyIn struct {
	Ms    int    `json:"ms"`
	Label string `json:"label,omitempty"`
}

type echoIn struct {
	Text string `json:"text"`
}

func newHarness(t testing.TB, mutate func(*taskrouter.Options)) *harness {
	t.Helper()
	return newHarnessOn(t, memory.New(nil), mutate)
}

func newHarnessOn(t testing.TB, st store.Store, mutate func(*taskrouter.Options)) *harness {
	t.Helper()
	opts := taskrouter.Options{PollInterval: 50 * time.Millisecond}
	if mutate != nil {
		mutate(&opts)
	}
	r, err := taskrouter.NewRouter(st, &opts)
	require.NoError(t, err)
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	require.NoError(t, r.Install(srv))
	h := &harness{t: t, st: st, r: r, srv: srv, cancelled: map[string]bool{}, started: make(chan string, 1024)}
	h.addTools()
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() { _ = r.Close() })
	return h
}

func (h *harness) addTools() {
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return textResult(in.Text), nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskForbidden})
	sleepy := func(ctx context.Context, req *mcp.CallToolRequest, in sleepyIn) (*mcp.CallToolResult, any, error) {
		h.started <- in.Label
		select {
		case <-time.After(time.Duration(in.Ms) * time.Millisecond):
			return textResult("slept " + in.Label), nil, nil
		case <-ctx.Done():
			h.mu.Lock()
			h.cancelled[in.Label] = true
			h.mu.Unlock()
			return nil, nil, ctx.Err()
		}
	}
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "sleepy"}, sleepy, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional, Retryable: true})
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "must"}, sleepy, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskRequired})
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "doze"}, sleepy, nil) // never a task: runs in the request
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "boom"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return nil, nil, errors.New("boom: it broke")
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	h.r.AddRawTool(&mcp.Tool{Name: "rpcerr", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: -32099, Message: "custom failure", Data: json.RawMessage(`{"why":"test"}`)}
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "panicky"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		panic("handler exploded")
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "chatty"}, chatty, nil)
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "chatty_host"}, chatty, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "ask"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		res, err := taskrouter.Elicit(ctx, req, &mcp.ElicitParams{Message: "Proceed?", RequestedSchema: map[string]any{
			"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}})
		if err != nil {
			return nil, nil, err
		}
		return textResult("answer: " + res.Action), nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
}

type chattyIn struct {
	N int `json:"n"`
}

// chatty reports progress n times when the call carries a progress token,
// then logs a line, then answers: a handler whose notifications reach the
// client on the call's own stream.
func chatty(ctx context.Context, req *mcp.CallToolRequest, in chattyIn) (*mcp.CallToolResult, any, error) {
	if tok := req.Params.GetProgressToken(); tok != nil {
		for i := 1; i <= in.N; i++ {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: float64(in.N), Message: fmt.Sprintf("step %d <of> %d", i, in.N)}); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "chatty", Data: map[string]any{"n": in.N}}); err != nil {
		return nil, nil, err
	}
	return textResult(fmt.Sprintf("chatted %d", in.N)), nil, nil
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func (h *harness) wasCancelled(label string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cancelled[label]
}

// serveHTTP starts the router's HTTP handler on 127.0.0.1.
func (h *harness) serveHTTP() string {
	if h.httpURL != "" {
		return h.httpURL
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(h.t, err)
	hs := httptest.NewUnstartedServer(h.r.HTTPHandler(nil))
	hs.Listener = ln
	hs.Start()
	h.t.Cleanup(hs.Close)
	h.httpURL = hs.URL
	return hs.URL
}

// dialect of a test peer.
type dialect int

const (
	core dialect = iota
	ext
	extUndeclared // 2026-07-28 without declaring the tasks extension
)

// peer is a raw JSON-RPC client speaking one dialect.
type peer struct {
	t     testing.TB
	c     *rpcconn.Conn
	d     dialect
	mu    sync.Mutex
	push  []json.RawMessage
	notes []note // every notification, in order
}

// note is one notification a peer received.
type note struct {
	method string
	params map[string]any
}

// notesOf returns the notifications of method received so far.
func (p *peer) notesOf(method string) []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []map[string]any
	for _, n := range p.notes {
		if n.method == method {
			out = append(out, n.params)
		}
	}
	return out
}

type transportKind int

const (
	inMemory transportKind = iota
	overHTTP
)

func (k transportKind) String() string {
	if k == overHTTP {
		return "http"
	}
	return "memory"
}

// dial connects a peer over the given transport.
func (h *harness) dial(k transportKind, d dialect, handler rpcconn.Handler) *peer {
	h.t.Helper()
	return h.dialWith(k, d, handler, nil)
}

// dialWith is dial for a core peer that declares caps in initialize (nil:
// form elicitation only); one that declares sampling also opens the
// standalone GET stream over HTTP (client.HTTPTransport), where requests
// from the server arrive.
func (h *harness) dialWith(k transportKind, d dialect, handler rpcconn.Handler, caps map[string]any) *peer {
	h.t.Helper()
	var t mcp.Transport
	if k == overHTTP {
		if _, samples := caps["sampling"]; samples {
			t = client.HTTPTransport(h.serveHTTP()+"/", nil) // opens the standalone stream
		} else {
			t = &mcp.StreamableClientTransport{Endpoint: h.serveHTTP() + "/", DisableStandaloneSSE: true, MaxRetries: -1}
		}
	} else {
		// What mcp.NewInMemoryTransports builds (a stream connection
		// over net.Pipe on each end), with the server's stream reachable
		// so that the router frames it, as it does stdio.
		cEnd, sEnd := net.Pipe()
		ct := &mcp.IOTransport{Reader: cEnd, Writer: cEnd}
		st := &mcp.IOTransport{Reader: sEnd, Writer: sEnd}
		ss, err := h.srv.Connect(context.Background(), h.r.Transport(st), nil)
		require.NoError(h.t, err)
		h.t.Cleanup(func() { _ = ss.Close() })
		t = ct
	}
	p := &peer{t: h.t, d: d}
	c, err := rpcconn.Dial(context.Background(), t, &rpcconn.Options{Handler: handler, SendCancelled: true, OnNotification: func(method string, params json.RawMessage) {
		var m map[string]any
		_ = json.Unmarshal(params, &m)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.notes = append(p.notes, note{method, m})
		if method == "notifications/tasks/status" {
			p.push = append(p.push, params)
		}
	}})
	require.NoError(h.t, err)
	h.t.Cleanup(func() { _ = c.Close() })
	p.c = c
	if caps == nil {
		caps = map[string]any{"elicitation": map[string]any{}}
	}
	if d == core {
		var res json.RawMessage
		require.NoError(h.t, c.Call(context.Background(), "initialize", map[string]any{
			"protocolVersion": "2025-11-25",
			"capabilities":    caps,
			"clientInfo":      map[string]any{"name": "peer", "version": "1"},
		}, &res))
		require.NoError(h.t, c.Notify(context.Background(), "notifications/initialized", map[string]any{}))
	}
	return p
}

// params adds the per-request _meta of the 2026-07-28 dialects.
func (p *peer) params(in map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range in {
		out[k] = v
	}
	if p.d == core {
		return out
	}
	caps := map[string]any{"elicitation": map[string]any{}}
	if p.d == ext {
		caps["extensions"] = map[string]any{mcptask.ExtensionID: map[string]any{}}
	}
	meta := map[string]any{}
	if m, ok := out["_meta"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = v
		}
	}
	meta["io.modelcontextprotocol/protocolVersion"] = "2026-07-28"
	meta["io.modelcontextprotocol/clientCapabilities"] = caps
	meta["io.modelcontextprotocol/clientInfo"] = map[string]any{"name": "peer", "version": "1"}
	out["_meta"] = meta
	return out
}

// call sends method and decodes the result into a generic map.
func (p *peer) call(method string, params map[string]any) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var res map[string]any
	err := p.c.Call(ctx, method, p.params(params), &res)
	return res, err
}

func (p *peer) mustCall(method string, params map[string]any) map[string]any {
	p.t.Helper()
	res, err := p.call(method, params)
	require.NoError(p.t, err, "%s", method)
	return res
}

// rpcCode returns the JSON-RPC code of err, failing the test if err is not
// a JSON-RPC error.
func rpcCode(t *testing.T, err error) int64 {
	t.Helper()
	require.Error(t, err)
	var je *jsonrpc.Error
	require.ErrorAs(t, err, &je)
	return je.Code
}

// waitStatus polls tasks/get until the task reaches one of the statuses.
func (p *peer) waitStatus(id string, statuses ...string) map[string]any {
	p.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		res := p.mustCall("tasks/get", map[string]any{"taskId": id})
		for _, s := range statuses {
			if res["status"] == s {
				return res
			}
		}
		require.True(p.t, time.Now().Before(deadline), "task %s still %v, want %v", id, res["status"], statuses)
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *peer) pushed() []json.RawMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]json.RawMessage(nil), p.push...)
}

var _ = http.MethodPost
