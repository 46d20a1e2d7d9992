package integration

// Chaos for replicas: three example 62 processes share one PostgreSQL
// store. Under load (tool tasks and workflows, each request to a random
// replica), one replica at a time is SIGKILLed and restarted. Then one is
// paused with SIGSTOP while it runs a task, long enough for its lease to
// expire and another replica to take the task over, and resumed: it must
// not overwrite anything. At the end: no acknowledged task is lost, none
// stays working past the lease timeout, every workflow step is recorded
// exactly once, and every completed workflow published exactly once.

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/postgres"
	"github.com/taskbridge/taskbridge/taskrouter"
)

const chaosLease = time.Second

// chaosCluster is three replica processes on one store.
type chaosCluster struct {
	t     *testing.T
	bin   string
	dsn   string
	dir   string
	mu    sync.Mutex
	procs []*proc
	gen   int
}

func (c *chaosCluster) env(name string) []string {
	return []string{"TASKBRIDGE_REPLICA_ID=" + name, "TASKBRIDGE_LEASE_DURATION=" + chaosLease.String(),
		"TASKBRIDGE_CHANGE_POLL_INTERVAL=200ms", "TASKBRIDGE_POLL_INTERVAL=20ms"}
}

// start (re)starts replica i under a new name.
func (c *chaosCluster) start(i int) {
	c.mu.Lock()
	c.gen++
	name := fmt.Sprintf("r%d-%d", i, c.gen)
	c.mu.Unlock()
	p := startProc(c.t, c.bin, c.env(name), "serve", "-http", "ADDR", "-db", c.dsn, "-ledger", filepath.Join(c.dir, "taskbridge-62.published"), "-v")
	c.mu.Lock()
	c.procs[i] = p
	c.mu.Unlock()
}

// url returns a random live replica's URL.
func (c *chaosCluster) url() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		p := c.procs[mrand.IntN(len(c.procs))]
		select {
		case <-p.exited:
			continue
		default:
			return p.url
		}
	}
}

// chaosLedger is what clients were told.
type chaosLedger struct {
	mu        sync.Mutex
	tools     map[string]string // task id -> topic
	workflows map[string]bool   // task id -> the client step was acknowledged
	errs      atomic.Int64      // requests that failed (a replica died under them)
	acks      atomic.Int64
}

func TestReplicaChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the replica chaos test runs for about a minute")
	}
	c := &chaosCluster{t: t, bin: exampleBinary(t, "./examples/62_tasks_workflow"), dsn: pgtest.DSN(t), dir: t.TempDir(), procs: make([]*proc, 3)}
	// The replicas share one publication ledger (-ledger) the way real
	// replicas would share a downstream system.
	wd, err := os.Getwd()
	require.NoError(t, err)
	require.NoError(t, os.Chdir(c.dir))
	t.Cleanup(func() { _ = os.Chdir(wd) })
	for i := range 3 {
		c.start(i)
	}
	l := &chaosLedger{tools: map[string]string{}, workflows: map[string]bool{}}
	ctx := relCtx(t, 4*time.Minute)
	hc := newRelHTTPClient(16)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if w%2 == 0 {
					chaosTool(ctx, hc, c, l, fmt.Sprintf("w%d-%d", w, n))
				} else {
					chaosWorkflow(ctx, hc, c, l, fmt.Sprintf("w%d-%d", w, n))
				}
			}
		}()
	}
	// Kill and restart one replica at a time.
	kills := 8
	for k := range kills {
		time.Sleep(time.Duration(300+mrand.IntN(500)) * time.Millisecond)
		i := k % 3
		c.procs[i].kill()
		time.Sleep(time.Duration(100+mrand.IntN(400)) * time.Millisecond)
		c.start(i)
	}
	close(stop)
	wg.Wait()

	// Fencing: pause a replica in the middle of a task past its lease;
	// another takes the task over and completes it; the paused one, once
	// resumed, must not write anything.
	paused := c.procs[0]
	pc := newRelClient(paused.url, hc, relExt, "")
	fenced := relTaskID(pc.must(t, ctx, "tools/call", map[string]any{"name": "generate_report", "arguments": map[string]any{"topic": "fenced", "seconds": 2}}))
	require.NotEmpty(t, fenced)
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, paused.cmd.Process.Signal(syscall.SIGSTOP))
	other := newRelClient(c.procs[1].url, hc, relExt, "")
	// Bounded generously: after the kills above the replicas may still be
	// taking over the chaos phase's tasks, one store write each, on a
	// machine the whole suite loads.
	deadline := time.Now().Add(chaosLease + 30*time.Second)
	var done map[string]any
	for {
		done = other.must(t, ctx, "tasks/get", map[string]any{"taskId": fenced})
		if done["status"] == "completed" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the task of a paused replica was not taken over: %v", done)
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, paused.cmd.Process.Signal(syscall.SIGCONT))
	resumed := time.Now()
	// It stopped the handler, having read the task's end from the feed or
	// found its lease gone, or its handler returned and found the task
	// ended: whichever came first, it says so. Waited for, not slept for:
	// a process woken on a loaded machine can take seconds to get there.
	noticed := regexp.MustCompile(`lease lost|ended in another process|took the task over|the task ended meanwhile`)
	for deadline := time.Now().Add(30 * time.Second); !noticed.MatchString(paused.log.String()); time.Sleep(50 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the resumed replica noticed it lost the task; its lines on it: %s", linesWith(paused.log.String(), fenced))
	}
	time.Sleep(time.Until(resumed.Add(3 * time.Second))) // and at least its handler's rest: it finishes and tries to record
	after := other.must(t, ctx, "tasks/get", map[string]any{"taskId": fenced})
	require.Equal(t, done["lastUpdatedAt"], after["lastUpdatedAt"], "the resumed replica overwrote the task")

	// Final checks, straight from the store. Every lease of a killed
	// replica expires and is taken over in the background: each check
	// waits (bounded) for the state it asserts rather than sleeping for it.
	st, err := postgres.Open(context.Background(), c.dsn, nil)
	require.NoError(t, err)
	defer st.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	waitDone := time.Now().Add(30 * time.Second)
	for id, topic := range l.tools {
		for {
			tk, err := st.Get(ctx, id)
			require.NoError(t, err, "acknowledged tool task %s is lost", id)
			if tk.Status.Terminal() {
				require.Equal(t, mcptask.StatusCompleted, tk.Status, "tool task %s: %s", id, tk.StatusMessage)
				require.Equal(t, crashReportText(topic), crashResultText(tk.Result))
				break
			}
			require.True(t, time.Now().Before(waitDone), "tool task %s still %s (%s), lease %q until %v", id, tk.Status, tk.StatusMessage, tk.LeaseHolder, tk.LeaseUntil)
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Each workflow settles first: one whose client step was acknowledged
	// ends; one waiting for its client holds no lease once a killed
	// replica's lease on it was taken over.
	settled := map[string]*store.Task{}
	for id, continued := range l.workflows {
		tk, err := st.Get(ctx, id)
		require.NoError(t, err, "acknowledged workflow %s is lost", id)
		for tk.Status == mcptask.StatusWorking && (continued || tk.LeaseHolder != "") && time.Now().Before(waitDone) {
			time.Sleep(50 * time.Millisecond)
			tk, err = st.Get(ctx, id)
			require.NoError(t, err)
		}
		settled[id] = tk
	}
	// Read after every workflow settled: one that completed while the
	// test waited published meanwhile.
	ledger := crashLedgerEntries(t, filepath.Join(c.dir, "taskbridge-62.published"))
	completed := 0
	for id, continued := range l.workflows {
		tk := settled[id]
		p := crashProgress(t, tk)
		crashCheckAttempts(t, id, p)
		if continued {
			require.Equal(t, mcptask.StatusCompleted, tk.Status, "workflow %s whose client step was acknowledged: %s", id, tk.StatusMessage)
		}
		if tk.Status == mcptask.StatusCompleted {
			completed++
			require.Equal(t, 1, ledger[id+"/publish"], "workflow %s published %d times", id, ledger[id+"/publish"])
		} else {
			require.Equal(t, mcptask.StatusWorking, tk.Status, "workflow %s: %s", id, tk.StatusMessage)
			require.Empty(t, tk.LeaseHolder, "workflow %s waits for its client holding a lease", id)
		}
	}
	// A tool task no client was told of (its replica died before the
	// answer) is taken over and ends too.
	for {
		active, err := st.Active(ctx)
		require.NoError(t, err)
		var left []string
		for _, tk := range active {
			if tk.Labels[taskrouter.LabelKind] == taskrouter.KindTool {
				left = append(left, fmt.Sprintf("%s %s (%s), lease %q until %v", tk.ID, tk.Status, tk.StatusMessage, tk.LeaseHolder, tk.LeaseUntil))
			}
		}
		if len(left) == 0 {
			break
		}
		require.True(t, time.Now().Before(waitDone), "tool tasks still active past the lease timeout: %s", strings.Join(left, "; "))
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("replica chaos: %d kills and restarts, 1 pause past the lease; %d acknowledged (%d tool tasks, %d workflows, %d completed); %d requests failed under a dying replica",
		kills, l.acks.Load(), len(l.tools), len(l.workflows), completed, l.errs.Load())
	require.Positive(t, completed)
	require.Positive(t, len(l.tools))
}

// chaosTool creates a short report task on a random replica and follows it
// on random replicas until it ends.
func chaosTool(ctx context.Context, hc *http.Client, c *chaosCluster, l *chaosLedger, topic string) {
	cl := newRelClient(c.url(), hc, relExt, "")
	rep, err := cl.call(ctx, "tools/call", map[string]any{"name": "generate_report", "arguments": map[string]any{"topic": topic, "seconds": 0.05}})
	if err != nil || rep.Err != nil || relTaskID(rep.Map()) == "" {
		l.errs.Add(1)
		return
	}
	id := relTaskID(rep.Map())
	l.mu.Lock()
	l.tools[id] = topic
	l.mu.Unlock()
	l.acks.Add(1)
	for range 200 {
		rep, err := newRelClient(c.url(), hc, relExt, "").call(ctx, "tasks/get", map[string]any{"taskId": id})
		if err == nil && rep.Err == nil {
			if s, _ := rep.Map()["status"].(string); relTerminal(s) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// chaosWorkflow runs release_notes: prompts/get on one replica, the
// client step on another (retried on yet another when a replica dies).
func chaosWorkflow(ctx context.Context, hc *http.Client, c *chaosCluster, l *chaosLedger, reviewer string) {
	rep, err := newRelClient(c.url(), hc, relExt, "").call(ctx, "prompts/get", map[string]any{"name": "release_notes", "arguments": map[string]any{"repo": "chaos"}})
	if err != nil || rep.Err != nil {
		l.errs.Add(1)
		return
	}
	doc, err := crashHandoff(rep.Result)
	if err != nil || len(doc.RemainingSteps) == 0 || doc.RemainingSteps[0].Name != "review" {
		l.errs.Add(1)
		return
	}
	l.mu.Lock()
	l.workflows[doc.TaskID] = false
	l.mu.Unlock()
	l.acks.Add(1)
	var draft string
	_ = json.Unmarshal(doc.RemainingSteps[0].Arguments["draft"], &draft)
	for range 10 {
		rep, err := newRelClient(c.url(), hc, relExt, "").call(ctx, "tools/call", map[string]any{
			"name": "review_notes", "arguments": map[string]any{"draft": draft, "feedback": "ok " + reviewer, "approved": true},
			"_meta": map[string]any{mcptask.MetaTaskID: doc.TaskID},
		})
		if err == nil && rep.Err == nil {
			l.mu.Lock()
			l.workflows[doc.TaskID] = true
			l.mu.Unlock()
			return
		}
		if err == nil && rep.Err != nil && !strings.Contains(rep.Err.Message, "another server process") {
			l.errs.Add(1)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// linesWith returns the lines of log that contain s.
func linesWith(log, s string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
