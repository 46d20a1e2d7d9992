package taskrouter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// requireTooMany checks that err is the -32000 of a quota, naming limit.
func requireTooMany(t *testing.T, err error, limit string) {
	t.Helper()
	var je *jsonrpc.Error
	require.ErrorAs(t, err, &je)
	require.EqualValues(t, mcptask.CodeTooManyTasks, je.Code, "%v", err)
	require.Contains(t, je.Message, limit)
}

// TestCreateTaskIsAdmitted: CreateTask (workflow tasks, forks, every kind a
// component drives) passes the same admission as a tool task: each limit
// refuses with -32000 naming it and stores nothing; a task holds its slot
// until it ends (completed, failed, cancelled, expired), however it ends.
func TestCreateTaskIsAdmitted(t *testing.T) {
	ctx := context.Background()
	st := memory.New(nil)
	h := newHarnessOn(t, st, func(o *taskrouter.Options) {
		o.MaxPendingPerOwner, o.MaxPendingPerSource, o.MaxPending = 2, 3, 4
	})
	r := h.r
	req := func(owner, source string) *taskrouter.Request {
		return &taskrouter.Request{Owner: owner, Source: source, Dialect: mcptask.Core}
	}
	create := func(q *taskrouter.Request) (*store.Task, error) {
		return r.CreateTask(ctx, q, store.Request{Method: mcptask.MethodPromptsGet, Name: "wf"}, &taskrouter.CreateOptions{Kind: taskrouter.KindWorkflow})
	}
	count := func() int {
		c, err := st.Counts(ctx)
		require.NoError(t, err)
		return c[mcptask.StatusWorking]
	}

	a1, err := create(req("user:a", "session:1"))
	require.NoError(t, err)
	a2, err := create(req("user:a", "session:1"))
	require.NoError(t, err)
	_, err = create(req("user:a", "session:2"))
	requireTooMany(t, err, "MaxPendingPerOwner=2")
	require.Equal(t, 2, count(), "a refused task is not stored")

	b1, err := create(req("user:b", "session:1"))
	require.NoError(t, err)
	_, err = create(req("user:c", "session:1"))
	requireTooMany(t, err, "MaxPendingPerSource=3")
	_, err = create(req("user:c", "session:2"))
	require.NoError(t, err)
	_, err = create(req("user:d", "session:3"))
	requireTooMany(t, err, "MaxPending=4")
	require.Equal(t, 4, r.Stats().Pending)

	// Ending a task, in any way, gives its slot back.
	_, err = r.Complete(ctx, a1.ID, map[string]any{"content": []any{}}, nil, 0)
	require.NoError(t, err)
	_, err = create(req("user:a", "session:3"))
	require.NoError(t, err, "a completed task frees its owner's slot")
	_, err = r.Fail(ctx, a2.ID, "no", nil)
	require.NoError(t, err)
	_, err = r.CancelTask(ctx, b1.ID, "cancelled by request")
	require.NoError(t, err)
	require.Equal(t, 2, r.Stats().Pending)

	// Tasks created outside a request belong to LocalOwner and have no
	// source: only MaxPending bounds them.
	_, err = r.CreateTask(ctx, nil, store.Request{Method: mcptask.MethodPromptsGet}, &taskrouter.CreateOptions{Kind: "other"})
	require.NoError(t, err)
	_, err = r.CreateTask(ctx, nil, store.Request{Method: mcptask.MethodPromptsGet}, &taskrouter.CreateOptions{Kind: "other"})
	require.NoError(t, err)
	_, err = r.CreateTask(ctx, nil, store.Request{Method: mcptask.MethodPromptsGet}, &taskrouter.CreateOptions{Kind: "other"})
	requireTooMany(t, err, "MaxPending=4")

	// A requestor that could not be identified creates nothing.
	_, err = r.CreateTask(ctx, &taskrouter.Request{OwnerErr: mcptask.InvalidRequest("who?")}, store.Request{}, nil)
	require.ErrorContains(t, err, "who?")
}

// TestCreatedTaskSlotsSurviveRestart: on an exclusive store a restart
// counts the tasks a previous process left active again (without
// refusing any), so a restart does not reset the quotas.
func TestCreatedTaskSlotsSurviveRestart(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/tasks.db"
	open := func() (*taskrouter.Router, func()) {
		st, err := bboltstore.Open(path, nil)
		require.NoError(t, err)
		r, err := taskrouter.NewRouter(st, &taskrouter.Options{MaxPendingPerOwner: 2})
		require.NoError(t, err)
		require.NoError(t, r.Install(mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)))
		r.HandleKind("held", napKind{}) // stays active: its Recover does nothing
		require.NoError(t, r.Start(ctx))
		return r, func() { _ = r.Close(); _ = st.Close() }
	}
	q := &taskrouter.Request{Owner: "user:a", Source: "session:1"}
	r, stop := open()
	var ids []string
	for range 2 {
		tk, err := r.CreateTask(ctx, q, store.Request{Method: mcptask.MethodPromptsGet}, &taskrouter.CreateOptions{Kind: "held"})
		require.NoError(t, err)
		ids = append(ids, tk.ID)
	}
	stop()

	r, stop = open()
	defer stop()
	require.Equal(t, 2, r.Stats().Pending, "the tasks left active count again")
	_, err := r.CreateTask(ctx, q, store.Request{Method: mcptask.MethodPromptsGet}, &taskrouter.CreateOptions{Kind: "held"})
	requireTooMany(t, err, "MaxPendingPerOwner=2")
	_, err = r.Fail(ctx, ids[0], "done with it", nil)
	require.NoError(t, err)
	_, err = r.CreateTask(ctx, q, store.Request{Method: mcptask.MethodPromptsGet}, &taskrouter.CreateOptions{Kind: "held"})
	require.NoError(t, err)
}

// TestStepsTakeSlots: tools run for a task's steps (Track, then RunTool)
// run at most MaxConcurrentSteps at once (MaxConcurrent's value by
// default), the others wait in order; a step's tool that calls another
// tool in process takes no second slot, so a single slot cannot deadlock.
func TestStepsTakeSlots(t *testing.T) {
	h := newHarness(t, func(o *taskrouter.Options) { o.MaxConcurrent = 2 })
	r := h.r
	release := make(chan struct{})
	var mu sync.Mutex
	running, peak := 0, 0
	taskrouter.AddTool(r, &mcp.Tool{Name: "step"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		select {
		case <-release:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		return textResult("stepped"), nil, nil
	}, nil)
	ctx := context.Background()
	const n = 6
	errs := make(chan error, n)
	for i := range n {
		go func() {
			tctx, done := r.Track(ctx, fmt.Sprint("task-", i))
			defer done()
			_, err := r.CallTool(tctx, nil, "step", map[string]any{}, nil)
			errs <- err
		}()
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		s := r.Stats()
		return running == 2 && s.Steps == 2 && s.StepsQueued == n-2
	}, 30*time.Second, time.Millisecond, "two steps run, the others wait: %+v", r.Stats())
	close(release)
	for range n {
		require.NoError(t, <-errs)
	}
	require.Equal(t, 2, peak, "never more than MaxConcurrent step tools at once")
	require.Zero(t, r.Stats().Steps)

	// One slot, and a step whose tool calls another tool with its context.
	h1 := newHarness(t, func(o *taskrouter.Options) { o.MaxConcurrentSteps = 1 })
	taskrouter.AddTool(h1.r, &mcp.Tool{Name: "outer"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		res, err := h1.r.CallTool(ctx, nil, "echo", map[string]any{"text": "inner"}, nil)
		return res, nil, err
	}, nil)
	tctx, done := h1.r.Track(ctx, "task-nested")
	defer done()
	cctx, cancel := context.WithTimeout(tctx, 10*time.Second)
	defer cancel()
	res, err := h1.r.CallTool(cctx, nil, "outer", map[string]any{}, nil)
	require.NoError(t, err, "a nested call with the step's context takes no second slot")
	require.Equal(t, "inner", res.Content[0].(*mcp.TextContent).Text)

	// A step waiting for a slot stops when its task's work is stopped.
	hold := make(chan struct{})
	defer close(hold)
	taskrouter.AddTool(h1.r, &mcp.Tool{Name: "hold"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		<-hold
		return textResult("held"), nil, nil
	}, nil)
	go func() {
		hctx, hdone := h1.r.Track(ctx, "task-holder")
		defer hdone()
		_, _ = h1.r.CallTool(hctx, nil, "hold", map[string]any{}, nil)
	}()
	require.Eventually(t, func() bool { return h1.r.Stats().Steps == 1 }, 30*time.Second, time.Millisecond)
	wctx, wdone := h1.r.Track(ctx, "task-waiter")
	defer wdone()
	wctx, wcancel := context.WithCancelCause(wctx)
	got := make(chan error, 1)
	go func() {
		_, err := h1.r.CallTool(wctx, nil, "echo", map[string]any{"text": "x"}, nil)
		got <- err
	}()
	require.Eventually(t, func() bool { return h1.r.Stats().StepsQueued == 1 }, 30*time.Second, time.Millisecond)
	stopped := errors.New("stopped")
	wcancel(stopped)
	require.ErrorIs(t, <-got, stopped)
}
