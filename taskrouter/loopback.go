package taskrouter

import (
	"context"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// loopback is a session for calls the engine makes on its own, with no
// client request behind them: re-running a retryable tool after a restart,
// listing tools while the builder validates workflows, a workflow server
// step resumed by recovery.
//
// Why it exists: the SDK's method handlers look the method up through the
// request's *mcp.ServerSession and hand that session to the tool handler,
// so a request without one cannot be dispatched. This session is the server
// end of an in-memory connection whose client end reads and discards
// whatever the server sends on it (a tool's logs or progress); requests the
// server sends on it (an elicitation) fail, because nobody can answer them.
// No tool call travels through it as JSON-RPC: Router.RunTool dispatches
// in-process and only names this session.
type loopback struct {
	// server is set by Install, before anything uses the loopback.
	server *mcp.Server

	// mu guards the session; it is a leaf (nothing is called while it is
	// held).
	mu sync.Mutex
	ss *mcp.ServerSession
	cs *mcp.ClientSession
}

// session returns the loopback session, connecting it on first use. The
// lock is not held while connecting (the client's initialize passes the
// router's middleware): two first uses at once may both connect, and the
// later one closes its session and uses the earlier.
func (l *loopback) session(ctx context.Context) (*mcp.ServerSession, error) {
	l.mu.Lock()
	ss, server := l.ss, l.server
	l.mu.Unlock()
	if ss != nil {
		return ss, nil
	}
	if server == nil {
		return nil, fmt.Errorf("taskrouter: Install has not been called")
	}
	ct, st := mcp.NewInMemoryTransports()
	ss, err := server.Connect(context.WithoutCancel(ctx), st, nil)
	if err != nil {
		return nil, fmt.Errorf("taskrouter: loopback session: %w", err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "taskbridge-loopback", Version: "1"}, nil)
	cs, err := client.Connect(context.WithoutCancel(ctx), ct, &mcp.ClientSessionOptions{ProtocolVersion: mcptask.CoreVersion})
	if err != nil {
		_ = ss.Close()
		return nil, fmt.Errorf("taskrouter: loopback session: %w", err)
	}
	l.mu.Lock()
	if l.ss != nil {
		first := l.ss
		l.mu.Unlock()
		_ = cs.Close()
		return first, nil
	}
	l.ss, l.cs = ss, cs
	l.mu.Unlock()
	return ss, nil
}

func (l *loopback) close() {
	l.mu.Lock()
	cs := l.cs
	l.cs, l.ss = nil, nil
	l.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
}
