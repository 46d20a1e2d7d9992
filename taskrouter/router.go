package taskrouter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
)

// Labels the engine keeps on task records.
const (
	// LabelKind says what created the task: KindTool or KindWorkflow (or a
	// kind registered with Router.OnRecover).
	LabelKind = "kind"
	// LabelDialect records the dialect the task was created in.
	LabelDialect = "dialect"

	KindTool     = "tool"
	KindWorkflow = "workflow"

	dialectCore = "core"
	dialectExt  = "ext"
)

var (
	errShutdown = errors.New("taskrouter: server shutting down")
	errCanceled = errors.New("taskrouter: task cancelled")
	errExpired  = errors.New("taskrouter: task ttl elapsed")
	errTimeout  = errors.New("taskrouter: task timed out")
)

// Router is the task engine: it creates durable tasks, runs task handlers
// in the background with bounded concurrency, wakes waiters, sweeps expired
// tasks and resolves work a dead process left behind. Install puts its MCP
// face (both wire dialects) onto an *mcp.Server.
type Router struct {
	cfg Config
	st  store.Store
	log *slog.Logger

	mu       sync.Mutex
	tools    map[string]*toolEntry
	runs     map[string]*run
	watches  map[string]chan struct{}
	owners   map[string]*ownerState
	recovery map[string]RecoverFunc
	conns    map[string]*pushConn // shim connection id -> connection
	taskConn map[string]string    // task id -> creating connection id
	closed   bool

	sem chan struct{}

	server *mcp.Server
	loopMu sync.Mutex
	loopSS atomic.Pointer[mcp.ServerSession]
	loopCS *mcp.ClientSession

	stopSweep chan struct{}
	wg        sync.WaitGroup
	startOnce sync.Once
}

type toolEntry struct {
	support   TaskSupport
	retryable bool
	preflight func(ctx context.Context, req *mcp.CallToolRequest) (mcp.InputRequestMap, error)
}

type ownerState struct {
	pending int // queued + running
	running int
	wake    chan struct{}
}

// run is the in-memory side of a task whose handler is executing here.
type run struct {
	r       *Router
	id      string
	owner   string
	dialect string
	cancel  context.CancelCauseFunc

	mu     sync.Mutex
	inputs map[string]*pendingInput
	seq    int
}

// RecoverFunc resolves an active task of one kind found on start.
type RecoverFunc func(ctx context.Context, t *store.Task) error

// New returns a Router over cfg.Store. Call Install to serve it over MCP and
// Start to begin sweeping and recovering.
func New(cfg Config) (*Router, error) {
	if cfg.Store == nil {
		return nil, errors.New("taskrouter: Config.Store is required")
	}
	cfg = cfg.withDefaults()
	return &Router{
		cfg:       cfg,
		st:        cfg.Store,
		log:       cfg.Logger,
		tools:     map[string]*toolEntry{},
		runs:      map[string]*run{},
		watches:   map[string]chan struct{}{},
		owners:    map[string]*ownerState{},
		recovery:  map[string]RecoverFunc{},
		conns:     map[string]*pushConn{},
		taskConn:  map[string]string{},
		sem:       make(chan struct{}, cfg.MaxConcurrent),
		stopSweep: make(chan struct{}),
	}, nil
}

// Config returns the effective configuration (defaults filled in).
func (r *Router) Config() Config { return r.cfg }

// Store returns the router's store.
func (r *Router) Store() store.Store { return r.st }

// OnRecover registers how Start resolves active tasks of a kind (the
// LabelKind label) that a previous process left behind. Tool tasks are
// handled by the router itself.
func (r *Router) OnRecover(kind string, f RecoverFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recovery[kind] = f
}

// Start resolves tasks left active by a previous process and starts the
// TTL sweeper. Call it once, after every tool and recovery hook is
// registered and Install has run. Later calls do nothing.
func (r *Router) Start(ctx context.Context) error {
	var err error
	r.startOnce.Do(func() {
		err = r.recover(ctx)
		r.wg.Add(1)
		go r.sweepLoop()
	})
	return err
}

// Close stops the sweeper, cancels running handlers without recording an
// outcome (so a later Start resolves them by policy, as after a crash), and
// waits for them to return. It does not close the store.
func (r *Router) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	runs := make([]*run, 0, len(r.runs))
	for _, ru := range r.runs {
		runs = append(runs, ru)
	}
	r.mu.Unlock()
	close(r.stopSweep)
	for _, ru := range runs {
		ru.cancel(errShutdown)
	}
	r.wg.Wait()
	r.loopMu.Lock()
	if r.loopCS != nil {
		_ = r.loopCS.Close()
	}
	r.loopMu.Unlock()
	return nil
}

// NewTaskID returns 128 random bits, hex encoded.
func NewTaskID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ---- watching ----

// watch returns a channel closed at the next change of task id.
func (r *Router) watch(id string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch, ok := r.watches[id]
	if !ok {
		ch = make(chan struct{})
		r.watches[id] = ch
	}
	return ch
}

// unwatch drops w if it is still the registered watch of id (the task
// vanished while a waiter held it).
func (r *Router) unwatch(id string, w <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.watches[id]; ok && (<-chan struct{})(ch) == w {
		delete(r.watches, id)
	}
}

// changed wakes everyone watching task t and pushes its status.
func (r *Router) changed(t *store.Task) {
	r.mu.Lock()
	ch, ok := r.watches[t.ID]
	if ok {
		delete(r.watches, t.ID)
	}
	r.mu.Unlock()
	if ok {
		close(ch)
	}
	r.push(t)
}

// ---- creation ----

// CreateOptions shape a task created through CreateTask.
type CreateOptions struct {
	// TTL is the requested ttl; zero means the configured default. It is
	// capped at Config.MaxTTL.
	TTL time.Duration
	// Kind is stored as the LabelKind label.
	Kind string
	// Labels are extra labels.
	Labels map[string]string
	// Variables are the task's initial variables.
	Variables map[string]json.RawMessage
	// StatusMessage is the initial status message.
	StatusMessage string
}

func (r *Router) actualTTL(requested time.Duration) time.Duration {
	if requested <= 0 {
		return r.cfg.DefaultTTL
	}
	if requested > r.cfg.MaxTTL {
		return r.cfg.MaxTTL
	}
	return requested
}

// CreateTask durably creates a working task for owner and returns it. It is
// the generic entry point the workflow bridge uses (FNDX-04): nothing runs;
// the caller drives the task with SetVariables, Complete and Fail.
func (r *Router) CreateTask(ctx context.Context, owner string, req store.Request, opts CreateOptions) (*store.Task, error) {
	labels := map[string]string{}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	if opts.Kind != "" {
		labels[LabelKind] = opts.Kind
	}
	now := r.cfg.Now()
	t := &store.Task{
		ID:            NewTaskID(),
		Owner:         owner,
		Status:        store.StatusWorking,
		StatusMessage: opts.StatusMessage,
		CreatedAt:     now,
		UpdatedAt:     now,
		TTL:           r.actualTTL(opts.TTL),
		PollInterval:  r.cfg.PollInterval,
		Request:       req,
		Labels:        labels,
		Variables:     opts.Variables,
	}
	return r.st.Create(ctx, t)
}

// ---- reading and writing (FNDX-04) ----

// Task returns a task by id, whoever owns it.
func (r *Router) Task(ctx context.Context, id string) (*store.Task, error) {
	return r.st.Get(ctx, id)
}

// OwnedTask returns the task if owner owns it, and store.ErrNotFound
// otherwise, so foreign tasks are indistinguishable from missing ones.
func (r *Router) OwnedTask(ctx context.Context, owner, id string) (*store.Task, error) {
	t, err := r.st.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if t.Owner != owner {
		return nil, fmt.Errorf("task %s: %w", id, store.ErrNotFound)
	}
	return t, nil
}

// Update applies u to a task and wakes its waiters.
func (r *Router) Update(ctx context.Context, id string, u store.Update) (*store.Task, error) {
	t, err := r.st.Update(ctx, id, u)
	if err != nil {
		return nil, err
	}
	r.changed(t)
	return t, nil
}

// SetVariables merges vars into the task's variables (a JSON null deletes
// a key). ifVersion, when non-zero, makes the write conditional.
func (r *Router) SetVariables(ctx context.Context, id string, vars map[string]json.RawMessage, ifVersion uint64) (*store.Task, error) {
	return r.Update(ctx, id, store.Update{IfVersion: ifVersion, Variables: vars})
}

// Complete ends a task as completed with result (any JSON-encodable MCP
// result), optionally merging final variables in the same write.
func (r *Router) Complete(ctx context.Context, id string, result any, vars map[string]json.RawMessage) (*store.Task, error) {
	raw, err := json.Marshal(result)
	if err != nil {
		return nil, fmt.Errorf("taskrouter: encoding result: %w", err)
	}
	return r.Update(ctx, id, store.Update{Status: store.StatusCompleted, Result: raw, Variables: vars, StatusMessage: ptr("")})
}

// Fail ends a task as failed with a status message and, optionally, the
// JSON-RPC error that tasks/result reports.
func (r *Router) Fail(ctx context.Context, id string, message string, rpcErr *store.ErrorInfo) (*store.Task, error) {
	return r.Update(ctx, id, store.Update{Status: store.StatusFailed, StatusMessage: &message, Error: rpcErr})
}

func ptr[T any](v T) *T { return &v }

// ---- running ----

// admit reserves a pending slot for owner, or fails when the owner has too
// many queued and running tasks.
func (r *Router) admit(owner string) error { return r.admitAs(owner, false) }

// admitAs is admit; with recovered set it skips the pending cap, because a
// task re-run after a restart was admitted before the crash, and refusing it
// now would leave it working forever.
func (r *Router) admitAs(owner string, recovered bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errShutdown
	}
	os := r.owners[owner]
	if os == nil {
		os = &ownerState{wake: make(chan struct{})}
		r.owners[owner] = os
	}
	if os.pending >= r.cfg.MaxPendingPerOwner && !recovered {
		return &jsonrpc.Error{Code: CodeTooManyTasks, Message: fmt.Sprintf("too many active tasks for this requestor (limit %d)", r.cfg.MaxPendingPerOwner)}
	}
	os.pending++
	return nil
}

// acquire waits for a global slot and an owner slot.
func (r *Router) acquire(ctx context.Context, owner string) error {
	for {
		r.mu.Lock()
		os := r.owners[owner]
		if os.running < r.cfg.MaxConcurrentPerOwner {
			os.running++
			r.mu.Unlock()
			break
		}
		wake := os.wake
		r.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	select {
	case r.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		r.releaseRunning(owner)
		return context.Cause(ctx)
	}
}

// releaseRunning gives back an owner's running slot and wakes its waiters.
func (r *Router) releaseRunning(owner string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	os := r.owners[owner]
	os.running--
	close(os.wake)
	os.wake = make(chan struct{})
}

// releaseOwner gives back an owner's pending slot, and its running slot
// when running is set.
func (r *Router) releaseOwner(owner string, running bool) {
	if running {
		r.releaseRunning(owner)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	os := r.owners[owner]
	os.pending--
	if os.pending == 0 && os.running == 0 {
		delete(r.owners, owner)
	}
}

// ExecFunc runs a task's work and returns its MCP result or error.
type ExecFunc func(ctx context.Context) (mcp.Result, error)

// taskCtxKey carries the running task id into handler contexts.
type taskCtxKey struct{}

// TaskID returns the id of the task whose handler ctx belongs to.
func TaskID(ctx context.Context) (string, bool) {
	ru, ok := ctx.Value(taskCtxKey{}).(*run)
	if !ok {
		return "", false
	}
	return ru.id, true
}

// spawn runs exec in the background for task t. The caller has admitted
// the owner.
func (r *Router) spawn(t *store.Task, exec ExecFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ru := &run{r: r, id: t.ID, owner: t.Owner, dialect: t.Labels[LabelDialect], cancel: cancel, inputs: map[string]*pendingInput{}}
	r.mu.Lock()
	r.runs[t.ID] = ru
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer cancel(nil)
		res, err := r.execute(ctx, ru, exec)
		r.finish(ru, ctx, res, err)
	}()
}

func (r *Router) execute(ctx context.Context, ru *run, exec ExecFunc) (res mcp.Result, err error) {
	if err := r.acquire(ctx, ru.owner); err != nil {
		r.releaseOwner(ru.owner, false)
		return nil, err
	}
	defer func() {
		<-r.sem
		r.releaseOwner(ru.owner, true)
	}()
	ctx = context.WithValue(ctx, taskCtxKey{}, ru)
	if r.cfg.TaskTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, r.cfg.TaskTimeout, fmt.Errorf("%w after %s", errTimeout, r.cfg.TaskTimeout))
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("task handler panicked", "task", ru.id, "panic", p, "stack", string(debug.Stack()))
			res, err = nil, &jsonrpc.Error{Code: CodeInternalError, Message: fmt.Sprintf("task handler panicked: %v", p)}
		}
	}()
	res, err = exec(ctx)
	if err == nil && res == nil {
		err = &jsonrpc.Error{Code: CodeInternalError, Message: "task handler returned no result"}
	}
	if cause := context.Cause(ctx); cause != nil {
		// The context ended (cancel, ttl, timeout, shutdown): report why,
		// whatever the handler made of it.
		res, err = nil, cause
	}
	return res, err
}

// finish records the outcome of a run unless the task was ended by
// someone else (cancel, ttl) or the server is shutting down.
func (r *Router) finish(ru *run, ctx context.Context, res mcp.Result, err error) {
	r.mu.Lock()
	delete(r.runs, ru.id)
	r.mu.Unlock()
	ru.failInputs(errCanceled)
	cause := context.Cause(ctx)
	if errors.Is(cause, errShutdown) || errors.Is(cause, errCanceled) || errors.Is(cause, errExpired) {
		return
	}
	u := outcome(res, err, ru.dialect)
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, uerr := r.Update(wctx, ru.id, u); uerr != nil && !errors.Is(uerr, store.ErrTerminal) && !errors.Is(uerr, store.ErrNotFound) {
		r.log.Error("recording task outcome", "task", ru.id, "error", uerr)
		if errors.Is(uerr, store.ErrTooLarge) {
			msg := "task result too large to store: " + uerr.Error()
			_, _ = r.Update(wctx, ru.id, store.Update{Status: store.StatusFailed, StatusMessage: &msg,
				Error: &store.ErrorInfo{Code: CodeInternalError, Message: msg}})
		}
	}
}

// outcome maps a handler's return to the update that ends the task. A
// JSON-RPC error fails the task. A tool result with isError fails it in
// the core dialect, but completes it in the extension dialect, where
// "failed" is reserved for JSON-RPC errors.
func outcome(res mcp.Result, err error, dialect string) store.Update {
	if err != nil {
		info := errorInfo(err)
		msg := info.Message
		return store.Update{Status: store.StatusFailed, StatusMessage: &msg, Error: info}
	}
	raw, merr := json.Marshal(res)
	if merr != nil {
		msg := "encoding task result: " + merr.Error()
		return store.Update{Status: store.StatusFailed, StatusMessage: &msg, Error: &store.ErrorInfo{Code: CodeInternalError, Message: msg}}
	}
	if ctr, ok := res.(*mcp.CallToolResult); ok && ctr.IsError {
		msg := toolErrorText(ctr)
		if dialect == dialectExt {
			return store.Update{Status: store.StatusCompleted, StatusMessage: &msg, Result: raw}
		}
		return store.Update{Status: store.StatusFailed, StatusMessage: &msg, Result: raw}
	}
	return store.Update{Status: store.StatusCompleted, Result: raw, StatusMessage: ptr("")}
}

func toolErrorText(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok && tc.Text != "" {
			parts = append(parts, tc.Text)
		}
	}
	if len(parts) == 0 {
		return "tool reported an error"
	}
	msg := strings.Join(parts, "\n")
	if len(msg) > 1024 {
		msg = msg[:1024] + "…"
	}
	return msg
}

// errorInfo converts an error into the JSON-RPC error stored on a task.
func errorInfo(err error) *store.ErrorInfo {
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return &store.ErrorInfo{Code: je.Code, Message: je.Message, Data: je.Data}
	}
	switch {
	case errors.Is(err, errTimeout):
		return &store.ErrorInfo{Code: CodeInternalError, Message: strings.TrimPrefix(err.Error(), "taskrouter: ")}
	case errors.Is(err, store.ErrTooLarge):
		return &store.ErrorInfo{Code: CodeInvalidParams, Message: err.Error()}
	}
	return &store.ErrorInfo{Code: CodeInternalError, Message: err.Error()}
}

// cancelTask marks a task cancelled, then stops its handler.
func (r *Router) cancelTask(ctx context.Context, t *store.Task, message string) (*store.Task, error) {
	nt, err := r.Update(ctx, t.ID, store.Update{IfVersion: 0, Status: store.StatusCancelled, StatusMessage: &message})
	if err != nil {
		return nil, err
	}
	r.stopRun(t.ID, errCanceled)
	return nt, nil
}

func (r *Router) stopRun(id string, cause error) {
	r.mu.Lock()
	ru := r.runs[id]
	r.mu.Unlock()
	if ru != nil {
		ru.cancel(cause)
	}
}

// Cancel cancels a task on behalf of owner: the task is marked cancelled
// before its handler's context is cancelled.
func (r *Router) Cancel(ctx context.Context, owner, id string) (*store.Task, error) {
	t, err := r.OwnedTask(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	return r.cancelTask(ctx, t, "cancelled by request")
}

// ---- TTL ----

func (r *Router) sweepLoop() {
	defer r.wg.Done()
	tick := time.NewTicker(r.cfg.SweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-r.stopSweep:
			return
		case <-tick.C:
			if _, err := r.Sweep(context.Background()); err != nil {
				r.log.Warn("ttl sweep", "error", err)
			}
		}
	}
}

// Sweep handles every task whose ttl has elapsed: finished tasks are
// deleted; tasks still running are cancelled and marked failed with a
// status message saying why, and kept readable for Config.ExpiredGrace.
// It returns how many tasks it deleted or marked.
func (r *Router) Sweep(ctx context.Context) (int, error) {
	n := 0
	for {
		now := r.cfg.Now()
		batch, err := r.st.Expired(ctx, now, 256)
		if err != nil {
			return n, err
		}
		if len(batch) == 0 {
			return n, nil
		}
		progressed := false
		for _, t := range batch {
			if t.Status.Terminal() {
				if err := r.st.Delete(ctx, t.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
					return n, err
				}
				r.mu.Lock()
				delete(r.watches, t.ID)
				r.mu.Unlock()
				n++
				progressed = true
				continue
			}
			msg := fmt.Sprintf("expired: ttl of %s elapsed before the task finished; it was cancelled", t.TTL)
			grace := now.Add(r.cfg.ExpiredGrace)
			nt, err := r.st.Update(ctx, t.ID, store.Update{Status: store.StatusFailed, StatusMessage: &msg,
				Error: &store.ErrorInfo{Code: CodeInternalError, Message: msg}, ExpiresAt: &grace})
			if err != nil {
				if errors.Is(err, store.ErrTerminal) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
					continue
				}
				return n, err
			}
			r.stopRun(t.ID, errExpired)
			r.changed(nt)
			n++
			progressed = true
		}
		if !progressed {
			return n, nil
		}
	}
}

// ---- recovery ----

func (r *Router) recover(ctx context.Context) error {
	active, err := r.st.Active(ctx)
	if err != nil {
		return fmt.Errorf("taskrouter: listing active tasks: %w", err)
	}
	for _, t := range active {
		kind := t.Labels[LabelKind]
		r.mu.Lock()
		hook := r.recovery[kind]
		r.mu.Unlock()
		switch {
		case hook != nil:
			if err := hook(ctx, t); err != nil {
				r.log.Error("recovering task", "task", t.ID, "kind", kind, "error", err)
			}
		case kind == KindTool:
			r.recoverTool(ctx, t)
		default:
			msg := fmt.Sprintf("interrupted: the server restarted while this task was %s and no recovery is registered for kind %q", t.Status, kind)
			if _, err := r.Fail(ctx, t.ID, msg, &store.ErrorInfo{Code: CodeInternalError, Message: msg}); err != nil {
				r.log.Error("failing interrupted task", "task", t.ID, "error", err)
			}
		}
	}
	return nil
}

func (r *Router) recoverTool(ctx context.Context, t *store.Task) {
	r.mu.Lock()
	te := r.tools[t.Request.Name]
	r.mu.Unlock()
	if te == nil || !te.retryable {
		msg := fmt.Sprintf("interrupted: the server restarted while tool %q was running, and the tool is not registered as safe to retry", t.Request.Name)
		if _, err := r.Fail(ctx, t.ID, msg, &store.ErrorInfo{Code: CodeInternalError, Message: msg}); err != nil {
			r.log.Error("failing interrupted task", "task", t.ID, "error", err)
		}
		return
	}
	if err := r.admitAs(t.Owner, true); err != nil {
		// Only a closed router refuses; the next start resolves the task.
		r.log.Error("re-running interrupted task", "task", t.ID, "error", err)
		return
	}
	msg := "re-running after a server restart"
	nt, err := r.Update(ctx, t.ID, store.Update{Status: store.StatusWorking, StatusMessage: &msg})
	if err != nil {
		r.releaseOwner(t.Owner, false)
		r.log.Error("re-running interrupted task", "task", t.ID, "error", err)
		return
	}
	name, args := nt.Request.Name, nt.Request.Arguments
	r.log.Info("re-running interrupted task", "task", nt.ID, "tool", name)
	r.spawn(nt, func(ctx context.Context) (mcp.Result, error) {
		return r.CallTool(ctx, name, args)
	})
}

// ---- loopback ----

// CallTool calls a tool of the installed server in-process, through the
// SDK's full tools/call pipeline (input validation, output schema), and
// never as a task. It is how the engine re-runs retryable tools after a
// restart and how the workflow bridge runs server steps.
func (r *Router) CallTool(ctx context.Context, name string, args any) (*mcp.CallToolResult, error) {
	cs, err := r.loopback(ctx)
	if err != nil {
		return nil, err
	}
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
}

// Tools lists the installed server's tools in-process.
func (r *Router) Tools(ctx context.Context) ([]*mcp.Tool, error) {
	cs, err := r.loopback(ctx)
	if err != nil {
		return nil, err
	}
	var out []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func (r *Router) loopback(ctx context.Context) (*mcp.ClientSession, error) {
	r.loopMu.Lock()
	defer r.loopMu.Unlock()
	if r.loopCS != nil {
		return r.loopCS, nil
	}
	if r.server == nil {
		return nil, errors.New("taskrouter: Install has not been called")
	}
	ct, st := mcp.NewInMemoryTransports()
	ss, err := r.server.Connect(context.WithoutCancel(ctx), st, nil)
	if err != nil {
		return nil, fmt.Errorf("taskrouter: loopback: %w", err)
	}
	r.loopSS.Store(ss)
	client := mcp.NewClient(&mcp.Implementation{Name: "taskbridge-loopback", Version: "1"}, &mcp.ClientOptions{})
	cs, err := client.Connect(context.WithoutCancel(ctx), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		_ = ss.Close()
		r.loopSS.Store(nil)
		return nil, fmt.Errorf("taskrouter: loopback: %w", err)
	}
	r.loopCS = cs
	return cs, nil
}

func (r *Router) isLoopback(req mcp.Request) bool {
	ss, ok := req.GetSession().(*mcp.ServerSession)
	if !ok || ss == nil {
		return false
	}
	return ss == r.loopSS.Load()
}
