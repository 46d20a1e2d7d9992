package taskrouter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/taskrouter"
)

func TestExtLifecycle(t *testing.T) {
	for _, k := range transports {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			p := h.dial(k, ext, nil)

			disc := p.mustCall("server/discover", map[string]any{})
			caps := disc["capabilities"].(map[string]any)
			require.Contains(t, caps["extensions"].(map[string]any), mcptask.ExtensionID)
			require.NotContains(t, caps, "tasks")

			// The server decides: an optional tool becomes a task for a
			// declaring client; the reply is flat.
			res := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 100, "label": "e"}})
			require.Equal(t, "task", res["resultType"])
			require.NotContains(t, res, "task")
			require.Equal(t, []any{}, res["content"])
			require.EqualValues(t, taskrouter.DefaultTTL.Milliseconds(), res["ttlMs"])
			require.EqualValues(t, 50, res["pollIntervalMs"])
			id := res["taskId"].(string)

			// Durable before the reply: tasks/get resolves at once.
			got := p.mustCall("tasks/get", map[string]any{"taskId": id})
			require.Equal(t, "complete", got["resultType"])
			require.Equal(t, id, got["taskId"])

			done := p.waitStatus(id, "completed")
			result := done["result"].(map[string]any)
			require.Equal(t, "slept e", result["content"].([]any)[0].(map[string]any)["text"])
			require.NotContains(t, result, "_meta")
			require.NotContains(t, done, "error")

			// A tool error completes the task with isError in this dialect.
			id = p.mustCall("tools/call", map[string]any{"name": "boom", "arguments": map[string]any{}})["taskId"].(string)
			done = p.waitStatus(id, "completed", "failed")
			require.Equal(t, "completed", done["status"])
			require.Equal(t, true, done["result"].(map[string]any)["isError"])

			// A JSON-RPC error fails it, with the error inline and no result.
			id = p.mustCall("tools/call", map[string]any{"name": "rpcerr", "arguments": map[string]any{}})["taskId"].(string)
			done = p.waitStatus(id, "failed", "completed")
			require.Equal(t, "failed", done["status"])
			require.EqualValues(t, -32099, done["error"].(map[string]any)["code"])
			require.NotContains(t, done, "result")

			// The legacy params.task is ignored: a forbidden tool stays sync.
			sync := p.mustCall("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "hi"}, "task": map[string]any{"ttl": 1000}})
			require.Equal(t, "complete", sync["resultType"])
			require.NotContains(t, sync, "taskId")
		})
	}
}

func TestExtCancel(t *testing.T) {
	for _, k := range transports {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			p := h.dial(k, ext, nil)
			id := p.mustCall("tools/call", map[string]any{"name": "must", "arguments": map[string]any{"ms": 60000, "label": "c"}})["taskId"].(string)
			require.Equal(t, "c", <-h.started)
			ack := p.mustCall("tasks/cancel", map[string]any{"taskId": id})
			require.Equal(t, map[string]any{"resultType": "complete"}, withoutMeta(ack))
			require.Equal(t, "cancelled", p.waitStatus(id, "cancelled")["status"])
			require.Eventually(t, func() bool { return h.wasCancelled("c") }, 30*time.Second, 5*time.Millisecond)
			// Idempotent on a finished task.
			ack = p.mustCall("tasks/cancel", map[string]any{"taskId": id})
			require.Equal(t, "complete", ack["resultType"])
		})
	}
}

func withoutMeta(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if k != "_meta" {
			out[k] = v
		}
	}
	return out
}

func TestExtErrors(t *testing.T) {
	h := newHarness(t, nil)
	p := h.dial(inMemory, ext, nil)
	u := h.dial(inMemory, extUndeclared, nil)
	id := p.mustCall("tools/call", map[string]any{"name": "must", "arguments": map[string]any{"ms": 60000}})["taskId"].(string)

	cases := []struct {
		name   string
		p      *peer
		method string
		params map[string]any
		code   int64
	}{
		{"tasks/result removed", p, "tasks/result", map[string]any{"taskId": id}, -32601},
		{"tasks/list removed", p, "tasks/list", map[string]any{}, -32601},
		{"unknown task", p, "tasks/get", map[string]any{"taskId": "nope"}, -32602},
		{"update unknown task", p, "tasks/update", map[string]any{"taskId": "nope", "inputResponses": map[string]any{}}, -32602},
		{"cancel unknown task", p, "tasks/cancel", map[string]any{"taskId": "nope"}, -32602},
		{"get without extension", u, "tasks/get", map[string]any{"taskId": id}, -32021},
		{"update without extension", u, "tasks/update", map[string]any{"taskId": id}, -32021},
		{"cancel without extension", u, "tasks/cancel", map[string]any{"taskId": id}, -32021},
		{"required tool without extension", u, "tools/call", map[string]any{"name": "must", "arguments": map[string]any{"ms": 1}}, -32021},
		{"inputResponses of the wrong type", p, "tasks/update", map[string]any{"taskId": id, "inputResponses": []int{1}}, -32602},
	}
	for _, c := range cases {
		_, err := c.p.call(c.method, c.params)
		require.EqualValues(t, c.code, rpcCode(t, err), c.name)
	}
	// -32021 carries the capability the client must declare.
	_, err := u.call("tools/call", map[string]any{"name": "must", "arguments": map[string]any{"ms": 1}})
	var data struct {
		RequiredCapabilities struct {
			Extensions map[string]any `json:"extensions"`
		} `json:"requiredCapabilities"`
	}
	require.NoError(t, json.Unmarshal(jsonrpcData(t, err), &data))
	require.Contains(t, data.RequiredCapabilities.Extensions, mcptask.ExtensionID)

	// An undeclared client gets optional tools synchronously.
	res := u.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 1, "label": "u"}})
	require.NotContains(t, res, "taskId")
	require.Equal(t, "slept u", res["content"].([]any)[0].(map[string]any)["text"])
	<-h.started
	<-h.started
	// The running task is untouched by all of it.
	require.Equal(t, "working", p.mustCall("tasks/get", map[string]any{"taskId": id})["status"])
}

func TestExtInputRequests(t *testing.T) {
	for _, k := range transports {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			p := h.dial(k, ext, nil)
			id := p.mustCall("tools/call", map[string]any{"name": "ask", "arguments": map[string]any{}})["taskId"].(string)
			got := p.waitStatus(id, "input_required")
			reqs := got["inputRequests"].(map[string]any)
			require.Len(t, reqs, 1)
			var key string
			for k, v := range reqs {
				key = k
				require.Equal(t, "elicitation/create", v.(map[string]any)["method"])
				require.Equal(t, "Proceed?", v.(map[string]any)["params"].(map[string]any)["message"])
			}
			// Unknown keys are ignored; the task keeps waiting.
			p.mustCall("tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{"nope": map[string]any{"x": 1}}})
			require.Equal(t, "input_required", p.mustCall("tasks/get", map[string]any{"taskId": id})["status"])
			ack := p.mustCall("tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{key: map[string]any{"action": "decline"}}})
			require.Equal(t, "complete", ack["resultType"])
			done := p.waitStatus(id, "completed", "failed")
			require.Equal(t, "answer: decline", done["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])
		})
	}
}

func TestExtNameHeaderMismatch(t *testing.T) {
	h := newHarness(t, nil)
	base := h.serveHTTP()
	p := h.dial(overHTTP, ext, nil)
	id := p.mustCall("tools/call", map[string]any{"name": "must", "arguments": map[string]any{"ms": 60000}})["taskId"].(string)
	code := postRaw(t, base, map[string]string{"Mcp-Method": "tasks/get", "Mcp-Name": "someone-else"}, "tasks/get", p.params(map[string]any{"taskId": id}))
	require.EqualValues(t, -32020, code)
	code = postRaw(t, base, map[string]string{"Mcp-Method": "tasks/get", "Mcp-Name": id}, "tasks/get", p.params(map[string]any{"taskId": id}))
	require.EqualValues(t, 0, code)
}

func TestSweepExpiresTasks(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	st := newMemoryWithClock(clock)
	h := newHarnessOn(t, st, func(c *taskrouter.Options) { c.Now = clock; c.ExpiredGrace = time.Minute })
	p := h.dial(inMemory, core, nil)
	done := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0, "label": "d"}, "task": map[string]any{"ttl": 1000}}))["taskId"].(string)
	p.mustCall("tasks/result", map[string]any{"taskId": done})
	running := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 60000, "label": "r"}, "task": map[string]any{"ttl": 1000}}))["taskId"].(string)
	keep := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 60000, "label": "k"}, "task": map[string]any{"ttl": 3600000}}))["taskId"].(string)
	<-h.started
	<-h.started
	<-h.started

	n, err := taskrouter.Sweep(context.Background(), h.r)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is due yet")

	advance(2 * time.Second)
	n, err = taskrouter.Sweep(context.Background(), h.r)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, err = p.call("tasks/get", map[string]any{"taskId": done})
	require.EqualValues(t, -32602, rpcCode(t, err), "a finished task past its ttl is deleted")
	got := p.mustCall("tasks/get", map[string]any{"taskId": running})
	require.Equal(t, "failed", got["status"], "a running task past its ttl is marked, not lost")
	require.Contains(t, got["statusMessage"], "expired")
	require.Eventually(t, func() bool { return h.wasCancelled("r") }, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, "working", p.mustCall("tasks/get", map[string]any{"taskId": keep})["status"])

	// After the grace period the marked task goes too.
	advance(2 * time.Minute)
	_, err = taskrouter.Sweep(context.Background(), h.r)
	require.NoError(t, err)
	_, err = p.call("tasks/get", map[string]any{"taskId": running})
	require.EqualValues(t, -32602, rpcCode(t, err))
}

func TestTaskTimeout(t *testing.T) {
	h := newHarness(t, func(c *taskrouter.Options) { c.TaskTimeout = 50 * time.Millisecond })
	p := h.dial(inMemory, core, nil)
	id := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 60000, "label": "t"}, "task": map[string]any{}}))["taskId"].(string)
	_, err := p.call("tasks/result", map[string]any{"taskId": id})
	require.EqualValues(t, -32603, rpcCode(t, err))
	got := p.mustCall("tasks/get", map[string]any{"taskId": id})
	require.Equal(t, "failed", got["status"])
	require.Contains(t, got["statusMessage"], "timed out")
	require.True(t, h.wasCancelled("t"))
}

func TestRestartResolvesInterruptedTasks(t *testing.T) {
	path := t.TempDir() + "/tasks.db"
	st, err := bboltstore.Open(path, nil)
	require.NoError(t, err)
	h := newHarnessOn(t, st, nil)
	p := h.dial(inMemory, core, nil)
	finished := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0, "label": "f"}, "task": map[string]any{}}))["taskId"].(string)
	p.mustCall("tasks/result", map[string]any{"taskId": finished})
	retry := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 60000, "label": "retry"}, "task": map[string]any{}}))["taskId"].(string)
	noRetry := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "must", "arguments": map[string]any{"ms": 60000, "label": "noretry"}, "task": map[string]any{}}))["taskId"].(string)
	<-h.started
	<-h.started
	<-h.started
	// The process "dies": handlers stop without recording anything.
	require.NoError(t, h.r.Close())
	require.NoError(t, st.Close())

	st2, err := bboltstore.Open(path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st2.Close() })
	// The retryable task runs again; make it quick this time by replacing the tool.
	h2 := newHarnessOn(t, st2, nil)
	_ = h2
	got, err := st2.Get(context.Background(), finished)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusCompleted, got.Status)
	got, err = st2.Get(context.Background(), noRetry)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusFailed, got.Status)
	require.Contains(t, got.StatusMessage, "not registered as safe to retry")
	require.Equal(t, "retry", <-h2.started, "the retryable task was re-run")
	got, err = st2.Get(context.Background(), retry)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusWorking, got.Status)
	require.Equal(t, "re-running after a server restart", got.StatusMessage)
}

func jsonrpcData(t *testing.T, err error) json.RawMessage {
	t.Helper()
	raw, ok := dataOf(err)
	require.True(t, ok, "error has no data: %v", err)
	return raw
}

var _ = mcp.Meta{}

// gatedDeletes is a store whose Delete waits until want deletions are in
// flight at once (or a generous bound passes), recording whether they
// ever were.
type gatedDeletes struct {
	store.Store
	want     int
	mu       sync.Mutex
	inFlight int
	opened   bool
	reached  chan struct{}
}

func (g *gatedDeletes) Delete(ctx context.Context, id string) error {
	g.mu.Lock()
	g.inFlight++
	if g.inFlight == g.want && !g.opened {
		g.opened = true
		close(g.reached)
	}
	g.mu.Unlock()
	select {
	case <-g.reached:
	case <-time.After(10 * time.Second):
	}
	g.mu.Lock()
	g.inFlight--
	g.mu.Unlock()
	return g.Store.Delete(ctx, id)
}

// TestSweepDeletesEndedTasksTogether: a sweep deletes the ended tasks it
// reads several at a time, so that a group-committing store commits them
// together instead of one commit (and its fsyncs) per task.
func TestSweepDeletesEndedTasksTogether(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	st := &gatedDeletes{Store: newMemoryWithClock(clock), want: 8, reached: make(chan struct{})}
	h := newHarnessOn(t, st, func(c *taskrouter.Options) { c.Now = clock })
	drainStarted(h)
	p := h.dial(inMemory, core, nil)
	var ids []string
	for i := range 40 {
		id := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0, "label": fmt.Sprint(i)}, "task": map[string]any{"ttl": 1000}}))["taskId"].(string)
		p.mustCall("tasks/result", map[string]any{"taskId": id})
		ids = append(ids, id)
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	n, err := taskrouter.Sweep(context.Background(), h.r)
	require.NoError(t, err)
	require.Equal(t, len(ids), n)
	select {
	case <-st.reached:
	default:
		t.Fatalf("the sweep never had %d deletions in flight at once", st.want)
	}
	for _, id := range ids {
		_, err := p.call("tasks/get", map[string]any{"taskId": id})
		require.EqualValues(t, -32602, rpcCode(t, err), "a finished task past its ttl is deleted")
	}
}

// heldDeletes is a store whose Delete waits until release is closed,
// counting the deletions it was asked for.
type heldDeletes struct {
	store.Store
	release chan struct{}
	calls   atomic.Int64
}

func (h *heldDeletes) Delete(ctx context.Context, id string) error {
	h.calls.Add(1)
	<-h.release
	return h.Store.Delete(ctx, id)
}

// TestCloseStopsASweepBetweenBatches: closing the router while a sweep
// works through a wave of expired tasks ends the sweep after the read of
// the expiry index in hand (at most 256 tasks), instead of after the
// whole wave.
func TestCloseStopsASweepBetweenBatches(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	st := &heldDeletes{Store: newMemoryWithClock(clock), release: make(chan struct{})}
	h := newHarnessOn(t, st, func(c *taskrouter.Options) { c.Now = clock; c.SweepInterval = 10 * time.Millisecond })
	drainStarted(h)
	p := h.dial(inMemory, core, nil)
	const tasks = 600
	for i := range tasks {
		id := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0, "label": fmt.Sprint(i)}, "task": map[string]any{"ttl": 1000}}))["taskId"].(string)
		p.mustCall("tasks/result", map[string]any{"taskId": id})
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	require.Eventually(t, func() bool { return st.calls.Load() > 0 }, 10*time.Second, time.Millisecond, "the sweeper never began")
	closed := make(chan struct{})
	go func() { _ = h.r.Close(); close(closed) }()
	// The deletions in hand go on once Close has asked the sweeper to
	// stop.
	require.Eventually(t, func() bool { return taskrouter.SweeperStopping(h.r) }, 30*time.Second, time.Millisecond)
	close(st.release)
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
	require.LessOrEqual(t, st.calls.Load(), int64(256), "the sweep went on past its batch")
}
