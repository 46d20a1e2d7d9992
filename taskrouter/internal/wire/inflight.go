package wire

import (
	"context"
	"errors"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The calls in flight on one connection (a wrapped stdio or in-memory
// connection) or one stateful HTTP session: the fast path's, by id, and
// the SDK's. go-sdk refuses (HTTP) or drops (streams) a call whose id is
// in flight, and knows only its own; so the fast path takes a call only
// when its id is free on both sides.

// State is what is in flight under an id.
type State int

// The states.
const (
	// Free: nothing is in flight under the id.
	Free State = iota
	// InFast: the id is in flight on the fast path.
	InFast
	// InSDK: the id (or a batch, whose ids are not looked into) is in
	// flight through the SDK.
	InSDK
	// Closed: the connection or session is closed.
	Closed
)

// ErrSessionClosed ends a fast-path request whose connection or session
// closed: the SDK's response stream ends without an answer then.
var ErrSessionClosed = errors.New("taskrouter: session closed")

// InFlight tracks the calls in flight on one connection or session. Its
// zero value is ready; its lock is a leaf.
type InFlight struct {
	mu      sync.Mutex
	closed  bool
	fast    map[jsonrpc.ID]context.CancelCauseFunc // fast-path requests, by id
	sdk     map[jsonrpc.ID]int                     // calls through the SDK, by id
	batches int                                    // batches through the SDK
}

// State reports what is in flight under id.
func (f *InFlight) State(id jsonrpc.ID) State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stateLocked(id)
}

func (f *InFlight) stateLocked(id jsonrpc.ID) State {
	switch {
	case f.closed:
		return Closed
	case f.fast[id] != nil:
		return InFast
	case f.sdk[id] > 0 || f.batches > 0:
		return InSDK
	}
	return Free
}

// BeginFast registers a fast-path request under id, cancelled by cancel,
// when the id is Free; it returns the state it found (Free: registered).
func (f *InFlight) BeginFast(id jsonrpc.ID, cancel context.CancelCauseFunc) State {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.stateLocked(id); s != Free {
		return s
	}
	if f.fast == nil {
		f.fast = map[jsonrpc.ID]context.CancelCauseFunc{}
	}
	f.fast[id] = cancel
	return Free
}

// EndFast forgets the fast-path request under id.
func (f *InFlight) EndFast(id jsonrpc.ID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.fast, id)
}

// CancelFast cancels the fast-path request under id, as
// notifications/cancelled cancels a request of the SDK's.
func (f *InFlight) CancelFast(id jsonrpc.ID) {
	f.mu.Lock()
	cancel := f.fast[id]
	f.mu.Unlock()
	if cancel != nil {
		cancel(context.Canceled)
	}
}

// HasFast reports whether a fast-path request is in flight.
func (f *InFlight) HasFast() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.fast) > 0
}

// BeginSDK records a call the SDK serves; batch records a batch.
func (f *InFlight) BeginSDK(id jsonrpc.ID, batch bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if batch {
		f.batches++
		return
	}
	if f.sdk == nil {
		f.sdk = map[jsonrpc.ID]int{}
	}
	f.sdk[id]++
}

// EndSDK records the end of a call (or a batch) the SDK served.
func (f *InFlight) EndSDK(id jsonrpc.ID, batch bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if batch {
		f.batches--
		return
	}
	if n, ok := f.sdk[id]; ok {
		if n <= 1 {
			delete(f.sdk, id)
		} else {
			f.sdk[id] = n - 1
		}
	}
}

// Close marks the connection or session closed and cancels its fast-path
// requests with ErrSessionClosed.
func (f *InFlight) Close() {
	f.mu.Lock()
	f.closed = true
	fast := f.fast
	f.fast = nil
	f.mu.Unlock()
	for _, cancel := range fast {
		cancel(ErrSessionClosed)
	}
}

// An HTTPSession is a live stateful Streamable HTTP session.
type HTTPSession struct {
	// SS is the SDK's session.
	SS *mcp.ServerSession
	// Handler names the HTTP handler that created it: only that handler
	// serves it.
	Handler string
	// UserID is the user that created it, when authenticated (the SDK
	// binds the session to it).
	UserID string
	// Calls are its calls in flight.
	Calls InFlight
}

// Sessions are the live stateful HTTP sessions, by Mcp-Session-Id. The
// zero value is ready.
type Sessions struct {
	m sync.Map // string -> *HTTPSession
}

// Track records session id the first time a request of it is seen (the
// request of the POST that created it), and forgets it once it ends.
func (s *Sessions) Track(id string, ss *mcp.ServerSession, handler, userID string) {
	if _, ok := s.m.Load(id); ok {
		return
	}
	hs := &HTTPSession{SS: ss, Handler: handler, UserID: userID}
	if _, loaded := s.m.LoadOrStore(id, hs); loaded {
		return
	}
	go func() {
		_ = ss.Wait()
		s.Drop(id, hs)
	}()
}

// Get returns the live session id, or nil.
func (s *Sessions) Get(id string) *HTTPSession {
	v, ok := s.m.Load(id)
	if !ok {
		return nil
	}
	return v.(*HTTPSession)
}

// Drop forgets a closed session and ends its fast-path requests.
func (s *Sessions) Drop(id string, hs *HTTPSession) {
	s.m.CompareAndDelete(id, hs)
	hs.Calls.Close()
}
