package metrics_test

import (
	"context"
	"github.com/taskbridge/taskbridge/mcptask"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/tests/obstest"
	"github.com/taskbridge/taskbridge/metrics"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// scrape fetches the handler over real HTTP on 127.0.0.1 and returns the
// exposition text.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// value finds the sample line "name{labels} value" in an exposition
// (labels in the order the registry prints them: sorted by name).
func value(t *testing.T, text, series string) string {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return rest
		}
	}
	t.Fatalf("no sample %s in:\n%s", series, text)
	return ""
}

// TestScrapeAfterRealActivity runs tool tasks (completed, failed,
// cancelled) and a workflow with a client step through a bbolt-backed
// server, then scrapes /metrics and checks the values.
func TestScrapeAfterRealActivity(t *testing.T) {
	m, err := metrics.New(nil)
	require.NoError(t, err)
	f := obstest.New(t, nil, func(b *builder.Builder) { b.WithObserver(m) })
	c := f.Client(t)
	ctx := t.Context()

	for range 3 {
		_, err := c.CallToolAndWait(ctx, "echo", map[string]any{"text": "hi"}, nil)
		require.NoError(t, err)
	}
	// A tool error is an isError result, which fails the task in the core
	// dialect.
	res, err := c.CallToolAndWait(ctx, "fail", map[string]any{"text": "no"}, nil)
	if err == nil {
		require.True(t, res.IsError)
	}
	slow := obstest.Start(t, c, "slow", map[string]any{"text": "s", "ms": 60000})
	// While it runs, the router's gauges show it.
	require.Eventually(t, func() bool {
		return strings.Contains(scrape(t, m.Handler()), "taskbridge_handlers_running 1\n")
	}, 30*time.Second, 10*time.Millisecond)
	_, err = c.CancelTask(ctx, slow)
	require.NoError(t, err)
	f.Wait(t, slow, mcptask.StatusCancelled)

	_, doc := obstest.Handoff(t, c, "metrics")
	obstest.Finish(t, c, doc, nil)
	f.Wait(t, doc.TaskID, mcptask.StatusCompleted)

	text := scrape(t, m.Handler())
	require.Equal(t, "3", value(t, text, `taskbridge_tasks_finished_total{kind="tool",name="echo",status="completed"}`))
	require.Equal(t, "1", value(t, text, `taskbridge_tasks_finished_total{kind="tool",name="fail",status="failed"}`))
	require.Equal(t, "1", value(t, text, `taskbridge_tasks_finished_total{kind="tool",name="slow",status="cancelled"}`))
	require.Equal(t, "1", value(t, text, `taskbridge_tasks_finished_total{kind="workflow",name="release",status="completed"}`))
	require.Equal(t, "3", value(t, text, `taskbridge_tasks_created_total{kind="tool",name="echo"}`))
	require.Equal(t, "1", value(t, text, `taskbridge_tasks_created_total{kind="workflow",name="release"}`))
	require.Equal(t, "3", value(t, text, `taskbridge_task_duration_seconds_count{kind="tool",name="echo",status="completed"}`))
	require.Equal(t, "3", value(t, text, `taskbridge_task_duration_seconds_bucket{kind="tool",name="echo",status="completed",le="+Inf"}`))
	require.Equal(t, "1", value(t, text, `taskbridge_handler_duration_seconds_count{tool="slow"}`))
	require.Equal(t, "3", value(t, text, `taskbridge_handler_queue_seconds_count{tool="echo"}`))
	// Workflow steps: three by the server, one by the client, all ok.
	for _, s := range []struct{ step, by string }{{"fetch", "server"}, {"draft", "server"}, {"review", "client"}, {"publish", "server"}} {
		require.Equal(t, "1", value(t, text, `taskbridge_workflow_step_attempts_total{by="`+s.by+`",outcome="ok",step="`+s.step+`",workflow="release"}`), s.step)
	}
	// The router's gauges, back to idle, and the store's counts.
	require.Equal(t, "0", value(t, text, "taskbridge_handlers_running"))
	require.Equal(t, "0", value(t, text, "taskbridge_tasks_pending"))
	require.Equal(t, "0", value(t, text, "taskbridge_result_waiters"))
	require.Equal(t, "4", value(t, text, `taskbridge_tasks_stored{status="completed"}`))
	require.Equal(t, "1", value(t, text, `taskbridge_tasks_stored{status="cancelled"}`))
	// bbolt commits: latency and writes per commit.
	commits := value(t, text, "taskbridge_store_commits_total")
	require.NotEqual(t, "0", commits)
	require.Equal(t, commits, value(t, text, "taskbridge_store_commit_duration_seconds_count"))
	require.Equal(t, commits, value(t, text, "taskbridge_store_commit_writes_count"))
	require.NotEqual(t, "0", value(t, text, "taskbridge_store_commit_duration_seconds_sum"))
	// No task id is ever a label value.
	require.NotContains(t, text, slow)
	require.NotContains(t, text, doc.TaskID)
}

// TestLabelsStayBounded: past MaxNames distinct names, the rest are
// counted as "other".
func TestLabelsStayBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(&metrics.Options{Registerer: reg, MaxNames: 2})
	require.NoError(t, err)
	for _, name := range []string{"a", "b", "c", "d", "a"} {
		m.TaskEvent(taskrouter.TaskEvent{Kind: taskrouter.TaskCreated, Task: &store.Task{Request: store.Request{Name: name}}})
	}
	n, err := testutil.GatherAndCount(reg, "taskbridge_tasks_created_total")
	require.NoError(t, err)
	require.Equal(t, 3, n, "a, b and other")
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP taskbridge_tasks_created_total Tasks created, by kind (tool or workflow) and tool or workflow name.
# TYPE taskbridge_tasks_created_total counter
taskbridge_tasks_created_total{kind="tool",name="a"} 2
taskbridge_tasks_created_total{kind="tool",name="b"} 1
taskbridge_tasks_created_total{kind="tool",name="other"} 2
`), "taskbridge_tasks_created_total"))
}

// TestStepOutcomes: a failed attempt and its retry are counted apart.
func TestStepOutcomes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(&metrics.Options{Registerer: reg, Namespace: "x"})
	require.NoError(t, err)
	at := time.Now()
	m.StepEvent(workflow.StepEvent{Workflow: "w", Step: "s", Attempt: workflow.Attempt{N: 1, By: "server", Outcome: workflow.OutcomeError, At: at, DurationMs: 20}})
	m.StepEvent(workflow.StepEvent{Workflow: "w", Step: "s", Attempt: workflow.Attempt{N: 2, By: "server", Outcome: workflow.OutcomeOK, At: at, DurationMs: 30}})
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP x_workflow_step_attempts_total Workflow step attempts that ended, by who performed them and outcome.
# TYPE x_workflow_step_attempts_total counter
x_workflow_step_attempts_total{by="server",outcome="error",step="s",workflow="w"} 1
x_workflow_step_attempts_total{by="server",outcome="ok",step="s",workflow="w"} 1
`), "x_workflow_step_attempts_total"))
	n, err := testutil.GatherAndCount(reg, "x_workflow_step_duration_seconds")
	require.NoError(t, err)
	require.Equal(t, 1, n, "one series: the outcome is not a duration label")
}

// TestMemoryStoreHasNoCommitMetrics: the store gauges come from a
// store.StatsReporter only (memory is none); the router's gauges are
// always there.
func TestMemoryStoreHasNoCommitMetrics(t *testing.T) {
	m, err := metrics.New(nil)
	require.NoError(t, err)
	f := obstest.New(t, memory.New(nil), func(b *builder.Builder) { b.WithObserver(m) })
	_, err = f.Client(t).CallToolAndWait(t.Context(), "echo", map[string]any{"text": "x"}, nil)
	require.NoError(t, err)
	text := scrape(t, m.Handler())
	require.NotContains(t, text, "taskbridge_store_commits_total")
	require.Equal(t, "1", value(t, text, `taskbridge_tasks_stored{status="completed"}`))
	require.Equal(t, "0", value(t, text, "taskbridge_tasks_queued"))
}

// reportingStore is a memory store that reports fixed write statistics,
// as any backend may (store.StatsReporter).
type reportingStore struct {
	*memory.Store
}

func (reportingStore) Stats() store.Stats {
	return store.Stats{Commits: 4, OpsCommitted: 10, OpsFailed: 2, MaxOpsPerCommit: 5, CommitErrors: 1, CommitTime: 2 * time.Second}
}

// TestAnyStatsReporter: the store gauges are read from any store that
// implements store.StatsReporter, not from one backend's type.
func TestAnyStatsReporter(t *testing.T) {
	m, err := metrics.New(nil)
	require.NoError(t, err)
	obstest.New(t, reportingStore{memory.New(nil)}, func(b *builder.Builder) { b.WithObserver(m) })
	text := scrape(t, m.Handler())
	for series, want := range map[string]string{
		"taskbridge_store_commits_total":                 "4",
		"taskbridge_store_commit_duration_seconds_sum":   "2",
		"taskbridge_store_commit_duration_seconds_count": "4",
		"taskbridge_store_commit_writes_sum":             "10",
		"taskbridge_store_commit_writes_count":           "4",
		"taskbridge_store_commit_writes_max":             "5",
		"taskbridge_store_writes_failed_total":           "2",
		"taskbridge_store_commit_errors_total":           "1",
	} {
		require.Equal(t, want, value(t, text, series), series)
	}
}

// TestWorkflowTasksPerVersion: an operator sees how many tasks still run
// on each workflow version before retiring one.
func TestWorkflowTasksPerVersion(t *testing.T) {
	db := filepath.Join(t.TempDir(), "tasks.db")
	wf := func(v string, extra bool) *workflow.Definition {
		w := workflow.New("deploy", "deploy").WithVersion(v).Step(workflow.Client("ok", "approve"))
		if extra {
			w.Step(workflow.Server("after", "approve"))
		}
		return w
	}
	// start serves defs on db and starts n tasks of the newest.
	start := func(m *metrics.Metrics, n int, defs ...*workflow.Definition) *builder.Server {
		b := builder.New("versions", "1").WithDB(db).WithoutEnv()
		if m != nil {
			b.WithObserver(m)
		}
		builder.Tool(b, &mcp.Tool{Name: "approve"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{}, nil, nil
		}, nil)
		for _, d := range defs {
			b.TaskWorkflow(d)
		}
		srv, err := b.Build(t.Context())
		require.NoError(t, err)
		tr, err := srv.Connect(t.Context())
		require.NoError(t, err)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(t.Context(), tr, nil)
		require.NoError(t, err)
		defer cs.Close()
		for range n {
			_, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "deploy"})
			require.NoError(t, err)
		}
		return srv
	}
	require.NoError(t, start(nil, 1, wf("v1", false)).Close())
	m, err := metrics.New(nil)
	require.NoError(t, err)
	srv := start(m, 2, wf("v1", false), wf("v2", true))
	defer srv.Close()
	text := scrape(t, m.Handler())
	require.Equal(t, "1", value(t, text, `taskbridge_workflow_tasks_active{version="v1",workflow="deploy"}`), "the old version's task still waits")
	require.Equal(t, "2", value(t, text, `taskbridge_workflow_tasks_active{version="v2",workflow="deploy"}`), "new tasks start on the newest version")
}

// TestQueueRuns: a queue of one with a slow step running and another
// waiting shows one holding and one waiting run.
func TestQueueRuns(t *testing.T) {
	m, err := metrics.New(nil)
	require.NoError(t, err)
	f := obstest.New(t, memory.New(nil), func(b *builder.Builder) {
		b.WithObserver(m).WithWorkflowOptions(workflow.Options{PromptWait: 50 * time.Millisecond})
		b.TaskWorkflow(workflow.New("one_at_a_time", "a slow step, one at a time").Step(
			workflow.Server("wait", "slow").Bind("ms", workflow.Const(60000)).Bind("text", workflow.Const("waited")).
				OnQueue(&workflow.Queue{Name: "slow", Concurrency: 1})))
	})
	c := f.Client(t)
	for range 2 {
		_, _, err := c.GetPrompt(t.Context(), "one_at_a_time", nil)
		require.NoError(t, err)
	}
	text := scrape(t, m.Handler())
	require.Equal(t, "1", value(t, text, `taskbridge_queue_runs{queue="slow",state="holding"}`))
	require.Equal(t, "1", value(t, text, `taskbridge_queue_runs{queue="slow",state="waiting"}`))
}

// TestNewRefusesOptionsThatCannotWork: New names the field that cannot
// work, and a second registration of the same names is an error, not a
// panic, that leaves the registry as it was.
func TestNewRefusesOptionsThatCannotWork(t *testing.T) {
	_, err := metrics.New(&metrics.Options{MaxNames: -1})
	require.ErrorContains(t, err, "MaxNames is negative")
	_, err = metrics.New(&metrics.Options{Buckets: []float64{1, 1}})
	require.ErrorContains(t, err, "Buckets must increase")
	reg := prometheus.NewRegistry()
	_, err = metrics.New(&metrics.Options{Registerer: reg})
	require.NoError(t, err)
	_, err = metrics.New(&metrics.Options{Registerer: reg})
	require.ErrorContains(t, err, "registered there already")
	_, err = metrics.New(&metrics.Options{Registerer: reg, Namespace: "other"})
	require.NoError(t, err, "another namespace registers beside")
}
