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
	// The dialect the headers name; a body may say Extension instead (a
	// per-request protocol version in its _meta).
	d := mcptask.DialectFor(req.Header.Get("Mcp-Protocol-Version"))
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
		if wire.MayBeListen(body) {
			if lr, ok := wire.ListenFor(body); ok && (d.NegotiatesPerRequest() || wire.HasProtocolKey(body)) {
				h.r.serveListen(w, req, lr)
				return
			}
		}
		if h.serveFast(w, req, body, d) {
			return
		}
		rb := wire.RewriteBody(body, d, len(req.Header.Values("Mcp-Name")) > 0)
		d = rb.Dialect
		if d.NegotiatesPerRequest() && rb.TaskMethod != "" && rb.TaskMethod != mcptask.MethodTasksList {
			if err := nameHeaderError(req.Header, rb.TaskID); err != nil {
				wire.WriteRPCError(w, http.StatusBadRequest, rb.ID, err)
				return
			}
		}
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
	if req.Method == http.MethodDelete {
		h.serveDelete(w, req, h.stateful)
		return
	}
	h.stateful.ServeHTTP(w, req)
}
