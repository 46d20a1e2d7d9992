package taskrouter_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// hostHarness is a harness with a short host deadline and the built-in
// task tools.
func hostHarness(t *testing.T, deadline time.Duration) *harness {
	h := newHarness(t, func(c *taskrouter.Options) { c.HostDeadline = deadline })
	h.r.AddTaskTools(nil)
	return h
}

// textOf joins a tool result's text content.
func textOf(res map[string]any) string {
	out := ""
	for _, c := range res["content"].([]any) {
		if m := c.(map[string]any); m["type"] == "text" {
			out += m["text"].(string)
		}
	}
	return out
}

// A plain call of a task-capable tool (what every LLM host sends) that
// outlives the host deadline answers within it, naming the task that now
// holds the work; task_result returns what the tool would have returned.
func TestHostDeadlineTurnsALongCallIntoATask(t *testing.T) {
	for _, d := range []dialect{core, extUndeclared} {
		t.Run(map[dialect]string{core: "core", extUndeclared: "ext-undeclared"}[d], func(t *testing.T) {
			h := hostHarness(t, 100*time.Millisecond)
			p := h.dial(overHTTP, d, nil)
			res := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 600, "label": "long"}})
			require.NotEqual(t, true, res["isError"])
			sc := res["structuredContent"].(map[string]any)
			id := sc["taskId"].(string)
			require.Equal(t, "working", sc["status"])
			require.Contains(t, textOf(res), "task "+id)
			require.Contains(t, textOf(res), `call the tool "task_result" with {"task_id": "`+id+`"}`)
			tk, err := h.st.Get(context.Background(), id)
			require.NoError(t, err, "the work is a durable task")
			require.Equal(t, "1", tk.Labels[taskrouter.LabelHost])

			// Each call waits at most the host deadline: a model calls it
			// again while the task runs.
			var out map[string]any
			for range 100 {
				out = p.mustCall("tools/call", map[string]any{"name": "task_result", "arguments": map[string]any{"task_id": id, "wait_seconds": 5}})
				if out["structuredContent"] == nil || out["structuredContent"].(map[string]any)["status"] != "working" {
					break
				}
				require.Contains(t, textOf(out), "is still running")
			}
			require.Equal(t, "slept long", textOf(out), "the tool's own result")
			require.NotEqual(t, true, out["isError"])
		})
	}
}

// A plain call that ends within the deadline answers as a plain call, and
// stores nothing.
func TestHostDeadlineQuickCallStoresNothing(t *testing.T) {
	h := hostHarness(t, 5*time.Second)
	p := h.dial(inMemory, core, nil)
	res := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 1, "label": "q"}})
	require.Equal(t, "slept q", textOf(res))
	counts, err := h.st.Counts(context.Background())
	require.NoError(t, err)
	for _, n := range counts {
		require.Zero(t, n)
	}
}

// A caller that goes away before the deadline stops nothing: the work is
// a task at once, and ends.
func TestHostCallerLeavingKeepsTheWork(t *testing.T) {
	h := hostHarness(t, time.Minute)
	p := h.dial(inMemory, core, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-h.started
		cancel()
	}()
	var res map[string]any
	_ = p.c.Call(ctx, "tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 300, "label": "left"}}, &res)
	var id string
	require.Eventually(t, func() bool {
		page, err := h.st.Query(context.Background(), store.Query{})
		if err != nil || len(page.Tasks) == 0 {
			return false
		}
		id = page.Tasks[0].ID
		return true
	}, 30*time.Second, 5*time.Millisecond)
	done := p.waitStatus(id, "completed")
	require.Equal(t, "completed", done["status"])
	require.False(t, h.wasCancelled("left"))
}

// A required tool called plainly in the core dialect is served like an
// optional one (a documented deviation from the spec's -32600, which would
// lock every LLM host out); with the host deadline off it is refused. In
// the extension dialect it is refused with -32021, as the spec and the
// conformance suite require.
func TestRequiredToolCalledPlainly(t *testing.T) {
	h := hostHarness(t, 5*time.Second)
	res := h.dial(inMemory, core, nil).mustCall("tools/call", map[string]any{"name": "must", "arguments": map[string]any{"ms": 1, "label": "r"}})
	require.Equal(t, "slept r", textOf(res))
	_, err := h.dial(inMemory, extUndeclared, nil).call("tools/call", map[string]any{"name": "must", "arguments": map[string]any{"ms": 1}})
	require.EqualValues(t, -32021, rpcCode(t, err))

	off := newHarness(t, func(c *taskrouter.Options) { c.HostDeadline = -1 })
	_, err = off.dial(inMemory, core, nil).call("tools/call", map[string]any{"name": "must", "arguments": map[string]any{"ms": 1}})
	require.EqualValues(t, -32600, rpcCode(t, err))
}

// task_result and task_cancel obey owners and say what happened, as
// results a model reads (never JSON-RPC errors).
func TestTaskTools(t *testing.T) {
	h := hostHarness(t, 50*time.Millisecond)
	p := h.dial(overHTTP, core, nil)
	other := h.dial(overHTTP, core, nil) // its own session: its own owner

	unknown := p.mustCall("tools/call", map[string]any{"name": "task_result", "arguments": map[string]any{"task_id": "0123456789abcdef0123456789abcdef"}})
	require.Equal(t, true, unknown["isError"])
	require.Contains(t, textOf(unknown), `"0123456789abcdef0123456789abcdef"`)

	created := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 60000, "label": "c"}, "task": map[string]any{}})
	id := created["task"].(map[string]any)["taskId"].(string)
	running := p.mustCall("tools/call", map[string]any{"name": "task_result", "arguments": map[string]any{"task_id": id, "wait_seconds": 0}})
	require.NotEqual(t, true, running["isError"])
	require.Contains(t, textOf(running), "is still running")
	require.Equal(t, "working", running["structuredContent"].(map[string]any)["status"])

	// Anonymous tasks are id capabilities: another session may read and
	// cancel them (README "Owners"); a token owner's may not (see
	// TestTaskToolsObeyTokenOwners in integration).
	cancelled := other.mustCall("tools/call", map[string]any{"name": "task_cancel", "arguments": map[string]any{"task_id": id}})
	require.Contains(t, textOf(cancelled), "is cancelled")
	require.Eventually(t, func() bool { return h.wasCancelled("c") }, 30*time.Second, 5*time.Millisecond, "the work stopped")
	again := p.mustCall("tools/call", map[string]any{"name": "task_cancel", "arguments": map[string]any{"task_id": id}})
	require.Contains(t, textOf(again), "had already ended (cancelled)")
	res := p.mustCall("tools/call", map[string]any{"name": "task_result", "arguments": map[string]any{"task_id": id}})
	require.Equal(t, true, res["isError"])
	require.Contains(t, textOf(res), "was cancelled")

	failed := p.mustCall("tools/call", map[string]any{"name": "rpcerr", "arguments": map[string]any{}, "task": map[string]any{}})
	fid := failed["task"].(map[string]any)["taskId"].(string)
	res = p.mustCall("tools/call", map[string]any{"name": "task_result", "arguments": map[string]any{"task_id": fid}})
	require.Equal(t, true, res["isError"])
	require.Contains(t, textOf(res), "custom failure")

	_, err := p.call("tools/call", map[string]any{"name": "task_result", "arguments": map[string]any{"task_id": fid}, "task": map[string]any{}})
	require.EqualValues(t, -32600, rpcCode(t, err), "the task tools are never tasks themselves")
}

// The _task_id argument of a step tool is advertised in its schema and
// moved into _meta before the tool's schema is checked.
func TestTaskIDArgument(t *testing.T) {
	h := hostHarness(t, time.Second)
	var got []mcp.Meta
	h.r.SetContinuation(func(ctx context.Context, q *taskrouter.Request, req *mcp.CallToolRequest) (mcp.Result, error) {
		got = append(got, req.Params.GetMeta())
		var args map[string]any
		_ = json.Unmarshal(req.Params.Arguments, &args)
		return textResult("continued " + args["text"].(string)), nil
	})
	h.r.AcceptTaskIDArgument("echo")
	p := h.dial(inMemory, core, nil)
	list := p.mustCall("tools/list", nil)
	for _, tl := range list["tools"].([]any) {
		tool := tl.(map[string]any)
		props, _ := tool["inputSchema"].(map[string]any)["properties"].(map[string]any)
		if tool["name"] == "echo" {
			require.Contains(t, props, "_task_id")
		} else {
			require.NotContains(t, props, "_task_id", tool["name"])
		}
	}
	res := p.mustCall("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x", "_task_id": "t-1"}})
	require.Equal(t, "continued x", textOf(res))
	require.Equal(t, "t-1", got[0]["_task_id"])
	_, err := p.call("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x", "_task_id": 7}})
	require.EqualValues(t, -32602, rpcCode(t, err))
	// Two different ids: the continuation handler judges (a workflow's
	// id in _meta, one of its child's steps in the argument); without
	// one, the call is refused.
	p.mustCall("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x", "_task_id": "a"}, "_meta": map[string]any{"_task_id": "b"}})
	require.Equal(t, "b", got[1]["_task_id"], "_meta's id is left as it is")
	h.r.SetContinuation(nil)
	_, err = p.call("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x", "_task_id": "a"}, "_meta": map[string]any{"_task_id": "b"}})
	require.EqualValues(t, -32602, rpcCode(t, err))
	res = p.mustCall("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "plain"}})
	require.Equal(t, "plain", textOf(res), "without the argument: a plain call")
}

// task_result's wait_seconds is clamped before any arithmetic: an extreme
// value waits up to the host deadline (it used to overflow and return at
// once), a negative one is refused; its schema has one type (Inspector's
// --strict flags a type array).
func TestTaskResultWaitExtremes(t *testing.T) {
	h := hostHarness(t, 20*time.Second)
	p := h.dial(inMemory, core, nil)
	list := p.mustCall("tools/list", nil)
	for _, tl := range list["tools"].([]any) {
		tool := tl.(map[string]any)
		if tool["name"] != "task_result" {
			continue
		}
		ws := tool["inputSchema"].(map[string]any)["properties"].(map[string]any)["wait_seconds"].(map[string]any)
		require.Equal(t, "number", ws["type"], "one type, not [null, number]: %v", ws)
		require.NotContains(t, tool["inputSchema"].(map[string]any)["required"], "wait_seconds")
	}
	for _, wait := range []any{1e308, 1e11, 9.3e18, float64(1 << 62)} {
		created := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 300, "label": "w"}, "task": map[string]any{}})
		id := created["task"].(map[string]any)["taskId"].(string)
		out := p.mustCall("tools/call", map[string]any{"name": "task_result", "arguments": map[string]any{"task_id": id, "wait_seconds": wait}})
		require.Equal(t, "slept w", textOf(out), "wait_seconds %v waits (up to the host deadline) for the task to end", wait)
	}
	created := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 60000, "label": "n"}, "task": map[string]any{}})
	id := created["task"].(map[string]any)["taskId"].(string)
	for _, wait := range []any{-1, -1e308} {
		out := p.mustCall("tools/call", map[string]any{"name": "task_result", "arguments": map[string]any{"task_id": id, "wait_seconds": wait}})
		require.Equal(t, true, out["isError"])
		require.Contains(t, textOf(out), "wait_seconds")
	}
}
