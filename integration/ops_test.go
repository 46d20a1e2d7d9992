package integration

// Operating workflows across real processes (issue 34): opsserver
// replicas (integration/testdata/opsserver) on one PostgreSQL store,
// SIGKILLed and restarted. A queue's per-key limit holds across replicas
// and a kill; a schedule fires each time once across replicas and a kill;
// a paused workflow stays paused across a kill, and a resume finishes it.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/postgres"
	"github.com/taskbridge/taskbridge/workflow"
)

// opsCluster is opsserver replicas on one store.
type opsCluster struct {
	t     *testing.T
	bin   string
	dsn   string
	args  []string
	procs []*proc
	names []string // replica ids
	st    *postgres.Store
}

func newOpsCluster(t *testing.T, n int, args ...string) *opsCluster {
	t.Helper()
	c := &opsCluster{t: t, bin: exampleBinary(t, "./integration/testdata/opsserver"), dsn: pgtest.DSN(t), args: args, procs: make([]*proc, n), names: make([]string, n)}
	for i := range n {
		c.start(i)
	}
	st, err := postgres.Open(context.Background(), c.dsn, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	c.st = st
	return c
}

// start (re)starts replica i.
func (c *opsCluster) start(i int) {
	c.names[i] = fmt.Sprintf("ops%d-%d", i, time.Now().UnixNano())
	env := []string{"TASKBRIDGE_REPLICA_ID=" + c.names[i], "TASKBRIDGE_LEASE_DURATION=1s",
		"TASKBRIDGE_CHANGE_POLL_INTERVAL=200ms", "TASKBRIDGE_POLL_INTERVAL=20ms", "TASKBRIDGE_PROMPT_WAIT=50ms"}
	c.procs[i] = startProc(c.t, c.bin, env, append([]string{"-http", "ADDR", "-db", c.dsn}, c.args...)...)
}

// call sends one request to replica i (the 2026-07-28 dialect: the task
// ids it gets are capabilities).
func (c *opsCluster) call(ctx context.Context, i int, method string, params map[string]any) map[string]any {
	c.t.Helper()
	rep, err := newRelClient(c.procs[i].url, nil, relExt, "").call(ctx, method, params)
	require.NoError(c.t, err)
	require.Nil(c.t, rep.Err, "%s: %v", method, rep.Err)
	return rep.Map()
}

// startWorkflow starts a workflow on replica i and returns its task id.
func (c *opsCluster) startWorkflow(ctx context.Context, i int, name string, args map[string]any) string {
	c.t.Helper()
	rep, err := newRelClient(c.procs[i].url, nil, relExt, "").call(ctx, "prompts/get", map[string]any{"name": name, "arguments": args})
	require.NoError(c.t, err)
	require.Nil(c.t, rep.Err)
	doc, err := crashHandoff(rep.Result)
	require.NoError(c.t, err)
	return doc.TaskID
}

// progress reads a workflow task and its progress from the store.
func (c *opsCluster) progress(id string) (*store.Task, *workflow.Progress) {
	c.t.Helper()
	tk, err := c.st.Get(context.Background(), id)
	require.NoError(c.t, err)
	var p workflow.Progress
	require.NoError(c.t, json.Unmarshal(tk.Variables[workflow.VarProgress], &p))
	return tk, &p
}

// waitFor polls until ok holds (bounded).
func (c *opsCluster) waitFor(what string, within time.Duration, ok func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			var logs []string
			for _, p := range c.procs {
				logs = append(logs, p.log.String())
			}
			c.t.Fatalf("%s: not within %s\n%s", what, within, strings.Join(logs, "\n---\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replicaOf returns the index of the replica holding task id's lease, or
// -1.
func (c *opsCluster) replicaOf(id string) int {
	tk, _ := c.progress(id)
	return slices.Index(c.names, tk.LeaseHolder)
}

// deployed reads the result deploy_service recorded for a train.
type deployed struct {
	Repo    string    `json:"repo"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
}

func (c *opsCluster) deployed(id string) deployed {
	c.t.Helper()
	_, p := c.progress(id)
	var d deployed // the step's output is the tool's structured content
	require.NoError(c.t, json.Unmarshal(p.Outputs["deploy"], &d), string(p.Outputs["deploy"]))
	return d
}

// TestQueueOneDeployPerRepoAcrossReplicas: three trains of one repo and
// one of another on two replicas, one deploy per repo at a time; the
// replica deploying the first is SIGKILLed mid-deploy and restarted. The
// other repo deploys at once; the same repo's deploys run one after
// another, in the order the trains came, never two at once (the killed
// one re-runs holding its place); every place is given back.
func TestQueueOneDeployPerRepoAcrossReplicas(t *testing.T) {
	// A deploy outlasts starting the other trains and the checks before
	// the kill, which must land in the middle of the first deploy (1.5 s
	// left too little on a loaded machine).
	c := newOpsCluster(t, 2, "-deploy", "3s")
	ctx := relCtx(t, 2*time.Minute)
	var a []string
	for i := range 3 {
		id := c.startWorkflow(ctx, i%2, "train", map[string]any{"repo": "a"})
		// The queue's order is the order of arrival on it, which prompts/get
		// (answering after PROMPT_WAIT) does not wait for: each train is on
		// the queue before the next comes, and is there for the checks below.
		c.waitFor("train "+id+" on the queue", 20*time.Second, func() bool {
			_, p := c.progress(id)
			return p.Steps[0].Queue != nil || p.Steps[0].Status != mcptask.StepPending
		})
		a = append(a, id)
	}
	b := c.startWorkflow(ctx, 1, "train", map[string]any{"repo": "b"})

	// The first deploy of a runs; the other two wait, queued.
	c.waitFor("a's first deploy running", 20*time.Second, func() bool {
		_, p := c.progress(a[0])
		return p.Steps[0].Status == mcptask.StepRunning
	})
	for _, id := range a[1:] {
		tk, p := c.progress(id)
		require.NotNil(t, p.Steps[0].Queue, tk.StatusMessage)
		require.Nil(t, p.Steps[0].Queue.GrantedAt, "a second deploy of a waits")
		require.Contains(t, tk.StatusMessage, `is queued on "deploys" (key "a")`)
	}
	holder := c.replicaOf(a[0])
	require.GreaterOrEqual(t, holder, 0, "a replica holds the first train")
	c.procs[holder].kill()
	time.Sleep(300 * time.Millisecond)
	c.start(holder)

	for _, id := range append(slices.Clone(a), b) {
		c.waitFor("train "+id+" completed", 60*time.Second, func() bool {
			tk, _ := c.progress(id)
			require.False(t, tk.Status.Terminal() && tk.Status != mcptask.StatusCompleted, "%s: %s", id, tk.StatusMessage)
			return tk.Status == mcptask.StatusCompleted
		})
	}
	runs := make([]deployed, len(a))
	for i, id := range a {
		runs[i] = c.deployed(id)
		require.Equal(t, "a", runs[i].Repo)
	}
	for i := 1; i < len(runs); i++ {
		require.False(t, runs[i].Started.Before(runs[i-1].Ended),
			"deploy %d of a started at %s, before deploy %d ended at %s: two at once", i+1, runs[i].Started, i, runs[i-1].Ended)
	}
	other := c.deployed(b)
	require.True(t, other.Ended.Before(runs[2].Started), "b deployed at once, not after a's queue")
	es, err := c.st.QueueEntries(ctx, "deploys")
	require.NoError(t, err)
	require.Empty(t, es, "every place was given back")
}

// TestScheduleOnceAcrossReplicas: two replicas run a schedule of every
// two seconds; one is SIGKILLed across a firing time and restarted, then
// both are. Each firing time started exactly one task, every fire is
// marked started, and no time was skipped (missed firings are
// backfilled).
func TestScheduleOnceAcrossReplicas(t *testing.T) {
	c := newOpsCluster(t, 2, "-schedule", "@every 2s")
	ctx := relCtx(t, 2*time.Minute)
	fires := func() []store.Fire {
		fs, err := c.st.Fires(ctx, "tick", store.MaxPageSize)
		require.NoError(t, err)
		return fs
	}
	c.waitFor("two firings", 20*time.Second, func() bool { return len(fires()) >= 2 })
	// Kill one across the next firing time, restart it, then kill both.
	next := fires()[0].At.Add(2 * time.Second)
	time.Sleep(time.Until(next.Add(-100 * time.Millisecond)))
	c.procs[0].kill()
	time.Sleep(2500 * time.Millisecond)
	c.start(0)
	n := len(fires())
	c.waitFor("two more firings", 20*time.Second, func() bool { return len(fires()) >= n+2 })
	next = fires()[0].At.Add(2 * time.Second)
	time.Sleep(time.Until(next.Add(-50 * time.Millisecond)))
	c.procs[0].kill()
	c.procs[1].kill()
	c.start(1) // one survivor finishes what was decided
	c.waitFor("every fire started", 20*time.Second, func() bool {
		for _, f := range fires() {
			if !f.Started {
				return false
			}
		}
		return true
	})
	c.procs[1].kill()

	fs := fires()
	sort.Slice(fs, func(i, j int) bool { return fs[i].At.Before(fs[j].At) })
	require.GreaterOrEqual(t, len(fs), 5)
	byTime := map[string]int{}
	var page store.Page
	var err error
	for cursor := ""; ; cursor = page.NextCursor {
		page, err = c.st.Query(ctx, store.Query{Name: "tick", Cursor: cursor})
		require.NoError(t, err)
		for _, tk := range page.Tasks {
			byTime[tk.Labels[workflow.LabelScheduledAt]]++
		}
		if page.NextCursor == "" {
			break
		}
	}
	// The last kill can land after a replica claimed its next fire and
	// before it started the fire's task (the schedule keeps firing while
	// the test checks): that one fire, the latest, may be left unstarted
	// with at most one task, for the next replica to finish.
	claimed := 0
	for i, f := range fs {
		at := f.At.UTC().Format(time.RFC3339)
		if !f.Started {
			require.Equal(t, len(fs)-1, i, "only the latest fire may be left unstarted by the last kill, not %s", at)
			require.LessOrEqual(t, byTime[at], 1, "firing %s started %d tasks", at, byTime[at])
			claimed = 1 - byTime[at]
		} else {
			require.Equal(t, 1, byTime[at], "firing %s started %d tasks", at, byTime[at])
		}
		if i > 0 {
			require.Equal(t, 2*time.Second, f.At.Sub(fs[i-1].At), "no firing skipped or repeated between %s and %s", fs[i-1].At, f.At)
		}
	}
	require.Len(t, byTime, len(fs)-claimed, "a task for every fire, and no task without one")
}

// TestPauseSurvivesAKill: a workflow paused while its step runs, its
// replica SIGKILLed and restarted: it stays paused (working, its status
// saying so), nothing after the step runs; task_resume finishes it, the
// step running again.
func TestPauseSurvivesAKill(t *testing.T) {
	c := newOpsCluster(t, 1, "-deploy", "2s")
	ctx := relCtx(t, 2*time.Minute)
	id := c.startWorkflow(ctx, 0, "soak", map[string]any{})
	c.waitFor("hold running", 20*time.Second, func() bool {
		_, p := c.progress(id)
		return p.Steps[0].Status == mcptask.StepRunning
	})
	res := c.call(ctx, 0, "tools/call", map[string]any{"name": "task_pause", "arguments": map[string]any{"task_id": id, "reason": "checking the soak"}})
	require.NotEqual(t, true, res["isError"], res)
	c.procs[0].kill()
	c.start(0)
	// The restarted replica takes the expired lease over and records the
	// killed run's attempt ended; a fixed sleep for that fell short on a
	// loaded machine (the restart alone can take seconds under -race).
	c.waitFor("the killed run recorded ended", 30*time.Second, func() bool {
		_, p := c.progress(id)
		h := p.Steps[0].History
		return len(h) > 0 && h[len(h)-1].Outcome != workflow.OutcomeRunning
	})
	time.Sleep(2500 * time.Millisecond) // the step's length: were it run again despite the pause, the next would start
	tk, p := c.progress(id)
	require.Equal(t, mcptask.StatusWorking, tk.Status)
	require.True(t, strings.HasPrefix(tk.StatusMessage, "paused by local since "), tk.StatusMessage)
	require.Contains(t, tk.StatusMessage, "checking the soak")
	require.NotContains(t, tk.StatusMessage, "still running", "the killed run is recorded interrupted")
	require.Equal(t, mcptask.StepPending, p.Steps[1].Status, "nothing after it ran")
	require.NotContains(t, c.procs[0].log.String(), "ANNOUNCE")
	got := c.call(ctx, 0, "tasks/get", map[string]any{"taskId": id})
	require.Equal(t, "working", got["status"], "the wire status stays working")

	res = c.call(ctx, 0, "tools/call", map[string]any{"name": "task_resume", "arguments": map[string]any{"task_id": id}})
	require.NotEqual(t, true, res["isError"], res)
	c.waitFor("the workflow completed", 30*time.Second, func() bool {
		tk, _ := c.progress(id)
		return tk.Status == mcptask.StatusCompleted
	})
	_, p = c.progress(id)
	require.GreaterOrEqual(t, p.Steps[0].Attempts, 2, "the step ran again")
	page, err := c.st.Events(ctx, id, 0, 0)
	require.NoError(t, err)
	var acts []string
	for _, e := range page.Events {
		if e.Type == "action" {
			acts = append(acts, string(e.Data))
		}
	}
	require.Len(t, acts, 2)
	require.Contains(t, acts[0], `"action":"paused","by":"local","reason":"checking the soak"`)
	require.Contains(t, acts[1], `"action":"resumed","by":"local"`)
}
