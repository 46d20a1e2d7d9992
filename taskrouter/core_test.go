package taskrouter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

var transports = []transportKind{inMemory, overHTTP}

func taskOf(t *testing.T, res map[string]any) map[string]any {
	t.Helper()
	task, ok := res["task"].(map[string]any)
	require.True(t, ok, "want a nested task in %v", res)
	return task
}

func TestCoreCapabilitiesAndToolList(t *testing.T) {
	for _, k := range transports {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			ctx := context.Background()
			p := h.dial(k, extUndeclared, nil) // dial raw, initialize by hand
			var init map[string]any
			require.NoError(t, p.c.Call(ctx, "initialize", map[string]any{
				"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
				"clientInfo": map[string]any{"name": "x", "version": "1"},
			}, &init))
			caps := init["capabilities"].(map[string]any)
			require.Equal(t, taskrouter.CoreCapability()["list"], caps["tasks"].(map[string]any)["list"])
			require.Contains(t, caps["tasks"].(map[string]any), "requests")
			require.NotContains(t, caps, "extensions", "the extension is for 2026-07-28 sessions, advertised by server/discover")
			require.NoError(t, p.c.Notify(ctx, "notifications/initialized", map[string]any{}))

			var list struct {
				Tools []struct {
					Name      string `json:"name"`
					Execution *struct {
						TaskSupport string `json:"taskSupport"`
					} `json:"execution"`
				} `json:"tools"`
			}
			require.NoError(t, p.c.Call(ctx, "tools/list", map[string]any{}, &list))
			got := map[string]string{}
			for _, tl := range list.Tools {
				require.NotNil(t, tl.Execution, tl.Name)
				got[tl.Name] = tl.Execution.TaskSupport
			}
			require.Equal(t, "forbidden", got["echo"])
			require.Equal(t, "optional", got["sleepy"])
			require.Equal(t, "required", got["must"])
		})
	}
}

func TestCoreLifecycle(t *testing.T) {
	for _, k := range transports {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			p := h.dial(k, core, nil)
			res := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 150, "label": "a"}, "task": map[string]any{"ttl": 60000}})
			task := taskOf(t, res)
			id := task["taskId"].(string)
			require.Len(t, id, 32)
			require.Equal(t, "working", task["status"])
			require.EqualValues(t, 60000, task["ttl"])
			require.EqualValues(t, 50, task["pollInterval"])
			require.NotEmpty(t, task["createdAt"])
			require.NotEmpty(t, task["lastUpdatedAt"])

			got := p.mustCall("tasks/get", map[string]any{"taskId": id})
			require.Equal(t, id, got["taskId"])
			require.Contains(t, []any{"working", "completed"}, got["status"])

			// tasks/result blocks until the task ends and returns the tool result.
			final := p.mustCall("tasks/result", map[string]any{"taskId": id})
			content := final["content"].([]any)
			require.Equal(t, "slept a", content[0].(map[string]any)["text"])
			meta := final["_meta"].(map[string]any)
			require.Equal(t, id, meta[mcptask.MetaRelatedTask].(map[string]any)["taskId"])

			got = p.mustCall("tasks/get", map[string]any{"taskId": id})
			require.Equal(t, "completed", got["status"])

			list := p.mustCall("tasks/list", nil)
			require.Len(t, list["tasks"], 1)
			require.Equal(t, id, list["tasks"].([]any)[0].(map[string]any)["taskId"])

			// Cancelling a finished task is an error in the core dialect.
			_, err := p.call("tasks/cancel", map[string]any{"taskId": id})
			require.EqualValues(t, -32602, rpcCode(t, err))

			// A plain call of an optional tool still works.
			plain := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 1, "label": "plain"}})
			require.Equal(t, "slept plain", plain["content"].([]any)[0].(map[string]any)["text"])
		})
	}
}

func TestCoreErrors(t *testing.T) {
	for _, k := range transports {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			p := h.dial(k, core, nil)
			cases := []struct {
				name   string
				method string
				params map[string]any
				code   int64
			}{
				{"task on forbidden tool", "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}, "task": map[string]any{}}, -32600},
				{"ttl of the wrong type", "tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 1}, "task": map[string]any{"ttl": "soon"}}, -32602},
				{"negative ttl", "tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 1}, "task": map[string]any{"ttl": -5}}, -32602},
				{"task not an object", "tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 1}, "task": 7}, -32602},
				{"get unknown task", "tasks/get", map[string]any{"taskId": "0123456789abcdef0123456789abcdef"}, -32602},
				{"get without id", "tasks/get", map[string]any{}, -32602},
				{"get with id of wrong type", "tasks/get", map[string]any{"taskId": 42}, -32602},
				{"result unknown task", "tasks/result", map[string]any{"taskId": "nope"}, -32602},
				{"cancel unknown task", "tasks/cancel", map[string]any{"taskId": "nope"}, -32602},
				{"forged cursor", "tasks/list", map[string]any{"cursor": "not-a-cursor"}, -32602},
				{"update is extension-only", "tasks/update", map[string]any{"taskId": "x", "inputResponses": map[string]any{}}, -32601},
			}
			for _, c := range cases {
				_, err := p.call(c.method, c.params)
				require.EqualValues(t, c.code, rpcCode(t, err), c.name)
			}
			// Nothing was created by any of the bad calls.
			list := p.mustCall("tasks/list", nil)
			require.Empty(t, list["tasks"])
		})
	}
}

func TestCoreCancelStopsWork(t *testing.T) {
	for _, k := range transports {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			p := h.dial(k, core, nil)
			res := p.mustCall("tools/call", map[string]any{"name": "must", "arguments": map[string]any{"ms": 60000, "label": "long"}, "task": map[string]any{}})
			id := taskOf(t, res)["taskId"].(string)
			require.Equal(t, "long", <-h.started)

			resultErr := make(chan error, 1)
			go func() {
				_, err := p.call("tasks/result", map[string]any{"taskId": id})
				resultErr <- err
			}()
			cancelled := p.mustCall("tasks/cancel", map[string]any{"taskId": id})
			require.Equal(t, "cancelled", cancelled["status"])
			require.Equal(t, id, cancelled["taskId"])

			require.Eventually(t, func() bool { return h.wasCancelled("long") }, 30*time.Second, 5*time.Millisecond, "handler context was not cancelled")
			select {
			case err := <-resultErr:
				require.Error(t, err) // a cancelled task has no result
			case <-time.After(30 * time.Second):
				t.Fatal("tasks/result did not return after cancel")
			}
			require.Equal(t, "cancelled", p.mustCall("tasks/get", map[string]any{"taskId": id})["status"])
			_, err := p.call("tasks/cancel", map[string]any{"taskId": id})
			require.EqualValues(t, -32602, rpcCode(t, err))
		})
	}
}

func TestCoreFailures(t *testing.T) {
	h := newHarness(t, nil)
	p := h.dial(inMemory, core, nil)

	// A tool error (isError) fails the task in the core dialect, with a
	// status message, and tasks/result returns the tool result itself.
	id := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "boom", "arguments": map[string]any{}, "task": map[string]any{}}))["taskId"].(string)
	res := p.mustCall("tasks/result", map[string]any{"taskId": id})
	require.Equal(t, true, res["isError"])
	got := p.mustCall("tasks/get", map[string]any{"taskId": id})
	require.Equal(t, "failed", got["status"])
	require.Contains(t, got["statusMessage"], "boom: it broke")

	// A JSON-RPC error from the handler comes back from tasks/result as
	// that same error.
	id = taskOf(t, p.mustCall("tools/call", map[string]any{"name": "rpcerr", "arguments": map[string]any{}, "task": map[string]any{}}))["taskId"].(string)
	_, err := p.call("tasks/result", map[string]any{"taskId": id})
	require.EqualValues(t, -32099, rpcCode(t, err))
	require.Contains(t, err.Error(), "custom failure")

	// A panicking handler fails its task and leaves the server serving.
	id = taskOf(t, p.mustCall("tools/call", map[string]any{"name": "panicky", "arguments": map[string]any{}, "task": map[string]any{}}))["taskId"].(string)
	_, err = p.call("tasks/result", map[string]any{"taskId": id})
	require.EqualValues(t, -32603, rpcCode(t, err))
	require.Equal(t, "failed", p.mustCall("tasks/get", map[string]any{"taskId": id})["status"])
	require.NotNil(t, p.mustCall("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "still here"}}))
}

func TestCoreTTLCappedAndReported(t *testing.T) {
	h := newHarness(t, func(c *taskrouter.Options) { c.MaxTTL = time.Minute; c.DefaultTTL = 30 * time.Second })
	p := h.dial(inMemory, core, nil)
	task := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 1}, "task": map[string]any{"ttl": 1e12}}))
	require.EqualValues(t, 60000, task["ttl"])
	task = taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 1}, "task": map[string]any{}}))
	require.EqualValues(t, 30000, task["ttl"])
}

func TestCoreInputRequiredOnResultStream(t *testing.T) {
	for _, k := range transports {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			asked := make(chan json.RawMessage, 1)
			p := h.dial(k, core, func(ctx context.Context, method string, params json.RawMessage) (any, error) {
				if method != "elicitation/create" {
					return nil, fmt.Errorf("unexpected %s", method)
				}
				asked <- params
				return map[string]any{"action": "accept", "content": map[string]any{"ok": true}}, nil
			})
			id := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "ask", "arguments": map[string]any{}, "task": map[string]any{}}))["taskId"].(string)
			p.waitStatus(id, "input_required")
			res := p.mustCall("tasks/result", map[string]any{"taskId": id})
			require.Equal(t, "answer: accept", res["content"].([]any)[0].(map[string]any)["text"])
			var req struct {
				Message string `json:"message"`
				Meta    map[string]struct {
					TaskID string `json:"taskId"`
				} `json:"_meta"`
			}
			require.NoError(t, json.Unmarshal(<-asked, &req))
			require.Equal(t, "Proceed?", req.Message)
			require.Equal(t, id, req.Meta[mcptask.MetaRelatedTask].TaskID)
			require.Equal(t, "completed", p.mustCall("tasks/get", map[string]any{"taskId": id})["status"])
		})
	}
}

// TestCoreListPaginatesAndIsOwnerScoped: tasks/list pages through the
// session's own tasks only. Without authentication, another session can
// still reach a task by its id (the id is the capability) unless the router
// is SessionBound.
func TestCoreListPaginatesAndIsOwnerScoped(t *testing.T) {
	for _, bound := range []bool{false, true} {
		t.Run(fmt.Sprintf("SessionBound=%v", bound), func(t *testing.T) {
			testCoreListScoped(t, bound)
		})
	}
}

func testCoreListScoped(t *testing.T, bound bool) {
	h := newHarness(t, func(c *taskrouter.Options) { c.SessionBound = bound })
	a := h.dial(overHTTP, core, nil)
	b := h.dial(overHTTP, core, nil)
	var ids []string
	for i := 0; i < 120; i++ {
		res := a.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 0, "label": "x"}, "task": map[string]any{}})
		ids = append(ids, taskOf(t, res)["taskId"].(string))
	}
	seen := map[string]bool{}
	cursor := ""
	pages := 0
	for {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		res := a.mustCall("tasks/list", params)
		pages++
		for _, tk := range res["tasks"].([]any) {
			seen[tk.(map[string]any)["taskId"].(string)] = true
		}
		next, _ := res["nextCursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	require.Greater(t, pages, 1)
	require.Len(t, seen, len(ids))

	// Another session lists none of it.
	require.Empty(t, b.mustCall("tasks/list", nil)["tasks"])
	for _, m := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		_, err := b.call(m, map[string]any{"taskId": ids[0]})
		switch {
		case bound:
			require.EqualValues(t, -32602, rpcCode(t, err), m)
			require.ErrorContains(t, err, "not found")
		case m == "tasks/cancel":
			// Reached, but already finished.
			require.ErrorContains(t, err, "already completed")
		default:
			require.NoError(t, err, "%s by id from another session", m)
		}
	}
	// And a's cursor is not b's.
	if cursor != "" {
		_, err := b.call("tasks/list", map[string]any{"cursor": cursor})
		require.EqualValues(t, -32602, rpcCode(t, err))
	}
}

func TestCoreStatusPushOnShimmedTransport(t *testing.T) {
	h := newHarness(t, nil)
	p := h.dial(inMemory, core, nil)
	id := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 20, "label": "p"}, "task": map[string]any{}}))["taskId"].(string)
	p.mustCall("tasks/result", map[string]any{"taskId": id})
	require.Eventually(t, func() bool {
		for _, raw := range p.pushed() {
			var tk mcptask.CoreTask
			if json.Unmarshal(raw, &tk) == nil && tk.TaskID == id && tk.Status == "completed" {
				require.NotNil(t, tk.TTL)
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond)
}

func TestBoundedConcurrency(t *testing.T) {
	h := newHarness(t, func(c *taskrouter.Options) { c.MaxConcurrent = 3; c.MaxConcurrentPerOwner = 2 })
	p := h.dial(inMemory, core, nil)
	const n = 40
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 2, "label": fmt.Sprint(i)}, "task": map[string]any{}})
			ids[i] = taskOf(t, res)["taskId"].(string)
		}()
	}
	wg.Wait()
	go func() {
		for range h.started {
		}
	}()
	for _, id := range ids {
		res := p.mustCall("tasks/result", map[string]any{"taskId": id})
		require.Contains(t, res["content"].([]any)[0].(map[string]any)["text"], "slept")
	}
}

func TestPendingLimitPerOwner(t *testing.T) {
	h := newHarness(t, func(c *taskrouter.Options) {
		c.MaxPendingPerOwner = 2
		c.Owner = func(context.Context, mcp.Request) (string, error) { return "user:alice", nil }
	})
	p := h.dial(inMemory, core, nil)
	for range 2 {
		p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 60000}, "task": map[string]any{}})
	}
	// The owner is the limit, whichever connection asks.
	q := h.dial(inMemory, core, nil)
	_, err := q.call("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 1}, "task": map[string]any{}})
	require.EqualValues(t, mcptask.CodeTooManyTasks, rpcCode(t, err))
	require.ErrorContains(t, err, "MaxPendingPerOwner=2")
	require.Len(t, p.mustCall("tasks/list", nil)["tasks"], 2)
}

// TestPendingLimitPerSource: one anonymous session that floods the server
// is refused at its own limit, and another session still creates tasks.
func TestPendingLimitPerSource(t *testing.T) {
	for _, k := range transports {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, func(c *taskrouter.Options) { c.MaxPendingPerSource = 5 })
			flood := h.dial(k, core, nil)
			refused := 0
			for range 20 {
				_, err := flood.call("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 60000}, "task": map[string]any{}})
				if err != nil {
					require.EqualValues(t, mcptask.CodeTooManyTasks, rpcCode(t, err))
					require.ErrorContains(t, err, "from this session")
					require.ErrorContains(t, err, "MaxPendingPerSource=5")
					refused++
				}
			}
			require.Equal(t, 15, refused)
			other := h.dial(k, core, nil)
			other.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 1}, "task": map[string]any{}})
		})
	}
}

// TestMissingParamsDoNotCrash: the TypeScript SDK sends tasks/list without
// params; every tasks/* method must answer such a request, not panic.
func TestMissingParamsDoNotCrash(t *testing.T) {
	for _, k := range transports {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			p := h.dial(k, core, nil)
			ctx := context.Background()
			var list map[string]any
			require.NoError(t, p.c.Call(ctx, "tasks/list", nil, &list))
			require.Empty(t, list["tasks"])
			for _, m := range []string{"tasks/get", "tasks/result", "tasks/cancel", "tasks/update"} {
				err := p.c.Call(ctx, m, nil, nil)
				require.Error(t, err, m)
				require.Contains(t, []int64{-32602, -32601}, rpcCode(t, err), m)
			}
			// Still serving.
			require.NotNil(t, p.mustCall("tasks/list", nil))
		})
	}
}

// TestWorkflowFacingCalls covers FNDX-04: a task created for a prompt
// execution, its variables merged and deleted, then completed with a result
// that tasks/result returns.
func TestWorkflowFacingCalls(t *testing.T) {
	h := newHarness(t, nil)
	p := h.dial(inMemory, core, nil)
	ctx := context.Background()
	task, err := h.r.CreateTask(ctx, nil, store.Request{Method: "prompts/get", Name: "wf"},
		&taskrouter.CreateOptions{Kind: taskrouter.KindWorkflow, Variables: map[string]json.RawMessage{"a": json.RawMessage(`1`)}})
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusWorking, task.Status)
	task, err = h.r.Update(ctx, task.ID, store.Update{IfVersion: task.Version, Variables: map[string]json.RawMessage{"a": json.RawMessage(`null`), "b": json.RawMessage(`{"x":2}`)}})
	require.NoError(t, err)
	require.NotContains(t, task.Variables, "a")
	require.JSONEq(t, `{"x":2}`, string(task.Variables["b"]))
	_, err = h.r.Update(ctx, task.ID, store.Update{IfVersion: task.Version - 1, Variables: map[string]json.RawMessage{"c": json.RawMessage(`3`)}})
	require.ErrorIs(t, err, store.ErrConflict, "a stale version writes nothing")

	waited := make(chan map[string]any, 1)
	go func() {
		res, _ := p.call("tasks/result", map[string]any{"taskId": task.ID})
		waited <- res
	}()
	_, err = h.r.Complete(ctx, task.ID, map[string]any{"messages": []any{}, "description": "done"}, nil, 0)
	require.NoError(t, err)
	select {
	case res := <-waited:
		require.Equal(t, "done", res["description"])
	case <-time.After(30 * time.Second):
		t.Fatal("tasks/result did not wake on Complete")
	}
	_, err = h.r.Fail(ctx, task.ID, "too late", nil)
	require.ErrorIs(t, err, store.ErrTerminal)
}
