package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPTransport returns a Streamable HTTP transport for Dial: the go-sdk's
// mcp.StreamableClientTransport (which keeps the session id), with an
// http.RoundTripper that adds the headers the go-sdk does not set for task
// requests:
//
//   - Mcp-Name: <taskId> (and Mcp-Method, if missing) on 2026-07-28
//     tasks/* requests, which the tasks extension requires so that a
//     server (or a load balancer in front of replicas) can route and check
//     them;
//   - Mcp-Protocol-Version on every request of a 2025-11-25 session, which
//     the go-sdk transport only sets for sessions its own client
//     negotiated.
//
// The headers are derived by peeking at each request's JSON body; headers
// already set are left alone. httpClient nil means http.DefaultClient; it
// is copied, not modified. Use one transport per Client.
func HTTPTransport(endpoint string, httpClient *http.Client) mcp.Transport {
	base := httpClient
	if base == nil {
		base = http.DefaultClient
	}
	hc := *base
	rt := &headerRoundTripper{next: base.Transport}
	if rt.next == nil {
		rt.next = http.DefaultTransport
	}
	hc.Transport = rt
	return &httpTransport{inner: &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &hc}, rt: rt, endpoint: endpoint, hc: &hc}
}

type httpTransport struct {
	inner    *mcp.StreamableClientTransport
	rt       *headerRoundTripper
	endpoint string
	hc       *http.Client
}

// Connect implements mcp.Transport.
func (t *httpTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc := &streamConn{Connection: c, t: t, incoming: make(chan jsonrpc.Message, 16), read: make(chan readResult, 1), stop: make(chan struct{})}
	sc.ctx, sc.cancel = context.WithCancel(context.Background())
	return sc, nil
}

// streamConn is the go-sdk's client connection plus the standalone GET
// stream of a 2025-11-25 session, which the go-sdk opens for its own
// client only: once the client has sent notifications/initialized, a GET
// carries what the server sends outside any request (a workflow step's
// sampling or elicitation request, tasks/* on a Receiver, status
// notifications). It is reopened when it ends, until the connection
// closes; a server that offers none (405) is not asked again.
type streamConn struct {
	mcp.Connection
	t        *httpTransport
	once     sync.Once // the stream is started once
	pumpOnce sync.Once // so is the reader of the go-sdk connection
	incoming chan jsonrpc.Message
	read     chan readResult
	ctx      context.Context
	cancel   context.CancelFunc
	stop     chan struct{}
	stopOnce sync.Once
}

type readResult struct {
	msg jsonrpc.Message
	err error
}

// Write sends msg, and starts the standalone stream after the client's
// notifications/initialized.
func (c *streamConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if req, ok := msg.(*jsonrpc.Request); ok && err == nil && req.Method == mcptask.MethodInitialized {
		c.once.Do(func() { go c.listen() })
	}
	return err
}

// Read returns the next message of the go-sdk connection or of the
// stream.
func (c *streamConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	c.pumpOnce.Do(func() { go c.pump() })
	select {
	case r := <-c.read:
		return r.msg, r.err
	case m := <-c.incoming:
		return m, nil
	case <-c.stop:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pump reads the go-sdk connection until it fails or closes.
func (c *streamConn) pump() {
	for {
		msg, err := c.Connection.Read(c.ctx)
		select {
		case c.read <- readResult{msg, err}:
		case <-c.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// Close closes the stream and the connection.
func (c *streamConn) Close() error {
	c.stopOnce.Do(func() {
		close(c.stop)
		c.cancel()
	})
	return c.Connection.Close()
}

// listen keeps the standalone stream open until the connection closes.
func (c *streamConn) listen() {
	backoff := 100 * time.Millisecond
	for {
		again := c.stream()
		if !again {
			return
		}
		select {
		case <-c.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// stream reads one standalone GET stream to its end; again is false when
// it must not be reopened (the connection closed, or the server offers
// no stream).
func (c *streamConn) stream() (again bool) {
	sid := ""
	if s, ok := c.Connection.(interface{ SessionID() string }); ok {
		sid = s.SessionID()
	}
	if sid == "" {
		return false // a server without sessions has no standalone stream
	}
	req, err := http.NewRequestWithContext(c.ctx, http.MethodGet, c.t.endpoint, nil)
	if err != nil {
		return false
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := c.t.hc.Do(req)
	if err != nil {
		return c.ctx.Err() == nil
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusMethodNotAllowed, resp.StatusCode == http.StatusNotFound:
		return false // no standalone stream here, or the session is gone
	case resp.StatusCode != http.StatusOK:
		return c.ctx.Err() == nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxStreamEvent)
	var data bytes.Buffer
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() > 0 && (event == "" || event == "message") {
				if msg, err := jsonrpc.DecodeMessage(data.Bytes()); err == nil {
					select {
					case c.incoming <- msg:
					case <-c.stop:
						return false
					}
				}
			}
			data.Reset()
			event = ""
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		}
	}
	return c.ctx.Err() == nil
}

// maxStreamEvent bounds one event of the standalone stream.
const maxStreamEvent = 16 << 20

// setProtocolVersion records the version a core-dialect initialize
// negotiated, for the Mcp-Protocol-Version header.
func (t *httpTransport) setProtocolVersion(v string) { t.rt.version.Store(v) }

type headerRoundTripper struct {
	next    http.RoundTripper
	version atomic.Value // string: negotiated protocol version
}

// maxPeek bounds the bodies the round tripper decodes; larger ones (big
// tool arguments) are passed through untouched: they are never tasks/*.
const maxPeek = 1 << 20

func (h *headerRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	if v, _ := h.version.Load().(string); v != "" && out.Header.Get("Mcp-Protocol-Version") == "" {
		out.Header.Set("Mcp-Protocol-Version", v)
	}
	if req.Method != http.MethodPost || req.Body == nil || req.Body == http.NoBody || req.ContentLength > maxPeek {
		return h.next.RoundTrip(out)
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxPeek+1))
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	out.ContentLength = int64(len(body))
	if len(body) > maxPeek {
		return h.next.RoundTrip(out)
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			TaskID json.RawMessage            `json:"taskId"`
			Meta   map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil || !strings.HasPrefix(msg.Method, "tasks/") {
		return h.next.RoundTrip(out)
	}
	version := out.Header.Get("Mcp-Protocol-Version")
	var metaVersion string
	if raw, ok := msg.Params.Meta[mcptask.MetaProtocolVersion]; ok {
		_ = json.Unmarshal(raw, &metaVersion)
	}
	if !mcptask.DialectFor(version).NegotiatesPerRequest() && !mcptask.DialectFor(metaVersion).NegotiatesPerRequest() {
		return h.next.RoundTrip(out) // the Mcp-* headers belong to the 2026-07-28 protocol
	}
	var id string
	if json.Unmarshal(msg.Params.TaskID, &id) == nil && id != "" {
		if out.Header.Get("Mcp-Method") == "" {
			out.Header.Set("Mcp-Method", msg.Method)
		}
		if out.Header.Get("Mcp-Name") == "" {
			out.Header.Set("Mcp-Name", headerValue(id))
		}
	}
	return h.next.RoundTrip(out)
}

// headerValue encodes a value that is not printable ASCII the way MCP
// standard headers do ("=?base64?...?=").
func headerValue(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(s)) + "?="
		}
	}
	if strings.TrimSpace(s) != s {
		return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(s)) + "?="
	}
	return s
}
