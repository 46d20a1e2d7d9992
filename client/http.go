package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/taskbridge/taskbridge/mcptask"

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
	return &httpTransport{inner: &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &hc}, rt: rt}
}

type httpTransport struct {
	inner *mcp.StreamableClientTransport
	rt    *headerRoundTripper
}

// Connect implements mcp.Transport.
func (t *httpTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	return t.inner.Connect(ctx)
}

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
