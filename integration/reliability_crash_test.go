package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// The crash test runs example 62 as a real process on a bbolt file, drives
// concurrent load at it over HTTP, SIGKILLs it at random moments, restarts
// it on the same file and checks, between runs (opening the file directly
// with bboltstore.Open while no server holds it) and after the last
// restart (over the wire), that nothing acknowledged was lost or rolled
// back and that no task stays working forever.

const (
	crashMaxReportSeconds = 0.3 // generate_report runs at most this long
	crashToolTTLms        = 10 * 60 * 1000
	// crashOrphanTimeout: a workflow task no client touched since its
	// handoff expires after this long (long enough for a continuation
	// retried across a kill and a restart).
	crashOrphanTimeout = 5 * time.Second
)

// crashAck is what clients were told about one task.
type crashAck struct {
	id, kind, owner, dialect string
	topic                    string            // tool tasks: the report topic
	status                   mcptask.Status    // a terminal status seen over the wire
	result                   string            // the acknowledged result text
	steps                    []string          // workflow steps acknowledged completed
	vars                     map[string]string // task variables acknowledged written
	done                     bool              // a continuation reported the workflow completed
	review                   json.RawMessage   // the draft argument of the review step
}

type crashLedger struct {
	mu     sync.Mutex
	tasks  map[string]*crashAck
	owners map[string]bool

	protocolErrors                  []string
	acks, continuations, rerunsSeen atomic.Int64
	retries, replays                atomic.Int64 // continuations retried after a kill; answered with the recorded result
}

func (l *crashLedger) owner(o string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.owners[o] = true
}

func (l *crashLedger) ack(a *crashAck) {
	l.acks.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tasks[a.id] = a
	l.owners[a.owner] = true
}

// update applies f to the ack of id under the lock.
func (l *crashLedger) update(id string, f func(a *crashAck)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := l.tasks[id]; a != nil {
		f(a)
	}
}

func (l *crashLedger) protocolError(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.protocolErrors = append(l.protocolErrors, fmt.Sprintf(format, args...))
}

// snapshot returns deep copies of every ack and the owners seen.
func (l *crashLedger) snapshot() ([]crashAck, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	acks := make([]crashAck, 0, len(l.tasks))
	for _, a := range l.tasks {
		c := *a
		c.steps = slices.Clone(a.steps)
		c.vars = map[string]string{}
		for k, v := range a.vars {
			c.vars[k] = v
		}
		acks = append(acks, c)
	}
	owners := make([]string, 0, len(l.owners))
	for o := range l.owners {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	return acks, owners
}

// crashEpoch is one run of the server process.
type crashEpoch struct {
	n      int
	url    string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	dead   chan struct{} // closed just before the process is killed
}

func (e *crashEpoch) isDead() bool {
	select {
	case <-e.dead:
		return true
	default:
		return false
	}
}

// crashCluster starts, kills and restarts the server and tells load
// workers which run is current.
type crashCluster struct {
	t       *testing.T
	bin, db string
	dir     string
	env     []string

	mu     sync.Mutex
	cur    *crashEpoch
	next   chan struct{} // closed when a new epoch is ready
	stop   chan struct{}
	epochs int
}

// await returns the current live epoch other than after, waiting for a
// new one if needed, or nil once the workers are told to stop.
func (c *crashCluster) await(after *crashEpoch) *crashEpoch {
	for {
		c.mu.Lock()
		cur, next := c.cur, c.next
		c.mu.Unlock()
		if cur != nil && cur != after && !cur.isDead() {
			return cur
		}
		select {
		case <-next:
		case <-c.stop:
			return nil
		}
	}
}

func crashFreeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// start runs the server on the store file and waits until it answers.
func (c *crashCluster) start() *crashEpoch {
	t := c.t
	t.Helper()
	var lastErr string
	for attempt := range 3 {
		c.epochs++
		e := &crashEpoch{n: c.epochs, exited: make(chan struct{}), dead: make(chan struct{})}
		addr := crashFreeAddr(t)
		e.url = "http://" + addr + "/mcp"
		e.log = filepath.Join(c.dir, fmt.Sprintf("epoch-%03d.log", e.n))
		logf, err := os.Create(e.log)
		require.NoError(t, err)
		e.cmd = exec.Command(c.bin, "serve", "-http", addr, "-db", c.db, "-v")
		e.cmd.Env = append(os.Environ(), c.env...)
		e.cmd.Stdout, e.cmd.Stderr = logf, logf
		require.NoError(t, e.cmd.Start())
		go func() {
			_ = e.cmd.Wait()
			_ = logf.Close()
			close(e.exited)
		}()
		t.Cleanup(func() {
			_ = e.cmd.Process.Kill()
			<-e.exited
		})
		if c.waitReady(e) {
			c.mu.Lock()
			c.cur = e
			close(c.next)
			c.next = make(chan struct{})
			c.mu.Unlock()
			return e
		}
		lastErr = crashTail(e.log, 2000)
		if !strings.Contains(lastErr, "address already in use") {
			break
		}
		t.Logf("start attempt %d: port taken, retrying", attempt)
	}
	t.Fatalf("the server did not start on %s (run %d):\n%s", c.db, c.epochs, lastErr)
	return nil
}

// waitReady polls the server until a tasks/get (extension dialect, so no
// session is needed) is answered, or the process exits.
func (c *crashCluster) waitReady(e *crashEpoch) bool {
	cl := newRelClient(e.url, newRelHTTPClient(1), relExt, "")
	defer cl.hc.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-e.exited:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		rep, err := cl.call(ctx, "tasks/get", map[string]any{"taskId": "00000000000000000000000000000000"})
		cancel()
		if err == nil && rep.Err != nil && rep.Err.Code == mcptask.CodeInvalidParams {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// kill SIGKILLs the epoch's process and waits for it to be gone; it fails
// the test if the process reported a data race or a panic.
func (c *crashCluster) kill(e *crashEpoch) {
	t := c.t
	t.Helper()
	close(e.dead)
	select {
	case <-e.exited:
		t.Fatalf("run %d exited before it was killed:\n%s", e.n, crashTail(e.log, 3000))
	default:
	}
	require.NoError(t, e.cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-e.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("run %d did not die after SIGKILL", e.n)
	}
	c.checkLog(e)
}

func (c *crashCluster) checkLog(e *crashEpoch) {
	b, err := os.ReadFile(e.log)
	require.NoError(c.t, err)
	for _, bad := range []string{"WARNING: DATA RACE", "panic:", "fatal error:", "level=ERROR", "rejected by transport"} {
		if i := bytes.Index(b, []byte(bad)); i >= 0 {
			c.t.Errorf("run %d logged %q:\n%s", e.n, bad, crashWindow(b, i, 4000))
		}
	}
}

func crashTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func crashWindow(b []byte, i, n int) string {
	end := min(len(b), i+n)
	return string(b[i:end])
}

// crashSeen is what earlier store checks saw of a task: durable state
// that must never go back.
type crashSeen struct {
	status    mcptask.Status
	version   uint64
	completed int // workflow steps completed
}

// storeCheck opens the store file while no server holds it and checks
// every acknowledged fact, index consistency, and that no durable state
// seen by an earlier check went back.
func (c *crashCluster) storeCheck(l *crashLedger, seen map[string]crashSeen) (tasks map[string]*store.Task) {
	t := c.t
	t.Helper()
	st, err := bboltstore.Open(c.db, &bboltstore.Options{OpenTimeout: 5 * time.Second})
	require.NoError(t, err, "the bbolt file must open cleanly after SIGKILL")
	defer func() { require.NoError(t, st.Close()) }()
	ctx := context.Background()
	acks, owners := l.snapshot()

	// Every task, through the by-owner index of every owner a client
	// ever had.
	tasks = map[string]*store.Task{}
	for _, o := range owners {
		cursor := ""
		for {
			page, err := st.List(ctx, store.ListOptions{Owner: o, Cursor: cursor, Limit: store.MaxPageSize})
			require.NoError(t, err)
			for _, tk := range page.Tasks {
				require.Equal(t, o, tk.Owner)
				tasks[tk.ID] = tk
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
	}
	// The active index holds exactly the non-terminal tasks.
	active, err := st.Active(ctx)
	require.NoError(t, err)
	activeIDs := map[string]bool{}
	for _, tk := range active {
		require.False(t, tk.Status.Terminal(), "task %s is %s but in the active index", tk.ID, tk.Status)
		_, listed := tasks[tk.ID]
		require.True(t, listed, "active task %s (owner %q) is missing from its owner's index", tk.ID, tk.Owner)
		activeIDs[tk.ID] = true
	}
	for id, tk := range tasks {
		require.Equal(t, !tk.Status.Terminal(), activeIDs[id], "task %s is %s; in the active index: %v", id, tk.Status, activeIDs[id])
		if strings.Contains(tk.StatusMessage, "re-running") {
			l.rerunsSeen.Add(1)
		}
	}

	// Every acknowledged fact is on disk.
	for _, a := range acks {
		tk, ok := tasks[a.id]
		if !ok {
			_, err := st.Get(ctx, a.id)
			t.Fatalf("acknowledged %s task %s (owner %s, %s) is missing from the store: %v", a.kind, a.id, a.owner, a.dialect, err)
		}
		require.Equal(t, a.owner, tk.Owner, "task %s", a.id)
		if a.status != "" {
			require.Equal(t, a.status, tk.Status, "task %s was acknowledged %s", a.id, a.status)
		}
		if a.result != "" {
			require.Equal(t, a.result, crashResultText(tk.Result), "task %s: acknowledged result", a.id)
		}
		if a.kind == taskrouter.KindWorkflow {
			p := crashProgress(t, tk)
			for _, s := range a.steps {
				require.Contains(t, p.CompletedSteps, s, "workflow %s: step %q was acknowledged completed", a.id, s)
			}
			for k, v := range a.vars {
				require.JSONEq(t, v, string(tk.Variables[k]), "workflow %s: variable %q was acknowledged", a.id, k)
			}
			if a.done {
				require.Equal(t, mcptask.StatusCompleted, tk.Status, "workflow %s was acknowledged completed", a.id)
			}
		}
	}

	// Nothing durable goes back between runs.
	for id, tk := range tasks {
		now := crashSeen{status: tk.Status, version: tk.Version}
		if tk.Labels[taskrouter.LabelKind] == taskrouter.KindWorkflow {
			now.completed = len(crashProgress(t, tk).CompletedSteps)
		}
		if before, ok := seen[id]; ok {
			require.GreaterOrEqual(t, now.version, before.version, "task %s: version went back", id)
			if before.status.Terminal() {
				require.Equal(t, before.status, now.status, "task %s: terminal status changed", id)
			}
			require.GreaterOrEqual(t, now.completed, before.completed, "workflow %s: completed steps went back", id)
		}
		seen[id] = now
	}
	for id := range seen {
		_, ok := tasks[id]
		require.True(t, ok, "task %s was in the store at an earlier check and is gone", id)
	}
	return tasks
}

func crashProgress(t *testing.T, tk *store.Task) *workflow.Progress {
	t.Helper()
	var p workflow.Progress
	require.NoError(t, json.Unmarshal(tk.Variables[workflow.VarProgress], &p), "workflow %s progress", tk.ID)
	return &p
}

// crashResultText is the first text content of a stored tool result.
func crashResultText(raw json.RawMessage) string {
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(raw, &r) != nil || len(r.Content) == 0 {
		return ""
	}
	return r.Content[0].Text
}

func crashReportText(topic string) string { return fmt.Sprintf("Report on %q is ready.", topic) }

// crashWorker drives load at whatever run is current.
type crashWorker struct {
	c      *crashCluster
	l      *crashLedger
	id     int
	hc     *http.Client
	ctx    context.Context
	epoch  *crashEpoch
	client *relClient
}

// failed handles a failed request: a failure caused by the kill (the
// epoch is dead) is expected and means "not acknowledged"; any other is a
// protocol error.
func (w *crashWorker) failed(what string, rep *relReply, err error) {
	if w.epoch.isDead() {
		w.epoch, w.client = nil, nil
		return
	}
	w.l.protocolError("run %d, worker %d, %s: %v %v", w.epoch.n, w.id, what, err, rep)
}

// connect makes sure the worker has a client on a live run; it returns
// false once the workers are told to stop.
func (w *crashWorker) connect(d relDialect) bool {
	for w.client == nil {
		w.epoch = w.c.await(w.epoch)
		if w.epoch == nil {
			return false
		}
		cl := newRelClient(w.epoch.url, w.hc, d, "")
		if d == relCore {
			if err := cl.initialize(w.ctx); err != nil {
				w.failed("initialize", nil, err)
				continue
			}
			w.l.owner(cl.owner(""))
		}
		w.client = cl
	}
	return true
}

func (w *crashWorker) stopped() bool {
	select {
	case <-w.c.stop:
		return true
	default:
		return false
	}
}

// runTools creates generate_report tasks. Core: params.task, then the
// blocking tasks/result in the same session (a kill ends the session,
// and with it the owner). Extension: polls tasks/get, across restarts.
func (w *crashWorker) runTools(d relDialect) {
	for n := 0; !w.stopped(); n++ {
		if !w.connect(d) {
			return
		}
		topic := fmt.Sprintf("%s-w%d-%d", d, w.id, n)
		params := map[string]any{"name": "generate_report", "arguments": map[string]any{"topic": topic, "seconds": 0.02 + mrand.Float64()*(crashMaxReportSeconds-0.02)}}
		if d == relCore {
			params["task"] = map[string]any{"ttl": crashToolTTLms}
		}
		rep, err := w.client.call(w.ctx, "tools/call", params)
		if err != nil || rep.Err != nil || relTaskID(rep.Map()) == "" {
			w.failed("create "+topic, rep, err)
			continue
		}
		id := relTaskID(rep.Map())
		w.l.ack(&crashAck{id: id, kind: taskrouter.KindTool, owner: w.client.owner(""), dialect: d.String(), topic: topic})
		if d == relCore {
			rep, err := w.client.call(w.ctx, "tasks/result", map[string]any{"taskId": id})
			if err != nil || rep.Err != nil {
				w.failed("tasks/result "+id, rep, err)
				continue
			}
			text := crashResultText(rep.Result)
			if text != crashReportText(topic) {
				w.l.protocolError("task %s: tasks/result %s", id, rep)
			}
			w.l.update(id, func(a *crashAck) { a.status, a.result = mcptask.StatusCompleted, text })
			continue
		}
		w.pollExt(id, topic)
	}
}

// pollExt polls an extension-dialect task until it ends, following the
// server across restarts (the owner "local" survives them).
func (w *crashWorker) pollExt(id, topic string) {
	for !w.stopped() {
		if !w.connect(relExt) {
			return
		}
		rep, err := w.client.call(w.ctx, "tasks/get", map[string]any{"taskId": id})
		if err != nil || rep.Err != nil {
			if err == nil && rep.Err != nil && rep.Err.Code == mcptask.CodeInvalidParams && !w.epoch.isDead() {
				w.l.protocolError("run %d: acknowledged task %s is unknown to tasks/get: %s", w.epoch.n, id, rep)
				return
			}
			w.failed("tasks/get "+id, rep, err)
			continue
		}
		got := rep.Map()
		status, _ := got["status"].(string)
		if !relTerminal(status) {
			time.Sleep(20 * time.Millisecond) // the extension dialect is polled
			continue
		}
		res, _ := json.Marshal(got["result"])
		text := crashResultText(res)
		if status != "completed" || text != crashReportText(topic) {
			w.l.protocolError("task %s ended %s: %s", id, status, rep)
		}
		w.l.update(id, func(a *crashAck) { a.status, a.result = mcptask.Status(status), text })
		return
	}
}

// runWorkflows starts release_notes workflows and continues most of them
// with review_notes and _meta._task_id (and a task variable). An
// interrupted continuation is retried after the restart, in both dialects
// (the task id is the capability, so a new session may continue it); a
// retry of a continuation that was recorded before the kill gets the
// recorded result. Every fourth workflow is left waiting and never
// touched again: it must expire as an orphan.
func (w *crashWorker) runWorkflows(d relDialect) {
	for n := 0; !w.stopped(); n++ {
		if !w.connect(d) {
			return
		}
		rep, err := w.client.call(w.ctx, "prompts/get", map[string]any{"name": "release_notes", "arguments": map[string]any{"repo": "taskbridge", "since": "v0.1.0"}})
		if err != nil || rep.Err != nil {
			w.failed("prompts/get", rep, err)
			continue
		}
		doc, derr := crashHandoff(rep.Result)
		if derr != nil || len(doc.RemainingSteps) == 0 || doc.RemainingSteps[0].Name != "review" {
			w.l.protocolError("prompts/get: bad handoff %v: %s", derr, rep)
			continue
		}
		var steps []string
		for _, s := range doc.CompletedSteps {
			steps = append(steps, s.Name)
		}
		a := &crashAck{id: doc.TaskID, kind: taskrouter.KindWorkflow, owner: w.client.owner(""), dialect: d.String(), steps: steps,
			vars: map[string]string{}, review: doc.RemainingSteps[0].Arguments["draft"]}
		w.l.ack(a)
		if n%4 == 3 {
			continue // leave this one waiting for its client step
		}
		w.continueWorkflow(d, a.id, a.owner, a.review, fmt.Sprintf("w%d-%d", w.id, n))
	}
}

func (w *crashWorker) continueWorkflow(d relDialect, id, owner string, draft json.RawMessage, reviewer string) {
	for attempt := 0; attempt < 5 && !w.stopped(); attempt++ {
		if !w.connect(d) {
			return
		}
		if attempt > 0 {
			w.l.retries.Add(1)
		}
		var draftText string
		_ = json.Unmarshal(draft, &draftText)
		vars, _ := json.Marshal(reviewer)
		rep, err := w.client.call(w.ctx, "tools/call", map[string]any{
			"name":      "review_notes",
			"arguments": map[string]any{"draft": draftText, "feedback": "ship it (" + reviewer + ")", "approved": true},
			"_meta":     map[string]any{mcptask.MetaTaskID: id, mcptask.MetaTaskVars: map[string]any{"reviewer": reviewer}},
		})
		if err != nil || rep.Err != nil {
			w.failed("continue "+id, rep, err)
			continue
		}
		w.l.continuations.Add(1)
		var out struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		}
		_ = json.Unmarshal(rep.Result, &out)
		var summary mcptask.WorkflowSummary
		_ = json.Unmarshal(out.Meta[mcptask.MetaWorkflow], &summary)
		if summary.Replayed {
			if attempt == 0 {
				w.l.protocolError("continuation of %s replayed on its first attempt: %s", id, rep)
			}
			w.l.replays.Add(1)
		}
		w.l.update(id, func(a *crashAck) {
			a.steps = append(a.steps, "review")
			a.vars["reviewer"] = string(vars)
			if summary.Status == "completed" {
				a.steps = append(a.steps, "publish")
				a.done, a.status = true, mcptask.StatusCompleted
			}
		})
		return
	}
}

func crashHandoff(raw json.RawMessage) (*handoff.Document, error) {
	var res struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, err
	}
	b, ok := res.Meta[mcptask.MetaHandoff]
	if !ok {
		return nil, errors.New("no handoff in _meta")
	}
	var d handoff.Document
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// TestCrashRestartDurability is the crash test: see the comment at the top
// of this file. It kills the server at least 20 times.
func TestCrashRestartDurability(t *testing.T) {
	kills := 30
	if testing.Short() {
		kills = 20
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "example62")
	args := []string{"build", "-o", bin}
	if relRace {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "./examples/62_tasks_workflow")...)
	build.Dir = ".."
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	c := &crashCluster{t: t, bin: bin, db: filepath.Join(dir, "tasks.db"), dir: dir, next: make(chan struct{}), stop: make(chan struct{}),
		env: []string{"TASKBRIDGE_POLL_INTERVAL=20ms", "TASKBRIDGE_ORPHAN_TIMEOUT=" + crashOrphanTimeout.String(), "TASKBRIDGE_SWEEP_INTERVAL=200ms"}}
	l := &crashLedger{tasks: map[string]*crashAck{}, owners: map[string]bool{taskrouter.LocalOwner: true}}
	ctx := relCtx(t, 5*time.Minute)
	shared := newRelHTTPClient(16)
	var wg sync.WaitGroup
	workers := []func(w *crashWorker){
		func(w *crashWorker) { w.runTools(relCore) },
		func(w *crashWorker) { w.runTools(relCore) },
		func(w *crashWorker) { w.runTools(relExt) },
		func(w *crashWorker) { w.runTools(relExt) },
		func(w *crashWorker) { w.runWorkflows(relExt) },
		func(w *crashWorker) { w.runWorkflows(relExt) },
		func(w *crashWorker) { w.runWorkflows(relCore) },
	}
	for i, run := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(&crashWorker{c: c, l: l, id: i, hc: shared, ctx: ctx})
		}()
	}
	stopWorkers := sync.OnceFunc(func() {
		close(c.stop)
		wg.Wait()
	})
	t.Cleanup(stopWorkers)

	seen := map[string]crashSeen{}
	start := time.Now()
	for i := range kills {
		e := c.start()
		// Chaos: kill at a random moment under load.
		time.Sleep(time.Duration(50+mrand.IntN(351)) * time.Millisecond)
		c.kill(e)
		c.storeCheck(l, seen)
		if t.Failed() {
			t.Fatalf("stopping after run %d", i+1)
		}
	}
	stopWorkers()
	loadTime := time.Since(start)

	// Final run: the server starts, every acknowledged task of the owner
	// that survives restarts ("local") is there, and every tool task
	// (re-run on start) and every workflow whose client step was done
	// reaches the end.
	e := c.start()
	acks, _ := l.snapshot()
	cl := newRelClient(e.url, shared, relExt, "")
	deadline := time.Now().Add(60 * time.Second)
	for _, a := range acks {
		// Every acknowledged task is readable by its id over the wire,
		// whatever session created it.
		for {
			got := cl.must(t, ctx, "tasks/get", map[string]any{"taskId": a.id})
			status := mcptask.Status(got["status"].(string))
			if a.status != "" {
				require.Equal(t, a.status, status, "task %s", a.id)
			}
			finished := status.Terminal()
			if a.kind == taskrouter.KindWorkflow && !finished && !slices.Contains(a.steps, "review") {
				// Waiting for its client: untouched ones expire as orphans
				// (this tasks/get touches only those not yet expired, and
				// the first read of an orphan candidate happens here, after
				// its deadline has passed for all but the newest).
				finished = true
			}
			if finished {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s task %s still %s after the final restart (acknowledged steps %v)", a.kind, a.id, status, a.steps)
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Workflow tasks whose prompts/get was cut off by a kill (nobody holds
	// their id) expire as orphans within the timeout (plus a sweep, every
	// 200 ms: 5 s leave a busy machine 25 of them). The store cannot be
	// read while the server holds it, nor a task read over the wire
	// without touching it, so this one wait is a time.
	time.Sleep(crashOrphanTimeout + 5*time.Second)
	c.kill(e)
	tasks := c.storeCheck(l, seen)
	ledger := crashLedgerEntries(t, c.db+".published")
	var tools, completedTools, workflows, orphans, completedWorkflows, rerunPublishes int
	for id, tk := range tasks {
		switch tk.Labels[taskrouter.LabelKind] {
		case taskrouter.KindTool:
			tools++
			require.Equal(t, mcptask.StatusCompleted, tk.Status, "tool task %s (%s) after the final restart: %s", id, tk.Owner, tk.StatusMessage)
			var args struct {
				Topic string `json:"topic"`
			}
			require.NoError(t, json.Unmarshal(tk.Request.Arguments, &args))
			require.Equal(t, crashReportText(args.Topic), crashResultText(tk.Result), "tool task %s", id)
			completedTools++
		case taskrouter.KindWorkflow:
			workflows++
			p := crashProgress(t, tk)
			crashCheckAttempts(t, id, p)
			switch tk.Status {
			case mcptask.StatusCompleted:
				completedWorkflows++
				require.Equal(t, []string{"fetch", "draft", "review", "publish"}, p.CompletedSteps, "workflow %s", id)
				// Published exactly once, even when the step ran again.
				key := id + "/publish"
				require.Equal(t, 1, ledger[key], "workflow %s: publications under key %s", id, key)
				for _, a := range p.Steps[3].History {
					if a.Reason == workflow.ReasonRestart {
						rerunPublishes++
						break
					}
				}
			case mcptask.StatusFailed:
				// Only an orphan: a task no client touched since its handoff.
				require.Contains(t, tk.StatusMessage, "orphaned:", "workflow %s failed: %s", id, tk.StatusMessage)
				require.Empty(t, tk.Labels[workflow.LabelTouched], "workflow %s was touched, yet expired as an orphan", id)
				require.NotContains(t, p.CompletedSteps, "review", "workflow %s", id)
				orphans++
			case mcptask.StatusWorking:
				// Working legitimately only while waiting for a client that
				// touched it (an untouched one would have expired).
				require.NotEmpty(t, tk.Labels[workflow.LabelTouched], "workflow %s is untouched and still working after the orphan timeout", id)
				require.NotContains(t, p.CompletedSteps, "review", "workflow %s: the client step is done but the task is still working (%v)", id, p)
			default:
				t.Errorf("workflow %s ended %s: %s", id, tk.Status, tk.StatusMessage)
			}
		default:
			t.Errorf("task %s has kind %q", id, tk.Labels[taskrouter.LabelKind])
		}
	}
	l.mu.Lock()
	perrs := l.protocolErrors
	l.mu.Unlock()
	t.Logf("crash test: %d SIGKILLs in %v (%d runs incl. the final one, race-built server: %v); acknowledged %d tasks, %d continuations "+
		"(%d retried after a kill, %d answered with the recorded result); store holds %d tool tasks (all completed: %d), %d workflows "+
		"(%d completed, %d expired as orphans); publish steps re-run after a restart and deduplicated: %d; re-run status seen %d times",
		kills, loadTime.Round(time.Millisecond), c.epochs, relRace, l.acks.Load(), l.continuations.Load(), l.retries.Load(), l.replays.Load(),
		tools, completedTools, workflows, completedWorkflows, orphans, rerunPublishes, l.rerunsSeen.Load())
	require.Positive(t, orphans, "workflows left untouched expire as orphans")
	require.Empty(t, perrs, "requests that failed while the server was up")
	require.Positive(t, l.acks.Load())
	require.Positive(t, l.continuations.Load())
}

// TestCrashRecoveryBeyondPendingLimit: a process dies with more
// interrupted retryable tool tasks of one owner than the restarted
// server's Config.MaxPendingPerOwner (an operator lowered it, or several
// processes' work meets in one file). README, "Restart": on Start, tasks a
// dead process left working are resolved, retryable tool tasks by running
// again. Each of them must end (here: complete) within a bounded time,
// not stay working until its ttl.
func TestCrashRecoveryBeyondPendingLimit(t *testing.T) {
	db := filepath.Join(t.TempDir(), "tasks.db")
	a := newRelServer(t, relServerOptions{db: db, cfg: taskrouter.Options{MaxConcurrent: 1}})
	ctx := relCtx(t, time.Minute)
	ex := newRelClient(a.url, newRelHTTPClient(2), relExt, "")
	// One long handler holds the only slot; the others queue behind it.
	relTaskID(ex.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"ms": 2000, "label": "blocker"}}))
	require.Equal(t, "blocker", <-a.hooks.started)
	// Each re-run takes longer than the whole recovery pass, so the
	// pending count on the restarted server only grows during it.
	var ids []string
	for i := range 12 {
		ids = append(ids, relTaskID(ex.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"ms": 500, "label": fmt.Sprint("q", i)}})))
	}
	a.close() // as good as a crash: Close records no outcome for running or queued tasks

	b := newRelServer(t, relServerOptions{db: db, cfg: taskrouter.Options{MaxPendingPerOwner: 4}})
	ex = newRelClient(b.url, newRelHTTPClient(2), relExt, "")
	deadline := time.Now().Add(time.Minute) // a generous bound: the loop ends when they are done
	for _, id := range ids {
		for {
			got := ex.must(t, ctx, "tasks/get", map[string]any{"taskId": id})
			if relTerminal(got["status"].(string)) {
				require.Equal(t, "completed", got["status"], "task %s: %v", id, got["statusMessage"])
				break
			}
			if time.Now().After(deadline) {
				active, err := b.st.Active(context.Background())
				require.NoError(t, err)
				t.Fatalf("BUG-3: task %s is still %v (%v) a minute after the restart; %d tasks are still active. "+
					"Router.recoverTool marks each interrupted retryable task working and calls r.admit(owner); when the owner is past "+
					"MaxPendingPerOwner, admit fails, the error is only logged, and the task is never run nor failed",
					id, got["status"], got["statusMessage"], len(active))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// crashCheckAttempts checks that a workflow's steps were each recorded
// exactly once, with their attempts: the attempt count matches the history
// (up to its cap), a completed step's last attempt succeeded and every
// earlier one failed or was interrupted, and attempts never outnumber one
// first run.
func crashCheckAttempts(t *testing.T, id string, p *workflow.Progress) {
	t.Helper()
	for _, sp := range p.Steps {
		if sp.Attempts <= 20 {
			require.Len(t, sp.History, sp.Attempts, "workflow %s step %s: %+v", id, sp.Name, sp.History)
		}
		if sp.Status != mcptask.StepCompleted {
			continue
		}
		require.NotEmpty(t, sp.History, "workflow %s step %s completed without an attempt", id, sp.Name)
		last := sp.History[len(sp.History)-1]
		require.Equal(t, workflow.OutcomeOK, last.Outcome, "workflow %s step %s", id, sp.Name)
		for i, a := range sp.History[:len(sp.History)-1] {
			require.Equal(t, workflow.OutcomeError, a.Outcome, "workflow %s step %s attempt %d", id, sp.Name, i+1)
		}
		firsts := 0
		for _, a := range sp.History {
			if a.Reason == workflow.ReasonFirst {
				firsts++
			}
		}
		require.LessOrEqual(t, firsts, 1, "workflow %s step %s", id, sp.Name)
	}
}

// crashLedgerEntries counts the publications example 62 recorded, by
// idempotency key.
func crashLedgerEntries(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]int{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var e struct {
			Key string `json:"key"`
		}
		if json.Unmarshal(line, &e) == nil && e.Key != "" {
			out[e.Key]++
		}
	}
	return out
}
