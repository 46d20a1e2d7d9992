package integration

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// The time rules, on a real engine and a real clock (scaled down from
// issue 27's probes: a 1 s ttl against 2.5 s waits): waiting for the clock
// is not idle, and a request answers while the client can still act.

// rulesServer serves w on a fresh bbolt file with a sweeper that runs
// every 100 ms, and returns a go-sdk client over HTTP.
func rulesServer(t *testing.T, opts workflow.Options, w *workflow.Definition) (*builder.Server, *mcp.ClientSession) {
	t.Helper()
	b := builder.New("rules", "1").WithDB(filepath.Join(t.TempDir(), "tasks.db")).WithoutEnv().
		WithRouterOptions(taskrouter.Options{SweepInterval: 100 * time.Millisecond}).WithWorkflowOptions(opts)
	for _, name := range []string{"work", "approve", "fallback"} {
		builder.Tool(b, &mcp.Tool{Name: name}, func(ctx context.Context, _ *mcp.CallToolRequest, _ vIn) (*mcp.CallToolResult, vOut, error) {
			return nil, vOut{By: name}, nil
		}, nil)
	}
	b.TaskWorkflow(w)
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv, versionClient(t, srv)
}

// waitEnded waits (bounded) for task id to end and returns it.
func waitEnded(t *testing.T, st store.Store, id string) *store.Task {
	t.Helper()
	var tk *store.Task
	require.Eventually(t, func() bool {
		var err error
		tk, err = st.Get(context.Background(), id)
		return err == nil && tk.Status.Terminal()
	}, 20*time.Second, 20*time.Millisecond)
	return tk
}

// A sleep longer than the workflow's ttl is not idle time: the task
// sleeps to the end and goes on (before, it expired mid-sleep, "rested
// for its ttl").
func TestTimeRulesSleepLongerThanTTL(t *testing.T) {
	srv, cs := rulesServer(t, workflow.Options{PromptWait: 200 * time.Millisecond}, workflow.New("nap", "a sleep longer than the ttl").WithTTL(time.Second).Step(
		workflow.Sleep("nap", 2500*time.Millisecond),
		workflow.Server("after", "work"),
	))
	res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "nap"})
	require.NoError(t, err)
	doc, err := handoff.FromPromptResult(res)
	require.NoError(t, err)
	tk, err := srv.Store.Get(context.Background(), doc.TaskID)
	require.NoError(t, err)
	require.NotNil(t, doc.RemainingSteps[0].Until)
	require.False(t, tk.ExpiresAt.Before(doc.RemainingSteps[0].Until.Add(time.Second)), "expiry >= the sleep's end + ttl")
	tk = waitEnded(t, srv.Store, doc.TaskID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
}

// A bounded client wait longer than the ttl runs to its end, and its
// policy's branch runs (before, the task expired at the ttl and the skip
// branch never ran).
func TestTimeRulesWaitLongerThanTTL(t *testing.T) {
	ok := workflow.Truthy(workflow.StepOutput("approve", "by"))
	srv, cs := rulesServer(t, workflow.Options{PromptWait: 200 * time.Millisecond}, workflow.New("wait", "a wait longer than the ttl").WithTTL(time.Second).Step(
		workflow.Client("approve", "approve").WaitsAtMost(2500*time.Millisecond, workflow.TimeoutSkip),
		workflow.Server("fallback", "fallback").Unless(ok),
	))
	res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "wait"})
	require.NoError(t, err)
	doc, err := handoff.FromPromptResult(res)
	require.NoError(t, err)
	tk := waitEnded(t, srv.Store, doc.TaskID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	res2, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "task_result", Arguments: map[string]any{"task_id": doc.TaskID}})
	require.NoError(t, err)
	done, err := handoff.FromToolResult(res2)
	require.NoError(t, err)
	require.Equal(t, "approve", done.SkippedSteps[0].Name)
	require.Contains(t, done.SkippedSteps[0].Reason, "within 2.5s")
	require.Equal(t, "fallback", done.CompletedSteps[0].Name, "the skip branch ran")
}

// A client step whose wait is shorter than PromptWait: prompts/get
// (3 s by default) answers as soon as the workflow waits for the client, with the step
// still the client's to perform (before, it answered after the wait ran
// out, with the task already failed).
func TestTimeRulesPromptAnswersBeforeAShortWait(t *testing.T) {
	srv, cs := rulesServer(t, workflow.Options{}, workflow.New("quick", "a short client wait").Step(
		workflow.Client("approve", "approve").WaitsAtMost(1500*time.Millisecond, workflow.TimeoutFail),
		workflow.Server("after", "work"),
	))
	start := time.Now()
	res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "quick"})
	require.NoError(t, err)
	answered := time.Since(start)
	doc, err := handoff.FromPromptResult(res)
	require.NoError(t, err)
	require.Equal(t, string(mcptask.StatusWorking), doc.Status)
	require.Equal(t, mcptask.StepAwaitingClient, doc.RemainingSteps[0].Status)
	require.NotNil(t, doc.RemainingSteps[0].Deadline)
	require.True(t, doc.RemainingSteps[0].Deadline.After(start.Add(answered)), "the client hears of the step before its wait runs out")
	out, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "approve", Arguments: map[string]any{"_task_id": doc.TaskID}})
	require.NoError(t, err)
	require.False(t, out.IsError)
	tk := waitEnded(t, srv.Store, doc.TaskID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
}
