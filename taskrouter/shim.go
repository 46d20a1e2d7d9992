package taskrouter

// The shims in this file exist because go-sdk v1.8 decodes tools/call params
// into a struct without a "task" field, dropping a core-dialect params.task
// before any middleware can see it. Each shim moves that object into
// params._meta[MetaTaskRequest] on the way in, and nothing else about the
// message changes. The transport shim also tags tools/call and prompts/get
// with a per-connection id so the router can push
// notifications/tasks/status on that connection.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
)

// metaConnID is the private _meta key carrying the shim's connection id.
const metaConnID = "taskbridge/conn"

// rewriteParams moves params.task into _meta and, when connID is set, tags
// the params with it. It returns the input unchanged when there is nothing
// to do or the params are not a JSON object.
func rewriteParams(params json.RawMessage, connID string) json.RawMessage {
	if !mayHaveTask(params) && connID == "" {
		return params
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil || m == nil {
		return params
	}
	task, hasTask := m["task"]
	if !hasTask && connID == "" {
		return params
	}
	meta := map[string]json.RawMessage{}
	if old, ok := m["_meta"]; ok {
		if err := json.Unmarshal(old, &meta); err != nil {
			return params // a malformed _meta is the SDK's to reject
		}
		if meta == nil { // "_meta": null
			meta = map[string]json.RawMessage{}
		}
	}
	if hasTask {
		delete(m, "task")
		meta[MetaTaskRequest] = task
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

// mayHaveTask is a fast filter: params can only carry a "task" key if the
// bytes contain it literally or contain a \u escape (which could spell it).
func mayHaveTask(params []byte) bool {
	return bytes.Contains(params, []byte(`"task"`)) || bytes.Contains(params, []byte(`\u`))
}

// takeConnID removes and returns the shim's connection id from _meta.
func takeConnID(p mcp.Params) string {
	meta := p.GetMeta()
	raw, ok := meta[metaConnID]
	if !ok {
		return ""
	}
	delete(meta, metaConnID)
	s, _ := raw.(string)
	return s
}

// ---- stdio / in-memory ----

// Transport wraps an MCP transport (stdio, in-memory, or any other
// persistent one) so core-dialect task-augmented calls reach the router and
// task status notifications can be pushed to the client.
func (r *Router) Transport(t mcp.Transport) mcp.Transport {
	return &taskTransport{inner: t, r: r}
}

type taskTransport struct {
	inner mcp.Transport
	r     *Router
}

func (t *taskTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	pc := &pushConn{Connection: c, id: NewTaskID(), r: t.r}
	t.r.mu.Lock()
	t.r.conns[pc.id] = pc
	t.r.mu.Unlock()
	return pc, nil
}

// pushConn is a shimmed connection.
type pushConn struct {
	mcp.Connection
	id        string
	r         *Router
	closeOnce sync.Once
}

func (c *pushConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if req, ok := msg.(*jsonrpc.Request); ok && err == nil && (req.Method == methodToolsCall || req.Method == "prompts/get") {
		req.Params = rewriteParams(req.Params, c.id)
	}
	return msg, err
}

func (c *pushConn) Close() error {
	c.closeOnce.Do(func() {
		c.r.mu.Lock()
		delete(c.r.conns, c.id)
		for id, cid := range c.r.taskConn {
			if cid == c.id {
				delete(c.r.taskConn, id)
			}
		}
		c.r.mu.Unlock()
	})
	return c.Connection.Close()
}

// bindPusher remembers which connection created a task.
func (r *Router) bindPusher(taskID, connID string) {
	if connID == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.conns[connID]; ok {
		r.taskConn[taskID] = connID
	}
}

// push sends notifications/tasks/status for a core-dialect task to the
// connection that created it, if that connection is shimmed and open.
func (r *Router) push(t *store.Task) {
	r.mu.Lock()
	cid, ok := r.taskConn[t.ID]
	var pc *pushConn
	if ok {
		pc = r.conns[cid]
		if t.Status.Terminal() {
			delete(r.taskConn, t.ID)
		}
	}
	r.mu.Unlock()
	if pc == nil {
		return
	}
	params, err := json.Marshal(CoreTask(t))
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pc.Connection.Write(ctx, &jsonrpc.Request{Method: notificationTaskStatus, Params: params}); err != nil {
		r.log.Debug("pushing task status", "task", t.ID, "error", err)
	}
}

// ---- Streamable HTTP ----

// HTTPOptions configure Router.HTTPHandler.
type HTTPOptions struct {
	// Streamable are passed to both underlying SDK handlers (Stateless is
	// set by the router per protocol version).
	Streamable mcp.StreamableHTTPOptions
	// MaxBodyBytes bounds a request body; zero means 8 MiB.
	MaxBodyBytes int64
}

// HTTPHandler serves the installed server over Streamable HTTP in both
// dialects. Requests at protocol 2026-07-28 and later (by the
// Mcp-Protocol-Version header or the request's _meta) go to a stateless SDK
// handler, as the SDK requires; older ones go to a stateful handler with
// sessions, which is what core-dialect clients (the TypeScript SDK 1.x)
// expect. Core-dialect params.task is moved where the router sees it.
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
		stateful:  mcp.NewStreamableHTTPHandler(get, &statefulOpts),
		stateless: mcp.NewStreamableHTTPHandler(get, &statelessOpts),
		maxBody:   o.MaxBodyBytes,
	}
}

type httpShim struct {
	stateful, stateless http.Handler
	maxBody             int64
}

func (h *httpShim) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	newProtocol := req.Header.Get("Mcp-Protocol-Version") >= ExtensionVersion
	if req.Method == http.MethodPost && req.Body != nil {
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, h.maxBody))
		if err != nil {
			http.Error(w, "request body too large or unreadable: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		_ = req.Body.Close()
		body, perRequest := rewriteBody(body)
		newProtocol = newProtocol || perRequest
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	if newProtocol {
		h.stateless.ServeHTTP(w, req)
		return
	}
	h.stateful.ServeHTTP(w, req)
}

// rewriteBody applies rewriteParams to the tools/call messages of a body
// (one message or a batch) and reports whether any message carries the
// per-request protocol version of 2026-07-28 or later.
func rewriteBody(body []byte) ([]byte, bool) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return body, false
	}
	if trimmed[0] == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(trimmed, &batch); err != nil {
			return body, false
		}
		changed, newProto := false, false
		for i, m := range batch {
			nm, c, np := rewriteMessage(m)
			batch[i] = nm
			changed = changed || c
			newProto = newProto || np
		}
		if !changed {
			return body, newProto
		}
		out, err := json.Marshal(batch)
		if err != nil {
			return body, newProto
		}
		return out, newProto
	}
	out, _, np := rewriteMessage(trimmed)
	return out, np
}

// rewriteMessage decodes one message once: it reports whether the message
// carries a 2026-07-28 per-request protocol version, and moves a
// tools/call's params.task into _meta (re-encoding only when it did).
func rewriteMessage(raw json.RawMessage) (json.RawMessage, bool, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return raw, false, false
	}
	params := m["params"]
	newProto := false
	if bytes.Contains(params, []byte(`"io.modelcontextprotocol/protocolVersion"`)) {
		var p struct {
			Meta map[string]any `json:"_meta"`
		}
		if json.Unmarshal(params, &p) == nil {
			v, _ := p.Meta["io.modelcontextprotocol/protocolVersion"].(string)
			newProto = v >= ExtensionVersion
		}
	}
	var method string
	_ = json.Unmarshal(m["method"], &method)
	if method != methodToolsCall || !mayHaveTask(params) {
		return raw, false, newProto
	}
	np := rewriteParams(params, "")
	if bytes.Equal(np, params) {
		return raw, false, newProto
	}
	m["params"] = np
	out, err := json.Marshal(m)
	if err != nil {
		return raw, false, newProto
	}
	return out, true, newProto
}
