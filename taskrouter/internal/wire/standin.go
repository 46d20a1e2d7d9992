package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Stand-in sessions for the fast path's 2026-07-28 requests over HTTP.
//
// go-sdk serves each such request on a throwaway session of its stateless
// handler, whose initialize parameters come from the request's _meta; the
// handler code of a request sees that session (req.Session), and the SDK
// reads it too (a tool result gets resultType "complete" only when the
// session's protocol version supports multi round-trip results). The fast
// path hands requests a long-lived session with the same parameters
// instead of making one per request: one per distinct protocol version,
// client capabilities and client information, at most standInMax of them.
// Like the throwaway session it has no id, and it refuses requests to the
// client (nobody could answer them) the way the SDK's stateless transport
// does, and notifications the way it refuses those it cannot deliver.

const standInMax = 32

// StandIns are the stand-in sessions of one server. The zero value is
// ready; its lock is a leaf (sessions connect and close outside it).
type StandIns struct {
	mu    sync.Mutex
	byKey map[string]*standIn
	order []string // oldest first
}

type standIn struct {
	ss   *mcp.ServerSession
	conn net.Conn // the client end, drained
}

// Session returns the stand-in session on server for a 2026-07-28
// request's initialize parameters.
func (f *StandIns) Session(ctx context.Context, server *mcp.Server, ip *mcp.InitializeParams) (*mcp.ServerSession, error) {
	b, err := json.Marshal(ip)
	if err != nil {
		return nil, err
	}
	key := string(b)
	f.mu.Lock()
	s := f.byKey[key]
	f.mu.Unlock()
	if s != nil {
		return s.ss, nil
	}
	if server == nil {
		return nil, fmt.Errorf("taskrouter: Install has not been called")
	}
	// Connect without the lock held; a request that connected the same
	// parameters meanwhile wins, and this session is closed.
	cli, srv := net.Pipe()
	go func() { _, _ = io.Copy(io.Discard, cli) }()
	state := &mcp.ServerSessionState{InitializeParams: ip}
	ss, err := server.Connect(context.WithoutCancel(ctx), &standInTransport{conn: srv}, &mcp.ServerSessionOptions{State: state})
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	in := &standIn{ss: ss, conn: cli}
	winner, evicted := f.add(key, in)
	if evicted != nil {
		go evicted.close() // requests still using it finish first
	}
	if winner != in {
		in.close()
		return winner.ss, nil
	}
	go f.forget(key, in)
	return ss, nil
}

// add keeps in under key unless another session got there first (it
// returns that one then), and returns the oldest session when there are
// too many.
func (f *StandIns) add(key string, in *standIn) (winner, evicted *standIn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.byKey[key]; s != nil {
		return s, nil
	}
	if f.byKey == nil {
		f.byKey = map[string]*standIn{}
	}
	if len(f.order) >= standInMax {
		evicted = f.byKey[f.order[0]]
		delete(f.byKey, f.order[0])
		f.order = f.order[1:]
	}
	f.byKey[key] = in
	f.order = append(f.order, key)
	return in, evicted
}

// forget drops in once its session ends (a keepalive ping it had to
// refuse, say): the next request makes a new one.
func (f *StandIns) forget(key string, in *standIn) {
	_ = in.ss.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byKey[key] == in {
		delete(f.byKey, key)
		for i, k := range f.order {
			if k == key {
				f.order = append(f.order[:i:i], f.order[i+1:]...)
				break
			}
		}
	}
}

func (s *standIn) close() {
	_ = s.ss.Close()
	_ = s.conn.Close()
}

// Close ends every stand-in session (the router is closing).
func (f *StandIns) Close() {
	f.mu.Lock()
	all := f.byKey
	f.byKey, f.order = nil, nil
	f.mu.Unlock()
	for _, s := range all {
		s.close()
	}
}

// standInTransport is the server end of a stand-in session.
type standInTransport struct{ conn net.Conn }

func (t *standInTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := (&mcp.IOTransport{Reader: t.conn, Writer: t.conn}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &standInConn{Connection: c}, nil
}

type standInConn struct{ mcp.Connection }

// errRejected is go-sdk's jsonrpc2.ErrRejected (a request the transport
// refuses, which leaves the connection intact).
var errRejected = &jsonrpc.Error{Code: -32005, Message: "rejected by transport"}

// Write refuses requests to the client as the SDK's stateless transport
// does, and notifications as it refuses those it cannot relate to a
// request's SSE stream (its standalone stream is never connected; the
// fast path writes those it can relate itself: see the router's
// replySink).
func (c *standInConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok {
		if req.IsCall() {
			return fmt.Errorf("%w: stateless servers cannot make requests", errRejected)
		}
		return errUndelivered
	}
	return c.Connection.Write(ctx, msg)
}

// errUndelivered is go-sdk's refusal of a message for a stream that is
// not connected.
var errUndelivered = fmt.Errorf("%w: undelivered message: %v", errRejected, errors.New("stream not connected or already closed"))
