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
	server *mcp.Server

	mu sync.Mutex
	ss *mcp.ServerSession
	cs *mcp.ClientSession
}

// session returns the loopback session, connecting it on first use.
func (l *loopback) session(ctx context.Context) (*mcp.ServerSession, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ss != nil {
		return l.ss, nil
	}
	if l.server == nil {
		return nil, fmt.Errorf("taskrouter: Install has not been called")
	}
	ct, st := mcp.NewInMemoryTransports()
	ss, err := l.server.Connect(context.WithoutCancel(ctx), st, nil)
	if err != nil {
		return nil, fmt.Errorf("taskrouter: loopback session: %w", err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "taskbridge-loopback", Version: "1"}, nil)
	cs, err := client.Connect(context.WithoutCancel(ctx), ct, &mcp.ClientSessionOptions{ProtocolVersion: mcptask.CoreVersion})
	if err != nil {
		_ = ss.Close()
		return nil, fmt.Errorf("taskrouter: loopback session: %w", err)
	}
	l.ss, l.cs = ss, cs
	return ss, nil
}

func (l *loopback) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cs != nil {
		_ = l.cs.Close()
		l.cs, l.ss = nil, nil
	}
}
