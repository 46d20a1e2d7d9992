package client_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/client"
)

// samplingTask asks c's Receiver, through s, for a task-augmented sampling
// of text and returns the task id.
func samplingTask(t *testing.T, s *rawServer, text string, ttlMs int) string {
	t.Helper()
	p := samplingParams(map[string]any{"ttl": ttlMs})
	p["messages"] = []any{map[string]any{"role": "user", "content": map[string]any{"type": "text", "text": text}}}
	created := s.mustCall("sampling/createMessage", p)
	return created["task"].(map[string]any)["taskId"].(string)
}

// TestReceiverStoreKeepsTasksAcrossRestarts: with a store, a client that
// restarts serves the tasks it ran for the server on its next connection:
// a finished one with the result it computed (its handler is not asked
// again), an unfinished one by running its handler again with the same
// request; expired ones are gone.
func TestReceiverStoreKeepsTasksAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "receiver.db")
	st, err := client.OpenReceiverStore(path)
	require.NoError(t, err)

	var mu sync.Mutex
	calls := map[string]int{}
	blocked := make(chan struct{}, 1)
	first := true
	handler := func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
		text := p.Messages[0].Content.(*mcp.TextContent).Text
		mu.Lock()
		calls[text]++
		block := first && text == "slow"
		mu.Unlock()
		if block {
			blocked <- struct{}{}
			<-ctx.Done() // the client closes while it runs
			return nil, ctx.Err()
		}
		return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "answer to " + text}}, nil
	}

	s1, ct1 := newRawServer(t)
	c1 := dial(t, ct1, &client.Options{Receiver: &client.Receiver{Sampling: handler, Store: st}})
	quick := samplingTask(t, s1, "quick", 60000)
	require.Eventually(t, func() bool { return s1.mustCall("tasks/get", map[string]any{"taskId": quick})["status"] == "completed" }, 30*time.Second, 5*time.Millisecond)
	short := samplingTask(t, s1, "short-lived", 50)
	slow := samplingTask(t, s1, "slow", 60000)
	<-blocked
	require.NoError(t, c1.Close())
	require.NoError(t, st.Close())
	time.Sleep(60 * time.Millisecond) // the short-lived task's ttl runs out meanwhile

	st, err = client.OpenReceiverStore(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	mu.Lock()
	first = false
	mu.Unlock()
	s2, ct2 := newRawServer(t)
	dial(t, ct2, &client.Options{Receiver: &client.Receiver{Sampling: handler, Store: st}})

	res := s2.mustCall("tasks/result", map[string]any{"taskId": quick})
	require.Equal(t, "answer to quick", res["content"].(map[string]any)["text"])
	res = s2.mustCall("tasks/result", map[string]any{"taskId": slow})
	require.Equal(t, "answer to slow", res["content"].(map[string]any)["text"])
	_, err = s2.call("tasks/get", map[string]any{"taskId": short})
	require.EqualValues(t, -32602, code(t, err), "an expired task is not kept")

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, calls["quick"], "a finished task's handler is not asked again")
	require.Equal(t, 2, calls["slow"], "an unfinished one's runs again")
}

// TestReceiverStoreRefusesWhatItCannotKeep: a task the client cannot
// record is refused (-32603), so the server never follows a task the
// client could lose.
func TestReceiverStoreRefusesWhatItCannotKeep(t *testing.T) {
	st, err := client.OpenReceiverStore(filepath.Join(t.TempDir(), "receiver.db"))
	require.NoError(t, err)
	s, ct := newRawServer(t)
	dial(t, ct, &client.Options{Receiver: &client.Receiver{Store: st,
		Sampling: func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Content: &mcp.TextContent{Text: "x"}}, nil
		}}})
	require.NoError(t, st.Close()) // writes fail from now on
	_, err = s.call("sampling/createMessage", samplingParams(map[string]any{}))
	require.EqualValues(t, -32603, code(t, err))
	require.Empty(t, s.mustCall("tasks/list", nil)["tasks"])
}
