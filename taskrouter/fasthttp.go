package taskrouter

// The fast path over Streamable HTTP (see fastpath.go). The router's HTTP
// handler answers a tasks/* POST itself when go-sdk's handler would accept
// it up to its dispatch, and answers it the way that handler would: the
// same status, headers and body, as JSON or as a one-event SSE stream as
// the handler's options say. The session rules of the core dialect hold
// because the router tracks the live stateful sessions of each of its
// handlers: a request naming an unknown or deleted Mcp-Session-Id, or one
// the session's user does not match, goes to the SDK, which refuses it as
// it always did.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// Private headers the HTTP shim sets (after deleting any value a client
// sent), read by the router's middleware through RequestExtra.Header.
const (
	// handlerHeader names the HTTPHandler a request came through, so that
	// a session is only ever served by the handler that created it.
	handlerHeader = "Taskbridge-Private-Handler"
	// touchedHeader names the task a fast-path tasks/result already
	// reported to the touch hook before handing the request to the SDK.
	touchedHeader = "Taskbridge-Private-Touched"
)

// httpSession is a live stateful Streamable HTTP session.
type httpSession struct {
	ss      *mcp.ServerSession
	handler string // the handler that created it
	userID  string // the user that created it, when authenticated (the SDK binds the session to it)

	mu      sync.Mutex
	closed  bool
	fast    map[jsonrpc.ID]context.CancelCauseFunc // fast-path requests in flight, by id
	sdk     map[jsonrpc.ID]int                     // calls in flight through the SDK, by id
	batches int                                    // batches in flight through the SDK
}

// errSessionClosed ends a fast-path request whose session closed: the
// SDK's response stream ends without an answer then.
var errSessionClosed = errors.New("taskrouter: session closed")

// trackSession records a stateful session the first time a request of it
// reaches the middleware: the request of the POST that created it.
func (f *fastState) trackSession(id string, ss *mcp.ServerSession, handler string, extra *mcp.RequestExtra) {
	if _, ok := f.sessions.Load(id); ok {
		return
	}
	s := &httpSession{ss: ss, handler: handler}
	if extra.TokenInfo != nil {
		s.userID = extra.TokenInfo.UserID
	}
	if _, loaded := f.sessions.LoadOrStore(id, s); loaded {
		return
	}
	go func() {
		_ = ss.Wait()
		f.dropSession(id, s)
	}()
}

// session returns the live session id, or nil.
func (f *fastState) session(id string) *httpSession {
	v, ok := f.sessions.Load(id)
	if !ok {
		return nil
	}
	return v.(*httpSession)
}

// dropSession forgets a closed session and ends its fast-path requests.
func (f *fastState) dropSession(id string, s *httpSession) {
	f.sessions.CompareAndDelete(id, s)
	s.mu.Lock()
	s.closed = true
	fast := s.fast
	s.fast = nil
	s.mu.Unlock()
	for _, cancel := range fast {
		cancel(errSessionClosed)
	}
}

type inflight int

const (
	inflightNone   inflight = iota
	inflightFast            // the id is in flight on the fast path
	inflightSDK             // the id (or a batch) is in flight through the SDK
	inflightClosed          // the session is closed
)

// beginFast registers a fast-path request, unless its id is in flight.
func (s *httpSession) beginFast(key jsonrpc.ID, cancel context.CancelCauseFunc) inflight {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return inflightClosed
	case s.fast[key] != nil:
		return inflightFast
	case s.sdk[key] > 0 || s.batches > 0:
		return inflightSDK
	}
	if s.fast == nil {
		s.fast = map[jsonrpc.ID]context.CancelCauseFunc{}
	}
	s.fast[key] = cancel
	return inflightNone
}

func (s *httpSession) endFast(key jsonrpc.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.fast, key)
}

// cancelFast cancels a fast-path request as notifications/cancelled
// cancels a request of the SDK's.
func (s *httpSession) cancelFast(key jsonrpc.ID) {
	s.mu.Lock()
	cancel := s.fast[key]
	s.mu.Unlock()
	if cancel != nil {
		cancel(context.Canceled)
	}
}

func (s *httpSession) hasFast() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.fast) > 0
}

// beginSDK records the calls of a POST the SDK serves; keys is nil for a
// batch.
func (s *httpSession) beginSDK(key jsonrpc.ID, batch bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if batch {
		s.batches++
		return
	}
	if s.sdk == nil {
		s.sdk = map[jsonrpc.ID]int{}
	}
	s.sdk[key]++
}

func (s *httpSession) endSDK(key jsonrpc.ID, batch bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if batch {
		s.batches--
		return
	}
	if s.sdk[key]--; s.sdk[key] <= 0 {
		delete(s.sdk, key)
	}
}

// hasUnclaimedInput reports whether the run has an input request no
// tasks/result stream is delivering yet.
func (ru *run) hasUnclaimedInput() bool {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	for _, in := range ru.inputs {
		if !in.inFlight {
			return true
		}
	}
	return false
}

// serveFast answers a POST body holding one tasks/* request, if the SDK
// would have dispatched it; it reports false, having written nothing, to
// leave the request to the SDK's path.
func (h *httpShim) serveFast(w http.ResponseWriter, req *http.Request, body []byte, headerNew bool) bool {
	if h.noFast || !mayBeFast(body) || !h.r.fastUsable() {
		return false
	}
	defer h.r.recoverFast("http")
	c, ok := parseFastBody(body)
	if !ok {
		return false
	}
	mv, ok := viewMeta(c.meta)
	if !ok || !h.sdkReads(req, len(body)) {
		return false
	}
	if headerNew || mv.version >= mcptask.ExtensionVersion {
		return h.serveStateless(w, req, c, mv)
	}
	return h.serveStateful(w, req, c, mv, body)
}

// sdkReads reports whether go-sdk's Streamable HTTP handler passes a POST
// of n body bytes on to its message handling: the checks common to its
// stateless and stateful handlers.
func (h *httpShim) sdkReads(req *http.Request, n int) bool {
	o := &h.opts
	if !o.DisableLocalhostProtection {
		if la, ok := req.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil {
			if isLoopback(la.String()) && !isLoopback(req.Host) {
				return false
			}
		}
	}
	if o.CrossOriginProtection != nil {
		return false
	}
	switch limit := o.MaxRequestBodyBytes; {
	case limit == 0 && int64(n) > mcp.DefaultMaxRequestBodyBytes, limit > 0 && int64(n) > limit:
		return false
	}
	if mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	if jsonOK, streamOK := streamableAccepts(req.Header.Values("Accept")); !jsonOK || !streamOK {
		return false
	}
	return len(req.Header.Values("Last-Event-ID")) == 0
}

// serveStateless is the fast path of a 2026-07-28 request, which the SDK
// serves on a throwaway session of its stateless handler.
func (h *httpShim) serveStateless(w http.ResponseWriter, req *http.Request, c fastCall, mv metaView) bool {
	hv := req.Header.Get("Mcp-Protocol-Version")
	switch {
	case !mv.newProtocol || hv != mv.version || !h.r.fast.accepted(hv):
		return false // the SDK refuses a missing or mismatched header, and unsupported versions
	case req.Header.Get("Mcp-Method") != c.method:
		return false // the SDK requires and checks Mcp-Method
	case c.method == mcptask.MethodToolsCall:
		if p := c.params.(*mcp.CallToolParamsRaw); req.Header.Get("Mcp-Name") != p.Name {
			return false // the SDK requires and checks Mcp-Name
		}
	case c.method != mcptask.MethodTasksList && nameHeaderError(req.Header, c.taskID) != nil:
		return false // the shim answers a mismatched Mcp-Name
	}
	ctx := context.WithoutCancel(req.Context())
	// A session like the throwaway one the SDK would make (fastsession.go).
	ss, err := h.r.standInSession(ctx, mv.initializeParams())
	if err != nil || h.r.serverInfo(ctx) == nil {
		return false
	}
	extra := &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(req.Context()), Header: req.Header}
	pc, ok := h.r.prepareCall(c, mv, ss, extra, "", true)
	if !ok {
		return false
	}
	if resp, err := h.r.serveCall(ctx, pc); err == nil {
		h.writeReply(w, resp, true)
	}
	return true
}

// serveStateful is the fast path of a core-dialect request on a stateful
// session.
func (h *httpShim) serveStateful(w http.ResponseWriter, req *http.Request, c fastCall, mv metaView, body []byte) bool {
	o := &h.opts
	if o.SessionTimeout > 0 || o.EventStore != nil {
		// Requests keep the SDK's idle timer paused, and events go to its
		// store: neither can be done from here.
		return false
	}
	if hv := req.Header.Get("Mcp-Protocol-Version"); hv != "" && !h.r.fast.accepted(hv) {
		return false
	}
	if mv.version != "" {
		return false // a stateful session refuses per-request protocol versions
	}
	s := h.r.fast.session(req.Header.Get("Mcp-Session-Id"))
	if s == nil || s.handler != h.id || s.ss.InitializeParams() == nil {
		return false
	}
	if s.userID != "" {
		if ti := auth.TokenInfoFromContext(req.Context()); ti == nil || ti.UserID != s.userID {
			return false
		}
	}
	extra := &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(req.Context()), Header: req.Header}
	pc, ok := h.r.prepareCall(c, mv, s.ss, extra, "", false)
	if !ok {
		return false
	}
	key := c.id
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(req.Context()))
	defer cancel(nil)
	switch s.beginFast(key, cancel) {
	case inflightFast:
		// The SDK refuses an id in flight in the session; it knows only
		// its own.
		h.setStreamHeaders(w)
		writeSDKError(w, http.StatusBadRequest, c.id, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("duplicate in-flight request ID %v", c.id.Raw())})
		return true
	case inflightSDK, inflightClosed:
		return false
	}
	ctx = context.WithValue(ctx, handoffKey{}, true)
	resp, err := h.r.serveCall(ctx, pc)
	s.endFast(key)
	switch {
	case errors.Is(err, errHandoff):
		// The task asks the client for input, which travels on the
		// request's own SDK stream: the SDK serves the request from the
		// start. The task was already reported to the touch hook.
		req.Header.Set(touchedHeader, c.taskID)
		return false
	case err != nil:
		h.setStreamHeaders(w)
		return true
	case errors.Is(context.Cause(ctx), errSessionClosed):
		h.setStreamHeaders(w)
		return true // the session ended: the SDK's stream ends without an answer
	}
	h.writeReply(w, resp, false)
	return true
}

// setStreamHeaders sets the headers the SDK sets on a POST's response
// before it answers.
func (h *httpShim) setStreamHeaders(w http.ResponseWriter) {
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-cache, no-transform")
	if h.opts.JSONResponse {
		hdr.Set("Content-Type", "application/json")
	} else {
		hdr.Set("Content-Type", "text/event-stream")
		hdr.Set("Connection", "keep-alive")
	}
}

// writeReply writes resp as the SDK's Streamable HTTP handler writes a
// POST's only response: a JSON body, or one SSE event, flushed; a
// 2026-07-28 protocol-level error as a JSON body with the HTTP status
// SEP-2575 assigns it.
func (h *httpShim) writeReply(w http.ResponseWriter, resp *jsonrpc.Response, newProtocol bool) {
	data, err := jsonrpc.EncodeMessage(resp)
	if err != nil {
		return
	}
	h.setStreamHeaders(w)
	if status := errorStatus(resp, newProtocol); status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(data)
		return
	}
	if h.opts.JSONResponse {
		_, _ = w.Write(data)
		return
	}
	const pre, post = "event: message\ndata: ", "\n\n"
	b := make([]byte, 0, len(pre)+len(data)+len(post))
	b = append(append(append(b, pre...), data...), post...)
	_, _ = w.Write(b)
	_ = http.NewResponseController(w).Flush()
}

// writeSDKError is go-sdk's writeJSONRPCError.
func writeSDKError(w http.ResponseWriter, status int, id jsonrpc.ID, je *jsonrpc.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: je}); err == nil {
		_, _ = w.Write(data)
	}
}

// errorStatus is go-sdk's extractErrorStatus: the HTTP status of a
// protocol-level error at 2026-07-28 and later.
func errorStatus(resp *jsonrpc.Response, newProtocol bool) int {
	if !newProtocol || resp.Error == nil {
		return 0
	}
	var je *jsonrpc.Error
	if !errors.As(resp.Error, &je) {
		return 0
	}
	switch je.Code {
	case jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case jsonrpc.CodeInvalidParams, mcp.CodeUnsupportedProtocolVersion, mcp.CodeMissingRequiredClientCapabilities:
		return http.StatusBadRequest
	}
	return 0
}

// trackSDKCall records the call ids of a POST to a tracked stateful
// session that the SDK serves, for the duration of the request, so that
// the fast path never serves an id the SDK has in flight; and passes a
// notifications/cancelled on to the fast-path request it names. It
// returns the function that ends the record.
func (h *httpShim) trackSDKCall(req *http.Request, body []byte) func() {
	sid := req.Header.Get("Mcp-Session-Id")
	if sid == "" {
		return func() {}
	}
	s := h.r.fast.session(sid)
	if s == nil {
		return func() {}
	}
	t := bytes.TrimSpace(body)
	if len(t) > 0 && t[0] == '[' {
		s.beginSDK(jsonrpc.ID{}, true)
		return func() { s.endSDK(jsonrpc.ID{}, true) }
	}
	ms, ok := objectMembers(t)
	if !ok {
		return func() {}
	}
	var idRaw, methodRaw, paramsRaw []byte
	for _, m := range ms {
		switch string(m.key) {
		case `"id"`:
			idRaw = t[m.vstart:m.end]
		case `"method"`:
			methodRaw = t[m.vstart:m.end]
		case `"params"`:
			paramsRaw = t[m.vstart:m.end]
		}
	}
	var id jsonrpc.ID
	if idRaw != nil {
		var raw any
		if sdkUnmarshal(idRaw, &raw) != nil {
			return func() {}
		}
		var err error
		if id, err = jsonrpc.MakeID(raw); err != nil {
			return func() {}
		}
	}
	if !id.IsValid() {
		if string(methodRaw) == `"`+methodCancelled+`"` && paramsRaw != nil && s.hasFast() {
			var p mcp.CancelledParams
			if sdkUnmarshal(paramsRaw, &p) == nil {
				if id, err := jsonrpc.MakeID(p.RequestID); err == nil && id.IsValid() {
					s.cancelFast(id)
				}
			}
		}
		return func() {}
	}
	key := id
	s.beginSDK(key, false)
	return func() { s.endSDK(key, false) }
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// serveDelete passes a DELETE to the SDK and forgets the session it ended.
func (h *httpShim) serveDelete(w http.ResponseWriter, req *http.Request, next http.Handler) {
	sid := req.Header.Get("Mcp-Session-Id")
	s := h.r.fast.session(sid)
	if s == nil {
		next.ServeHTTP(w, req)
		return
	}
	rec := &statusRecorder{ResponseWriter: w}
	next.ServeHTTP(rec, req)
	if rec.status == http.StatusNoContent {
		h.r.fast.dropSession(sid, s)
	}
}

// streamableAccepts is go-sdk's check of a POST's Accept header.
func streamableAccepts(values []string) (jsonOK, streamOK bool) {
	for _, value := range values {
		for _, raw := range strings.Split(value, ",") {
			base, _, _ := strings.Cut(strings.TrimSpace(raw), ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK, streamOK
}

// isLoopback is go-sdk's check of a loopback address or host.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// handlerID numbers the router's HTTP handlers.
func (f *fastState) handlerID() string { return strconv.FormatUint(f.handlers.Add(1), 10) }
