package taskrouter

// The shims in this file exist because go-sdk v1.8 decodes tools/call params
// into a struct without a "task" field, dropping a core-dialect params.task
// before any middleware can see it. Each shim moves that object into
// params._meta[metaTaskRequest] on the way in; the router's middleware
// takes it out again (with every other key under
// mcptask.PrivateMetaPrefix) before any handler runs. The transport shim
// also tags tools/call and prompts/get with its connection id so the router
// can push notifications/tasks/status on that connection. Keys under the
// private prefix that a client sends itself are dropped, so a client cannot
// forge them.

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

var privatePrefix = []byte(mcptask.PrivateMetaPrefix)

// rewriteParams drops private _meta keys the client sent, moves
// params.task into _meta when moveTask is set (tools/call), and, when
// connID is set, tags the params with it. It returns the input unchanged
// when there is nothing to do or the params are not a JSON object.
func rewriteParams(params json.RawMessage, connID string, moveTask bool) json.RawMessage {
	if !mayNeedRewrite(params) && connID == "" {
		return params
	}
	if !json.Valid(params) {
		return params // the SDK answers it
	}
	if out, ok := spliceParams(params, connID, moveTask); ok {
		return out
	}
	return decodeRewrite(params, connID, moveTask)
}

var (
	keyTask        = []byte(`"task"`)
	keyTaskRequest = quotedKey(metaTaskRequest)
	keyConnID      = quotedKey(metaConnID)
	quotedPrivate  = quotedKey(mcptask.PrivateMetaPrefix)[:len(mcptask.PrivateMetaPrefix)+1] // with the opening quote
)

// spliceParams is rewriteParams on the bytes: it copies the members it
// keeps and writes the new _meta, without decoding anything. ok is false
// when it cannot tell exactly (an escaped key, a duplicate "task" or
// "_meta"); decodeRewrite decides then.
func spliceParams(params json.RawMessage, connID string, moveTask bool) (json.RawMessage, bool) {
	ms, ok := objectMembers(params)
	if !ok {
		if bytes.TrimSpace(params)[0] == '{' {
			return nil, false // an escaped key
		}
		return params, true // not an object: the SDK's to reject
	}
	task, meta := -1, -1
	for i, m := range ms {
		switch {
		case moveTask && bytes.Equal(m.key, keyTask):
			if task >= 0 {
				return nil, false
			}
			task = i
		case bytes.Equal(m.key, metaKey):
			if meta >= 0 {
				return nil, false
			}
			meta = i
		}
	}
	var metaMembers []member
	var metaRaw []byte
	forged := false
	if meta >= 0 {
		metaRaw = params[ms[meta].vstart:ms[meta].end]
		if string(metaRaw) != "null" {
			var isObj bool
			metaMembers, isObj = objectMembers(metaRaw)
			if !isObj {
				if metaRaw[0] == '{' {
					return nil, false // an escaped key
				}
				return params, true // a _meta that is not an object is the SDK's to reject
			}
			for _, m := range metaMembers {
				if bytes.HasPrefix(m.key, quotedPrivate) {
					forged = true
				}
			}
		}
	}
	if task < 0 && connID == "" && !forged {
		return params, true
	}
	out := make([]byte, 0, len(params)+len(keyTaskRequest)+len(keyConnID)+len(connID)+16)
	out = append(out, '{')
	for i, m := range ms {
		if i == task || i == meta {
			continue
		}
		out = append(out, params[m.start:m.end]...)
		out = append(out, ',')
	}
	out = append(out, metaKey...)
	out = append(out, ":{"...)
	n := 0
	for _, m := range metaMembers {
		if bytes.HasPrefix(m.key, quotedPrivate) {
			continue
		}
		out = append(out, metaRaw[m.start:m.end]...)
		out = append(out, ',')
		n++
	}
	if task >= 0 {
		out = append(out, keyTaskRequest...)
		out = append(out, ':')
		out = append(out, params[ms[task].vstart:ms[task].end]...)
		out = append(out, ',')
		n++
	}
	if connID != "" {
		out = append(out, keyConnID...)
		out = append(out, ':')
		out = append(out, quotedKey(connID)...)
		out = append(out, ',')
		n++
	}
	if n > 0 {
		out = out[:len(out)-1]
	}
	out = append(out, "}}"...)
	return out, true
}

// decodeRewrite is rewriteParams through a decoded map: for params whose
// keys hold escapes or repeat.
func decodeRewrite(params json.RawMessage, connID string, moveTask bool) json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil || m == nil {
		return params
	}
	task, hasTask := m["task"]
	hasTask = hasTask && moveTask
	meta := map[string]json.RawMessage{}
	if old, ok := m["_meta"]; ok {
		if err := json.Unmarshal(old, &meta); err != nil {
			return params // a malformed _meta is the SDK's to reject
		}
		if meta == nil { // "_meta": null
			meta = map[string]json.RawMessage{}
		}
	}
	forged := false
	for k := range meta {
		if strings.HasPrefix(k, mcptask.PrivateMetaPrefix) {
			delete(meta, k)
			forged = true
		}
	}
	if !hasTask && connID == "" && !forged {
		return params
	}
	if hasTask {
		delete(m, "task")
		meta[metaTaskRequest] = task
	}
	if connID != "" {
		meta[metaConnID], _ = json.Marshal(connID)
	}
	m["_meta"], _ = json.Marshal(meta)
	out, err := json.Marshal(m)
	if err != nil {
		return params
	}
	return out
}

// mayNeedRewrite is a fast filter: params can only carry a "task" key or a
// private _meta key if the bytes contain them literally or contain a \u
// escape (which could spell them).
func mayNeedRewrite(params []byte) bool {
	return bytes.Contains(params, keyTask) || bytes.Contains(params, privatePrefix) || bytes.IndexByte(params, '\\') >= 0
}

// ---- stdio / in-memory ----

// Transport wraps an MCP transport (stdio, in-memory, or any other
// persistent one) so core-dialect task-augmented calls reach the router and
// task status notifications can be pushed to the client. The wrapped
// connection answers the task methods itself (see fastpath.go).
func (r *Router) Transport(t mcp.Transport) mcp.Transport {
	return &taskTransport{inner: t, r: r}
}

type taskTransport struct {
	inner  mcp.Transport
	r      *Router
	noFast bool // the task methods go through the SDK (tests compare both)
}

func (t *taskTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	var pc *pushConn
	if src, ok := framedSourceOf(t.inner); ok && !t.noFast {
		c, err := t.connectFramed(ctx, src) // fastframe.go
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
	// the requests in flight, by id: the fast path's, and the SDK's calls
	// (the SDK refuses an id in flight, and knows only its own).
	noFast bool
	ss     atomic.Pointer[mcp.ServerSession]
	fast   map[jsonrpc.ID]context.CancelCauseFunc
	sdk    map[jsonrpc.ID]int
	// framed: the router reads the stream itself and answers the fast
	// path's messages before they reach the SDK (fastframe.go); closeSrc
	// closes that stream's reading side.
	framed   bool
	closeSrc func() error
}

// connListen is a subscriptions/listen stream served on a pushConn.
type connListen struct{ cancel context.CancelFunc }

func (c *pushConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		req, ok := msg.(*jsonrpc.Request)
		if !ok || err != nil {
			return msg, err
		}
		if req.IsCall() && !c.framed {
			switch c.inFlight(req.ID) {
			case inflightFast:
				// The SDK's jsonrpc2 layer drops a call whose id is in
				// flight, without an answer; this one is in flight here.
				continue
			case inflightNone:
				if (req.Method == mcptask.MethodToolsCall || mcptask.IsTaskMethod(req.Method)) && c.serveFast(req) {
					continue
				}
			}
		}
		switch req.Method {
		case mcptask.MethodToolsCall:
			req.Params = rewriteParams(req.Params, c.id, true)
		case mcptask.MethodPromptsGet:
			req.Params = rewriteParams(req.Params, c.id, false)
		case mcptask.MethodSubscriptionsListen:
			var lp listenParams
			if req.IsCall() && json.Unmarshal(req.Params, &lp) == nil && lp.forTasks() {
				c.listen(req, &lp)
				continue // answered here, not by the SDK
			}
			req.Params = rewriteParams(req.Params, "", false)
		case methodCancelled:
			c.cancelListen(req.Params) // and the SDK cancels its own requests
			c.cancelFast(req.Params)
		default:
			connID := ""
			if req.IsCall() && c.ss.Load() == nil {
				connID = c.id // so the router learns this connection's session
			}
			req.Params = rewriteParams(req.Params, connID, false)
		}
		if req.IsCall() && !c.framed {
			c.beginSDK(req.ID) // the framer records the calls it passes on itself
		}
		return msg, err
	}
}

// Write passes msg on, noting the end of the SDK's call it answers.
func (c *pushConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok && resp.ID.IsValid() {
		c.endSDK(resp.ID)
	}
	return c.Connection.Write(ctx, msg)
}

// setSession records the session the SDK made of the connection.
func (c *pushConn) setSession(ss *mcp.ServerSession) { c.ss.CompareAndSwap(nil, ss) }

func (c *pushConn) inFlight(id jsonrpc.ID) inflight {
	key := id
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.fast[key] != nil:
		return inflightFast
	case c.sdk[key] > 0:
		return inflightSDK
	}
	return inflightNone
}

func (c *pushConn) beginSDK(id jsonrpc.ID) {
	key := id
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sdk == nil {
		c.sdk = map[jsonrpc.ID]int{}
	}
	c.sdk[key]++
}

func (c *pushConn) endSDK(id jsonrpc.ID) {
	key := id
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.sdk[key]; ok {
		if n <= 1 {
			delete(c.sdk, key)
		} else {
			c.sdk[key] = n - 1
		}
	}
}

// serveFast answers a tasks/* call on the connection, if the SDK would
// have dispatched it, in its own goroutine as the SDK does; it reports
// false to leave the call to the SDK.
func (c *pushConn) serveFast(req *jsonrpc.Request) bool {
	if c.noFast || !c.r.fastUsable() {
		return false
	}
	defer c.r.recoverFast("connection")
	ss := c.ss.Load()
	if ss == nil || ss.InitializeParams() == nil {
		return false // the SDK refuses calls before initialize, or learns the client from this one
	}
	if req.Method == mcptask.MethodToolsCall && !mayAskTask(req.Params) &&
		ss.InitializeParams().ProtocolVersion < mcptask.ExtensionVersion {
		// A plain call (no params.task, no per-request version, a session
		// older than the extension): the SDK serves it; decoding it here
		// would be thrown away.
		return false
	}
	call, ok := decodeFastCall(req.ID, req.Method, req.Params)
	if !ok {
		return false
	}
	mv, ok := viewMeta(call.meta)
	if !ok || mv.newProtocol && (!c.r.fast.accepted(mv.version) || c.r.serverInfo(context.Background()) == nil) {
		return false
	}
	connID := ""
	if req.Method == mcptask.MethodToolsCall {
		connID = c.id // as Read tags every tools/call
	}
	pc, ok := c.r.prepareCall(call, mv, ss, nil, connID, false)
	if !ok {
		return false
	}
	key := req.ID
	ctx, cancel := context.WithCancelCause(context.Background())
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cancel(nil)
		return false
	}
	if c.fast == nil {
		c.fast = map[jsonrpc.ID]context.CancelCauseFunc{}
	}
	c.fast[key] = cancel
	c.mu.Unlock()
	go func() {
		defer cancel(nil)
		defer c.r.recoverFast("connection")
		resp, err := c.r.serveCall(ctx, pc)
		// The id is free again before the answer leaves, as in the SDK.
		c.mu.Lock()
		delete(c.fast, key)
		c.mu.Unlock()
		if err == nil {
			_ = c.Connection.Write(context.Background(), resp)
		}
	}()
	return true
}

// cancelFast cancels the fast-path call a notifications/cancelled names,
// as the SDK cancels its own.
func (c *pushConn) cancelFast(params json.RawMessage) {
	var p mcp.CancelledParams
	if len(params) == 0 || sdkUnmarshal(params, &p) != nil {
		return
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil || !id.IsValid() {
		return
	}
	c.mu.Lock()
	cancel := c.fast[id]
	c.mu.Unlock()
	if cancel != nil {
		cancel(context.Canceled)
	}
}

const methodCancelled = "notifications/cancelled"

// listen serves a subscriptions/listen request for task notifications on
// the connection, in its own goroutine, until the followed tasks ended,
// the client cancels it or the connection closes.
func (c *pushConn) listen(req *jsonrpc.Request, lp *listenParams) {
	write := func(ctx context.Context, msg jsonrpc.Message) bool {
		if err := c.Connection.Write(ctx, msg); err != nil {
			c.r.log.Debug("writing a subscriptions/listen message", "error", err)
			return false
		}
		return true
	}
	refuse := func(err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		write(ctx, &jsonrpc.Response{ID: req.ID, Error: err})
	}
	if !lp.declaresExtension() {
		refuse(mcptask.MissingExtension("task notifications on subscriptions/listen"))
		return
	}
	q := c.r.listenOwner(context.Background(), &mcp.RequestExtra{})
	if q.OwnerErr != nil {
		refuse(q.OwnerErr)
		return
	}
	key := req.ID
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
		c.r.runListen(ctx, q, req.ID.Raw(), lp.Notifications.TaskIDs, listenSink{
			notify: func(method string, params any) bool {
				raw, err := json.Marshal(params)
				return err == nil && write(ctx, &jsonrpc.Request{Method: method, Params: raw})
			},
			reply: func(result any) bool {
				raw, err := json.Marshal(result)
				return err == nil && write(ctx, &jsonrpc.Response{ID: req.ID, Result: raw})
			},
		})
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
	for _, cancel := range c.fast {
		cancel(errSessionClosed)
	}
	c.mu.Unlock()
	c.closeOnce.Do(func() {
		if c.closeSrc != nil {
			_ = c.closeSrc()
		}
		c.r.pushers.remove(c.id)
	})
	return c.Connection.Close()
}
