package taskrouter_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// addBindTool adds "bindme", which creates a task for its caller (bound
// to the caller's connection, as a workflow prompt's task is) and answers
// with its id.
func (h *harness) addBindTool() {
	h.r.AddRawTool(&mcp.Tool{Name: "bindme", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		t, err := h.r.CreateTask(ctx, h.r.Resolve(ctx, req), store.Request{Method: "tools/call", Name: "bindme"}, &taskrouter.CreateOptions{Kind: "peer-test"})
		if err != nil {
			return nil, err
		}
		return textResult(t.ID), nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskForbidden})
}

// bindFrom calls bindme on p and returns the task id.
func bindFrom(t *testing.T, p *peer) string {
	t.Helper()
	res := p.mustCall("tools/call", map[string]any{"name": "bindme", "arguments": map[string]any{}})
	return res["content"].([]any)[0].(map[string]any)["text"].(string)
}

// samplingCaps declares sampling, and task-augmented sampling when tasks.
func samplingCaps(tasks bool) map[string]any {
	caps := map[string]any{"sampling": map[string]any{}}
	if tasks {
		caps["tasks"] = map[string]any{"requests": map[string]any{"sampling": map[string]any{"createMessage": map[string]any{}}}}
	}
	return caps
}

// TestPeerCallsTheClient: the client that named a task can be sent
// requests outside any of its own, on each transport: the request arrives
// with the peer's own id, the client's answer comes back (a result, or
// its JSON-RPC error, code and all), and the capabilities it declared in
// initialize (tasks.requests, which go-sdk drops) are known.
func TestPeerCallsTheClient(t *testing.T) {
	for _, k := range []transportKind{inMemory, overHTTP} {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			h.addBindTool()
			var mu sync.Mutex
			var seen []json.RawMessage
			handler := func(ctx context.Context, method string, params json.RawMessage) (any, error) {
				require.Equal(t, mcptask.MethodSampling, method)
				mu.Lock()
				seen = append(seen, params)
				mu.Unlock()
				var p mcp.CreateMessageParams
				require.NoError(t, json.Unmarshal(params, &p))
				text := p.Messages[0].Content.(*mcp.TextContent).Text
				if text == "refuse" {
					return nil, &jsonrpc.Error{Code: -32042, Message: "the user refused"}
				}
				return map[string]any{"role": "assistant", "model": "m1", "content": map[string]any{"type": "text", "text": "echo: " + text}}, nil
			}
			p := h.dialWith(k, core, handler, samplingCaps(true))
			id := bindFrom(t, p)

			var peer *taskrouter.Peer
			require.Eventually(t, func() bool { peer = h.r.Peers().Of(id); return peer != nil }, 30*time.Second, 5*time.Millisecond)
			require.True(t, peer.Can(mcptask.MethodSampling))
			require.False(t, peer.Can(mcptask.MethodElicit))
			require.True(t, peer.TakesTask(mcptask.MethodSampling))
			require.False(t, peer.TakesTask(mcptask.MethodElicit))
			require.Equal(t, mcptask.Core, peer.Dialect())

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			msg := func(text string) map[string]any {
				return map[string]any{"maxTokens": 10, "messages": []any{map[string]any{"role": "user", "content": map[string]any{"type": "text", "text": text}}}}
			}
			raw, err := peer.Call(ctx, mcptask.MethodSampling, msg("hello"))
			require.NoError(t, err)
			var res mcp.CreateMessageResult
			require.NoError(t, json.Unmarshal(raw, &res))
			require.Equal(t, "echo: hello", res.Content.(*mcp.TextContent).Text)
			require.Equal(t, "m1", res.Model)

			_, err = peer.Call(ctx, mcptask.MethodSampling, msg("refuse"))
			var je *jsonrpc.Error
			require.ErrorAs(t, err, &je)
			require.EqualValues(t, -32042, je.Code)
			require.Equal(t, "the user refused", je.Message)

			// Many at once: each answer reaches its own request.
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					text := string(rune('a' + i))
					raw, err := peer.Call(ctx, mcptask.MethodSampling, msg(text))
					if !errors.Is(err, nil) {
						t.Errorf("call %d: %v", i, err)
						return
					}
					var res mcp.CreateMessageResult
					if err := json.Unmarshal(raw, &res); err != nil || res.Content.(*mcp.TextContent).Text != "echo: "+text {
						t.Errorf("call %d got %s", i, raw)
					}
				}()
			}
			wg.Wait()
			mu.Lock()
			require.Len(t, seen, 10)
			mu.Unlock()

			// The connection closes: the task has no peer any more.
			require.NoError(t, p.c.Close())
			require.Eventually(t, func() bool { return h.r.Peers().Of(id) == nil }, 30*time.Second, 5*time.Millisecond)
			actx, acancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer acancel()
			_, err = h.r.Peers().Await(actx, id)
			require.ErrorIs(t, err, taskrouter.ErrNoPeer)
		})
	}
}

// TestPeerRebindsToTheNextConnection: a task is bound to the connection
// that named it last (tasks/get here); Peers.Await returns as soon as one
// does, and a connection that declared no receiver capabilities is known
// as one.
func TestPeerRebindsToTheNextConnection(t *testing.T) {
	h := newHarness(t, nil)
	h.addBindTool()
	first := h.dialWith(inMemory, core, nil, map[string]any{})
	id := bindFrom(t, first)
	require.NotNil(t, h.r.Peers().Of(id))
	require.False(t, h.r.Peers().Of(id).Can(mcptask.MethodSampling))
	require.NoError(t, first.c.Close())
	require.Eventually(t, func() bool { return h.r.Peers().Of(id) == nil }, 30*time.Second, 5*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan *taskrouter.Peer, 1)
	go func() {
		p, err := h.r.Peers().Await(ctx, id)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	second := h.dialWith(overHTTP, core, func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		return map[string]any{"role": "assistant", "model": "m2", "content": map[string]any{"type": "text", "text": "from the second"}}, nil
	}, samplingCaps(false))
	second.mustCall("tasks/get", map[string]any{"taskId": id})
	p := <-got
	require.NotNil(t, p)
	require.True(t, p.Can(mcptask.MethodSampling))
	require.False(t, p.TakesTask(mcptask.MethodSampling))
	raw, err := p.Call(ctx, mcptask.MethodSampling, map[string]any{"maxTokens": 5, "messages": []any{}})
	require.NoError(t, err)
	require.Contains(t, string(raw), "from the second")
}

// TestPeerCallGivenUpTellsTheClient: a request the server stops waiting
// for is cancelled on the client (notifications/cancelled), whose
// handler's context ends; and a client's notifications/tasks/status, which
// go-sdk's HTTP handler would refuse (breaking the client's connection),
// is accepted.
func TestPeerCallGivenUpTellsTheClient(t *testing.T) {
	for _, k := range []transportKind{inMemory, overHTTP} {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			h.addBindTool()
			started, stopped := make(chan struct{}, 1), make(chan struct{}, 1)
			p := h.dialWith(k, core, func(ctx context.Context, method string, params json.RawMessage) (any, error) {
				started <- struct{}{}
				<-ctx.Done()
				stopped <- struct{}{}
				return nil, ctx.Err()
			}, samplingCaps(true))
			id := bindFrom(t, p)
			var peer *taskrouter.Peer
			require.Eventually(t, func() bool { peer = h.r.Peers().Of(id); return peer != nil }, 30*time.Second, 5*time.Millisecond)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := peer.Call(ctx, mcptask.MethodSampling, map[string]any{"maxTokens": 5, "messages": []any{}})
				errc <- err
			}()
			<-started
			cancel()
			require.ErrorIs(t, <-errc, context.Canceled)
			select {
			case <-stopped:
			case <-time.After(30 * time.Second):
				t.Fatal("the client's handler was not cancelled")
			}

			require.NoError(t, p.c.Notify(context.Background(), mcptask.NotificationTaskStatus, map[string]any{"taskId": "t1", "status": "working"}))
			require.Equal(t, "working", p.mustCall("tasks/get", map[string]any{"taskId": id})["status"], "the connection still works")
		})
	}
}
