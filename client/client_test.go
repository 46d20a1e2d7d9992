package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/taskbridge/taskbridge/mcptask"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/taskrouter"
)

func TestDialNegotiatesDialect(t *testing.T) {
	s := newConfServer(t, nil)

	t.Run("http auto is extension", func(t *testing.T) {
		c := dial(t, client.HTTPTransport(s.endpoint(), nil), nil)
		require.Equal(t, mcptask.Extension, c.Dialect())
		require.Equal(t, mcptask.ExtensionVersion, c.ProtocolVersion())
		require.True(t, c.ServerTasks().Extension)
		require.False(t, c.ServerTasks().Core, "the legacy tasks capability is not advertised at 2026-07-28")
		require.Equal(t, "taskbridge-conformance", c.ServerInfo().Name)
	})
	t.Run("memory auto is extension", func(t *testing.T) {
		c := dial(t, s.memory(), nil)
		require.Equal(t, mcptask.Extension, c.Dialect())
	})
	t.Run("memory core", func(t *testing.T) {
		c := dial(t, s.memory(), &client.Options{Dialect: mcptask.Core})
		require.Equal(t, mcptask.Core, c.Dialect())
		require.Equal(t, mcptask.CoreVersion, c.ProtocolVersion())
		require.Equal(t, client.Support{Core: true, List: true, Cancel: true, ToolsCall: true}, c.ServerTasks(), "initialize advertises core tasks only")
		require.NotNil(t, c.ServerCapabilities().Tools)
	})
	t.Run("http core", func(t *testing.T) {
		c := dial(t, client.HTTPTransport(s.endpoint(), nil), &client.Options{Dialect: mcptask.Core})
		require.Equal(t, mcptask.Core, c.Dialect())
		require.True(t, c.ServerTasks().ToolsCall)
	})
}

// TestDialAutoWithoutTasks: a plain go-sdk server speaks 2026-07-28
// without the tasks extension and refuses initialize after server/discover
// on the same connection; the client stays at 2026-07-28 with no task
// support, and plain calls still work.
func TestDialAutoWithoutTasks(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "plain", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	ctr := counting(ct)
	c := dial(t, ctr, nil)
	require.Equal(t, mcptask.Extension, c.Dialect())
	require.Equal(t, client.Support{}, c.ServerTasks())
	require.Equal(t, "plain", c.ServerInfo().Name)
	require.Equal(t, 1, ctr.count("server/discover"))
	require.Equal(t, 1, ctr.count("initialize"), "initialize was tried for core tasks")

	ctx := testCtx(t)
	r := collect(ctx, c, "echo", map[string]any{"text": "hi"}, nil)
	require.ErrorIs(t, r.err, client.ErrCapability)
	require.Zero(t, ctr.count("tools/call"), "refused before sending")
	res, err := c.CallToolAndWait(ctx, "echo", map[string]any{"text": "hi"}, &client.CallOptions{AllowPlain: true})
	require.NoError(t, err)
	require.Equal(t, "hi", text(res))
}

func TestToolsTaskSupport(t *testing.T) {
	s := newConfServer(t, nil)
	for _, m := range []mode{{false, mcptask.Core}, {true, mcptask.Extension}} {
		t.Run(m.String(), func(t *testing.T) {
			c := s.dial(m, nil)
			tools, err := c.Tools(testCtx(t))
			require.NoError(t, err)
			got := map[string]mcptask.TaskSupport{}
			for _, tl := range tools {
				got[tl.Name] = tl.TaskSupport
				require.NotNil(t, tl.InputSchema, tl.Name)
			}
			require.Equal(t, map[string]mcptask.TaskSupport{
				"greet":               mcptask.TaskForbidden,
				"slow_compute":        mcptask.TaskOptional,
				"failing_job":         mcptask.TaskRequired,
				"protocol_error_job":  mcptask.TaskRequired,
				"confirm_delete":      mcptask.TaskRequired,
				"multi_input":         mcptask.TaskRequired,
				"test_tool_with_task": mcptask.TaskRequired,
				"task_result":         mcptask.TaskForbidden, "task_cancel": mcptask.TaskForbidden,
			}, got)
		})
	}
}

func TestCallToolSlowCompute(t *testing.T) {
	s := newConfServer(t, nil)
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			c := s.dial(m, nil)
			r := collect(testCtx(t), c, "slow_compute", map[string]any{"seconds": 0.2, "label": m.String()}, &client.CallOptions{TTL: time.Minute})
			res := r.result(t)
			require.False(t, res.IsError)
			require.Equal(t, `Computation "`+m.String()+`" completed after 0.2 seconds. Result: 42.`, text(res))

			require.Equal(t, client.EventCreated, r.events[0].Kind)
			created := r.events[0].Task
			require.Len(t, created.ID, 32)
			require.Equal(t, mcptask.StatusWorking, created.Status)
			require.Equal(t, 20*time.Millisecond, created.PollInterval)
			require.False(t, created.CreatedAt.IsZero())
			require.NotNil(t, created.TTL)
			if m.dialect == mcptask.Core {
				require.Equal(t, time.Minute, *created.TTL, "the requested ttl is reported back")
			}
			require.Equal(t, []mcptask.Status{mcptask.StatusCompleted}, r.statuses())
			require.Equal(t, mcptask.StatusCompleted, r.events[len(r.events)-1].Task.Status)
		})
	}
}

func TestCallToolFailures(t *testing.T) {
	s := newConfServer(t, nil)
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			c := s.dial(m, nil)
			ctx := testCtx(t)

			// A tool error is a result with isError in both dialects; the
			// task is failed in the core dialect and completed in the
			// extension, which the client reads as failed too (one status
			// whatever the dialect).
			r := collect(ctx, c, "failing_job", map[string]any{}, nil)
			res := r.result(t)
			require.True(t, res.IsError)
			require.Equal(t, "simulated failure: job crashed", text(res))
			require.Equal(t, []mcptask.Status{mcptask.StatusFailed}, r.statuses())

			// A JSON-RPC error comes back as the server sent it.
			r = collect(ctx, c, "protocol_error_job", map[string]any{}, nil)
			require.Error(t, r.err)
			var re *client.RPCError
			require.ErrorAs(t, r.err, &re)
			require.EqualValues(t, -32603, re.Code)
			require.Equal(t, "internal error: simulated protocol error: server internal failure", re.Message)
			require.NotErrorIs(t, r.err, client.ErrNotFound)
			require.Equal(t, []client.EventKind{client.EventCreated, client.EventStatus}, r.kinds())
			require.Equal(t, mcptask.StatusFailed, r.events[1].Task.Status)
		})
	}
}

func TestCallToolElicitation(t *testing.T) {
	s := newConfServer(t, nil)
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			c := s.dial(m, &client.Options{InputHandler: elicitAnswers(map[string]any{"confirm": true, "name": "ada"})})
			ctx := testCtx(t)

			r := collect(ctx, c, "confirm_delete", map[string]any{"filename": "x"}, nil)
			require.Equal(t, "deleted 'x'", text(r.result(t)))
			var asked []string
			for _, ev := range r.events {
				if ev.Kind == client.EventInput {
					p, err := ev.Input.Elicitation()
					require.NoError(t, err)
					asked = append(asked, p.Message)
					require.Equal(t, r.taskID(), ev.Task.ID)
				}
			}
			require.Equal(t, []string{"Delete 'x'?"}, asked)
			require.Contains(t, r.statuses(), mcptask.StatusInputRequired)

			r = collect(ctx, c, "multi_input", map[string]any{}, nil)
			require.Equal(t, `name="ada" confirmed=true`, text(r.result(t)))
			n := 0
			for _, ev := range r.events {
				if ev.Kind == client.EventInput {
					n++
				}
			}
			require.Equal(t, 2, n)
		})
	}
}

// TestCallToolInputBeforeTask: test_tool_with_task asks for a name before
// it becomes a task: in the extension dialect as an input_required result
// (answered, then the call is retried), in the core dialect as an
// elicitation on the tools/call stream.
func TestCallToolInputBeforeTask(t *testing.T) {
	s := newConfServer(t, nil)
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			var mu sync.Mutex
			var taskIDs []string
			answer := elicitAnswers(map[string]any{"name": "ada"})
			c := s.dial(m, &client.Options{InputHandler: func(ctx context.Context, taskID string, req client.InputRequest) (json.RawMessage, error) {
				mu.Lock()
				taskIDs = append(taskIDs, taskID)
				mu.Unlock()
				return answer(ctx, taskID, req)
			}})
			r := collect(testCtx(t), c, "test_tool_with_task", map[string]any{}, nil)
			require.Equal(t, "Hello, ada! (computed in task)", text(r.result(t)))
			require.Equal(t, []string{""}, taskIDs, "asked once, before any task existed")
			if m.dialect == mcptask.Extension {
				require.Equal(t, client.EventInput, r.events[0].Kind)
				require.Nil(t, r.events[0].Task)
				require.Equal(t, "user_name", r.events[0].Input.Key)
				require.Equal(t, client.EventCreated, r.events[1].Kind)
			} else {
				require.Equal(t, client.EventCreated, r.events[0].Kind)
			}
		})
	}
}

func TestCallToolWithoutInputHandler(t *testing.T) {
	s := newConfServer(t, nil)
	c := s.dial(mode{true, mcptask.Extension}, nil)
	r := collect(testCtx(t), c, "confirm_delete", map[string]any{"filename": "x"}, &client.CallOptions{CancelOnStop: true})
	require.ErrorIs(t, r.err, client.ErrNoInputHandler)
	id := r.taskID()
	require.NotEmpty(t, id)
	task, err := c.GetTask(testCtx(t), id)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusCancelled, task.Status, "CancelOnStop cancelled the abandoned task")
}

func TestRefuseTaskCallBeforeSending(t *testing.T) {
	s := newConfServer(t, nil)
	for _, d := range []mcptask.Dialect{mcptask.Core, mcptask.Extension} {
		t.Run(d.String(), func(t *testing.T) {
			ctr := counting(s.memory())
			c := dial(t, ctr, &client.Options{Dialect: d})
			ctx := testCtx(t)
			r := collect(ctx, c, "greet", map[string]any{"name": "x"}, nil)
			require.ErrorIs(t, r.err, client.ErrCapability)
			require.Contains(t, r.err.Error(), `tool "greet" does not support tasks`)
			require.Empty(t, r.events)
			require.Zero(t, ctr.count("tools/call"))

			r = collect(ctx, c, "no_such_tool", nil, nil)
			require.ErrorIs(t, r.err, client.ErrUnknownTool)
			require.Zero(t, ctr.count("tools/call"))

			res, err := c.CallToolAndWait(ctx, "greet", map[string]any{"name": "x"}, &client.CallOptions{AllowPlain: true})
			require.NoError(t, err)
			require.Equal(t, "Hello, x!", text(res))
		})
	}
}

func TestCancelTask(t *testing.T) {
	s := newConfServer(t, nil)
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			c := s.dial(m, nil)
			ctx := testCtx(t)
			// Start a long task and stop following it after creation.
			var id string
			for ev, err := range c.CallTool(ctx, "slow_compute", map[string]any{"seconds": 60}, nil) {
				require.NoError(t, err)
				require.Equal(t, client.EventCreated, ev.Kind)
				id = ev.Task.ID
				break
			}
			task, err := c.GetTask(ctx, id)
			require.NoError(t, err)
			require.Equal(t, mcptask.StatusWorking, task.Status, "stopping the iteration does not cancel the task")

			task, err = c.CancelTask(ctx, id)
			require.NoError(t, err)
			require.Equal(t, id, task.ID)
			require.Equal(t, mcptask.StatusCancelled, task.Status)

			_, err = c.TaskResult(ctx, id)
			require.ErrorIs(t, err, client.ErrCancelled)

			task, err = c.CancelTask(ctx, id)
			if m.dialect == mcptask.Core {
				require.ErrorIs(t, err, client.ErrTerminal)
				require.NotErrorIs(t, err, client.ErrNotFound)
				var re *client.RPCError
				require.ErrorAs(t, err, &re)
				require.EqualValues(t, -32602, re.Code)
			} else {
				require.NoError(t, err, "the extension acknowledges a cancel of a finished task")
				require.Equal(t, mcptask.StatusCancelled, task.Status)
			}

			_, err = c.CancelTask(ctx, "0123456789abcdef0123456789abcdef")
			require.ErrorIs(t, err, client.ErrNotFound)
			require.NotErrorIs(t, err, client.ErrTerminal)
		})
	}
}

func TestGetTaskUnknown(t *testing.T) {
	s := newConfServer(t, nil)
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			c := s.dial(m, nil)
			_, err := c.GetTask(testCtx(t), "0123456789abcdef0123456789abcdef")
			require.ErrorIs(t, err, client.ErrNotFound)
			var re *client.RPCError
			require.ErrorAs(t, err, &re)
			require.EqualValues(t, -32602, re.Code)
			require.Equal(t, "tasks/get", re.Method)
		})
	}
}

func TestTaskResult(t *testing.T) {
	s := newConfServer(t, nil)
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			c := s.dial(m, &client.Options{InputHandler: elicitAnswers(map[string]any{"confirm": true})})
			ctx := testCtx(t)
			id := startTask(t, c, "slow_compute", map[string]any{"seconds": 0.1, "label": "r"})
			raw, err := c.TaskResult(ctx, id)
			require.NoError(t, err)
			var res mcp.CallToolResult
			require.NoError(t, json.Unmarshal(raw, &res))
			require.Equal(t, `Computation "r" completed after 0.1 seconds. Result: 42.`, text(&res))

			// Input requests are answered while waiting.
			id = startTask(t, c, "confirm_delete", map[string]any{"filename": "y"})
			raw, err = c.TaskResult(ctx, id)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(raw, &res))
			require.Equal(t, "deleted 'y'", text(&res))

			// A failed task's JSON-RPC error is the error.
			id = startTask(t, c, "protocol_error_job", map[string]any{})
			_, err = c.TaskResult(ctx, id)
			var re *client.RPCError
			require.ErrorAs(t, err, &re)
			require.EqualValues(t, -32603, re.Code)
			require.Nil(t, re.Kind())
		})
	}
}

// startTask creates a task with CallTool and stops following it.
func startTask(t *testing.T, c *client.Client, name string, args any) string {
	t.Helper()
	for ev, err := range c.CallTool(testCtx(t), name, args, nil) {
		require.NoError(t, err)
		require.Equal(t, client.EventCreated, ev.Kind)
		return ev.Task.ID
	}
	t.Fatal("no task created")
	return ""
}

func TestListTasksPages(t *testing.T) {
	s := newConfServer(t, nil)
	ctr := counting(s.memory())
	c := dial(t, ctr, &client.Options{Dialect: mcptask.Core})
	ctx := testCtx(t)
	want := map[string]bool{}
	for range 120 {
		want[startTask(t, c, "slow_compute", map[string]any{"seconds": 0})] = true
	}
	got := map[string]bool{}
	for task, err := range c.ListTasks(ctx) {
		require.NoError(t, err)
		require.False(t, got[task.ID], "task %s listed twice", task.ID)
		got[task.ID] = true
	}
	require.Equal(t, want, got)
	require.Greater(t, ctr.count("tasks/list"), 1, "120 tasks span several pages")

	// Stopping early stops paging.
	before := ctr.count("tasks/list")
	for range c.ListTasks(ctx) {
		break
	}
	require.Equal(t, before+1, ctr.count("tasks/list"))

	// The extension has no tasks/list.
	e := s.dial(mode{false, mcptask.Extension}, nil)
	for _, err := range e.ListTasks(ctx) {
		require.ErrorIs(t, err, client.ErrCapability)
	}
}

// TestStatusPushIsConsumed: over the shimmed in-memory transport the server
// pushes notifications/tasks/status. With an hour's suggested poll
// interval (the client polls every 30 s at most), a task that ends in
// 200ms is followed by the push alone: no tasks/get was sent.
func TestStatusPushIsConsumed(t *testing.T) {
	s := newConfServer(t, func(c *taskrouter.Options) { c.PollInterval = time.Hour })
	ctr := counting(s.memory())
	c := dial(t, ctr, &client.Options{Dialect: mcptask.Core})
	r := collect(testCtx(t), c, "slow_compute", map[string]any{"seconds": 0.2, "label": "push"}, nil)
	require.Equal(t, `Computation "push" completed after 0.2 seconds. Result: 42.`, text(r.result(t)))
	require.Equal(t, []mcptask.Status{mcptask.StatusCompleted}, r.statuses())
	require.Zero(t, ctr.count("tasks/get"), "no poll was needed")
	require.Equal(t, 1, ctr.count("tasks/result"))
}

func TestStopOnContextEnd(t *testing.T) {
	s := newConfServer(t, nil)
	for _, m := range []mode{{false, mcptask.Core}, {true, mcptask.Extension}} {
		t.Run(m.String(), func(t *testing.T) {
			c := s.dial(m, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			r := collect(ctx, c, "slow_compute", map[string]any{"seconds": 60}, nil)
			require.ErrorIs(t, r.err, context.DeadlineExceeded)
			task, err := c.GetTask(testCtx(t), r.taskID())
			require.NoError(t, err)
			require.Equal(t, mcptask.StatusWorking, task.Status, "the task outlives the call")

			ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel2()
			r = collect(ctx2, c, "slow_compute", map[string]any{"seconds": 60}, &client.CallOptions{CancelOnStop: true})
			require.ErrorIs(t, r.err, context.DeadlineExceeded)
			task, err = c.GetTask(testCtx(t), r.taskID())
			require.NoError(t, err)
			require.Equal(t, mcptask.StatusCancelled, task.Status)
		})
	}
}

func TestTrackedAndForget(t *testing.T) {
	s := newConfServer(t, nil)
	c := s.dial(mode{false, mcptask.Core}, nil)
	ctx := testCtx(t)
	done := collect(ctx, c, "slow_compute", map[string]any{"seconds": 0}, nil)
	done.result(t)
	running := startTask(t, c, "slow_compute", map[string]any{"seconds": 60})

	tracked := c.Tracked()
	require.Len(t, tracked, 2)
	require.Equal(t, done.taskID(), tracked[0].ID)
	require.Equal(t, "slow_compute", tracked[0].Tool)
	require.Equal(t, mcptask.StatusCompleted, tracked[0].Status)
	require.Equal(t, running, tracked[1].ID)
	require.Equal(t, mcptask.StatusWorking, tracked[1].Status)
	require.False(t, tracked[1].Started.IsZero())

	// Any observation updates the record.
	_, err := c.CancelTask(ctx, running)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusCancelled, c.Tracked()[1].Status)

	require.True(t, c.Forget(done.taskID()))
	require.False(t, c.Forget(done.taskID()))
	require.Len(t, c.Tracked(), 1)

	// ForgetAfterResult drops a task once its result is delivered.
	f := s.dial(mode{false, mcptask.Extension}, &client.Options{ForgetAfterResult: true})
	collect(ctx, f, "slow_compute", map[string]any{"seconds": 0}, nil).result(t)
	id := startTask(t, f, "slow_compute", map[string]any{"seconds": 0})
	require.Len(t, f.Tracked(), 1)
	_, err = f.TaskResult(ctx, id)
	require.NoError(t, err)
	require.Empty(t, f.Tracked())
}

// headerRecorder records the task headers of the requests it passes on,
// and can tamper with Mcp-Name.
type headerRecorder struct {
	mu      sync.Mutex
	names   map[string][]string // method -> Mcp-Name values
	tamper  bool
	version map[string]string // method -> Mcp-Protocol-Version
}

func (h *headerRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	method := req.Header.Get("Mcp-Method")
	h.mu.Lock()
	if name := req.Header.Get("Mcp-Name"); name != "" {
		h.names[method] = append(h.names[method], name)
	}
	if h.tamper && method == "tasks/get" {
		req.Header.Set("Mcp-Name", "someone-else")
	}
	h.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func TestHTTPTransportTaskHeaders(t *testing.T) {
	s := newConfServer(t, nil)
	rec := &headerRecorder{names: map[string][]string{}}
	c := dial(t, client.HTTPTransport(s.endpoint(), &http.Client{Transport: rec}), nil)
	require.Equal(t, mcptask.Extension, c.Dialect())
	ctx := testCtx(t)
	id := startTask(t, c, "slow_compute", map[string]any{"seconds": 60})
	_, err := c.GetTask(ctx, id)
	require.NoError(t, err)
	_, err = c.CancelTask(ctx, id)
	require.NoError(t, err)
	rec.mu.Lock()
	require.Contains(t, rec.names["tasks/get"], id)
	require.Equal(t, []string{id}, rec.names["tasks/cancel"])
	rec.mu.Unlock()

	// The server checks the header: a mismatch is -32020.
	rec.tamper = true
	_, err = c.GetTask(ctx, id)
	var re *client.RPCError
	require.ErrorAs(t, err, &re)
	require.EqualValues(t, -32020, re.Code)
}

func TestErrorsAreClassified(t *testing.T) {
	re := &client.RPCError{Code: -32602, Message: "x"}
	require.False(t, errors.Is(re, client.ErrNotFound), "an unclassified error maps to nothing")
	require.Nil(t, re.Kind())
	require.Equal(t, "x (code -32602)", re.Error())
}
