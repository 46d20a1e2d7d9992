package taskrouter

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
)

// waitFor clamps task_result's wait_seconds before any arithmetic.
func TestWaitForClamps(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	const deadline = 25 * time.Second
	for _, c := range []struct {
		in   *float64
		want time.Duration
		err  string
	}{
		{nil, deadline, ""},
		{f(0), 0, ""},
		{f(1.5), 1500 * time.Millisecond, ""},
		{f(25), deadline, ""},
		{f(1e11), deadline, ""},
		{f(1e308), deadline, ""},
		{f(math.Inf(1)), deadline, ""},
		{f(math.MaxInt64), deadline, ""},
		{f(-1), 0, "negative"},
		{f(math.Inf(-1)), 0, "negative"},
		{f(math.NaN()), 0, "not a number"},
	} {
		got, err := waitFor(deadline, c.in)
		if c.err != "" {
			require.ErrorContains(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.want, got)
	}
	got, err := waitFor(-1, f(1e308))
	require.NoError(t, err)
	require.Equal(t, DefaultHostDeadline, got, "the host deadline off: the default bounds the wait")
}

// unannounced is the engine task_result sees, whose Await reads the task
// once and then, as another replica would, changes it with no
// announcement reaching this process's waiters.
type unannounced struct {
	taskToolEngine
	once sync.Once
	msg  string
}

func (u *unannounced) Await(ctx context.Context, id string, done func(*store.Task) bool) (*store.Task, error) {
	return u.taskToolEngine.Await(ctx, id, func(t *store.Task) bool {
		u.once.Do(func() {
			// A write straight to the store: it wakes no waiter here.
			_, err := u.Store().Update(context.Background(), id, store.Update{StatusMessage: &u.msg})
			if err != nil {
				panic(err)
			}
		})
		return done(t)
	})
}

// TestTaskResultReadsAgainWhenTheWaitRunsOut: task_result whose wait runs
// out answers the task as stored then, not as its wait last read it (a
// change whose announcement never came, another replica's on a shared
// store), through a real go-sdk client.
func TestTaskResultReadsAgainWhenTheWaitRunsOut(t *testing.T) {
	r, err := NewRouter(memory.New(nil), nil)
	require.NoError(t, err)
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	require.NoError(t, r.Install(srv))
	r.AddTaskTools(nil)
	require.NoError(t, r.Start(t.Context()))
	t.Cleanup(func() { _ = r.Close() })
	u := &unannounced{taskToolEngine: r.taskTools.e, msg: "changed by another replica"}
	r.taskTools.e = u

	tk, err := r.CreateTask(t.Context(), nil, store.Request{Name: "work"}, &CreateOptions{StatusMessage: "working on it"})
	require.NoError(t, err)
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: DefaultResultToolName, Arguments: map[string]any{"task_id": tk.ID, "wait_seconds": 0.2}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	text := res.Content[0].(*mcp.TextContent).Text
	require.Contains(t, text, u.msg, "the task as stored when the wait ran out")
	require.NotContains(t, text, "working on it")
}
