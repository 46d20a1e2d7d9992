package taskrouter

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// HTTPOptions configure Router.HTTPHandler.
type HTTPOptions struct {
	// Streamable are passed to both underlying SDK handlers (Stateless is
	// set by the router per protocol version).
	Streamable mcp.StreamableHTTPOptions
	// MaxBodyBytes bounds a request body; zero means 8 MiB.
	MaxBodyBytes int64
	// DisableFastPath sends the task methods through the SDK's handlers
	// like every other request. By default the handler answers them
	// itself (identically, at a fraction of the cost; see the package
	// documentation), unless receiving middleware was added to the server
	// after Install, which would then not see them.
	DisableFastPath bool
}

// HTTPHandler serves the installed server over Streamable HTTP in both
// dialects. Requests at protocol 2026-07-28 and later (by the
// Mcp-Protocol-Version header or the request's _meta) go to a stateless SDK
// handler, as the SDK requires; older ones go to a stateful handler with
// sessions, which is what core-dialect clients (the TypeScript SDK 1.x)
// expect.
//
// Before the SDK sees a POST body, the handler refuses a body that is not
// exactly one JSON value (-32700, HTTP 400), refuses an extension-dialect
// tasks/* request whose Mcp-Name headers do not all name its task (-32020,
// HTTP 400, like the SDK's own header checks), moves a core-dialect
// params.task where the router sees it, drops private _meta keys a client
// sent, and records the client's IP address for the per-source quota. It
// serves an extension-dialect subscriptions/listen that asks for task
// notifications itself (see listen.go).
func (r *Router) HTTPHandler(opts *HTTPOptions) http.Handler {
	var o HTTPOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 8 << 20
	}
	get := func(*http.Request) *mcp.Server { return r.mustServer() }
	statefulOpts, statelessOpts := o.Streamable, o.Streamable
	statefulOpts.Stateless, statelessOpts.Stateless = false, true
	return &httpShim{
		r:         r,
		id:        r.fast.handlerID(),
		opts:      statefulOpts,
		noFast:    o.DisableFastPath,
		stateful:  mcp.NewStreamableHTTPHandler(get, &statefulOpts),
		stateless: mcp.NewStreamableHTTPHandler(get, &statelessOpts),
		maxBody:   o.MaxBodyBytes,
	}
}

type httpShim struct {
	r                   *Router
	id                  string                    // names this handler's sessions (handlerHeader)
	opts                mcp.StreamableHTTPOptions // as the SDK's handlers have them (Stateless aside)
	noFast              bool
	stateful, stateless http.Handler
	maxBody             int64
}

func (h *httpShim) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	req.Header.Del(remoteHeader)
	if host, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
		req.Header.Set(remoteHeader, host)
	}
	req.Header.Del(touchedHeader)
	req.Header.Set(handlerHeader, h.id)
	newProtocol := req.Header.Get("Mcp-Protocol-Version") >= mcptask.ExtensionVersion
	if req.Method == http.MethodPost && req.Body != nil {
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, h.maxBody))
		if err != nil {
			http.Error(w, "request body too large or unreadable: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		_ = req.Body.Close()
		if !json.Valid(body) {
			writeRPCError(w, http.StatusBadRequest, jsonrpc.ID{}, mcptask.Errorf(mcptask.CodeParseError,
				"parse error: the request body must be exactly one JSON value (a message or a batch)"))
			return
		}
		if bytes.Contains(body, listenMethod) {
			if lr, ok := listenFor(body); ok && (newProtocol || bytes.Contains(body, protocolKey)) {
				h.r.serveListen(w, req, lr)
				return
			}
		}
		if h.serveFast(w, req, body, newProtocol) {
			return
		}
		rb := rewriteBody(body, newProtocol, len(req.Header.Values("Mcp-Name")) > 0)
		newProtocol = newProtocol || rb.newProtocol
		if newProtocol && rb.taskMethod != "" && rb.taskMethod != mcptask.MethodTasksList {
			if err := nameHeaderError(req.Header, rb.taskID); err != nil {
				writeRPCError(w, http.StatusBadRequest, rb.id, err)
				return
			}
		}
		req.Body = io.NopCloser(bytes.NewReader(rb.body))
		req.ContentLength = int64(len(rb.body))
		if !newProtocol {
			defer h.trackSDKCall(req, rb.body)()
		}
	}
	if newProtocol {
		h.stateless.ServeHTTP(w, req)
		return
	}
	if req.Method == http.MethodDelete {
		h.serveDelete(w, req, h.stateful)
		return
	}
	h.stateful.ServeHTTP(w, req)
}

// writeRPCError answers with a JSON-RPC error response, the way the SDK's
// handler answers its own header and protocol errors.
func writeRPCError(w http.ResponseWriter, status int, id jsonrpc.ID, err error) {
	je, ok := err.(*jsonrpc.Error)
	if !ok {
		je = mcptask.InternalError("%v", err)
	}
	body, merr := json.Marshal(struct {
		JSONRPC string         `json:"jsonrpc"`
		ID      any            `json:"id"`
		Error   *jsonrpc.Error `json:"error"`
	}{"2.0", id.Raw(), je})
	if merr != nil {
		http.Error(w, je.Message, status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// rewrittenBody is a POST body after rewriteBody.
type rewrittenBody struct {
	body []byte
	// newProtocol: a message carries a per-request protocol version of
	// 2026-07-28 or later.
	newProtocol bool
	// For a body holding a single tasks/* request: its method, id and
	// params.taskId.
	taskMethod string
	taskID     string
	id         jsonrpc.ID
}

var listenMethod = []byte(`"` + mcptask.MethodSubscriptionsListen + `"`)

// protocolKey is how a per-request protocol version appears in a body.
var protocolKey = []byte(`"` + mcptask.MetaProtocolVersion + `"`)

// rewriteBody applies rewriteParams to the messages of a body (one message
// or a batch), reports whether any message carries the per-request protocol
// version of 2026-07-28 or later, and names the task of a lone tasks/*
// request. body is valid JSON. knownNew says the headers already name a
// 2026-07-28 version, and named says an Mcp-Name header is present; a body
// that needs none of this is passed through without being decoded (the
// common case).
func rewriteBody(body []byte, knownNew, named bool) rewrittenBody {
	trimmed := bytes.TrimSpace(body)
	out := rewrittenBody{body: body}
	if len(trimmed) == 0 {
		return out
	}
	if !mayNeedRewrite(trimmed) && (knownNew || !bytes.Contains(trimmed, protocolKey)) && !named {
		return out
	}
	if trimmed[0] == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(trimmed, &batch); err != nil {
			return out
		}
		changed := false
		out.newProtocol = knownNew
		for i, m := range batch {
			rm := rewriteMessage(m)
			batch[i] = rm.raw
			changed = changed || rm.changed
			out.newProtocol = out.newProtocol || rm.newProtocol
		}
		if changed {
			if b, err := json.Marshal(batch); err == nil {
				out.body = b
			}
		}
		return out
	}
	rm := rewriteMessage(trimmed)
	out.body, out.newProtocol = rm.raw, rm.newProtocol || knownNew
	out.taskMethod, out.taskID, out.id = rm.taskMethod, rm.taskID, rm.id
	return out
}

type rewrittenMessage struct {
	raw         json.RawMessage
	changed     bool
	newProtocol bool
	taskMethod  string
	taskID      string
	id          jsonrpc.ID
}

// rewriteMessage decodes one message once: it reports whether the message
// carries a 2026-07-28 per-request protocol version, names the task of a
// tasks/* request, and moves a tools/call's params.task into _meta and
// drops forged private _meta keys (re-encoding only when it changed
// something).
func rewriteMessage(raw json.RawMessage) rewrittenMessage {
	out := rewrittenMessage{raw: raw}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return out
	}
	params := m["params"]
	if bytes.Contains(params, protocolKey) {
		var p struct {
			Meta map[string]any `json:"_meta"`
		}
		if json.Unmarshal(params, &p) == nil {
			v, _ := p.Meta[mcptask.MetaProtocolVersion].(string)
			out.newProtocol = v >= mcptask.ExtensionVersion
		}
	}
	var method string
	_ = json.Unmarshal(m["method"], &method)
	if mcptask.IsTaskMethod(method) {
		var p struct {
			TaskID string `json:"taskId"`
		}
		_ = json.Unmarshal(params, &p)
		out.taskMethod, out.taskID = method, p.TaskID
		if idRaw, ok := m["id"]; ok {
			var id any
			if json.Unmarshal(idRaw, &id) == nil {
				out.id, _ = jsonrpc.MakeID(id)
			}
		}
	}
	if !mayNeedRewrite(params) {
		return out
	}
	np := rewriteParams(params, "", method == mcptask.MethodToolsCall)
	if bytes.Equal(np, params) {
		return out
	}
	m["params"] = np
	b, err := json.Marshal(m)
	if err != nil {
		return out
	}
	out.raw, out.changed = b, true
	return out
}
