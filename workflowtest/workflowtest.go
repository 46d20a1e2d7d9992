// Package workflowtest runs a server's own workflows in a test, in
// milliseconds: the real engine (router and workflow bridge, as
// builder.Build makes them) with the server's real or fake tools, on a
// clock the test skips forward, with a go-sdk client connected in memory.
// The test starts workflows, answers client steps and events, skips time
// (a three-day approval takes milliseconds), injects a failure, a crash
// or a deploy at a named step, and asserts on the steps run, the handoffs
// and the final status. Replay checks that changed definitions still
// serve the tasks recorded in a store file. Temporal's test suite and
// replayer are the models; the machinery is the engine simulation's
// (internal/sim).
//
//	env := workflowtest.New(t, func(b *builder.Builder) {
//		builder.Tool(b, &mcp.Tool{Name: "charge"}, charge, nil)
//		b.TaskWorkflow(checkout())
//	}, nil)
//	run := env.Start("checkout", map[string]string{"cart": "42"})
//	env.Advance(72 * time.Hour)                     // the approval waits three days
//	run.Send("approve", map[string]any{"ok": true}) // a person's decision
//	require.Equal(t, mcptask.StatusCompleted, run.Status())
//
// After every action the Env waits until the engine rests (every task
// ended or waits for something named: the client, an event, a timer, a
// queue, a pause) before it returns; a workflow that does neither (it
// went silent) fails the test, naming the task. Time moves only when the
// test says: Advance stops at every wake-up on the way (a sleep's end, a
// retry, a client's wait running out) and lets the engine act there.
// Steps' Timeout and Heartbeat bounds, and tools that wait themselves,
// run on real time.
package workflowtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/sim"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// TB is what an Env needs of a test; *testing.T and *testing.B have it.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Options configure an Env; nil means the defaults.
type Options struct {
	// Start is where the clock starts; zero means a fixed instant (the
	// same in every run).
	Start time.Time
	// File, when set, keeps the tasks in a bbolt file at that path,
	// which outlives the Env (Replay reads such a file); empty keeps them
	// in memory.
	File string
	// Router and Workflow are the engine's and the bridge's options (the
	// setup must not set them on its builder: the Env's clock is in
	// Router). The Env sets Router's clock (Now), its scheduler's tick
	// (SweepInterval) and ReplicaID; a zero Workflow.PromptWait is 50ms
	// (the Env waits for the workflow to rest itself).
	Router   taskrouter.Options
	Workflow workflow.Options
}

// An Env is a server under test: the processes it runs on one store (a
// restart, a crash or a deploy replaces the process; the store stays),
// its clock, and the steps its workflows ran. Its methods fail the test
// (t.Fatal) when the server does not do what they ask; they are not
// safe for concurrent use.
type Env struct {
	t     TB
	ctx   context.Context
	world *sim.World
	setup func(*builder.Builder)

	inflight atomic.Int64 // step tool calls running (not those a deploy holds)

	mu      sync.Mutex
	calls   []StepCall
	rules   []*rule
	pending func(*builder.Builder) // a deploy a rule asked for: the next process's setup
	held    map[string]bool        // "task/path" of calls a deploy holds
}

// StepCall is one call of a step's tool that the Env saw: a server step
// the engine ran, or a step the client performed.
type StepCall struct {
	// Task is the workflow task; Step the step's path ("deploy[1]" for
	// an item of a for-each); Tool the tool called.
	Task, Step, Tool string
	// Attempt numbers the step's attempts from 1; By is server, client
	// or webhook (workflow.StepInfo's).
	Attempt int
	By      string
	// Err is the call's failure ("" when it succeeded); Injected says
	// what the Env made of it: "fail", "crash after" or "deploy before"
	// ("" for none).
	Err, Injected string
}

// New starts a server on a simulated clock: setup registers its tools and
// workflows (as the server's own code does, on the builder the Env
// makes), and runs again for every process. The Env is closed when the
// test ends.
func New(t TB, setup func(b *builder.Builder), opts *Options) *Env {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Start.IsZero() {
		o.Start = sim.Epoch
	}
	if o.Workflow.PromptWait == 0 {
		o.Workflow.PromptWait = 50 * time.Millisecond
	}
	clock := sim.NewClock(o.Start)
	var st store.Store
	if o.File != "" {
		b, err := bboltstore.Open(o.File, &bboltstore.Options{Options: store.Options{Now: clock.Now}})
		if err != nil {
			t.Fatalf("workflowtest: opening %s: %v", o.File, err)
		}
		st = b
	} else {
		st = memory.New(&store.Options{Now: clock.Now})
	}
	e := &Env{t: t, ctx: context.Background(), setup: setup, held: map[string]bool{}}
	e.world = sim.NewWorld(clock, sim.NewDisk(st), sim.WorldOptions{
		Setup:    e.register,
		Router:   o.Router,
		Workflow: o.Workflow,
	})
	t.Cleanup(func() { _ = e.world.Close() })
	if _, err := e.world.Start(e.ctx); err != nil {
		t.Fatalf("workflowtest: starting the server: %v", err)
	}
	e.settle()
	return e
}

// register sets process p up: the step middleware, then the setup.
func (e *Env) register(b *builder.Builder, p *sim.Process) error {
	b.WithMiddleware(e.middleware(p))
	e.mu.Lock()
	setup := e.setup
	e.mu.Unlock()
	if setup != nil {
		setup(b)
	}
	return nil
}

// Now is the Env's clock.
func (e *Env) Now() time.Time { return e.world.Clock.Now() }

// Advance moves the clock d forward, stopping at every wake-up on the
// way (a sleep's end, a retry, a client's wait running out, a child's
// look, a queue's) and letting the engine act at each, as it would have
// at that time. Each stop takes a few milliseconds: a workflow that
// looks at something every minute (a parent at its child, a run waiting
// on a queue) makes a long Advance stop every minute.
func (e *Env) Advance(d time.Duration) {
	e.t.Helper()
	if d < 0 {
		e.t.Fatalf("workflowtest: Advance(%s): time does not go back", d)
	}
	const maxStops = 100000
	if _, err := e.world.Advance(e.ctx, d, maxStops, e.rest(), func(time.Time, error) { e.deploys() }); err != nil {
		e.fatal(err)
	}
	e.settle()
}

// Restart stops the server gracefully (the steps running are handed back)
// and starts it again on the same store: it recovers its tasks.
func (e *Env) Restart() {
	e.t.Helper()
	e.world.Stop()
	e.start()
}

// Crash kills the server (nothing it does from now on reaches the store)
// and starts it again on the same store: it recovers its tasks.
func (e *Env) Crash() {
	e.t.Helper()
	e.world.Crash()
	e.start()
}

// Deploy stops the server gracefully and starts the next one with setup:
// changed tools, or changed definitions (a new version beside the old
// one, or the old one gone).
func (e *Env) Deploy(setup func(b *builder.Builder)) {
	e.t.Helper()
	e.world.Stop()
	e.mu.Lock()
	e.setup = setup
	e.mu.Unlock()
	e.start()
}

func (e *Env) start() {
	e.t.Helper()
	if _, err := e.world.Start(e.ctx); err != nil {
		e.t.Fatalf("workflowtest: starting the server again: %v", err)
	}
	e.settle()
}

// Fail makes the next n server runs of step fail (a tool error naming
// the injection), whatever its tool would do; n <= 0 makes every run
// fail. step is a step's name, or a path ("deploy[1]"): a for-each's
// name matches each of its items.
func (e *Env) Fail(step string, n int) {
	e.addRule(&rule{step: step, kind: injectFail, left: n})
}

// CrashAfter makes the server crash right after step's tool next returns
// on the server (its effect applied, its outcome not recorded), and
// starts the next one, which runs the step again (with the same
// idempotency key): the test of a step's idempotency.
func (e *Env) CrashAfter(step string) {
	e.addRule(&rule{step: step, kind: injectCrash, left: 1})
}

// DeployBefore deploys setup (see Deploy) when step is next about to run
// on the server: the server stops gracefully at that moment (the step
// is handed back, not run) and the next one, running setup, runs it.
func (e *Env) DeployBefore(step string, setup func(b *builder.Builder)) {
	e.addRule(&rule{step: step, kind: injectDeploy, left: 1, setup: setup})
}

// Steps returns the calls of steps' tools so far, in the order they
// started.
func (e *Env) Steps() []StepCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.calls)
}

// Start starts workflow name with args, as a client's prompts/get does,
// and returns its run once the engine rests (a crash a rule injects
// before the start answers included: the run goes on in the next
// process).
func (e *Env) Start(name string, args map[string]string) *Run {
	e.t.Helper()
	before := len(e.runsOf(name))
	res, err := e.session().GetPrompt(e.ctx, &mcp.GetPromptParams{Name: name, Arguments: args})
	if err != nil && e.world.Crashed() {
		// A crash a rule injected came before the start answered (its
		// first step ran at once): the task is stored, and the next
		// process goes on with it.
		e.settle()
		if runs := e.runsOf(name); len(runs) > before {
			return runs[len(runs)-1]
		}
	}
	if err != nil {
		e.t.Fatalf("workflowtest: starting workflow %q: %v", name, err)
	}
	doc, err := handoff.FromPromptResult(res)
	if err != nil {
		e.t.Fatalf("workflowtest: workflow %q answered no handoff: %v", name, err)
	}
	e.settle()
	return &Run{e: e, ID: doc.TaskID}
}

// Runs returns every workflow task in the store (a replayed file's
// included), oldest first.
func (e *Env) Runs() []*Run {
	e.t.Helper()
	var runs []*Run
	for q := (store.Query{Oldest: true, Limit: store.MaxPageSize}); ; {
		page, err := e.world.Disk.Store().Query(e.ctx, q)
		if err != nil {
			e.t.Fatalf("workflowtest: listing tasks: %v", err)
		}
		for _, t := range page.Tasks {
			if t.Labels[taskrouter.LabelKind] == taskrouter.KindWorkflow {
				runs = append(runs, &Run{e: e, ID: t.ID})
			}
		}
		if page.NextCursor == "" {
			return runs
		}
		q.Cursor = page.NextCursor
	}
}

// runsOf returns the runs of workflow name, oldest first.
func (e *Env) runsOf(name string) []*Run {
	var out []*Run
	for _, r := range e.Runs() {
		if t, err := e.world.Disk.Store().Get(e.ctx, r.ID); err == nil && t.Labels[workflow.LabelWorkflow] == name {
			out = append(out, r)
		}
	}
	return out
}

// session is the client of the process running now.
func (e *Env) session() *mcp.ClientSession {
	e.t.Helper()
	p := e.world.Process()
	if p == nil {
		e.t.Fatalf("workflowtest: no server runs")
	}
	return p.Session
}

// rest is what the Env waits for: no step tool running (those a deploy
// holds aside).
func (e *Env) rest() sim.Rest {
	return sim.Rest{
		Busy: func() bool { return e.inflight.Load() > 0 },
		Held: func(id, path string) bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.held[id+"/"+path]
		},
	}
}

// settle waits until the engine rests, carrying out the deploys rules
// asked for on the way; a task that does not rest fails the test.
func (e *Env) settle() {
	e.t.Helper()
	for range 100 {
		err := e.world.Settle(e.ctx, e.rest())
		if e.deploys() {
			continue
		}
		if err != nil {
			e.fatal(err)
		}
		return
	}
	e.t.Fatalf("workflowtest: the server was deployed 100 times while settling")
}

// deploys carries out a deploy a rule asked for, if any.
func (e *Env) deploys() bool {
	e.mu.Lock()
	setup := e.pending
	e.pending = nil
	e.mu.Unlock()
	if setup == nil {
		return false
	}
	e.world.Stop()
	e.mu.Lock()
	e.setup, e.held = setup, map[string]bool{}
	e.mu.Unlock()
	if _, err := e.world.Start(e.ctx); err != nil {
		e.t.Fatalf("workflowtest: deploying: %v", err)
	}
	return true
}

func (e *Env) fatal(err error) {
	e.t.Helper()
	var re *sim.RestlessError
	if errors.As(err, &re) {
		e.t.Fatalf("workflowtest: the workflow did not come to rest (it neither ended nor waits for anything named):\n  %s", strings.Join(re.Why, "\n  "))
	}
	e.t.Fatalf("workflowtest: %v", err)
}

// What a rule injects.
const (
	injectFail   = "fail"
	injectCrash  = "crash after"
	injectDeploy = "deploy before"
)

// rule is an injection waiting for its step.
type rule struct {
	step, kind string
	left       int // runs it still applies to (<= 0 with fail: every run)
	setup      func(*builder.Builder)
}

func (e *Env) addRule(r *rule) {
	e.mu.Lock()
	e.rules = append(e.rules, r)
	e.mu.Unlock()
}

// take returns the rule that applies to a server run of the step at
// path, using it up.
func (e *Env) take(path string) *rule {
	e.mu.Lock()
	defer e.mu.Unlock()
	base, _, _ := strings.Cut(path, "[")
	for i, r := range e.rules {
		if r.step != path && r.step != base {
			continue
		}
		if r.kind != injectFail || r.left > 0 {
			if r.left--; r.left == 0 {
				e.rules = slices.Delete(e.rules, i, i+1)
			}
		}
		return r
	}
	return nil
}

// middleware is process p's step middleware: it records every call of a
// step's tool and applies the rules to the server's.
func (e *Env) middleware(p *sim.Process) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			info, ok := workflow.StepFrom(ctx)
			call, isCall := req.(*mcp.CallToolRequest)
			if method != mcptask.MethodToolsCall || !ok || !isCall {
				return next(ctx, method, req)
			}
			e.inflight.Add(1)
			defer e.inflight.Add(-1)
			sc := StepCall{Task: info.TaskID, Step: info.Step, Tool: call.Params.Name, Attempt: info.Attempt, By: info.By}
			var r *rule
			if info.By == string(mcptask.ExecServer) {
				r = e.take(info.Step)
			}
			var res mcp.Result
			var err error
			switch {
			case r != nil && r.kind == injectFail:
				sc.Injected, sc.Err = r.kind, fmt.Sprintf("workflowtest: injected failure of step %q", info.Step)
				e.record(sc)
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: sc.Err}}}, nil
			case r != nil && r.kind == injectDeploy:
				sc.Injected, sc.Err = r.kind, "stopped for a deploy before it ran"
				e.record(sc)
				e.mu.Lock()
				e.pending, e.held[info.TaskID+"/"+info.Step] = r.setup, true
				e.mu.Unlock()
				e.inflight.Add(-1) // held for the deploy: the Env stops the server
				<-ctx.Done()
				e.inflight.Add(1)
				return nil, context.Cause(ctx)
			}
			res, err = next(ctx, method, req)
			sc.Err = callErr(res, err)
			if r != nil && r.kind == injectCrash {
				sc.Injected = r.kind
				p.Conn.Crash() // the outcome is never written; the Env starts the next process
			}
			e.record(sc)
			return res, err
		}
	}
}

func (e *Env) record(sc StepCall) {
	e.mu.Lock()
	e.calls = append(e.calls, sc)
	e.mu.Unlock()
}

// callErr words a tool call's failure ("" for none).
func callErr(res mcp.Result, err error) string {
	if err != nil {
		return err.Error()
	}
	if r, ok := res.(*mcp.CallToolResult); ok && r.IsError {
		for _, c := range r.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				return t.Text
			}
		}
		return "the tool failed"
	}
	return ""
}

// A Run is one workflow task of an Env.
type Run struct {
	e *Env
	// ID is the task's id.
	ID string
}

// Task returns the task as the store holds it now.
func (r *Run) Task() *store.Task {
	r.e.t.Helper()
	t, err := r.e.world.Disk.Store().Get(r.e.ctx, r.ID)
	if err != nil {
		r.e.t.Fatalf("workflowtest: reading task %s: %v", r.ID, err)
	}
	return t
}

// Status returns the task's status now.
func (r *Run) Status() mcptask.Status { return r.Task().Status }

// Progress returns the workflow's progress now: every step's record, its
// attempts and outputs.
func (r *Run) Progress() *workflow.Progress {
	r.e.t.Helper()
	t := r.Task()
	var p workflow.Progress
	if err := json.Unmarshal(t.Variables[workflow.VarProgress], &p); err != nil {
		r.e.t.Fatalf("workflowtest: task %s has no workflow progress: %v", r.ID, err)
	}
	return &p
}

// Handoff returns the handoff a client reads now (the built-in
// task_result tool, without waiting): the steps done, what the client is
// to do next, or the workflow's end.
func (r *Run) Handoff() *handoff.Document {
	r.e.t.Helper()
	res, err := r.e.session().CallTool(r.e.ctx, &mcp.CallToolParams{Name: taskrouter.DefaultResultToolName,
		Arguments: map[string]any{"task_id": r.ID, "wait_seconds": 0}})
	if err != nil {
		r.e.t.Fatalf("workflowtest: reading the handoff of task %s: %v", r.ID, err)
	}
	doc, err := handoff.FromToolResult(res)
	if err != nil {
		r.e.t.Fatalf("workflowtest: task %s has no handoff: %v (%s)", r.ID, err, callErr(res, nil))
	}
	return doc
}

// Call performs a step the client is handed: it calls tool with args and
// the task's id (a continuation), and returns the handoff it answers
// with, once the engine rests. A call the server refuses fails the test
// with the server's words; use TryCall to see a refusal.
func (r *Run) Call(tool string, args map[string]any) *handoff.Document {
	r.e.t.Helper()
	doc, err := r.TryCall(tool, args)
	if err != nil {
		r.e.t.Fatalf("workflowtest: %v", err)
	}
	return doc
}

// TryCall is Call that returns the server's refusal (a JSON-RPC error, or
// a tool error) instead of failing the test.
func (r *Run) TryCall(tool string, args map[string]any) (*handoff.Document, error) {
	r.e.t.Helper()
	return r.continuation(tool, args)
}

// Send delivers event name with payload (the event tool, as a model or a
// host delivers a person's decision) and returns the handoff, once the
// engine rests.
func (r *Run) Send(event string, payload any) *handoff.Document {
	r.e.t.Helper()
	doc, err := r.continuation(workflow.DefaultEventTool, map[string]any{"event": event, "payload": payload})
	if err != nil {
		r.e.t.Fatalf("workflowtest: delivering event %q: %v", event, err)
	}
	return doc
}

// Cancel cancels the task, as tasks/cancel does, and waits until the
// engine rests.
func (r *Run) Cancel() {
	r.e.t.Helper()
	p := r.e.world.Process()
	if p == nil {
		r.e.t.Fatalf("workflowtest: no server runs")
	}
	if _, err := p.Server.Router.CancelTask(r.e.ctx, r.ID, "cancelled by the test"); err != nil {
		r.e.t.Fatalf("workflowtest: cancelling task %s: %v", r.ID, err)
	}
	r.e.settle()
}

// continuation calls tool with the task's id, then settles and reads the
// handoff.
func (r *Run) continuation(tool string, args map[string]any) (*handoff.Document, error) {
	res, err := r.e.session().CallTool(r.e.ctx, &mcp.CallToolParams{Name: tool, Arguments: args, Meta: mcp.Meta{mcptask.MetaTaskID: r.ID}})
	r.e.settle()
	switch {
	case err != nil:
		return nil, fmt.Errorf("calling %s for task %s: %w", tool, r.ID, err)
	case res.IsError:
		return nil, fmt.Errorf("calling %s for task %s: %s", tool, r.ID, callErr(res, nil))
	}
	return r.Handoff(), nil
}

// Replay checks that setup (a changed server: new definitions, new
// versions) still serves the workflow tasks recorded in the bbolt file at
// path: it starts the server on a copy of the file (the original is left
// as it is), lets it recover the tasks, and reports as a test error every
// task that was active in the file and that the changed server cannot run
// (its version is not served, its definition changed under its version,
// its progress does not match: workflow.Bridge.CanRun), or that it failed
// meanwhile, with the server's words. A task whose version the changed
// server does not serve would wait for a process that does (up to
// Options.VersionGrace), then fail: the replayer reports it at once. It
// returns the Env, to drive the recorded tasks further.
func Replay(t TB, path string, setup func(b *builder.Builder), opts *Options) *Env {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("workflowtest: reading %s: %v", path, err)
	}
	dir, err := os.MkdirTemp("", "workflowtest-replay-")
	if err != nil {
		t.Fatalf("workflowtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	copyPath := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(copyPath, raw, 0o600); err != nil {
		t.Fatalf("workflowtest: copying %s: %v", path, err)
	}
	active, err := activeIn(copyPath)
	if err != nil {
		t.Fatalf("workflowtest: reading the tasks recorded in %s: %v", path, err)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	o.File = copyPath
	if o.Start.IsZero() {
		o.Start = latest(active)
	}
	e := New(t, setup, &o)
	p := e.world.Process()
	if p == nil {
		t.Fatalf("workflowtest: no server runs")
	}
	for _, rec := range active {
		now := (&Run{e: e, ID: rec.ID}).Task()
		switch err := p.Server.Bridge.CanRun(now); {
		case now.Status == mcptask.StatusFailed:
			t.Errorf("workflowtest: the changed server fails task %s (workflow %q, version %q), recorded %s in %s: %s",
				rec.ID, rec.Labels[workflow.LabelWorkflow], rec.Labels[workflow.LabelVersion], rec.Status, path, now.StatusMessage)
		case err != nil && !now.Status.Terminal():
			t.Errorf("workflowtest: the changed server cannot run task %s (workflow %q, version %q), recorded %s in %s: %v",
				rec.ID, rec.Labels[workflow.LabelWorkflow], rec.Labels[workflow.LabelVersion], rec.Status, path, err)
		}
	}
	return e
}

// activeIn reads the active workflow tasks of the bbolt file at path.
func activeIn(path string) ([]*store.Task, error) {
	st, err := bboltstore.Open(path, nil)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	all, err := st.Active(context.Background())
	if err != nil {
		return nil, err
	}
	var out []*store.Task
	for _, t := range all {
		if t.Labels[taskrouter.LabelKind] == taskrouter.KindWorkflow {
			out = append(out, t)
		}
	}
	return out, nil
}

// latest is the latest write among ts (zero for none): a replay's clock
// starts there, so the recorded tasks have not expired.
func latest(ts []*store.Task) time.Time {
	var at time.Time
	for _, t := range ts {
		if t.UpdatedAt.After(at) {
			at = t.UpdatedAt
		}
	}
	return at
}
