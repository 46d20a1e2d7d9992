package taskrouter

// The transport shim (stdio, in-memory and any other persistent
// transport): it rewrites every request on its way to go-sdk (see package
// wire: params.task moved into a private _meta key, private keys a client
// sent dropped), tags tools/call and prompts/get with its connection id so
// the router can push notifications/tasks/status on that connection,
// serves subscriptions/listen for task notifications, and answers the
// fast path's requests (fastpath.go) before the SDK reads them.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
)

// ---- stdio / in-memory ----

type taskTransport struct {
	inner  mcp.Transport
	r      *Router
	noFast bool // the task methods go through the SDK (tests compare both)
}

func (t *taskTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	var pc *pushConn
	if src, ok := wire.SourceOf(t.inner); ok {
		c, err := t.connectFramed(ctx, src)
		if err != nil {
			return nil, err
		}
		pc = c
	} else {
		c, err := t.inner.Connect(ctx)
		if err != nil {
			return nil, err
		}
		pc = &pushConn{Connection: c, id: NewTaskID(), r: t.r, listens: map[jsonrpc.ID]*connListen{}, noFast: t.noFast}
	}
	t.r.pushers.add(pc)
	return pc, nil
}

// connectFramed connects the SDK's stream connection to a pipe the
// router's framer (wire.Frame) feeds from src: the framer answers a line
// the SDK could not read (which would end the stream) itself, and offers
// each message to takeFrame first (the fast path, unless it is off).
func (t *taskTransport) connectFramed(ctx context.Context, src wire.Source) (*pushConn, error) {
	pr, pw := io.Pipe()
	out := &lockedWriter{w: src.W} // the SDK's messages and the framer's refusals, whole
	c, err := (&mcp.IOTransport{Reader: pr, Writer: out, MaxLineLength: src.MaxLen}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	pc := &pushConn{Connection: c, id: NewTaskID(), r: t.r, listens: map[jsonrpc.ID]*connListen{}, noFast: t.noFast, framed: true, closeSrc: src.Close}
	refuse := func(id json.RawMessage, e *jsonrpc.Error) {
		_, _ = out.Write(append(wire.ErrorLine(id, e), '\n'))
	}
	go func() {
		defer pc.r.fast.recover("framer")
		wire.Frame(src.R, pw, src.MaxLen, wire.CheckLine, refuse, pc.takeFrame)
	}()
	return pc, nil
}

// lockedWriter writes each message whole: the SDK's connection and the
// framer's refusals share the stream.
type lockedWriter struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) Close() error { return l.w.Close() }

// takeFrame answers a framed message on the fast path, or records the
// call the SDK is about to get (the SDK refuses an id in flight, and
// knows only its own); it reports whether it answered.
func (c *pushConn) takeFrame(raw []byte) bool {
	req, ok := wire.DecodeCall(raw)
	if !ok {
		// The answer to a Peer's request is taken here; anything else the
		// SDK answers (or refuses) itself.
		return c.r.peers.takeResponse(raw)
	}
	if req.Method == mcptask.MethodInitialize {
		rc := readReceiverCaps(req.Params)
		c.recv.Store(&rc)
	}
	switch c.calls.State(req.ID) {
	case wire.InFast:
		return true // the SDK's jsonrpc2 layer drops such a call, without an answer
	case wire.InSDK:
		c.calls.BeginSDK(req.ID, false)
		return false
	}
	if c.serveFast(req) {
		return true
	}
	c.calls.BeginSDK(req.ID, false)
	return false
}

// pushConn is a shimmed connection.
type pushConn struct {
	mcp.Connection
	id        string
	r         *Router
	closeOnce sync.Once

	mu      sync.Mutex
	listens map[jsonrpc.ID]*connListen // subscriptions/listen streams served here, by request id
	closed  bool

	// The fast path (fastpath.go): the session the SDK made of this
	// connection, once a request of it reached the router's middleware;
	// the calls in flight: the fast path's, and the SDK's (the SDK drops
	// a call whose id is in flight, and knows only its own).
	noFast bool
	ss     atomic.Pointer[mcp.ServerSession]
	calls  wire.InFlight
	// framed: the router reads the stream itself and answers the fast
	// path's messages before they reach the SDK (wire.Frame); closeSrc
	// closes that stream's reading side.
	framed   bool
	closeSrc func() error
	// recv are the task-augmented requests the client declared it takes
	// (its initialize's capabilities.tasks.requests), for Peers.
	recv atomic.Pointer[receiverCaps]
}

// receiver returns the receiver capabilities the connection's client
// declared.
func (c *pushConn) receiver() receiverCaps {
	if rc := c.recv.Load(); rc != nil {
		return *rc
	}
	return receiverCaps{}
}

// connListen is a subscriptions/listen stream served on a pushConn.
type connListen struct{ cancel context.CancelFunc }

func (c *pushConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if resp, ok := msg.(*jsonrpc.Response); ok && err == nil && c.r.peers.deliver(resp) {
			continue // the answer to a Peer's request, which the SDK never sent
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok || err != nil {
			return msg, err
		}
		if req.Method == mcptask.MethodInitialize {
			rc := readReceiverCaps(req.Params)
			c.recv.Store(&rc)
		}
		if req.IsCall() && !c.framed {
			switch c.calls.State(req.ID) {
			case wire.InFast:
				// The SDK's jsonrpc2 layer drops a call whose id is in
				// flight, without an answer; this one is in flight here.
				continue
			case wire.Free:
				if (req.Method == mcptask.MethodToolsCall || mcptask.IsTaskMethod(req.Method)) && c.serveFast(req) {
					continue
				}
			}
		}
		switch req.Method {
		case mcptask.MethodToolsCall:
			req.Params = wire.RewriteParams(req.Params, c.id, true)
		case mcptask.MethodPromptsGet:
			req.Params = wire.RewriteParams(req.Params, c.id, false)
		case mcptask.MethodTasksStream:
			if req.IsCall() {
				if c.framed {
					c.calls.EndSDK(req.ID, false) // the framer passed it on as the SDK's
				}
				c.stream(req) // answered here, not by the SDK (streamwire.go)
				continue
			}
		case mcptask.MethodSubscriptionsListen:
			var lp wire.ListenParams
			if req.IsCall() && json.Unmarshal(req.Params, &lp) == nil && lp.ForTasks() {
				c.listen(req, &lp)
				continue // answered here, not by the SDK
			}
			req.Params = wire.RewriteParams(req.Params, "", false)
		case mcptask.MethodCancelled:
			c.cancelListen(req.Params) // and the SDK cancels its own requests
			if id, ok := wire.CancelledID(req.Params); ok {
				c.calls.CancelFast(id)
			}
		default:
			connID := ""
			if req.IsCall() && c.ss.Load() == nil {
				connID = c.id // so the router learns this connection's session
			}
			req.Params = wire.RewriteParams(req.Params, connID, false)
		}
		if req.IsCall() && !c.framed {
			c.calls.BeginSDK(req.ID, false) // the framer records the calls it passes on itself
		}
		return msg, err
	}
}

// Write passes msg on, noting the end of the SDK's call it answers. An
// error the SDK answers with code 0 (its refusals before any handler
// runs, such as a call before initialize: every error a handler returns
// has a code, see wireError) goes out as -32600, the client's request
// being what it refused.
func (c *pushConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok {
		if resp.ID.IsValid() {
			c.calls.EndSDK(resp.ID, false)
		}
		var je *jsonrpc.Error
		switch {
		case resp.Error == nil:
		case !errors.As(resp.Error, &je):
			fixed := *resp
			fixed.Error = &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: resp.Error.Error()}
			msg = &fixed
		case je.Code == 0:
			fixed := *resp
			fixed.Error = &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: je.Message, Data: je.Data}
			msg = &fixed
		}
	}
	return c.Connection.Write(ctx, msg)
}

// setSession records the session the SDK made of the connection.
func (c *pushConn) setSession(ss *mcp.ServerSession) {
	if c.ss.CompareAndSwap(nil, ss) {
		c.r.peers.addConn(ss, c)
	}
}

// serveFast answers a tasks/* call on the connection, if the SDK would
// have dispatched it, in its own goroutine as the SDK does; it reports
// false to leave the call to the SDK.
func (c *pushConn) serveFast(req *jsonrpc.Request) bool {
	if c.noFast || !c.r.fast.usable() {
		return false
	}
	defer c.r.fast.recover("connection")
	ss := c.ss.Load()
	if ss == nil || ss.InitializeParams() == nil {
		return false // the SDK refuses calls before initialize, or learns the client from this one
	}
	call, ok := wire.DecodeParams(req.ID, req.Method, req.Params)
	if !ok {
		return false
	}
	mv, ok := wire.ViewMeta(call.Meta)
	if !ok || mv.PerRequest() && (!c.r.fast.accepted(mv.Version) || c.r.fast.serverInfo(context.Background()) == nil) {
		return false
	}
	connID := ""
	if req.Method == mcptask.MethodToolsCall {
		connID = c.id // as Read tags every tools/call
	}
	pc, ok := c.r.fast.prepare(call, mv, ss, nil, fastSite{connID: connID})
	if !ok {
		return false
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	if c.calls.BeginFast(req.ID, cancel) != wire.Free {
		cancel(nil) // the connection closed
		return false
	}
	// On a pooled goroutine: one whose stack has already grown to what
	// serving a call takes (the schema validator recurses deeply), where
	// a new goroutine per call copied its stack while growing it, a
	// fifth of a plain call's CPU on this connection.
	c.r.workers.run(func() { // workers.go
		defer cancel(nil)
		defer c.r.fast.recover("connection")
		resp, err := c.r.fast.serve(ctx, pc)
		// The id is free again before the answer leaves, as in the SDK.
		c.calls.EndFast(req.ID)
		if err == nil {
			_ = c.Connection.Write(context.Background(), resp)
		}
	})
	return true
}

// listen serves a subscriptions/listen request for task notifications on
// the connection, in its own goroutine, until the followed tasks ended,
// the client cancels it or the connection closes.
func (c *pushConn) listen(req *jsonrpc.Request, lp *wire.ListenParams) {
	write := func(ctx context.Context, msg jsonrpc.Message) bool {
		return c.writeStream(ctx, msg, "subscriptions/listen")
	}
	refuse := func(err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		write(ctx, &jsonrpc.Response{ID: req.ID, Error: err})
	}
	if !lp.DeclaresExtension() {
		refuse(mcptask.MissingExtension("task notifications on subscriptions/listen"))
		return
	}
	q := c.r.streaming.listenOwner(context.Background(), &mcp.RequestExtra{})
	if q.OwnerErr != nil {
		refuse(q.OwnerErr)
		return
	}
	c.serveStream(req.ID, func(ctx context.Context) {
		c.r.streaming.runListen(ctx, q, req.ID.Raw(), lp.TaskIDs(), listenSink{
			notify: func(method string, params any) bool {
				raw, err := json.Marshal(params)
				return err == nil && write(ctx, &jsonrpc.Request{Method: method, Params: raw})
			},
			reply: func(result any) bool {
				raw, err := json.Marshal(result)
				return err == nil && write(ctx, &jsonrpc.Response{ID: req.ID, Result: raw})
			},
		})
	})
}

// writeStream writes a message of a stream the connection serves itself
// (what names it, for the log); it reports whether the client is still
// there.
func (c *pushConn) writeStream(ctx context.Context, msg jsonrpc.Message, what string) bool {
	if err := c.Connection.Write(ctx, msg); err != nil {
		c.r.log.Debug("writing a "+what+" message", "error", err)
		return false
	}
	return true
}

// serveStream runs serve in its own goroutine as the answer to request
// key (a subscriptions/listen, a tasks/stream): its context ends when the
// client cancels the request (notifications/cancelled), reuses its id, or
// the connection closes.
func (c *pushConn) serveStream(key jsonrpc.ID, serve func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	ln := &connListen{cancel: cancel}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cancel()
		return
	}
	if prev := c.listens[key]; prev != nil {
		prev.cancel() // a client reusing a request id ends the earlier stream
	}
	c.listens[key] = ln
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			if c.listens[key] == ln {
				delete(c.listens, key)
			}
			c.mu.Unlock()
			cancel()
		}()
		serve(ctx)
	}()
}

// cancelListen ends the listen stream a notifications/cancelled names.
func (c *pushConn) cancelListen(params json.RawMessage) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil || p.RequestID == nil {
		return
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return
	}
	c.mu.Lock()
	ln := c.listens[id]
	c.mu.Unlock()
	if ln != nil {
		ln.cancel()
	}
}

func (c *pushConn) Close() error {
	c.mu.Lock()
	c.closed = true
	for _, ln := range c.listens {
		ln.cancel()
	}
	c.mu.Unlock()
	c.calls.Close()
	c.closeOnce.Do(func() {
		if c.closeSrc != nil {
			_ = c.closeSrc()
		}
		c.r.pushers.remove(c.id)
		c.r.peers.dropConn(c)
	})
	return c.Connection.Close()
}
