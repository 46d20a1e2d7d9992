package taskrouter_test

import (
	"context"
	"encoding/json"
	"github.com/taskbridge/taskbridge/mcptask"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// writeCounter counts the durable writes a store receives, per task.
type writeCounter struct {
	store.Store
	mu      sync.Mutex
	creates map[string]mcptask.Status // task id -> status it was created in
	updates map[string]int
}

func countWrites(st store.Store) *writeCounter {
	return &writeCounter{Store: st, creates: map[string]mcptask.Status{}, updates: map[string]int{}}
}

func (w *writeCounter) Create(ctx context.Context, t *store.Task) (*store.Task, error) {
	out, err := w.Store.Create(ctx, t)
	if err == nil {
		w.mu.Lock()
		w.creates[t.ID] = t.Status
		w.mu.Unlock()
	}
	return out, err
}

func (w *writeCounter) Update(ctx context.Context, id string, u store.Update) (*store.Task, error) {
	out, err := w.Store.Update(ctx, id, u)
	if err == nil {
		w.mu.Lock()
		w.updates[id]++
		w.mu.Unlock()
	}
	return out, err
}

func (w *writeCounter) writes(id string) (mcptask.Status, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.creates[id], w.updates[id]
}

func drainStarted(h *harness) {
	go func() {
		for range h.started {
		}
	}()
}

// TestInstantToolIsOneWrite: a handler that returns within the instant
// window has its task created ended, outcome included, in one write; the
// client reads it back like any task, in both dialects.
func TestInstantToolIsOneWrite(t *testing.T) {
	for _, k := range transports {
		t.Run(k.String(), func(t *testing.T) {
			st := countWrites(memory.New(nil))
			h := newHarnessOn(t, st, func(c *taskrouter.Options) { c.InstantWindow = time.Second })
			drainStarted(h)

			p := h.dial(k, core, nil)
			task := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0, "label": "c"}, "task": map[string]any{}}))
			require.Equal(t, "completed", task["status"])
			id := task["taskId"].(string)
			res := p.mustCall("tasks/result", map[string]any{"taskId": id})
			require.Equal(t, "slept c", res["content"].([]any)[0].(map[string]any)["text"])
			status, updates := st.writes(id)
			require.Equal(t, mcptask.StatusCompleted, status)
			require.Zero(t, updates)

			e := h.dial(k, ext, nil)
			created := e.mustCall("tools/call", map[string]any{"name": "must", "arguments": map[string]any{"ms": 0, "label": "e"}})
			require.Equal(t, "task", created["resultType"])
			require.Equal(t, "completed", created["status"])
			got := e.mustCall("tasks/get", map[string]any{"taskId": created["taskId"]})
			require.Equal(t, "slept e", got["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])
			status, updates = st.writes(created["taskId"].(string))
			require.Equal(t, mcptask.StatusCompleted, status)
			require.Zero(t, updates)
		})
	}
}

// TestInstantFailuresAreFolded: errors, tool errors and panics of an
// instant handler end its task the way they end any task.
func TestInstantFailuresAreFolded(t *testing.T) {
	st := countWrites(memory.New(nil))
	h := newHarnessOn(t, st, func(c *taskrouter.Options) { c.InstantWindow = time.Second })
	p := h.dial(inMemory, core, nil)
	for tool, want := range map[string]string{"boom": "boom: it broke", "panicky": "task handler panicked: handler exploded", "rpcerr": "custom failure"} {
		task := taskOf(t, p.mustCall("tools/call", map[string]any{"name": tool, "arguments": map[string]any{}, "task": map[string]any{}}))
		require.Equal(t, "failed", task["status"], tool)
		require.Contains(t, task["statusMessage"], want, tool)
		res, err := p.call("tasks/result", map[string]any{"taskId": task["taskId"]})
		if tool == "boom" { // a typed handler's error is a tool error result
			require.NoError(t, err)
			require.Equal(t, true, res["isError"])
		} else {
			require.ErrorContains(t, err, want, tool)
		}
		_, updates := st.writes(task["taskId"].(string))
		require.Zero(t, updates, tool)
	}
}

// TestSlowToolIsStoredWorking: a handler still running when the window
// ends has its working task stored then; the reply does not wait for it.
func TestSlowToolIsStoredWorking(t *testing.T) {
	st := countWrites(memory.New(nil))
	h := newHarnessOn(t, st, func(c *taskrouter.Options) { c.InstantWindow = 20 * time.Millisecond })
	drainStarted(h)
	p := h.dial(inMemory, core, nil)
	// The handler sleeps a minute: the reply is "working", and the
	// handler is still running when the test cancels it after the reply
	// (no wall-clock comparison).
	task := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 60_000, "label": "s"}, "task": map[string]any{}}))
	require.Equal(t, "working", task["status"], "the reply did not wait for the handler")
	id := task["taskId"].(string)
	p.mustCall("tasks/cancel", map[string]any{"taskId": id})
	require.Eventually(t, func() bool { return h.wasCancelled("s") }, 30*time.Second, 5*time.Millisecond)
	status, _ := st.writes(id)
	require.Equal(t, mcptask.StatusWorking, status)
}

// TestInstantWindowOff: with folding off, every task is stored working
// first.
func TestInstantWindowOff(t *testing.T) {
	st := countWrites(memory.New(nil))
	h := newHarnessOn(t, st, func(c *taskrouter.Options) { c.InstantWindow = -1 })
	drainStarted(h)
	p := h.dial(inMemory, core, nil)
	task := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0, "label": "o"}, "task": map[string]any{}}))
	require.Equal(t, "working", task["status"])
	id := task["taskId"].(string)
	p.mustCall("tasks/result", map[string]any{"taskId": id})
	status, updates := st.writes(id)
	require.Equal(t, mcptask.StatusWorking, status)
	require.Equal(t, 1, updates)
}

// TestHandlerThatNeedsItsTaskGetsItStored: a handler that asks for its
// task id (to write variables, say), asks for input, or waits for a
// running slot has a stored task to work with, even within the window.
func TestHandlerThatNeedsItsTaskGetsItStored(t *testing.T) {
	st := countWrites(memory.New(nil))
	h := newHarnessOn(t, st, func(c *taskrouter.Options) {
		c.InstantWindow = time.Hour
		c.MaxConcurrent = 1
	})
	drainStarted(h)
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "noter"}, func(ctx context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		id, ok := taskrouter.TaskID(ctx)
		if !ok {
			return nil, nil, nil
		}
		if _, err := h.r.Update(ctx, id, store.Update{Variables: map[string]json.RawMessage{"note": json.RawMessage(`"` + in.Text + `"`)}}); err != nil {
			return nil, nil, err
		}
		return textResult("noted " + in.Text), nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})

	// blocker makes sure its task is stored (TaskID), then runs until
	// cancelled.
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "blocker"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		taskrouter.TaskID(ctx)
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})

	p := h.dial(inMemory, core, nil)
	task := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "noter", "arguments": map[string]any{"text": "hi"}, "task": map[string]any{}}))
	id := task["taskId"].(string)
	res := p.mustCall("tasks/result", map[string]any{"taskId": id})
	require.Equal(t, "noted hi", res["content"].([]any)[0].(map[string]any)["text"])
	stored, err := h.r.Task(context.Background(), id)
	require.NoError(t, err)
	require.JSONEq(t, `"hi"`, string(stored.Variables["note"]))
	// The counter counts a write once the store returned, which may be
	// after a reader (tasks/result) saw it.
	require.Eventually(t, func() bool {
		status, updates := st.writes(id)
		return status == mcptask.StatusWorking && updates == 2 // the variables, the outcome
	}, 30*time.Second, time.Millisecond)

	// Input: the task waits in input_required where the client can see it.
	asked := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "ask", "arguments": map[string]any{}, "task": map[string]any{}}))
	require.Contains(t, []any{"working", "input_required"}, asked["status"])
	p.waitStatus(asked["taskId"].(string), "input_required")
	p.mustCall("tasks/cancel", map[string]any{"taskId": asked["taskId"]})

	// A running slot: a task queued behind a running one is stored
	// working with a "queued" message, though its window never ends.
	first := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "blocker", "arguments": map[string]any{}, "task": map[string]any{}}))
	require.Equal(t, "working", first["status"])
	second := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0, "label": "q2"}, "task": map[string]any{}}))
	require.Equal(t, "working", second["status"])
	// The reply may come before the "queued" message is written (the
	// record is stored first, so that the message has a task to go to).
	require.Eventually(t, func() bool {
		queued := p.mustCall("tasks/get", map[string]any{"taskId": second["taskId"]})
		msg, _ := queued["statusMessage"].(string)
		return strings.HasPrefix(msg, "queued")
	}, 30*time.Second, time.Millisecond)
	p.mustCall("tasks/cancel", map[string]any{"taskId": first["taskId"]})
	p.waitStatus(second["taskId"].(string), "completed")
}

// TestInstantResultTooLarge: a folded result the store refuses fails the
// task with the reason instead of losing it.
func TestInstantResultTooLarge(t *testing.T) {
	st := memory.New(&store.Options{Limits: store.Limits{MaxResultBytes: 64}})
	h := newHarnessOn(t, st, func(c *taskrouter.Options) { c.InstantWindow = time.Second })
	drainStarted(h)
	p := h.dial(inMemory, core, nil)
	task := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0, "label": strings.Repeat("x", 200)}, "task": map[string]any{}}))
	require.Equal(t, "failed", task["status"])
	require.Contains(t, task["statusMessage"], "task result too large to store")
}

// TestInstantObserved: an observer sees a folded task's creation as its
// end, once.
func TestInstantObserved(t *testing.T) {
	rec := &recorder{}
	h := newHarness(t, func(c *taskrouter.Options) {
		c.Observer = rec
		c.InstantWindow = time.Second
	})
	drainStarted(h)
	p := h.dial(inMemory, core, nil)
	task := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0, "label": "o"}, "task": map[string]any{}}))
	require.Equal(t, "completed", task["status"])
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.tasks, 1)
	require.Equal(t, taskrouter.TaskCreated, rec.tasks[0].Kind)
	require.True(t, rec.tasks[0].Ended)
}

// TestInstantToolTakingItsLogger: a quick handler that takes its task's
// logger (taskrouter.Logger) but logs nothing is still an instant task,
// created ended in one write; one that logs makes its task real first,
// and its record is an event of the task.
func TestInstantToolTakingItsLogger(t *testing.T) {
	st := countWrites(memory.New(nil))
	h := newHarnessOn(t, st, func(c *taskrouter.Options) { c.InstantWindow = time.Second })
	drainStarted(h)
	type logIn struct {
		Say string `json:"say,omitempty"`
	}
	taskrouter.AddTool(h.r, &mcp.Tool{Name: "logs"}, func(ctx context.Context, _ *mcp.CallToolRequest, in logIn) (*mcp.CallToolResult, any, error) {
		log := taskrouter.Logger(ctx).With("tool", "logs")
		if in.Say != "" {
			log.Info(in.Say)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	p := h.dial(inMemory, core, nil)

	quiet := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "logs", "arguments": map[string]any{}, "task": map[string]any{}}))
	require.Equal(t, "completed", quiet["status"])
	status, updates := st.writes(quiet["taskId"].(string))
	require.Equal(t, mcptask.StatusCompleted, status)
	require.Zero(t, updates)

	loud := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "logs", "arguments": map[string]any{"say": "hello"}, "task": map[string]any{}}))
	id := loud["taskId"].(string)
	res := p.mustCall("tasks/result", map[string]any{"taskId": id})
	require.Equal(t, "done", res["content"].([]any)[0].(map[string]any)["text"])
	status, updates = st.writes(id)
	require.Equal(t, mcptask.StatusWorking, status, "a handler that logs is no instant task")
	require.NotZero(t, updates)
	var logged []string
	require.Eventually(t, func() bool {
		page, err := st.Events(context.Background(), id, 0, 100)
		require.NoError(t, err)
		logged = logged[:0]
		for _, e := range page.Events {
			if e.Type == mcptask.EventLog {
				logged = append(logged, string(e.Data))
			}
		}
		return len(logged) == 1
	}, 10*time.Second, 5*time.Millisecond)
	require.Contains(t, logged[0], `"hello"`)
	require.Contains(t, logged[0], `"tool":"logs"`)
}
