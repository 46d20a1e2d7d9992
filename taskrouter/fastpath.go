package taskrouter

// The fast path: the task methods (tasks/get, tasks/result, tasks/list,
// tasks/cancel, tasks/update) and the tools/call of tools registered with
// the router (task-augmented or plain) answered by the router straight
// from the transport, in both dialects, instead of through go-sdk's
// request handling.
//
// Why: go-sdk v1.8 decodes a message with a streaming decoder that
// allocates and fills a fresh 32 KiB buffer per call, several times per
// request (the body as a batch, then as a message, the _meta, the params,
// the client capabilities...), and routes every request through a session
// connection's goroutines; for a task method or a quick tool that is
// most of the work (docs/PERFORMANCE.md). The router reads every body
// anyway.
//
// What stays identical: the fast path decodes with the same library and
// flags as the SDK (segmentio/encoding in place, case-sensitive fields),
// runs the request through the server's whole receiving chain (the
// middleware added after Install, the router's own, whatever was
// installed before Install, and the SDK's method handlers: see
// fastPath.chain), and encodes the reply the way the SDK's jsonrpc2
// layer and transports do. It only takes a request the SDK would accept up to its dispatch;
// anything else (a batch, a malformed or unusual body, a header the SDK
// would refuse, an unknown session, a version the server has not
// accepted yet...) goes to the SDK exactly as before, so every refusal is
// the SDK's own. A request that turns out to need the SDK's stream after
// all (a core tasks/result whose task asks the client for input over
// HTTP) is handed to the SDK before anything is written.
//
// The fast path is off when it cannot be sure to match: MCPGODEBUG
// compatibility settings (go-sdk's, read where they matter), or
// Options.DisableFastPath; HTTPOptions.DisableFastPath turns it off for
// one handler. What an upgrade of go-sdk must re-check is listed in
// doc.go ("Upgrading go-sdk").

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
)

// fastPath is the router's fast path: its state, and the methods that
// serve a request on it. r is the router it serves.
type fastPath struct {
	r *Router

	checkOnce sync.Once
	off       bool // the fast path cannot match the SDK path on this server
	// chain is the server's receiving chain as it stood on the first
	// request that could take the fast path: every middleware added to
	// the server after Install (go-sdk makes the latest the outermost),
	// then the router's (Router.handle), then what was there before
	// Install and the SDK's dispatch. The fast path runs its requests
	// through it, so middleware sees them as it sees the SDK's.
	chain mcp.MethodHandler

	// impl is the server's Implementation, which go-sdk adds to every
	// 2026-07-28 result's _meta (annotateServerInfo); learned from an
	// initialize result.
	impl atomic.Pointer[mcp.Implementation]

	// versions holds protocol versions the SDK has accepted: values of the
	// Mcp-Protocol-Version header older than 2026-07-28 (the HTTP handler
	// refuses versions the server does not support), and per-request
	// _meta versions from 2026-07-28 on (the session refuses unsupported
	// ones). A request at a version not seen yet takes the SDK path once.
	versions sync.Map // string -> struct{}

	// sessions are the live stateful Streamable HTTP sessions, by
	// Mcp-Session-Id (see fasthttp.go).
	sessions wire.Sessions
	handlers atomic.Uint64

	served atomic.Int64 // requests the fast path answered (for tests)

	standIns wire.StandIns // sessions for 2026-07-28 requests over HTTP

	paramHeaders sync.Map // *mcp.Tool -> bool: its schema binds Mcp-Param-* headers
}

// usable reports whether the fast path may serve requests for this
// router. The check runs once, on the first request that could use it,
// and takes the server's receiving chain then (fastPath.chain):
// middleware is added before a server serves.
func (f *fastPath) usable() bool {
	f.checkOnce.Do(func() {
		var why string // the fast path is off: why, for the log
		switch {
		case f.r.opts.DisableFastPath:
			f.off, why = true, "Options.DisableFastPath (TASKBRIDGE_FAST_PATH=off)"
		case f.r.server == nil || f.r.inner == nil:
			f.off, why = true, "Install has not been called"
		case sdkCompatSettings():
			f.off, why = true, "MCPGODEBUG is set"
		default:
			// A pass-through middleware, added now, is handed the chain
			// as it stands; it adds nothing to it.
			f.r.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
				f.chain = next
				return next
			})
		}
		if f.off {
			f.r.log.Info("taskrouter: task methods go through the SDK", "reason", why)
		} else {
			f.r.log.Debug("taskrouter: task methods take the fast path")
		}
	})
	return !f.off
}

func (f *fastPath) noteVersion(v string) {
	if _, ok := f.versions.Load(v); !ok {
		f.versions.Store(v, struct{}{})
	}
}

func (f *fastPath) accepted(v string) bool {
	_, ok := f.versions.Load(v)
	return ok
}

// noteRequest learns, from a request that reached the router's middleware
// through the SDK, what the fast path needs to know: the protocol versions
// the SDK accepted, the stateful HTTP session the request belongs to, and
// the session of a connection wrapped by Transport.
func (f *fastPath) noteRequest(req mcp.Request, q *Request) {
	if p := req.GetParams(); p != nil && !isNilParams(p) {
		if v, ok := p.GetMeta()[mcptask.MetaProtocolVersion].(string); ok && mcptask.DialectFor(v).NegotiatesPerRequest() {
			f.noteVersion(v)
		}
	}
	ss, _ := req.GetSession().(*mcp.ServerSession)
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		h := http.Header(extra.Header)
		if hv := h.Get("Mcp-Protocol-Version"); hv != "" && !mcptask.DialectFor(hv).NegotiatesPerRequest() {
			f.noteVersion(hv)
		}
		if hid := h.Get(handlerHeader); hid != "" && ss != nil {
			if id := ss.ID(); id != "" {
				userID := ""
				if extra.TokenInfo != nil {
					userID = extra.TokenInfo.UserID
				}
				f.sessions.Track(id, ss, hid, userID)
			}
		}
		q.touched = h.Get(touchedHeader)
	}
	if q.connID != "" && ss != nil {
		if pc := f.r.pushers.get(q.connID); pc != nil {
			pc.setSession(ss)
		}
	}
}

// noteInitialize remembers the server's Implementation from an initialize
// result.
func (f *fastPath) noteInitialize(res *mcp.InitializeResult) {
	if res != nil && res.ServerInfo != nil && f.impl.Load() == nil {
		f.impl.Store(res.ServerInfo)
	}
}

// serverInfo returns the server's Implementation, connecting the loopback
// session (whose initialize passes the router's middleware) if no
// initialize has been seen yet.
func (f *fastPath) serverInfo(ctx context.Context) *mcp.Implementation {
	if impl := f.impl.Load(); impl != nil {
		return impl
	}
	if _, err := f.r.loop.session(ctx); err != nil {
		return nil
	}
	return f.impl.Load()
}

// ---- serving ----

// fastCapsKey carries the client capabilities the fast path decoded, so
// that resolve does not decode them again.
type fastCapsKey struct{}

type fastCaps struct {
	req  mcp.Request
	caps *mcp.ClientCapabilities
}

// clientCapabilities is req.ClientCapabilities(), unless the fast path
// decoded them already for this request.
func clientCapabilities(ctx context.Context, req mcp.Request, v versioned) *mcp.ClientCapabilities {
	if fc, ok := ctx.Value(fastCapsKey{}).(*fastCaps); ok && fc.req == req {
		return fc.caps
	}
	return v.ClientCapabilities()
}

// noLogLevelKey marks a fast-path request that negotiates per request
// (2026-07-28) without a log level (the fast path leaves one that has a
// level to the SDK). go-sdk keeps that empty level in the request's
// context, which sends the client no log messages whatever level its
// session was set to; the router's sending middleware drops them for
// such a request (see sending).
type noLogLevelKey struct{}

// handoffKey marks a fast-path tasks/result that gives the request back to
// the SDK when its task asks the client for input (see errHandoff).
type handoffKey struct{}

// errHandoff: the request needs what only the SDK's path has (its
// response stream, for input requests); nothing was written yet.
var errHandoff = errors.New("taskrouter: request handed back to the SDK")

// handsOff reports whether ctx is a fast-path request that hands back.
func handsOff(ctx context.Context) bool {
	h, _ := ctx.Value(handoffKey{}).(bool)
	return h
}

// errNoReply: the SDK would send no response (a result it cannot encode).
var errNoReply = errors.New("taskrouter: no response")

// preparedCall is a request the fast path serves, ready to run.
type preparedCall struct {
	c    wire.Call
	mv   wire.MetaView
	req  mcp.Request
	caps *mcp.ClientCapabilities
}

// fastSite says where a request the fast path may serve came from.
type fastSite struct {
	// connID is the id of a connection wrapped by Transport, which its
	// shim tags every tools/call with.
	connID string
	// headers: the SDK checks a tools/call's Mcp-Param-* headers (HTTP,
	// from 2026-07-28).
	headers bool
	// stream: requests a handler sends the client in the course of a call
	// travel on the call's own response stream, where the SDK's answer
	// handling (not the fast path's) expects them (stateful HTTP, SSE).
	stream bool
}

// prepare builds the SDK's request for c on session ss, as the SDK
// would; it reports false (having done nothing) for a tools/call it does
// not serve (see createsTask and servesPlain).
func (f *fastPath) prepare(c wire.Call, mv wire.MetaView, ss *mcp.ServerSession, extra *mcp.RequestExtra, site fastSite) (*preparedCall, bool) {
	var req mcp.Request
	switch p := c.Params.(type) {
	case *ListTasksParams:
		req = &mcp.ServerRequest[*ListTasksParams]{Session: ss, Params: p, Extra: extra}
	case *UpdateTaskParams:
		req = &mcp.ServerRequest[*UpdateTaskParams]{Session: ss, Params: p, Extra: extra}
	case *TaskIDParams:
		req = &mcp.ServerRequest[*TaskIDParams]{Session: ss, Params: p, Extra: extra}
	case *mcp.CallToolParamsRaw:
		req = &mcp.CallToolRequest{Session: ss, Params: p, Extra: extra}
	}
	caps := mv.Caps
	if caps == nil {
		if ip := ss.InitializeParams(); ip != nil {
			caps = ip.Capabilities
		}
	}
	if p, ok := c.Params.(*mcp.CallToolParamsRaw); ok {
		declared := false
		if caps != nil {
			_, declared = caps.Extensions[mcptask.ExtensionID]
		}
		d := mcptask.DialectFor(req.(versioned).ProtocolVersion())
		if !f.createsTask(p, d, declared, site.headers) && !f.servesPlain(p, mv, caps, site) {
			return nil, false
		}
		if site.connID != "" {
			if p.Meta == nil {
				p.Meta = mcp.Meta{}
			}
			p.Meta[wire.MetaConnID] = site.connID
		}
	}
	if extra != nil {
		// The SDK gives every call a way to close its SSE stream; after a
		// fast-path reply there is no stream left to close.
		extra.CloseSSEStream = func(mcp.CloseSSEStreamArgs) {}
	}
	return &preparedCall{c: c, mv: mv, req: req, caps: caps}, true
}

// serve runs a prepared request through the server's receiving chain
// (fastPath.chain: the middleware, the router's, the SDK's method
// dispatch), and returns the response to write;
// or errHandoff when the request was handed back, or errNoReply.
func (f *fastPath) serve(ctx context.Context, pc *preparedCall) (*jsonrpc.Response, error) {
	c, mv, req := pc.c, pc.mv, pc.req
	ctx = context.WithValue(ctx, fastCapsKey{}, &fastCaps{req: req, caps: pc.caps})
	if mv.PerRequest() {
		ctx = context.WithValue(ctx, noLogLevelKey{}, true)
	}
	f.served.Add(1)
	res, err := f.chain(ctx, c.Method, req)
	if errors.Is(err, errHandoff) {
		return nil, errHandoff
	}
	var result any
	if err == nil {
		result = res
		if mv.PerRequest() {
			// go-sdk's ServerSession.handle: every result of a request
			// that negotiates per request names the server in _meta.
			wire.AnnotateServerInfo(res, f.serverInfo(ctx))
		}
	}
	resp, ok := wire.Response(c.ID, c.Method, result, err)
	if !ok {
		f.r.log.Error("taskrouter: a task method's result cannot be encoded; no response is sent", "method", c.Method)
		return nil, errNoReply
	}
	return resp, nil
}

// createsTask reports whether the router's tools/call takes this call
// straight to creating a task, running nothing in the request first: a
// task the client asked for (core) or the server decides on (extension),
// of a tool registered with the router, that is no continuation, has no
// Preflight, carries no _task_id argument, and (when the SDK would check
// them) has no Mcp-Param-* header annotations. Everything else goes
// through the SDK, whose stream a call run in the request may need.
func (f *fastPath) createsTask(p *mcp.CallToolParamsRaw, d mcptask.Dialect, declared, headers bool) bool {
	te, ok := f.r.tools.lookup(p.Name)
	if !ok || te.opts.Preflight != nil || te.opts.TaskSupport == mcptask.TaskForbidden {
		return false
	}
	if f.mayContinue(p) {
		return false
	}
	if headers && !f.noParamHeaders(&te) {
		return false
	}
	if d.ServerDecidesTasks() {
		return declared
	}
	if p.Meta == nil {
		return false
	}
	_, asked, err := wire.TakeTaskParam(p.Meta)
	return asked && err == nil
}

// mayContinue reports whether a tools/call may continue a workflow task
// (the router's continuation handler takes it, not the fast path): it
// names a task in _meta._task_id, or carries the argument _task_id to a
// tool that takes it (see moveTaskIDArgument). Without either, a tool a
// workflow may hand its client (every step's tool) is an ordinary tool.
func (f *fastPath) mayContinue(p *mcp.CallToolParamsRaw) bool {
	if _, bound := p.Meta[mcptask.MetaTaskID]; bound {
		return true
	}
	return bytes.Contains(p.Arguments, taskIDKey) && f.r.tools.takesTaskID(p.Name)
}

// servesPlain reports whether the fast path serves a tools/call that
// creates no task straight away: a call, asking for no task, of a tool
// registered with the router (AddTool, AddRawTool), that is no
// continuation (neither _meta._task_id nor, for a tool that takes it, the
// argument _task_id). The router's tools/call
// runs it (a plain call, or host mode's), through the SDK's tool
// dispatch, as on the SDK's path. The fast path leaves to the SDK what
// only the SDK's request handling can do: a per-request log level
// (2026-07-28), which it keeps in the handler's context; Mcp-Param-*
// header annotations, when the SDK would check them; and, where a
// handler's requests to the client travel on the call's own stream
// (site.stream), a call whose handler runs in the request for a client
// that takes such requests (it declared sampling, elicitation or
// roots). A handler's notifications reach the client as on the SDK's
// path (see fasthttp.go's replySink).
func (f *fastPath) servesPlain(p *mcp.CallToolParamsRaw, mv wire.MetaView, caps *mcp.ClientCapabilities, site fastSite) bool {
	te, ok := f.r.tools.lookup(p.Name)
	if !ok || te.tool == nil || te.tool.InputSchema == nil {
		return false
	}
	if f.mayContinue(p) {
		return false
	}
	if _, asked := p.Meta[wire.MetaTaskRequest]; asked {
		return false // params.task, yet no task at once: refused, or Preflight's
	}
	if _, ok := p.Meta[mcp.MetaKeyLogLevel]; ok && mv.PerRequest() {
		return false
	}
	if site.headers && !f.noParamHeaders(&te) {
		return false
	}
	if site.stream && !f.r.opts.runsApart(te) && caps != nil && (caps.Sampling != nil || caps.Elicitation != nil || caps.RootsV2 != nil) {
		return false
	}
	return true
}

// noParamHeaders reports whether a tool's input schema is known and
// binds no argument to an Mcp-Param-* header (x-mcp-header), which the
// SDK checks against the request's headers.
func (f *fastPath) noParamHeaders(te *toolEntry) bool {
	if te.tool == nil || te.tool.InputSchema == nil {
		return false
	}
	if v, ok := f.paramHeaders.Load(te.tool); ok {
		return !v.(bool)
	}
	b, err := json.Marshal(te.tool.InputSchema)
	has := err != nil || bytes.Contains(b, []byte("x-mcp-header"))
	f.paramHeaders.Store(te.tool, has)
	return !has
}

// recover keeps a bug in the fast path's own code from taking the
// process down; the request then has no answer, as when a connection
// breaks.
func (f *fastPath) recover(where string) {
	if p := recover(); p != nil {
		f.r.log.Error("panic in the task fast path", "where", where, "panic", p, "stack", string(debug.Stack()))
	}
}

// handlerID numbers the router's HTTP handlers.
func (f *fastPath) handlerID() string { return strconv.FormatUint(f.handlers.Add(1), 10) }
