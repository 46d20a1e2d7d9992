package integration

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// Rolling deploys with default options: replicas built from two
// definitions of one workflow share a PostgreSQL database, and every task
// in flight completes on the version it started with. Real processes
// (integration/testdata/versionserver): nap is a (server), a durable
// sleep, c (server); its v2 adds d (server). Before the replicas'
// registry, each replica failed the other's tasks at their first wake-up
// ("version ... is not served by this server"): 1 to 5 of 6 per run.

// rollingEnv is a replica's environment: its name, short leases (a
// replica not heard of for a second is not live) and quick polls.
func rollingEnv(name string) []string {
	return []string{"TASKBRIDGE_REPLICA_ID=" + name, "TASKBRIDGE_LEASE_DURATION=1s", "TASKBRIDGE_CHANGE_POLL_INTERVAL=100ms",
		"TASKBRIDGE_POLL_INTERVAL=20ms", "TASKBRIDGE_PROMPT_WAIT=50ms"}
}

// startNap starts nap on the replica behind c and returns its task id.
func startNap(t *testing.T, ctx context.Context, c *relClient) string {
	t.Helper()
	return relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "nap"})).TaskID
}

// napDone waits until task id completed, read on c, and returns the steps
// it completed.
func napDone(t *testing.T, ctx context.Context, c *relClient, id string, logs ...*proc) []string {
	t.Helper()
	var got map[string]any
	require.Eventually(t, func() bool {
		got = c.must(t, ctx, "tasks/get", map[string]any{"taskId": id})
		return got["status"] != "working" && got["status"] != "input_required"
	}, 60*time.Second, 20*time.Millisecond, "task %s never ended", id)
	var all strings.Builder
	for _, p := range logs {
		all.WriteString(p.log.String())
	}
	require.Equal(t, "completed", got["status"], "task %s: %v\n%s", id, got, all.String())
	doc := relHandoff(t, c.must(t, ctx, "tools/call", map[string]any{"name": "task_result", "arguments": map[string]any{"task_id": id}}))
	var steps []string
	for _, s := range doc.CompletedSteps {
		steps = append(steps, s.Name)
	}
	return steps
}

func TestRollingDeployCompletesEveryTask(t *testing.T) {
	bin := exampleBinary(t, "./integration/testdata/versionserver")
	dsn := pgtest.DSN(t)
	ctx := relCtx(t, 3*time.Minute)
	hc := newRelHTTPClient(8)
	// The nap outlasts starting three tasks and stopping a replica: the
	// draining tasks below must still sleep when the old replica stops,
	// or it wakes them itself (1.5 s left too little on a loaded machine).
	nap := []string{"-nap-sleep", "4s"}
	old := startProc(t, bin, rollingEnv("old"), append([]string{"-http", "ADDR", "-db", dsn, "-nap", "v1"}, nap...)...)
	oldC := newRelClient(old.url, hc, relExt, "")
	fresh := startProc(t, bin, rollingEnv("new"), append([]string{"-http", "ADDR", "-db", dsn, "-nap", "v2"}, nap...)...)
	freshC := newRelClient(fresh.url, hc, relExt, "")

	// Side by side: tasks started on either replica sleep while the other
	// polls the same wake index; each completes on its own version.
	var onOld, onNew []string
	for range 3 {
		onOld = append(onOld, startNap(t, ctx, oldC))
		onNew = append(onNew, startNap(t, ctx, freshC))
	}
	for _, id := range onOld {
		require.Equal(t, []string{"a", "nap", "c"}, napDone(t, ctx, freshC, id, old, fresh), "a v1 task ran v1 (read on the other replica)")
	}
	for _, id := range onNew {
		require.Equal(t, []string{"a", "nap", "c", "d"}, napDone(t, ctx, oldC, id, old, fresh), "a v2 task ran v2")
	}
	require.NotContains(t, old.log.String(), "RAN td", "the old replica never ran a step of v2")

	// The deploy goes on: a replica serving both versions starts, and the
	// old one is stopped (SIGTERM) while its newest tasks sleep: they
	// complete on the replica that serves their version.
	both := startProc(t, bin, rollingEnv("both"), append([]string{"-http", "ADDR", "-db", dsn, "-nap", "v1,v2"}, nap...)...)
	var draining []string
	for range 3 {
		draining = append(draining, startNap(t, ctx, oldC))
	}
	old.term(t)
	for _, id := range draining {
		require.Equal(t, []string{"a", "nap", "c"}, napDone(t, ctx, freshC, id, old, fresh, both), "read on the replica that does not serve v1")
	}
	require.Equal(t, 3, strings.Count(both.log.String(), "RAN tc"), "the v1 tasks of the stopped replica ended on the one that serves v1:\n%s", both.log.String())
	for _, p := range []*proc{old, fresh, both} {
		require.NotContains(t, p.log.String(), "is not served by this server")
		require.NotContains(t, p.log.String(), "panic")
	}
}

// The fail-after-time path on one process (bbolt), on the router's
// clock: the process that served v1 stops; one serving only v2 starts
// two minutes later and finds a v1 task. The task waits, saying so, for
// Options.VersionGrace counted from the last heartbeat of the process
// that served v1 (not from the restart), refuses continuations, and then
// fails saying why.
func TestVersionGoneFailsAfterGrace(t *testing.T) {
	db := filepath.Join(t.TempDir(), "tasks.db")
	ctx := context.Background()
	clock := &relClock{now: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)}
	serve := func(defs ...*workflow.Definition) *builder.Server {
		return versionServerWith(t, db, map[string]int{}, taskrouter.Options{ReplicaID: "single", Now: clock.Now, SweepInterval: 20 * time.Millisecond},
			workflow.Options{PromptWait: 50 * time.Millisecond}, defs...)
	}
	v1, v2 := abcDef(nil), abcDef(func(w *workflow.Definition) { w.Step(workflow.Server("d", "td")) })
	srv := serve(v1)
	id := startAbc(t, versionClient(t, srv))
	stopped := clock.Now()
	require.NoError(t, srv.Close())

	clock.add(2 * time.Minute)
	srv = serve(v2)
	defer srv.Close()
	tk, err := srv.Store.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusWorking, tk.Status)
	deadline := stopped.Add(workflow.DefaultVersionGrace)
	require.Contains(t, tk.StatusMessage, "waiting: no live server process serves workflow \"abc\" version \""+workflow.VersionOf(v1)+"\" (one last did at "+stopped.Format(time.RFC3339)+")")
	require.Contains(t, tk.StatusMessage, "until "+deadline.Format(time.RFC3339))
	require.True(t, tk.WakeAt.Equal(clock.Now().Add(time.Minute)), "looked at again in a minute: %v", tk.WakeAt)
	cs := versionClient(t, srv)
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "tb", Arguments: map[string]any{"x": 1}, Meta: mcp.Meta{"_task_id": id}})
	require.ErrorContains(t, err, "nothing was recorded")

	clock.set(deadline)
	require.Eventually(t, func() bool {
		tk, err = srv.Store.Get(ctx, id)
		return err == nil && tk.Status.Terminal()
	}, 20*time.Second, 10*time.Millisecond, "the scheduler wakes it at its deadline, on the router's clock")
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.Contains(t, tk.StatusMessage, "no live server process has served workflow \"abc\" version \""+workflow.VersionOf(v1)+"\" since "+stopped.Format(time.RFC3339))
	require.Contains(t, tk.StatusMessage, "(Options.VersionGrace, 10m0s)")
	require.Contains(t, tk.StatusMessage, "is not served by this server (it serves \""+workflow.VersionOf(v2)+"\")")
}

// relClock is a clock a test moves.
type relClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *relClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *relClock) set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

func (c *relClock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// During a rolling deploy, a continuation that reaches a replica that
// does not serve its task's version is refused, recording nothing and
// changing nothing, and names the replica that serves it; sent there, it
// goes on.
func TestContinuationOnReplicaOfOtherVersion(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	calls := map[string]int{}
	v1, v2 := abcDef(nil), abcDef(func(w *workflow.Definition) { w.Step(workflow.Server("d", "td")) })
	old := versionServerWith(t, dsn, calls, taskrouter.Options{ReplicaID: "old"}, workflow.Options{PromptWait: -1}, v1)
	defer old.Close()
	fresh := versionServerWith(t, dsn, map[string]int{}, taskrouter.Options{ReplicaID: "new"}, workflow.Options{PromptWait: -1}, v2)
	defer fresh.Close()
	id := startAbc(t, versionClient(t, old))
	before, err := fresh.Store.Get(ctx, id)
	require.NoError(t, err)

	_, err = versionClient(t, fresh).CallTool(ctx, &mcp.CallToolParams{Name: "tb", Arguments: map[string]any{"x": 1}, Meta: mcp.Meta{"_task_id": id}})
	require.ErrorContains(t, err, `which this server process does not serve; the live server processes "old" serve it: send the call to one of them; nothing was recorded`)
	after, err := fresh.Store.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, before.Version, after.Version, "nothing was written")

	out, err := versionClient(t, old).CallTool(ctx, &mcp.CallToolParams{Name: "tb", Arguments: map[string]any{"x": 1}, Meta: mcp.Meta{"_task_id": id}})
	require.NoError(t, err)
	require.False(t, out.IsError)
	require.Eventually(t, func() bool {
		tk, err := old.Store.Get(ctx, id)
		return err == nil && tk.Status == mcptask.StatusCompleted
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, calls["tc"])
}
