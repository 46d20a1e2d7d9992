package integration

// Shared helpers of the reliability tests (reliability_*_test.go): a raw
// JSON-RPC-over-Streamable-HTTP client that can speak either task dialect
// or send arbitrary bytes, an in-process server fixture on a bbolt store,
// and store snapshots. Everything listens on 127.0.0.1 only.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

const (
	relCoreVersion = "2025-11-25"
	relExtVersion  = "2026-07-28"
)

// relDialect is the wire dialect a relClient speaks.
type relDialect int

const (
	relCore          relDialect = iota // 2025-11-25, stateful session
	relExt                             // 2026-07-28, declares the tasks extension
	relExtUndeclared                   // 2026-07-28 without the extension
)

func (d relDialect) String() string {
	switch d {
	case relExt:
		return "ext"
	case relExtUndeclared:
		return "ext-undeclared"
	}
	return "core"
}

// relRPCError is a JSON-RPC error object as it came over the wire.
type relRPCError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *relRPCError) Error() string { return fmt.Sprintf("jsonrpc %d: %s", e.Code, e.Message) }

// relReply is what came back for one HTTP request.
type relReply struct {
	Status      int
	Header      http.Header
	ContentType string
	// Body is the raw body for non-JSON-RPC answers (plain-text HTTP
	// errors), or the raw JSON of the JSON-RPC response.
	Body []byte
	// Result and Err are the JSON-RPC response, when there was one. For a
	// batch, Batch holds every response.
	Result json.RawMessage
	Err    *relRPCError
	Batch  []relWireResponse
}

// IsRPC reports whether the answer carried a JSON-RPC response.
func (r *relReply) IsRPC() bool { return r.Result != nil || r.Err != nil || r.Batch != nil }

func (r *relReply) String() string {
	switch {
	case r.Err != nil:
		return fmt.Sprintf("HTTP %d, %v", r.Status, r.Err)
	case r.Result != nil:
		return fmt.Sprintf("HTTP %d, result %.300s", r.Status, r.Result)
	case r.Batch != nil:
		b, _ := json.Marshal(r.Batch)
		return fmt.Sprintf("HTTP %d, batch %.500s", r.Status, b)
	}
	return fmt.Sprintf("HTTP %d, %s: %.300q", r.Status, r.ContentType, r.Body)
}

// Map decodes the result as a JSON object.
func (r *relReply) Map() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(r.Result, &m)
	return m
}

type relWireResponse struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *relRPCError    `json:"error,omitempty"`
}

// newRelHTTPClient returns an HTTP client that keeps enough idle
// connections for n concurrent callers (so load tests do not exhaust
// ephemeral ports).
func newRelHTTPClient(n int) *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        n + 16,
		MaxIdleConnsPerHost: n + 16,
		IdleConnTimeout:     30 * time.Second,
	}
	return &http.Client{Transport: tr}
}

// relClient is a raw JSON-RPC client over Streamable HTTP.
type relClient struct {
	url     string
	hc      *http.Client
	dialect relDialect
	token   string // bearer token, if any
	session string // core: Mcp-Session-Id after initialize
	ids     atomic.Int64
}

func newRelClient(url string, hc *http.Client, d relDialect, token string) *relClient {
	if hc == nil {
		hc = newRelHTTPClient(4)
	}
	return &relClient{url: url, hc: hc, dialect: d, token: token}
}

// initialize opens a core-dialect session (initialize, then
// notifications/initialized). The session id identifies the owner
// "session:<id>" when the request is not authenticated.
func (c *relClient) initialize(ctx context.Context) error {
	c.session = ""
	rep, err := c.call(ctx, "initialize", map[string]any{
		"protocolVersion": relCoreVersion,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "reliability", "version": "1"},
	})
	if err != nil {
		return err
	}
	if rep.Err != nil || rep.Result == nil {
		return fmt.Errorf("initialize: %s", rep)
	}
	sid := rep.Header.Get("Mcp-Session-Id")
	if sid == "" {
		return fmt.Errorf("initialize: no Mcp-Session-Id header")
	}
	c.session = sid
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized", "params": map[string]any{}})
	rep, err = c.post(ctx, body, c.headers("notifications/initialized", nil))
	if err != nil {
		return err
	}
	if rep.Status != http.StatusAccepted {
		return fmt.Errorf("notifications/initialized: %s", rep)
	}
	return nil
}

// owner is the owner string the default owner policy gives this client's
// requests.
func (c *relClient) owner(user string) string {
	switch {
	case user != "":
		return "user:" + user
	case c.dialect == relCore:
		return "session:" + c.session
	}
	return taskrouter.LocalOwner
}

// withMeta returns params with the per-request _meta of the 2026-07-28
// dialects added (protocol version, client capabilities, client info).
func (c *relClient) withMeta(params map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range params {
		out[k] = v
	}
	if c.dialect == relCore {
		return out
	}
	caps := map[string]any{}
	if c.dialect == relExt {
		caps["extensions"] = map[string]any{mcptask.ExtensionID: map[string]any{}}
	}
	meta := map[string]any{}
	if m, ok := out["_meta"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = v
		}
	}
	meta["io.modelcontextprotocol/protocolVersion"] = relExtVersion
	meta["io.modelcontextprotocol/clientCapabilities"] = caps
	meta["io.modelcontextprotocol/clientInfo"] = map[string]any{"name": "reliability", "version": "1"}
	out["_meta"] = meta
	return out
}

// headers are the HTTP headers of a request in the client's dialect.
// params (may be nil) supplies Mcp-Name in the extension dialect.
func (c *relClient) headers(method string, params map[string]any) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	if c.dialect == relCore {
		if c.session != "" {
			h.Set("Mcp-Session-Id", c.session)
			h.Set("Mcp-Protocol-Version", relCoreVersion)
		}
		return h
	}
	h.Set("Mcp-Protocol-Version", relExtVersion)
	h.Set("Mcp-Method", method)
	var name string
	switch method {
	case "tools/call", "prompts/get":
		name, _ = params["name"].(string)
	case "tasks/get", "tasks/cancel", "tasks/update":
		name, _ = params["taskId"].(string)
	}
	if name != "" && relHeaderSafe(name) {
		h.Set("Mcp-Name", name)
	}
	return h
}

// relHeaderSafe reports whether s can travel as an HTTP header value.
func relHeaderSafe(s string) bool {
	if len(s) > 4096 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// envelope encodes a JSON-RPC request. A nil params map sends no params
// member at all.
func (c *relClient) envelope(method string, params map[string]any) []byte {
	msg := map[string]any{"jsonrpc": "2.0", "id": c.ids.Add(1), "method": method}
	if params != nil {
		msg["params"] = c.withMeta(params)
	}
	b, err := json.Marshal(msg)
	if err != nil {
		panic(err)
	}
	return b
}

// call sends one request in the client's dialect. The error is for
// transport failures only; a JSON-RPC error is in the reply.
func (c *relClient) call(ctx context.Context, method string, params map[string]any) (*relReply, error) {
	return c.post(ctx, c.envelope(method, params), c.headers(method, params))
}

// post sends raw bytes with the given headers and decodes the answer
// (application/json, an SSE stream, or a plain-text HTTP error).
func (c *relClient) post(ctx context.Context, body []byte, h http.Header) (*relReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range h {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if host := h.Get("Host"); host != "" {
		req.Host = host
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return relDecode(resp, bytes.HasPrefix(bytes.TrimSpace(body), []byte("[")))
}

// relDecode reads an answer. For a batch request every response of the
// stream is collected into Batch; otherwise decoding stops at the first
// response.
func relDecode(resp *http.Response, batch bool) (*relReply, error) {
	rep := &relReply{Status: resp.StatusCode, Header: resp.Header}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	rep.ContentType = ct
	switch ct {
	case "text/event-stream":
		// Read events until the first JSON-RPC response (notifications and
		// requests may come first).
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
		var data []string
		flush := func() bool {
			if len(data) == 0 {
				return false
			}
			payload := []byte(strings.Join(data, "\n"))
			data = data[:0]
			if batch {
				var one relWireResponse
				if json.Unmarshal(payload, &one) == nil && one.Method == "" && (one.Result != nil || one.Error != nil) {
					rep.Batch = append(rep.Batch, one)
					return false
				}
			}
			return rep.absorb(payload)
		}
		for sc.Scan() {
			line := sc.Text()
			if line == "" {
				if flush() {
					return rep, nil
				}
				continue
			}
			if v, ok := strings.CutPrefix(line, "data:"); ok {
				data = append(data, strings.TrimPrefix(v, " "))
			}
		}
		if flush() || rep.Batch != nil {
			return rep, nil
		}
		if err := sc.Err(); err != nil {
			return rep, fmt.Errorf("reading event stream: %w", err)
		}
		if resp.StatusCode == http.StatusOK {
			return rep, fmt.Errorf("event stream ended without a response")
		}
		return rep, nil
	default:
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		if err != nil {
			return rep, err
		}
		rep.Body = b
		if ct == "application/json" && len(bytes.TrimSpace(b)) > 0 {
			rep.absorb(b)
		}
		return rep, nil
	}
}

// absorb records a JSON-RPC response (or batch) from payload, reporting
// whether it was one.
func (r *relReply) absorb(payload []byte) bool {
	t := bytes.TrimSpace(payload)
	if len(t) == 0 {
		return false
	}
	if t[0] == '[' {
		var batch []relWireResponse
		if json.Unmarshal(t, &batch) != nil {
			return false
		}
		r.Batch, r.Body = batch, append([]byte(nil), t...)
		return true
	}
	var m relWireResponse
	if json.Unmarshal(t, &m) != nil || m.Method != "" || (m.Result == nil && m.Error == nil) {
		return false
	}
	r.Result, r.Err, r.Body = m.Result, m.Error, append([]byte(nil), t...)
	return true
}

// ---- in-process server fixture ----

// relServer is an in-process taskbridge server on a bbolt file (or a
// PostgreSQL database), served over Streamable HTTP on 127.0.0.1.
type relServer struct {
	srv   *builder.Server
	st    store.Store
	url   string
	db    string
	hooks *relHooks
	// close stops serving and closes the server and its store, leaving
	// running tasks for the next start to resolve (as after a crash).
	close func()
}

type relServerOptions struct {
	// db is the bbolt file, or a postgres:// DSN; empty means a new bbolt
	// file in a temporary directory. limits apply to a bbolt file only.
	db     string
	cfg    taskrouter.Options
	limits store.Limits
	// wrap, when set, wraps the HTTP handler (e.g. bearer auth).
	wrap     func(http.Handler) http.Handler
	httpOpts *taskrouter.HTTPOptions
}

// relHooks lets tests observe tool handlers.
type relHooks struct {
	started chan string // label of every "work" handler that starts
}

type relWorkIn struct {
	Ms    int    `json:"ms,omitempty"`
	Label string `json:"label,omitempty"`
}

type relBigIn struct {
	Bytes int `json:"bytes"`
}

type relPrepIn struct {
	Topic string `json:"topic"`
}
type relPrepOut struct {
	Draft string `json:"draft"`
}
type relSignIn struct {
	Draft   string `json:"draft"`
	Verdict string `json:"verdict"`
}
type relSignOut struct {
	Signed string `json:"signed"`
}
type relFileIn struct {
	Signed string `json:"signed"`
}

// relFlow is the reliability fixture's workflow:
//
//	prep (server) -> sign (client) -> file (server)
const relFlow = "relflow"

func newRelServer(t *testing.T, o relServerOptions) *relServer {
	t.Helper()
	path := o.db
	if path == "" {
		path = filepath.Join(t.TempDir(), "tasks.db")
	}
	var st store.Store
	var err error
	if builder.IsPostgresDSN(path) {
		st, err = builder.OpenStore(context.Background(), path, nil)
	} else {
		st, err = bboltstore.Open(path, &bboltstore.Options{Options: store.Options{Limits: o.limits}})
	}
	require.NoError(t, err)
	hooks := &relHooks{started: make(chan string, 4096)}
	cfg := o.cfg
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	b := builder.New("reliability", "1").WithStore(st).WithoutEnv().WithRouterOptions(cfg)
	work := func(ctx context.Context, _ *mcp.CallToolRequest, in relWorkIn) (*mcp.CallToolResult, any, error) {
		select {
		case hooks.started <- in.Label:
		default:
		}
		if in.Ms > 0 {
			tm := time.NewTimer(time.Duration(in.Ms) * time.Millisecond)
			defer tm.Stop()
			select {
			case <-tm.C:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done " + in.Label}}}, nil, nil
	}
	builder.Tool(b, &mcp.Tool{Name: "work", Description: "sleeps ms, then answers"}, work,
		&taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional, Retryable: true})
	builder.Tool(b, &mcp.Tool{Name: "must_work", Description: "task-required work"}, work,
		&taskrouter.ToolOptions{TaskSupport: mcptask.TaskRequired})
	builder.Tool(b, &mcp.Tool{Name: "plain_work", Description: "never a task"}, work,
		&taskrouter.ToolOptions{TaskSupport: mcptask.TaskForbidden})
	builder.Tool(b, &mcp.Tool{Name: "rpcfail", Description: "fails with a JSON-RPC error carrying data"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return nil, nil, &jsonrpc.Error{Code: -32099, Message: "custom failure", Data: json.RawMessage(`{"why":"test"}`)}
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	builder.Tool(b, &mcp.Tool{Name: "big", Description: "returns a text of the given size"},
		func(ctx context.Context, _ *mcp.CallToolRequest, in relBigIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", in.Bytes)}}}, nil, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	builder.Tool(b, &mcp.Tool{Name: "prep"}, func(ctx context.Context, _ *mcp.CallToolRequest, in relPrepIn) (*mcp.CallToolResult, relPrepOut, error) {
		return nil, relPrepOut{Draft: "draft about " + in.Topic}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "sign"}, func(ctx context.Context, _ *mcp.CallToolRequest, in relSignIn) (*mcp.CallToolResult, relSignOut, error) {
		return nil, relSignOut{Signed: in.Draft + " / " + in.Verdict}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "file"}, func(ctx context.Context, _ *mcp.CallToolRequest, in relFileIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "filed: " + in.Signed}}}, nil, nil
	}, nil)
	b.TaskWorkflow(workflow.New(relFlow, "prepare, sign, file").
		Arg("topic", "what to work on", true).
		Step(
			workflow.Server("prep", "prep").Bind("topic", workflow.PromptArg("topic")),
			workflow.Client("sign", "sign").Bind("draft", workflow.StepOutput("prep", "draft")).
				Bind("verdict", workflow.FromClient("your verdict")),
			workflow.Server("file", "file").Bind("signed", workflow.StepOutput("sign", "signed")),
		))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var h http.Handler = srv.HTTPHandler(o.httpOpts)
	if o.wrap != nil {
		h = o.wrap(h)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	rs := &relServer{srv: srv, st: st, url: "http://" + ln.Addr().String() + "/mcp", db: path, hooks: hooks}
	rs.close = sync.OnceFunc(func() {
		_ = hs.Close()
		_ = srv.Close()
		_ = st.Close()
	})
	t.Cleanup(rs.close)
	return rs
}

// ---- store snapshots ----

// relSnapshot is every task in a store: id -> "owner status vN".
type relSnapshot map[string]string

// relSnap reads every task of every owner from st. Every task the engine
// creates has a ttl, so the expiry index (asked for everything expiring
// before the far future) plus the active index cover all of them.
func relSnap(t testing.TB, st store.Store) relSnapshot {
	t.Helper()
	ctx := context.Background()
	out := relSnapshot{}
	all, err := st.Expired(ctx, time.Now().Add(100*365*24*time.Hour), 1<<30)
	require.NoError(t, err)
	active, err := st.Active(ctx)
	require.NoError(t, err)
	for _, tk := range append(all, active...) {
		out[tk.ID] = fmt.Sprintf("%s %s v%d", tk.Owner, tk.Status, tk.Version)
	}
	return out
}

// diff describes how b differs from a.
func (a relSnapshot) diff(b relSnapshot) string {
	var d []string
	for id, v := range a {
		if w, ok := b[id]; !ok {
			d = append(d, fmt.Sprintf("- %s %s", id, v))
		} else if w != v {
			d = append(d, fmt.Sprintf("~ %s %s -> %s", id, v, w))
		}
	}
	for id, w := range b {
		if _, ok := a[id]; !ok {
			d = append(d, fmt.Sprintf("+ %s %s", id, w))
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}

// relWaitQuiet waits until no tool task in st is active (workflow tasks
// waiting for their client step may stay working).
func relWaitQuiet(t testing.TB, st store.Store, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		active, err := st.Active(context.Background())
		require.NoError(t, err)
		busy := 0
		for _, tk := range active {
			if tk.Labels[taskrouter.LabelKind] != taskrouter.KindWorkflow {
				busy++
			}
		}
		if busy == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d tool tasks still active after %v", busy, within)
		time.Sleep(5 * time.Millisecond)
	}
}

// relCtx is a context bounded by d, cancelled at the end of the test.
func relCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// must sends a request and fails the test unless it gets a JSON-RPC
// success; it returns the result as a map.
func (c *relClient) must(t testing.TB, ctx context.Context, method string, params map[string]any) map[string]any {
	t.Helper()
	rep, err := c.call(ctx, method, params)
	require.NoError(t, err, method)
	require.Nil(t, rep.Err, "%s: %s", method, rep)
	require.NotNil(t, rep.Result, "%s: %s", method, rep)
	return rep.Map()
}

// relTaskID extracts the task id of a create reply in either dialect.
func relTaskID(res map[string]any) string {
	if task, ok := res["task"].(map[string]any); ok {
		id, _ := task["taskId"].(string)
		return id
	}
	id, _ := res["taskId"].(string)
	return id
}

func relTerminal(status string) bool {
	return mcptask.Status(status).Terminal()
}
