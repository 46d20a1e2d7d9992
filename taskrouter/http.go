package taskrouter

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
)

// HTTPOptions configure Router.HTTPHandler.
type HTTPOptions struct {
	// Streamable are passed to both underlying SDK handlers (Stateless is
	// set by the router per protocol version).
	Streamable mcp.StreamableHTTPOptions
	// MaxBodyBytes bounds a request body; zero means 8 MiB.
	MaxBodyBytes int64
	// DisableFastPath sends the task methods and the tools/call of the
	// router's tools through the SDK's handlers like every other request.
	// By default the handler answers them itself (identically, at a
	// fraction of the cost, through the same receiving middleware; see
	// the package documentation).
	DisableFastPath bool
}

// newHTTPShim is Router.HTTPHandler: it serves the installed server over Streamable HTTP in both
// dialects. Requests at protocol 2026-07-28 and later (by the
// Mcp-Protocol-Version header or the request's _meta) go to a stateless SDK
// handler, as the SDK requires; older ones go to a stateful handler with
// sessions, which is what core-dialect clients (the TypeScript SDK 1.x)
// expect.
//
// Before the SDK sees a POST body, the handler refuses a body that is not
// exactly one JSON value (-32700, HTTP 400); a request id the SDK would
// echo altered (-32600, HTTP 400: a fraction, an exponent, beyond
// ±(2^53−1)); a core-dialect call without Mcp-Session-Id other than
// initialize (-32600, HTTP 400, where the SDK answered code 0); an
// extension-dialect tasks/* request whose Mcp-Name headers do not all
// name its task (-32020, HTTP 400, like the SDK's own header checks) or
// whose params name the task under two keys that differ only in case
// (-32602, HTTP 400: the header check and the SDK's decoder would read
// different keys). It moves a core-dialect params.task where the router
// sees it, drops private _meta keys a client sent, and records the
// client's IP address for the per-source quota. It serves an
// extension-dialect subscriptions/listen that asks for task notifications
// itself (see listen.go), and tasks/stream, as SSE, with a GET carrying a
// Last-Event-ID of such a stream resuming it (see streamwire.go). A
// DELETE of a session first answers the session's waiting tasks/result
// requests (see serveDelete).
func newHTTPShim(r *Router, opts *HTTPOptions) *httpShim {
	var o HTTPOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 8 << 20
	}
	get := func(*http.Request) *mcp.Server { return r.tools.mustServer() }
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
	waits               sessionWaits // tasks/result POSTs in flight, by session (serveDelete)
}

// sessionWaits counts the tasks/result POSTs in flight on each stateful
// session, so that a DELETE of the session waits for their answers
// (which it ends: see serveDelete) before the session closes.
type sessionWaits struct {
	mu sync.Mutex
	m  map[string]*postsInFlight
}

type postsInFlight struct {
	n    int
	none chan struct{} // closed when n is back to 0
}

// begin counts a POST of session sid; the function ends it.
func (s *sessionWaits) begin(sid string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*postsInFlight{}
	}
	p := s.m[sid]
	if p == nil {
		p = &postsInFlight{none: make(chan struct{})}
		s.m[sid] = p
	}
	p.n++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if p.n--; p.n == 0 {
			close(p.none)
			delete(s.m, sid)
		}
	}
}

// wait waits until session sid has no POST counted, or for d.
func (s *sessionWaits) wait(sid string, d time.Duration) {
	s.mu.Lock()
	p := s.m[sid]
	s.mu.Unlock()
	if p == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.none:
	case <-t.C:
	}
}

func (h *httpShim) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	req.Header.Del(remoteHeader)
	if host, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
		req.Header.Set(remoteHeader, host)
	}
	req.Header.Del(touchedHeader)
	req.Header.Set(handlerHeader, h.id)
	// The dialect the headers name; a body may say Extension instead (a
	// per-request protocol version in its _meta).
	d := mcptask.DialectFor(req.Header.Get("Mcp-Protocol-Version"))
	if h.resumeStreamHTTP(w, req) { // a GET resuming a tasks/stream (streamwire.go)
		return
	}
	var initialize *receiverCaps // a core initialize's receiver capabilities
	if req.Method == http.MethodPost && req.Body != nil {
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, h.maxBody))
		if err != nil {
			http.Error(w, "request body too large or unreadable: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		_ = req.Body.Close()
		if !json.Valid(body) {
			wire.WriteRPCError(w, http.StatusBadRequest, jsonrpc.ID{}, mcptask.Errorf(mcptask.CodeParseError,
				"parse error: the request body must be exactly one JSON value (a message or a batch)"))
			return
		}
		if h.r.peers.takeResponse(body) || isTaskStatusNote(body) {
			// A client's answer to a request a Peer sent, or the status
			// of a task the client runs for one (peer.go), which the
			// Peer polls for: the SDK knows neither.
			w.WriteHeader(http.StatusAccepted)
			return
		}
		if id, bad := wire.UnsafeIDs(body); bad {
			// go-sdk would echo it altered (2.5 as 2, 2^53+1 as 2^53).
			wire.WriteErrorLine(w, http.StatusBadRequest, id, wire.BadIDError(id))
			return
		}
		if sid := req.Header.Get("Mcp-Session-Id"); sid != "" && bytes.Contains(body, []byte(mcptask.MethodTasksResult)) {
			if _, method, _ := wire.CallOf(body); method == mcptask.MethodTasksResult {
				defer h.waits.begin(sid)()
			}
		}
		if wire.MayBeListen(body) {
			if lr, ok := wire.ListenFor(body); ok && (d.NegotiatesPerRequest() || wire.HasProtocolKey(body)) {
				h.r.streaming.serveListen(w, req, lr)
				return
			}
		}
		if sr, ok, perr := streamRequestIn(body); ok {
			h.serveStreamHTTP(w, req, sr, perr, d) // streamwire.go
			return
		}
		if h.serveFast(w, req, body, d) {
			return
		}
		rb := wire.RewriteBody(body, d, len(req.Header.Values("Mcp-Name")) > 0)
		d = rb.Dialect
		if d.NegotiatesPerRequest() && rb.TaskMethod != "" && rb.TaskMethod != mcptask.MethodTasksList {
			if rb.TaskIDTwice && len(req.Header.Values("Mcp-Name")) > 0 {
				wire.WriteRPCError(w, http.StatusBadRequest, rb.ID, mcptask.InvalidParams(
					"params name the task more than once (taskId under two keys that differ only in case, or repeated): the Mcp-Name header cannot be checked against it; send taskId once"))
				return
			}
			if err := nameHeaderError(req.Header, rb.TaskID); err != nil {
				wire.WriteRPCError(w, http.StatusBadRequest, rb.ID, err)
				return
			}
		}
		if !d.NegotiatesPerRequest() && req.Header.Get("Mcp-Session-Id") == "" {
			if id, method, call := wire.CallOf(body); call && method != mcptask.MethodInitialize {
				// go-sdk would make a session of it and answer code 0.
				wire.WriteErrorLine(w, http.StatusBadRequest, id, wire.NoSessionError(method))
				return
			}
		}
		if id, err := badInitialize(body); err != nil {
			// go-sdk would answer its decoding error with code 0.
			wire.WriteErrorLine(w, http.StatusBadRequest, id, err)
			return
		}
		initialize = initializeCaps(body)
		req.Body = io.NopCloser(bytes.NewReader(rb.Body))
		req.ContentLength = int64(len(rb.Body))
		if !d.NegotiatesPerRequest() {
			defer h.trackSDKCall(req, rb.Body)()
		}
	}
	// A request that negotiates per request has no session: the SDK
	// serves it statelessly.
	if d.NegotiatesPerRequest() {
		h.stateless.ServeHTTP(w, req)
		return
	}
	switch sid := req.Header.Get("Mcp-Session-Id"); {
	case req.Method == http.MethodDelete:
		h.serveDelete(w, req, h.stateful)
	case req.Method == http.MethodGet && sid != "":
		// The session's standalone stream, which Peers share (peer.go).
		s := &sseStream{ResponseWriter: w, ps: &h.r.peers, session: sid}
		defer s.close()
		h.stateful.ServeHTTP(s, req)
	case req.Method == http.MethodPost && initialize != nil:
		h.stateful.ServeHTTP(w, req)
		h.r.peers.noteReceiver(w.Header().Get("Mcp-Session-Id"), *initialize)
	default:
		h.stateful.ServeHTTP(w, req)
	}
}

// badInitialize returns the -32602 refusal of a POST body that is an
// initialize request whose params go-sdk cannot decode (not an object, a
// protocolVersion that is no string, capabilities that are no object),
// with the request's id; nil for any other body.
func badInitialize(body []byte) (json.RawMessage, *jsonrpc.Error) {
	if !bytes.Contains(body, []byte(`"`+mcptask.MethodInitialize+`"`)) {
		return nil, nil
	}
	id, method, call := wire.CallOf(body)
	if !call || method != mcptask.MethodInitialize {
		return nil, nil
	}
	var m struct {
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(body, &m) != nil || len(m.Params) == 0 {
		return nil, nil // the SDK's own refusal has a code
	}
	var p mcp.InitializeParams
	if err := json.Unmarshal(m.Params, &p); err != nil {
		return id, mcptask.InvalidParams("invalid params of initialize: %v (want an object with protocolVersion, a string; capabilities and clientInfo, objects)", err)
	}
	return nil, nil
}

// initializeCaps returns the receiver capabilities of a POST body that is
// a core initialize request, or nil.
func initializeCaps(body []byte) *receiverCaps {
	if !bytes.Contains(body, []byte(`"`+mcptask.MethodInitialize+`"`)) {
		return nil
	}
	var m struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(body, &m) != nil || m.Method != mcptask.MethodInitialize {
		return nil
	}
	rc := readReceiverCaps(m.Params)
	return &rc
}
