package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/taskbridge/taskbridge/mcptask"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/internal/rpcconn"
)

// rawServer is a core-dialect MCP "server" speaking raw JSON-RPC, so a
// test can send what the go-sdk server cannot: task-augmented sampling and
// elicitation requests, and tasks/* requests to the client.
type rawServer struct {
	t    *testing.T
	conn *rpcconn.Conn

	mu         sync.Mutex
	clientCaps map[string]any
	pushed     []client.Task
	pushedRaw  []json.RawMessage
	methods    []string
}

func newRawServer(t *testing.T) (*rawServer, mcp.Transport) {
	return newRawServerWith(t, nil, nil)
}

// newRawServerWith lets handlers answer methods first, and declares caps
// (nil: tools only) in initialize.
func newRawServerWith(t *testing.T, caps map[string]any, handlers map[string]func(json.RawMessage) (any, error)) (*rawServer, mcp.Transport) {
	t.Helper()
	if caps == nil {
		caps = map[string]any{"tools": map[string]any{}}
	}
	ct, st := mcp.NewInMemoryTransports()
	s := &rawServer{t: t}
	conn, err := rpcconn.Dial(context.Background(), st, &rpcconn.Options{
		Handler: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			s.mu.Lock()
			s.methods = append(s.methods, method)
			s.mu.Unlock()
			if h, ok := handlers[method]; ok {
				return h(params)
			}
			switch method {
			case "initialize":
				var p struct {
					Capabilities map[string]any `json:"capabilities"`
				}
				if err := json.Unmarshal(params, &p); err != nil {
					return nil, err
				}
				s.mu.Lock()
				s.clientCaps = p.Capabilities
				s.mu.Unlock()
				return map[string]any{
					"protocolVersion": "2025-11-25",
					"capabilities":    caps,
					"serverInfo":      map[string]any{"name": "raw", "version": "1"},
				}, nil
			case "tools/list":
				return map[string]any{"tools": []any{}}, nil
			}
			return nil, &jsonrpc.Error{Code: -32601, Message: "method not found: " + method}
		},
		OnNotification: func(method string, params json.RawMessage) {
			if method != "notifications/tasks/status" {
				return
			}
			var tk struct {
				TaskID string `json:"taskId"`
				Status string `json:"status"`
			}
			_ = json.Unmarshal(params, &tk)
			s.mu.Lock()
			s.pushed = append(s.pushed, client.Task{ID: tk.TaskID, Status: mcptask.Status(tk.Status)})
			s.pushedRaw = append(s.pushedRaw, params)
			s.mu.Unlock()
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	s.conn = conn
	return s, ct
}

func (s *rawServer) call(method string, params any) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var res map[string]any
	err := s.conn.Call(ctx, method, params, &res)
	return res, err
}

func (s *rawServer) mustCall(method string, params any) map[string]any {
	s.t.Helper()
	res, err := s.call(method, params)
	require.NoError(s.t, err, method)
	return res
}

func (s *rawServer) pushedStatus(id string, status mcptask.Status) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pushed {
		if p.ID == id && p.Status == status {
			return true
		}
	}
	return false
}

func code(t *testing.T, err error) int64 {
	t.Helper()
	var je *jsonrpc.Error
	require.ErrorAs(t, err, &je)
	return je.Code
}

func samplingParams(task map[string]any) map[string]any {
	p := map[string]any{
		"messages":  []any{map[string]any{"role": "user", "content": map[string]any{"type": "text", "text": "hello"}}},
		"maxTokens": 10,
	}
	if task != nil {
		p["task"] = task
	}
	return p
}

// gate lets a test release a blocked handler.
type gate struct {
	release   chan struct{}
	cancelled chan struct{}
}

func newGate() *gate { return &gate{release: make(chan struct{}), cancelled: make(chan struct{}, 16)} }

func (g *gate) wait(ctx context.Context) error {
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		g.cancelled <- struct{}{}
		return ctx.Err()
	}
}

func newReceiverClient(t *testing.T, r *client.Receiver) (*rawServer, *client.Client) {
	t.Helper()
	s, ct := newRawServer(t)
	c := dial(t, ct, &client.Options{Receiver: r}) // Auto: discover is refused, so initialize
	require.Equal(t, mcptask.Core, c.Dialect())
	return s, c
}

func TestReceiverDeclaresCapabilities(t *testing.T) {
	s, _ := newReceiverClient(t, &client.Receiver{
		Sampling: func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
			return nil, nil
		},
		Elicitation: func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) { return nil, nil },
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, map[string]any{
		"list":   map[string]any{},
		"cancel": map[string]any{},
		"requests": map[string]any{
			"sampling":    map[string]any{"createMessage": map[string]any{}},
			"elicitation": map[string]any{"create": map[string]any{}},
		},
	}, s.clientCaps["tasks"])
	require.Contains(t, s.clientCaps, "sampling")
	require.Contains(t, s.clientCaps, "elicitation")
	require.NotContains(t, s.clientCaps, "roots")
	require.Equal(t, []string{"server/discover", "initialize"}, s.methods)
}

func TestReceiverSamplingTask(t *testing.T) {
	g := newGate()
	var got *mcp.CreateMessageParams
	s, _ := newReceiverClient(t, &client.Receiver{
		Sampling: func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
			got = p
			if err := g.wait(ctx); err != nil {
				return nil, err
			}
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test-model", Content: &mcp.TextContent{Text: "hi there"}}, nil
		},
		PollInterval: 250 * time.Millisecond,
	})

	created := s.mustCall("sampling/createMessage", samplingParams(map[string]any{"ttl": 60000}))
	task, ok := created["task"].(map[string]any)
	require.True(t, ok, "nested core CreateTaskResult: %v", created)
	id := task["taskId"].(string)
	require.Len(t, id, 32)
	require.Equal(t, "working", task["status"])
	require.EqualValues(t, 60000, task["ttl"])
	require.EqualValues(t, 250, task["pollInterval"])
	require.NotEmpty(t, task["createdAt"])
	require.NotEmpty(t, task["lastUpdatedAt"])

	require.Equal(t, "working", s.mustCall("tasks/get", map[string]any{"taskId": id})["status"])
	list := s.mustCall("tasks/list", nil)
	require.Len(t, list["tasks"], 1)
	require.NotContains(t, list, "nextCursor")

	// tasks/result blocks until the handler is done.
	results := make(chan map[string]any, 1)
	go func() {
		res, err := s.call("tasks/result", map[string]any{"taskId": id})
		if err != nil {
			res = map[string]any{"error": err.Error()}
		}
		results <- res
	}()
	select {
	case res := <-results:
		t.Fatalf("tasks/result returned before the handler finished: %v", res)
	case <-time.After(100 * time.Millisecond):
	}
	close(g.release)
	var res map[string]any
	select {
	case res = <-results:
	case <-time.After(30 * time.Second):
		t.Fatal("tasks/result did not return")
	}
	require.Equal(t, "assistant", res["role"])
	require.Equal(t, "test-model", res["model"])
	require.Equal(t, "hi there", res["content"].(map[string]any)["text"])
	require.Equal(t, id, res["_meta"].(map[string]any)["io.modelcontextprotocol/related-task"].(map[string]any)["taskId"])
	require.Equal(t, "hello", got.Messages[0].Content.(*mcp.TextContent).Text)

	require.Equal(t, "completed", s.mustCall("tasks/get", map[string]any{"taskId": id})["status"])
	require.Eventually(t, func() bool { return s.pushedStatus(id, mcptask.StatusCompleted) }, 30*time.Second, 5*time.Millisecond)
	s.mu.Lock()
	var pushed map[string]any
	require.NoError(t, json.Unmarshal(s.pushedRaw[len(s.pushedRaw)-1], &pushed))
	s.mu.Unlock()
	require.Contains(t, pushed, "ttl", "a pushed task always carries ttl")

	// A finished task cannot be cancelled.
	_, err := s.call("tasks/cancel", map[string]any{"taskId": id})
	require.EqualValues(t, -32602, code(t, err))
}

func TestReceiverElicitationCancel(t *testing.T) {
	g := newGate()
	s, _ := newReceiverClient(t, &client.Receiver{
		Elicitation: func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			if err := g.wait(ctx); err != nil {
				return nil, err
			}
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
	})
	created := s.mustCall("elicitation/create", map[string]any{"message": "ok?", "requestedSchema": map[string]any{"type": "object"}, "task": map[string]any{}})
	id := created["task"].(map[string]any)["taskId"].(string)
	require.EqualValues(t, time.Hour.Milliseconds(), created["task"].(map[string]any)["ttl"], "default ttl when none is asked for")

	cancelled := s.mustCall("tasks/cancel", map[string]any{"taskId": id})
	require.Equal(t, "cancelled", cancelled["status"])
	require.Equal(t, id, cancelled["taskId"])
	select {
	case <-g.cancelled:
	case <-time.After(30 * time.Second):
		t.Fatal("cancel did not stop the handler")
	}
	_, err := s.call("tasks/cancel", map[string]any{"taskId": id})
	require.EqualValues(t, -32602, code(t, err))
	_, err = s.call("tasks/result", map[string]any{"taskId": id})
	require.EqualValues(t, -32602, code(t, err))
	require.Eventually(t, func() bool { return s.pushedStatus(id, mcptask.StatusCancelled) }, 30*time.Second, 5*time.Millisecond)

	// Sampling has no handler: the client declines the task.
	_, err = s.call("sampling/createMessage", samplingParams(map[string]any{}))
	require.EqualValues(t, -32601, code(t, err))
}

func TestReceiverFailureAndPlainRequests(t *testing.T) {
	s, _ := newReceiverClient(t, &client.Receiver{
		Sampling: func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
			if p.MaxTokens > 100 {
				return nil, errors.New("too many tokens")
			}
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "plain"}}, nil
		},
	})
	params := samplingParams(map[string]any{"ttl": 1000})
	params["maxTokens"] = 1000
	id := s.mustCall("sampling/createMessage", params)["task"].(map[string]any)["taskId"].(string)
	_, err := s.call("tasks/result", map[string]any{"taskId": id})
	require.EqualValues(t, -32603, code(t, err))
	require.Contains(t, err.Error(), "too many tokens")
	got := s.mustCall("tasks/get", map[string]any{"taskId": id})
	require.Equal(t, "failed", got["status"])
	require.Equal(t, "too many tokens", got["statusMessage"])

	// Without params.task the request is answered at once.
	res := s.mustCall("sampling/createMessage", samplingParams(nil))
	require.Equal(t, "plain", res["content"].(map[string]any)["text"])

	for _, m := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		_, err := s.call(m, map[string]any{"taskId": "nope"})
		require.EqualValues(t, -32602, code(t, err), m)
	}
	_, err = s.call("tasks/list", map[string]any{"cursor": "forged"})
	require.EqualValues(t, -32602, code(t, err))
	_, err = s.call("tasks/get", map[string]any{"taskId": 42})
	require.EqualValues(t, -32602, code(t, err))
}

func TestReceiverTTLCapAndExpiry(t *testing.T) {
	g := newGate()
	s, _ := newReceiverClient(t, &client.Receiver{
		Sampling: func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
			if err := g.wait(ctx); err != nil {
				return nil, err
			}
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "late"}}, nil
		},
		MaxTTL:        300 * time.Millisecond,
		SweepInterval: 10 * time.Millisecond,
	})
	task := s.mustCall("sampling/createMessage", samplingParams(map[string]any{"ttl": 1e12}))["task"].(map[string]any)
	require.EqualValues(t, 300, task["ttl"], "the ttl is capped and the actual value reported")
	id := task["taskId"].(string)
	waiting := make(chan error, 1)
	go func() {
		_, err := s.call("tasks/result", map[string]any{"taskId": id})
		waiting <- err
	}()
	require.Eventually(t, func() bool {
		_, err := s.call("tasks/get", map[string]any{"taskId": id})
		return err != nil && code(t, err) == -32602
	}, 30*time.Second, 10*time.Millisecond)
	select {
	case <-g.cancelled:
	case <-time.After(30 * time.Second):
		t.Fatal("expiry did not stop the handler")
	}
	select {
	case err := <-waiting:
		require.EqualValues(t, -32602, code(t, err))
	case <-time.After(30 * time.Second):
		t.Fatal("tasks/result did not return when the task expired")
	}
}

func TestReceiverListPages(t *testing.T) {
	s, _ := newReceiverClient(t, &client.Receiver{
		Sampling: func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "x"}}, nil
		},
	})
	want := map[string]bool{}
	for range 70 {
		want[s.mustCall("sampling/createMessage", samplingParams(map[string]any{}))["task"].(map[string]any)["taskId"].(string)] = true
	}
	got := map[string]bool{}
	cursor, pages := "", 0
	for {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		res := s.mustCall("tasks/list", params)
		pages++
		for _, tk := range res["tasks"].([]any) {
			got[tk.(map[string]any)["taskId"].(string)] = true
		}
		next, _ := res["nextCursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, 2, pages)
	require.Equal(t, want, got)
}
