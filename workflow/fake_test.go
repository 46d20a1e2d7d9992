package workflow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// fakeEngine is a TaskEngine over a memory store, with a clock the test
// moves and tools that are Go functions: enough to test the bridge without
// an MCP server. It has no scheduler: a test wakes due tasks with wakeDue.
type fakeEngine struct {
	st          store.Store
	mu          sync.Mutex
	now         time.Time
	tools       map[string]func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error)
	calls       map[string]int
	kind        taskrouter.KindHandler
	cont        taskrouter.ContinuationHandler
	track       map[string][]context.CancelCauseFunc
	watch       map[string]chan struct{}
	taskIDTools map[string]bool
	maxTTL      time.Duration
	takesTasks  bool // requests declare the tasks extension (legs)
	legs        chan legOutcome
	ticking     time.Time                             // when set, the clock also moves with real time from then on
	failWrite   func(id string, u store.Update) error // when set, a write it fails is not made
	awaitBlocks func(id string)                       // when set, called each time Await is about to wait for a change
	onCall      func(what, id string)                 // when set, told of every call of the store, a queue or a child, before it is made
	failCreate  func(id string) error                 // when set, a create it fails is not made
}

// called tells onCall of a call (what, on task id).
func (e *fakeEngine) called(what, id string) {
	e.mu.Lock()
	f := e.onCall
	e.mu.Unlock()
	if f != nil {
		f(what, id)
	}
}

func newFakeEngine() *fakeEngine {
	e := &fakeEngine{
		now:         time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC),
		tools:       map[string]func(context.Context, map[string]any) (*mcp.CallToolResult, error){},
		calls:       map[string]int{},
		track:       map[string][]context.CancelCauseFunc{},
		watch:       map[string]chan struct{}{},
		taskIDTools: map[string]bool{},
		maxTTL:      24 * time.Hour,
	}
	e.st = memory.New(&store.Options{Now: e.Now})
	return e
}

var _ TaskEngine = (*fakeEngine)(nil)

func (e *fakeEngine) Resolve(ctx context.Context, req mcp.Request) *taskrouter.Request {
	// The client speaks the extension but did not declare it, so it takes
	// no task as an answer (legs: see leg_test.go, which turns it on).
	return &taskrouter.Request{MCP: req, Dialect: mcptask.Extension, Declared: e.takesTasks, Owner: taskrouter.LocalOwner, Source: "local"}
}

func (e *fakeEngine) CreateTask(ctx context.Context, req *taskrouter.Request, origin store.Request, o *taskrouter.CreateOptions) (*store.Task, error) {
	var opts taskrouter.CreateOptions
	if o != nil {
		opts = *o
	}
	e.called("create", opts.Labels[LabelParent])
	e.mu.Lock()
	fail := e.failCreate
	e.mu.Unlock()
	if fail != nil {
		if err := fail(opts.ID); err != nil {
			return nil, err
		}
	}
	labels := map[string]string{taskrouter.LabelKind: opts.Kind, taskrouter.LabelDialect: "ext"}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = time.Hour
	}
	status := mcptask.StatusWorking
	if opts.InputRequired {
		status = mcptask.StatusInputRequired
	}
	return e.st.Create(ctx, &store.Task{ID: cmp.Or(opts.ID, taskrouter.NewTaskID()), Owner: taskrouter.LocalOwner, Status: status,
		StatusMessage: opts.StatusMessage, CreatedAt: e.Now(), TTL: ttl, Request: origin, Labels: labels, Variables: opts.Variables, WakeAt: opts.WakeAt})
}

func (e *fakeEngine) TaskFor(ctx context.Context, req *taskrouter.Request, id string) (*store.Task, error) {
	e.called("read", id)
	return e.st.Get(ctx, id)
}

func (e *fakeEngine) Task(ctx context.Context, id string) (*store.Task, error) {
	e.called("read", id)
	return e.st.Get(ctx, id)
}

// setFailWrite makes the writes f fails not happen (nil: none).
func (e *fakeEngine) setFailWrite(f func(id string, u store.Update) error) {
	e.mu.Lock()
	e.failWrite = f
	e.mu.Unlock()
}

func (e *fakeEngine) Update(ctx context.Context, id string, u store.Update) (*store.Task, error) {
	e.called("write", id)
	e.mu.Lock()
	fail := e.failWrite
	e.mu.Unlock()
	if fail != nil {
		if err := fail(id, u); err != nil {
			return nil, err
		}
	}
	t, err := e.st.Update(ctx, id, u)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	if ch := e.watch[id]; ch != nil {
		close(ch)
		delete(e.watch, id)
	}
	e.mu.Unlock()
	return t, nil
}

func (e *fakeEngine) Await(ctx context.Context, id string, done func(*store.Task) bool) (*store.Task, error) {
	var last *store.Task
	for {
		e.mu.Lock()
		ch := e.watch[id]
		if ch == nil {
			ch = make(chan struct{})
			e.watch[id] = ch
		}
		e.mu.Unlock()
		t, err := e.st.Get(ctx, id)
		if err != nil {
			return last, err
		}
		last = t
		if done(t) {
			return t, nil
		}
		if f := e.awaitBlocks; f != nil {
			f(id)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return last, ctx.Err()
		}
	}
}

func (e *fakeEngine) RunTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	e.mu.Lock()
	f := e.tools[req.Params.Name]
	e.calls[req.Params.Name]++
	e.mu.Unlock()
	if f == nil {
		return nil, fmt.Errorf("unknown tool %q", req.Params.Name)
	}
	var args map[string]any
	_ = json.Unmarshal(req.Params.Arguments, &args)
	return f(ctx, args)
}

// CheckToolArguments passes everything: the fake's tools have no input
// schemas (integration's TestHostileWebhookBodies checks the router's).
func (e *fakeEngine) CheckToolArguments(string, json.RawMessage) error { return nil }

func (e *fakeEngine) Track(ctx context.Context, id string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	e.mu.Lock()
	e.track[id] = append(e.track[id], cancel)
	e.mu.Unlock()
	return ctx, func() { cancel(nil) }
}

// cancel cancels task id as tasks/cancel does: the status first, then the
// work.
func (e *fakeEngine) cancel(t *testing.T, id string) {
	_, err := e.CancelTask(context.Background(), id, "cancelled by request")
	require.NoError(t, err)
}

// CancelTask cancels task id as the engine does: the status first, then
// the work, then the kind learns it ended.
func (e *fakeEngine) CancelTask(ctx context.Context, id, msg string) (*store.Task, error) {
	e.called("cancel", id)
	e.mu.Lock()
	writer, _ := e.kind.(taskrouter.EndWriter)
	e.mu.Unlock()
	var nt *store.Task
	for attempt := 0; ; attempt++ { // as the router writes it
		t, err := e.st.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		m := msg
		u := store.Update{Status: mcptask.StatusCancelled, StatusMessage: &m}
		if writer != nil {
			writer.EndWrite(t, &u)
			u.IfVersion = t.Version
		}
		nt, err = e.Update(ctx, id, u)
		if errors.Is(err, store.ErrConflict) && attempt < 16 {
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	e.mu.Lock()
	cs := e.track[id]
	delete(e.track, id)
	ended, _ := e.kind.(taskrouter.EndKind)
	e.mu.Unlock()
	for _, c := range cs {
		c(errors.New("cancelled"))
	}
	if ended != nil {
		ended.Ended(ctx, nt)
	}
	return nt, nil
}

func (e *fakeEngine) TryLease(ctx context.Context, id string) (*taskrouter.Lease, error) {
	e.called("lease", id)
	t, err := e.st.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if t.Status.Terminal() {
		return nil, store.ErrTerminal
	}
	return &taskrouter.Lease{Task: t}, nil
}

func (e *fakeEngine) AdoptLease(t *store.Task) *taskrouter.Lease { return &taskrouter.Lease{Task: t} }

func (e *fakeEngine) HandleKind(kind string, h taskrouter.KindHandler) {
	if kind == taskrouter.KindWorkflow {
		e.kind = h // the workflow's hooks; legs need none in the fake
	}
}

func (e *fakeEngine) SetContinuation(h taskrouter.ContinuationHandler) { e.cont = h }

func (e *fakeEngine) AcceptTaskIDArgument(tool string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.taskIDTools[tool] = true
}

func (e *fakeEngine) SetToolOptions(string, *taskrouter.ToolOptions) {}

// StartLeg runs exec in the background, as the router runs a leg's
// handler, and answers with a stand-in for the task (its outcome comes
// on e.legs).
func (e *fakeEngine) StartLeg(ctx context.Context, q *taskrouter.Request, req *mcp.CallToolRequest, kind string, labels map[string]string, exec func(ctx context.Context) (mcp.Result, error)) (mcp.Result, error) {
	e.mu.Lock()
	if e.legs == nil {
		e.legs = make(chan legOutcome, 16)
	}
	legs := e.legs
	e.mu.Unlock()
	go func() {
		res, err := exec(context.WithoutCancel(ctx))
		legs <- legOutcome{res, err}
	}()
	return &mcp.CallToolResult{Meta: mcp.Meta{"leg": labels}}, nil
}

// legOutcome is what a leg's handler returned.
type legOutcome struct {
	res mcp.Result
	err error
}

func (e *fakeEngine) ResumeLeg(ctx context.Context, t *store.Task, reason string, exec func(ctx context.Context) (mcp.Result, error)) error {
	_, err := exec(ctx)
	return err
}

func (e *fakeEngine) Logger() *slog.Logger  { return slog.New(slog.DiscardHandler) }
func (e *fakeEngine) MaxTTL() time.Duration { return e.maxTTL }
func (e *fakeEngine) Now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.ticking.IsZero() {
		return e.now.Add(time.Since(e.ticking))
	}
	return e.now
}

// tick makes the clock move with real time too (for retries' backoffs in
// tests of what takes real time: timeouts, heartbeats).
func (e *fakeEngine) tick()                   { e.mu.Lock(); e.ticking = time.Now(); e.mu.Unlock() }
func (e *fakeEngine) advance(d time.Duration) { e.mu.Lock(); e.now = e.now.Add(d); e.mu.Unlock() }

func (e *fakeEngine) tool(name string, f func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tools[name] = f
}

func (e *fakeEngine) callsOf(name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[name]
}

// lookup is the ToolLookup of the fake's tools (every schema open).
func (e *fakeEngine) lookup() ToolLookup {
	return func(name string) (*mcp.Tool, bool) {
		e.mu.Lock()
		defer e.mu.Unlock()
		_, ok := e.tools[name]
		return &mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}}, ok
	}
}

// wakeDue wakes every task whose wake-up time came, as the engine's
// scheduler does.
func (e *fakeEngine) wakeDue(t *testing.T) int {
	due, err := e.st.Due(context.Background(), e.Now(), 100)
	require.NoError(t, err)
	for _, task := range due {
		require.NoError(t, e.kind.Wake(context.Background(), task))
	}
	return len(due)
}

// recoverAll resolves every active task as Start does after a restart.
func (e *fakeEngine) recoverAll(t *testing.T) {
	active, err := e.st.Active(context.Background())
	require.NoError(t, err)
	for _, task := range active {
		require.NoError(t, e.kind.Recover(context.Background(), task, taskrouter.ReasonRestart))
	}
	// Then, as Start does, it hands every cancelled task to the kind's
	// Owed (an undo task a crash kept from being created).
	owed, ok := e.kind.(interface {
		Owed(ctx context.Context, t *store.Task)
	})
	if !ok {
		return
	}
	q := store.Query{Statuses: []mcptask.Status{mcptask.StatusCancelled}, Limit: store.MaxPageSize}
	for {
		page, err := e.st.Query(context.Background(), q)
		require.NoError(t, err)
		for _, task := range page.Tasks {
			owed.Owed(context.Background(), task)
		}
		if page.NextCursor == "" {
			return
		}
		q.Cursor = page.NextCursor
	}
}

// ok is a tool result with structured content v.
func ok(v any) *mcp.CallToolResult { return &mcp.CallToolResult{StructuredContent: v} }

// fixture is a bridge on a fake engine, with an MCP server to register on.
type fixture struct {
	e   *fakeEngine
	b   *Bridge
	srv *mcp.Server
}

func newFixture(t *testing.T, e *fakeEngine, opts *Options, wfs ...*Definition) *fixture {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	b, err := NewBridge(e, opts)
	require.NoError(t, err)
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	b.Install(srv)
	for _, w := range wfs {
		_, err := b.Register(srv, w, e.lookup())
		require.NoError(t, err)
	}
	t.Cleanup(b.Close)
	return &fixture{e: e, b: b, srv: srv}
}

// start runs the workflow's prompt and returns its handoff's task and
// progress.
func (f *fixture) start(t *testing.T, name string, args map[string]string) (*store.Task, *Progress) {
	t.Helper()
	v := f.b.workflows[name]
	require.NotNil(t, v)
	res, err := v.prompt.Handle(context.Background(), &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: name, Arguments: args}})
	require.NoError(t, err)
	id := res.Meta[mcptask.MetaRelatedTask].(mcptask.RelatedTask).TaskID
	return f.task(t, id)
}

// task reads a task and its progress.
func (f *fixture) task(t *testing.T, id string) (*store.Task, *Progress) {
	t.Helper()
	tk, err := f.e.st.Get(context.Background(), id)
	require.NoError(t, err)
	p, err := decodeProgress(tk)
	require.NoError(t, err)
	return tk, p
}

// call performs a continuation of tool on task id.
func (f *fixture) call(t *testing.T, id, tool string, args map[string]any) (mcp.Result, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: tool, Arguments: raw, Meta: mcp.Meta{mcptask.MetaTaskID: id}}}
	return f.e.cont(context.Background(), f.e.Resolve(context.Background(), req), req)
}

// settled waits (bounded, generously: a busy machine is slow) until task
// id rests or ends.
func (f *fixture) settled(t *testing.T, id string) (*store.Task, *Progress) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tk, err := f.e.Await(ctx, id, func(tk *store.Task) bool {
		p, err := decodeProgress(tk)
		return err != nil || tk.Status.Terminal() || rests(p, f.e.Now().Add(time.Second))
	})
	require.NoError(t, err)
	return f.task(t, tk.ID)
}
