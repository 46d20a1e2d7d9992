package client_test

import (
	"context"
	"encoding/json"
	"github.com/taskbridge/taskbridge/mcptask"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/examples/conformance/conftools"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// confServer is the conformance tools server (taskbridge) for a test.
type confServer struct {
	t      *testing.T
	srv    *mcp.Server
	router *taskrouter.Router

	mu  sync.Mutex // parallel subtests share the server
	url string
}

func newConfServer(t *testing.T, mutate func(*taskrouter.Options)) *confServer {
	t.Helper()
	opts := taskrouter.Options{PollInterval: 20 * time.Millisecond}
	if mutate != nil {
		mutate(&opts)
	}
	srv, router, err := conftools.NewServer(memory.New(nil), &opts)
	require.NoError(t, err)
	require.NoError(t, router.Start(context.Background()))
	t.Cleanup(func() { _ = router.Close() })
	return &confServer{t: t, srv: srv, router: router}
}

// memory returns a client transport connected in-process (shimmed, so core
// task requests and status pushes work).
func (s *confServer) memory() mcp.Transport {
	s.t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.srv.Connect(context.Background(), s.router.Transport(st), nil)
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = ss.Close() })
	return ct
}

// endpoint serves the router's HTTP handler on 127.0.0.1.
func (s *confServer) endpoint() string {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.url == "" {
		s.url = serveHTTP(s.t, s.router.HTTPHandler(nil))
	}
	return s.url
}

func serveHTTP(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := httptest.NewUnstartedServer(h)
	hs.Listener = ln
	hs.Start()
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// builtServer is a server made with the builder that a test dials in
// each mode (in-process, or over HTTP served once for the owning test).
type builtServer struct {
	t   *testing.T // the test that owns the server
	srv *builder.Server
	url string
}

// build builds the server, closed when the owning test ends.
func (b *builtServer) build(bld *builder.Builder) {
	b.t.Helper()
	srv, err := bld.Build(context.Background())
	require.NoError(b.t, err)
	b.t.Cleanup(func() { _ = srv.Close() })
	b.srv = srv
}

func (b *builtServer) dial(t *testing.T, m mode, opts *client.Options) *client.Client {
	t.Helper()
	var tr mcp.Transport
	if m.http {
		if b.url == "" {
			b.url = serveHTTP(b.t, b.srv.HTTPHandler(nil))
		}
		tr = client.HTTPTransport(b.url, nil)
	} else {
		var err error
		tr, err = b.srv.Connect(context.Background())
		require.NoError(t, err)
	}
	o := client.Options{}
	if opts != nil {
		o = *opts
	}
	o.Dialect = m.dialect
	return dial(t, tr, &o)
}

// mode is a transport and a dialect to run a test in.
type mode struct {
	http    bool
	dialect mcptask.Dialect
}

func (m mode) String() string {
	tr := "memory"
	if m.http {
		tr = "http"
	}
	return tr + "-" + m.dialect.String()
}

var allModes = []mode{{false, mcptask.Core}, {false, mcptask.Extension}, {true, mcptask.Core}, {true, mcptask.Extension}}

func (s *confServer) dial(m mode, opts *client.Options) *client.Client {
	s.t.Helper()
	var tr mcp.Transport
	if m.http {
		tr = client.HTTPTransport(s.endpoint(), nil)
	} else {
		tr = s.memory()
	}
	o := client.Options{}
	if opts != nil {
		o = *opts
	}
	o.Dialect = m.dialect
	return dial(s.t, tr, &o)
}

func dial(t *testing.T, tr mcp.Transport, opts *client.Options) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, tr, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// run collects a CallTool sequence.
type run struct {
	events []client.Event
	err    error
}

func collect(ctx context.Context, c *client.Client, name string, args any, opts *client.CallOptions) run {
	var r run
	for ev, err := range c.CallTool(ctx, name, args, opts) {
		if err != nil {
			r.err = err
			break
		}
		r.events = append(r.events, ev)
	}
	return r
}

func (r run) kinds() []client.EventKind {
	var out []client.EventKind
	for _, ev := range r.events {
		out = append(out, ev.Kind)
	}
	return out
}

func (r run) statuses() []mcptask.Status {
	var out []mcptask.Status
	for _, ev := range r.events {
		if ev.Kind == client.EventStatus {
			out = append(out, ev.Task.Status)
		}
	}
	return out
}

func (r run) result(t *testing.T) *mcp.CallToolResult {
	t.Helper()
	require.NoError(t, r.err)
	require.NotEmpty(t, r.events)
	last := r.events[len(r.events)-1]
	require.Equal(t, client.EventResult, last.Kind, "events: %v", r.kinds())
	return last.Result
}

func (r run) taskID() string {
	for _, ev := range r.events {
		if ev.Kind == client.EventCreated {
			return ev.Task.ID
		}
	}
	return ""
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// elicitAnswers is an InputHandler that accepts every elicitation with
// values for the properties it knows.
func elicitAnswers(values map[string]any) client.InputHandler {
	return func(ctx context.Context, taskID string, req client.InputRequest) (json.RawMessage, error) {
		p, err := req.Elicitation()
		if err != nil {
			return nil, err
		}
		content := map[string]any{}
		schema, _ := p.RequestedSchema.(map[string]any)
		props, _ := schema["properties"].(map[string]any)
		for k := range props {
			if v, ok := values[k]; ok {
				content[k] = v
			}
		}
		return json.Marshal(&mcp.ElicitResult{Action: "accept", Content: content})
	}
}

// countingTransport counts the requests a client sends, by method.
type countingTransport struct {
	mcp.Transport
	mu     sync.Mutex
	counts map[string]int
}

func counting(t mcp.Transport) *countingTransport {
	return &countingTransport{Transport: t, counts: map[string]int{}}
}

func (c *countingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := c.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Connection: conn, ct: c}, nil
}

func (c *countingTransport) count(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[method]
}

type countingConn struct {
	mcp.Connection
	ct *countingTransport
}

func (c *countingConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		c.ct.mu.Lock()
		c.ct.counts[req.Method]++
		c.ct.mu.Unlock()
	}
	return c.Connection.Write(ctx, msg)
}
