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
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
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

// serveFast answers a POST body holding one tasks/* request, if the SDK
// would have dispatched it; it reports false, having written nothing, to
// leave the request to the SDK's path.
func (h *httpShim) serveFast(w http.ResponseWriter, req *http.Request, body []byte, header mcptask.Dialect) bool {
	if h.noFast || !wire.MayBeFast(body) || !h.r.fast.usable() {
		return false
	}
	defer h.r.fast.recover("http")
	c, ok := wire.ParseBody(body)
	if !ok {
		return false
	}
	mv, ok := wire.ViewMeta(c.Meta)
	if !ok || !wire.SDKReads(req, &h.opts, len(body)) {
		return false
	}
	if header.NegotiatesPerRequest() || mv.PerRequest() {
		return h.serveStateless(w, req, c, mv)
	}
	return h.serveStateful(w, req, c, mv)
}

// serveStateless is the fast path of a 2026-07-28 request, which the SDK
// serves on a throwaway session of its stateless handler.
func (h *httpShim) serveStateless(w http.ResponseWriter, req *http.Request, c wire.Call, mv wire.MetaView) bool {
	hv := req.Header.Get("Mcp-Protocol-Version")
	switch {
	case !mv.PerRequest() || hv != mv.Version || !h.r.fast.accepted(hv):
		return false // the SDK refuses a missing or mismatched header, and unsupported versions
	case req.Header.Get("Mcp-Method") != c.Method:
		return false // the SDK requires and checks Mcp-Method
	case c.Method == mcptask.MethodToolsCall:
		if p := c.Params.(*mcp.CallToolParamsRaw); req.Header.Get("Mcp-Name") != p.Name {
			return false // the SDK requires and checks Mcp-Name
		}
	case c.Method != mcptask.MethodTasksList && nameHeaderError(req.Header, c.TaskID) != nil:
		return false // the shim answers a mismatched Mcp-Name
	}
	ctx := context.WithoutCancel(req.Context())
	// A session like the throwaway one the SDK would make.
	ss, err := h.r.fast.standIns.Session(ctx, h.r.server, mv.InitializeParams())
	if err != nil || h.r.fast.serverInfo(ctx) == nil {
		return false
	}
	extra := &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(req.Context()), Header: req.Header}
	pc, ok := h.r.fast.prepare(c, mv, ss, extra, fastSite{headers: true})
	if !ok {
		return false
	}
	if c.Method == mcptask.MethodToolsCall && h.opts.PropagateRequestCancellation {
		// The SDK ends the call's handler when its HTTP request ends.
		ctx = req.Context()
	}
	sink := h.sinkFor(c, w)
	resp, err := h.r.fast.serve(withReplySink(ctx, sink), pc)
	sink.end(func() {
		if err == nil {
			wire.WriteReply(w, h.opts.JSONResponse, resp, mv.Dialect)
		}
	})
	return true
}

// serveStateful is the fast path of a core-dialect request on a stateful
// session.
func (h *httpShim) serveStateful(w http.ResponseWriter, req *http.Request, c wire.Call, mv wire.MetaView) bool {
	o := &h.opts
	if o.SessionTimeout > 0 || o.EventStore != nil {
		// Requests keep the SDK's idle timer paused, and events go to its
		// store: neither can be done from here.
		return false
	}
	if hv := req.Header.Get("Mcp-Protocol-Version"); hv != "" && !h.r.fast.accepted(hv) {
		return false
	}
	if mv.Version != "" {
		return false // a stateful session refuses per-request protocol versions
	}
	s := h.r.fast.sessions.Get(req.Header.Get("Mcp-Session-Id"))
	if s == nil || s.Handler != h.id || s.SS.InitializeParams() == nil {
		return false
	}
	if s.UserID != "" {
		if ti := auth.TokenInfoFromContext(req.Context()); ti == nil || ti.UserID != s.UserID {
			return false
		}
	}
	extra := &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(req.Context()), Header: req.Header}
	pc, ok := h.r.fast.prepare(c, mv, s.SS, extra, fastSite{stream: !o.JSONResponse})
	if !ok {
		return false
	}
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(req.Context()))
	defer cancel(nil)
	switch s.Calls.BeginFast(c.ID, cancel) {
	case wire.InFast:
		// The SDK refuses an id in flight in the session; it knows only
		// its own.
		wire.SetStreamHeaders(w, h.opts.JSONResponse)
		wire.WriteSDKError(w, http.StatusBadRequest, c.ID, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("duplicate in-flight request ID %v", c.ID.Raw())})
		return true
	case wire.InSDK, wire.Closed:
		return false
	}
	if c.Method == mcptask.MethodTasksResult {
		// Only a tasks/result hands its request back (its task asks for
		// input); a tool's handler never sees the mark.
		ctx = context.WithValue(ctx, handoffKey{}, true)
	}
	sink := h.sinkFor(c, w)
	resp, err := h.r.fast.serve(withReplySink(ctx, sink), pc)
	s.Calls.EndFast(c.ID)
	if errors.Is(err, errHandoff) {
		// The task asks the client for input, which travels on the
		// request's own SDK stream: the SDK serves the request from the
		// start. The task was already reported to the touch hook.
		req.Header.Set(touchedHeader, c.TaskID)
		return false
	}
	sink.end(func() {
		switch {
		case err != nil:
			wire.SetStreamHeaders(w, h.opts.JSONResponse)
		case errors.Is(context.Cause(ctx), wire.ErrSessionClosed):
			wire.SetStreamHeaders(w, h.opts.JSONResponse) // the session ended: the SDK's stream ends without an answer
		default:
			// A stateful session's requests negotiated with initialize (core).
			wire.WriteReply(w, h.opts.JSONResponse, resp, mcptask.Core)
		}
	})
	return true
}

// sinkFor returns the sink of the notifications a tools/call's handler
// sends while it runs, when the reply is an SSE stream (otherwise the
// SDK sends them apart from the reply, and so does the fast path: it
// passes them on); nil for anything else.
func (h *httpShim) sinkFor(c wire.Call, w http.ResponseWriter) *replySink {
	if c.Method != mcptask.MethodToolsCall || h.opts.JSONResponse {
		return nil
	}
	return &replySink{w: w}
}

// replySink carries the notifications a fast-path tools/call's handler
// sends the client while the call runs (logging, progress), in the
// context of the call, onto the call's SSE response, before its answer,
// where go-sdk's Streamable HTTP transport writes them for a call it
// serves (the router's sending middleware hands them over: see
// sending). Once the answer is written, later ones are refused,
// as the SDK refuses messages related to an answered request. A nil
// sink takes nothing.
type replySink struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	started bool // events were written: the headers are out
	ended   bool // the answer was written
}

// replySinkKey carries a call's *replySink in its context.
type replySinkKey struct{}

func withReplySink(ctx context.Context, s *replySink) context.Context {
	if s == nil {
		return ctx
	}
	return context.WithValue(ctx, replySinkKey{}, s)
}

// replySinkFrom returns the sink of the fast-path call ctx belongs to.
func replySinkFrom(ctx context.Context) *replySink {
	s, _ := ctx.Value(replySinkKey{}).(*replySink)
	return s
}

// notify writes a notification as an event of the call's stream.
func (s *replySink) notify(method string, params any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return wire.ErrStreamClosed
	}
	first := !s.started
	s.started = true
	return wire.WriteNotification(s.w, first, method, params)
}

// end runs write (the answer) and takes nothing more.
func (s *replySink) end(write func()) {
	if s == nil {
		write()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	write()
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
	s := h.r.fast.sessions.Get(sid)
	if s == nil {
		return func() {}
	}
	switch c := wire.ReadSDKCall(body, s.Calls.HasFast()); {
	case c.Batch:
		s.Calls.BeginSDK(jsonrpc.ID{}, true)
		return func() { s.Calls.EndSDK(jsonrpc.ID{}, true) }
	case c.ID.IsValid():
		s.Calls.BeginSDK(c.ID, false)
		return func() { s.Calls.EndSDK(c.ID, false) }
	case c.Cancels.IsValid():
		s.Calls.CancelFast(c.Cancels)
	}
	return func() {}
}

// deleteWait bounds how long a DELETE waits for the session's tasks/result
// answers.
const deleteWait = 5 * time.Second

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
// The session's tasks/result requests are answered first (-32603, the
// task goes on), on either path, and their answers written before the
// session closes: the SDK would hold the DELETE until they ended, and
// they wait for their task.
func (h *httpShim) serveDelete(w http.ResponseWriter, req *http.Request, next http.Handler) {
	sid := req.Header.Get("Mcp-Session-Id")
	if sid != "" {
		h.r.quotas.endWaits("session:" + sid)
		h.waits.wait(sid, deleteWait)
	}
	s := h.r.fast.sessions.Get(sid)
	if s == nil {
		next.ServeHTTP(w, req)
		return
	}
	rec := &statusRecorder{ResponseWriter: w}
	next.ServeHTTP(rec, req)
	if rec.status == http.StatusNoContent {
		h.r.fast.sessions.Drop(sid, s)
	}
}
