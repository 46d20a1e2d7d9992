package taskrouter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
)

// Peers: requests the server sends to a client, apart from any request of
// the client's (a workflow step that asks the client's model to sample, or
// a person to fill in a form). go-sdk sends only its own typed requests,
// so it cannot send a task-augmented sampling/createMessage (params.task),
// read the CreateTaskResult a client answers it with, or follow that task
// with tasks/get and tasks/result on the client (the core dialect's
// receiver-side tasks). The shims can: a Peer writes raw JSON-RPC requests
// with ids of its own ("taskbridge-" and a NewTaskID) on the client's
// connection, and the shims take the client's responses to them out of
// the stream before the SDK reads it.
//
//   - stdio and in-memory (Transport): the request is written on the
//     connection; the response is taken in pushConn.Read (or the framer).
//   - Streamable HTTP (HTTPHandler, stateful sessions, core dialect): the
//     request is written as an SSE event on the session's standalone GET
//     stream, between the SDK's own events; the client POSTs its response,
//     which the shim answers with 202 Accepted without the SDK seeing it.
//     A session without an open GET stream has no peer.
//
// A request of a client that names a task (tasks/*, a continuation, a
// resume, the request that created it) binds the task to that client's
// session; Peers.Of returns the peer of the session bound last. The
// bindings live in memory: after a restart a task has no peer until its
// client names it again (Peers.Await waits for that). The 2026-07-28
// protocol forbids requests from the server: a client of that version is
// asked through input requests instead (see InputKind), never through a
// Peer.

// peerIDPrefix starts the id of every request a Peer sends.
const peerIDPrefix = "taskbridge-"

// What the shims look for in a message before decoding it.
var (
	peerIDBytes     = []byte(`"` + peerIDPrefix)
	taskStatusBytes = []byte(`"` + mcptask.NotificationTaskStatus + `"`)
)

// ErrNoPeer is returned by Peers.Await when no client connection that can
// take requests named the task before ctx ended.
var ErrNoPeer = errors.New("taskrouter: no connection to the task's client")

// A Peer sends requests to one client connection (see the package's
// "Peers"). Its methods are safe for concurrent use.
type Peer struct {
	ps *peers
	ss *mcp.ServerSession
}

// Peers is the handle of the requests the server sends clients
// (Router.Peers): the peer of a task's client, now or once it connects.
type Peers struct{ ps *peers }

// peers is the registry of the connections a Peer writes on, the
// sessions tasks are bound to, and the requests waiting for their
// response. Its lock is a leaf.
type peers struct {
	mu      sync.Mutex
	conns   map[*mcp.ServerSession]*pushConn // stdio and in-memory connections, by the session the SDK made of them
	streams map[string]*sseStream            // open standalone GET streams, by HTTP session id
	tasks   map[string]receiverCaps          // receiver capabilities declared in initialize, by HTTP session id
	byTask  map[string]*mcp.ServerSession    // the session that named the task last
	watched map[*mcp.ServerSession]bool      // sessions whose end drops their entries
	pending map[string]chan *jsonrpc.Response
	changed chan struct{} // closed and replaced when a binding or a stream changes
}

// receiverCaps are the task-augmented requests a client declared it takes
// (core: capabilities.tasks.requests in initialize).
type receiverCaps struct {
	sampling    bool // tasks.requests.sampling.createMessage
	elicitation bool // tasks.requests.elicitation.create
}

// readReceiverCaps reads capabilities.tasks.requests from initialize
// params (go-sdk drops the member when it decodes them).
func readReceiverCaps(params json.RawMessage) receiverCaps {
	var p struct {
		Capabilities struct {
			Tasks struct {
				Requests struct {
					Sampling struct {
						CreateMessage json.RawMessage `json:"createMessage"`
					} `json:"sampling"`
					Elicitation struct {
						Create json.RawMessage `json:"create"`
					} `json:"elicitation"`
				} `json:"requests"`
			} `json:"tasks"`
		} `json:"capabilities"`
	}
	if json.Unmarshal(params, &p) != nil {
		return receiverCaps{}
	}
	present := func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }
	rq := p.Capabilities.Tasks.Requests
	return receiverCaps{sampling: present(rq.Sampling.CreateMessage), elicitation: present(rq.Elicitation.Create)}
}

// changedLocked wakes those waiting for a peer. Call with mu held.
func (ps *peers) changedLocked() {
	if ps.changed != nil {
		close(ps.changed)
	}
	ps.changed = make(chan struct{})
}

// wait returns the channel closed at the next change.
func (ps *peers) wait() <-chan struct{} {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.changed == nil {
		ps.changed = make(chan struct{})
	}
	return ps.changed
}

// watchLocked drops the session's entries once it ends. Call with mu
// held.
func (ps *peers) watchLocked(ss *mcp.ServerSession) {
	if ps.watched == nil {
		ps.watched = map[*mcp.ServerSession]bool{}
	}
	if ps.watched[ss] {
		return
	}
	ps.watched[ss] = true
	go func() {
		_ = ss.Wait()
		ps.forget(ss)
	}()
}

// forget drops everything of an ended session.
func (ps *peers) forget(ss *mcp.ServerSession) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(ps.watched, ss)
	delete(ps.conns, ss)
	if id := ss.ID(); id != "" {
		delete(ps.tasks, id)
	}
	for t, s := range ps.byTask {
		if s == ss {
			delete(ps.byTask, t)
		}
	}
	ps.changedLocked()
}

// addConn registers a shimmed connection's session.
func (ps *peers) addConn(ss *mcp.ServerSession, pc *pushConn) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.conns == nil {
		ps.conns = map[*mcp.ServerSession]*pushConn{}
	}
	ps.conns[ss] = pc
	ps.watchLocked(ss)
	ps.changedLocked()
}

// dropConn forgets a closed connection.
func (ps *peers) dropConn(pc *pushConn) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for ss, c := range ps.conns {
		if c == pc {
			delete(ps.conns, ss)
		}
	}
	ps.changedLocked()
}

// noteReceiver records the receiver capabilities an HTTP session's
// initialize declared.
func (ps *peers) noteReceiver(sessionID string, caps receiverCaps) {
	if sessionID == "" {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.tasks == nil {
		ps.tasks = map[string]receiverCaps{}
	}
	ps.tasks[sessionID] = caps
}

// openStream registers an HTTP session's standalone GET stream; the
// returned function unregisters it.
func (ps *peers) openStream(sessionID string, s *sseStream) func() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.streams == nil {
		ps.streams = map[string]*sseStream{}
	}
	ps.streams[sessionID] = s
	ps.changedLocked()
	return func() {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if ps.streams[sessionID] == s {
			delete(ps.streams, sessionID)
			ps.changedLocked()
		}
	}
}

// bind records that a request of session ss named task id.
func (ps *peers) bind(id string, ss *mcp.ServerSession) {
	if id == "" || ss == nil {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.byTask[id] == ss {
		return
	}
	if _, shimmed := ps.conns[ss]; !shimmed && ss.ID() == "" {
		return // a stateless HTTP session: nothing can reach its client later
	}
	if ps.byTask == nil {
		ps.byTask = map[string]*mcp.ServerSession{}
	}
	ps.byTask[id] = ss
	ps.watchLocked(ss)
	ps.changedLocked()
}

// writer returns how to write a request to session ss, or nil when
// nothing can reach its client now (an HTTP session without an open GET
// stream).
func (ps *peers) writer(ss *mcp.ServerSession) func(ctx context.Context, req *jsonrpc.Request) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if pc := ps.conns[ss]; pc != nil {
		return func(ctx context.Context, req *jsonrpc.Request) error { return pc.Connection.Write(ctx, req) }
	}
	if id := ss.ID(); id != "" {
		if s := ps.streams[id]; s != nil {
			return s.send
		}
	}
	return nil
}

// receiver returns the receiver capabilities of session ss.
func (ps *peers) receiver(ss *mcp.ServerSession) receiverCaps {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if pc := ps.conns[ss]; pc != nil {
		return pc.receiver()
	}
	return ps.tasks[ss.ID()]
}

// expect registers a request id waiting for its response.
func (ps *peers) expect(id string) chan *jsonrpc.Response {
	ch := make(chan *jsonrpc.Response, 1)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.pending == nil {
		ps.pending = map[string]chan *jsonrpc.Response{}
	}
	ps.pending[id] = ch
	return ch
}

// unexpect forgets a request id.
func (ps *peers) unexpect(id string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(ps.pending, id)
}

// deliver hands a client's response to the request waiting for it; it
// reports whether the response answers a Peer's request (it must then not
// reach the SDK, which never sent it).
func (ps *peers) deliver(resp *jsonrpc.Response) bool {
	id, ok := resp.ID.Raw().(string)
	if !ok || !strings.HasPrefix(id, peerIDPrefix) {
		return false
	}
	ps.mu.Lock()
	ch := ps.pending[id]
	delete(ps.pending, id)
	ps.mu.Unlock()
	if ch != nil {
		ch <- resp
	}
	return true // a late answer to a request given up on is dropped too
}

// takeResponse reports whether raw (one JSON-RPC message as read from a
// client) is the response to a Peer's request, delivering it if so.
func (ps *peers) takeResponse(raw []byte) bool {
	if !bytes.Contains(raw, peerIDBytes) || !peerResponseID(raw) {
		return false
	}
	msg, err := jsonrpc.DecodeMessage(raw)
	if err != nil {
		return false
	}
	resp, ok := msg.(*jsonrpc.Response)
	return ok && ps.deliver(resp)
}

// peerResponseID reports whether raw, one message, has no method (it is a
// response) and a top-level id that is a string naming a Peer's request:
// read with the byte scanner, so that a message merely mentioning the
// prefix (an extension-dialect request whose _meta carries a client
// named "taskbridge-…", as the Go client and the CLI are) is not decoded
// whole on every request.
func peerResponseID(raw []byte) bool {
	f := wire.Fields(raw, "id", "method")
	var id string
	return f[1] == nil && json.Unmarshal(f[0], &id) == nil && strings.HasPrefix(id, peerIDPrefix)
}

// isTaskStatusNote reports whether body is a client's
// notifications/tasks/status (about a task it runs for the server), which
// go-sdk's HTTP handler refuses as an unknown notification.
func isTaskStatusNote(body []byte) bool {
	if !bytes.Contains(body, taskStatusBytes) {
		return false
	}
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return false
	}
	req, ok := msg.(*jsonrpc.Request)
	return ok && !req.IsCall() && req.Method == mcptask.NotificationTaskStatus
}

// Of returns the peer of the client that named task id last, or nil when
// no connection that can take requests is known for it now (no client
// named it since this process started, its connection closed, or its
// HTTP session has no open GET stream).
func (h *Peers) Of(id string) *Peer { return h.ps.peerOf(id) }

func (ps *peers) peerOf(id string) *Peer {
	ps.mu.Lock()
	ss := ps.byTask[id]
	ps.mu.Unlock()
	if ss == nil || ps.writer(ss) == nil {
		return nil
	}
	return &Peer{ps: ps, ss: ss}
}

// Await waits until a connection that can take requests is known for the
// client of task id (see Of), or ctx ends (ErrNoPeer).
func (h *Peers) Await(ctx context.Context, id string) (*Peer, error) {
	for {
		changed := h.ps.wait()
		if p := h.ps.peerOf(id); p != nil {
			return p, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w %s: %v", ErrNoPeer, id, context.Cause(ctx))
		}
	}
}

// bindRequest binds task id to the session of request q (see bind).
func (ps *peers) bindRequest(id string, q *Request) {
	if q == nil || q.MCP == nil {
		return
	}
	if ss, ok := q.MCP.GetSession().(*mcp.ServerSession); ok && ss != nil {
		ps.bind(id, ss)
	}
}

// Dialect is the tasks dialect of the peer's session.
func (p *Peer) Dialect() mcptask.Dialect {
	if ip := p.ss.InitializeParams(); ip != nil {
		return mcptask.DialectFor(ip.ProtocolVersion)
	}
	return mcptask.Core
}

// Can reports whether the client declared the capability method needs:
// sampling for sampling/createMessage, form elicitation for
// elicitation/create.
func (p *Peer) Can(method string) bool {
	ip := p.ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil {
		return false
	}
	c := ip.Capabilities
	switch method {
	case mcptask.MethodSampling:
		return c.Sampling != nil
	case mcptask.MethodElicit:
		return c.Elicitation != nil && (c.Elicitation.Form != nil || c.Elicitation.URL == nil)
	}
	return false
}

// TakesTask reports whether the client declared that it takes method as
// a task-augmented request (core: capabilities.tasks.requests).
func (p *Peer) TakesTask(method string) bool {
	caps := p.ps.receiver(p.ss)
	switch method {
	case mcptask.MethodSampling:
		return caps.sampling
	case mcptask.MethodElicit:
		return caps.elicitation
	}
	return false
}

// peerCancelWait bounds the notifications/cancelled a Peer sends for a
// request given up on.
const peerCancelWait = 2 * time.Second

// Call sends method with params (any JSON-encodable value; a
// json.RawMessage is sent as it is) to the client and returns the raw
// result. A JSON-RPC error of the client's is returned as a
// *jsonrpc.Error. When ctx ends first, the client is told with
// notifications/cancelled and ctx's cause is returned; a connection that
// closes meanwhile makes the call fail.
func (p *Peer) Call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	write := p.ps.writer(p.ss)
	if write == nil {
		return nil, fmt.Errorf("%w: the connection closed, or has no stream for requests from the server", ErrNoPeer)
	}
	raw, ok := params.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(params); err != nil {
			return nil, fmt.Errorf("taskrouter: encoding the params of %s: %w", method, err)
		}
	}
	idText := peerIDPrefix + NewTaskID()
	id, _ := jsonrpc.MakeID(idText)
	ch := p.ps.expect(idText)
	defer p.ps.unexpect(idText)
	if err := write(ctx, &jsonrpc.Request{ID: id, Method: method, Params: raw}); err != nil {
		return nil, fmt.Errorf("taskrouter: sending %s to the client: %w", method, err)
	}
	ended := p.ps.wait()
	for {
		select {
		case resp := <-ch:
			if resp.Error != nil {
				var je *jsonrpc.Error
				if errors.As(resp.Error, &je) {
					return nil, je
				}
				return nil, resp.Error
			}
			return resp.Result, nil
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), peerCancelWait)
			cp, _ := json.Marshal(map[string]any{"requestId": idText, "reason": "the server no longer waits for it"})
			_ = write(cctx, &jsonrpc.Request{Method: mcptask.MethodCancelled, Params: cp})
			cancel()
			return nil, context.Cause(ctx)
		case <-ended:
			if p.ps.writer(p.ss) == nil {
				return nil, fmt.Errorf("%w: the connection closed while %s waited for its answer", ErrNoPeer, method)
			}
			ended = p.ps.wait()
		}
	}
}

// sseStream is a standalone GET stream of an HTTP session, whose writes
// the SDK and the router's Peers share: the SDK writes each event in one
// Write followed by a flush, so an event the router injects between two
// of them never splits one.
type sseStream struct {
	http.ResponseWriter
	ps      *peers
	session string // the HTTP session id

	mu    sync.Mutex
	ready bool   // the SDK answered 200 with an event stream: Peers may write
	done  bool   // the handler returned
	undo  func() // unregisters the stream
}

// WriteHeader registers the stream for Peers once the SDK accepted it
// (200, an event stream): a GET the SDK refuses (an unknown session, a
// second stream) never replaces the session's stream.
func (s *sseStream) WriteHeader(code int) {
	s.mu.Lock()
	register := !s.ready && code == http.StatusOK && strings.HasPrefix(s.ResponseWriter.Header().Get("Content-Type"), "text/event-stream")
	s.ready = s.ready || register
	s.ResponseWriter.WriteHeader(code)
	s.mu.Unlock()
	if !register {
		return
	}
	undo := s.ps.openStream(s.session, s) // not under s.mu: the registry's lock is a leaf
	s.mu.Lock()
	done := s.done
	if !done {
		s.undo = undo
	}
	s.mu.Unlock()
	if done {
		undo()
	}
}

func (s *sseStream) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ResponseWriter.Write(b)
}

// Flush flushes the stream.
func (s *sseStream) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap is for http.ResponseController.
func (s *sseStream) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// close marks the stream ended (the handler returned) and unregisters
// it.
func (s *sseStream) close() {
	s.mu.Lock()
	s.done = true
	undo := s.undo
	s.mu.Unlock()
	if undo != nil {
		undo()
	}
}

// send writes req as one SSE event.
func (s *sseStream) send(_ context.Context, req *jsonrpc.Request) error {
	data, err := jsonrpc.EncodeMessage(req)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || !s.ready {
		return errors.New("the client's GET stream is not open")
	}
	if _, err := fmt.Fprintf(s.ResponseWriter, "event: message\ndata: %s\n\n", data); err != nil {
		return err
	}
	return http.NewResponseController(s.ResponseWriter).Flush()
}
