package taskrouter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// Creating a tool task: the record a request makes (newRecord), stored
// (the fanout's create), and the task-augmented tools/call that starts its
// handler at once (startToolTask), folding an instant handler's outcome
// into the create commit (instant tasks, below).

// CreateTask durably creates a working task for the requestor and returns
// it. Nothing runs: the caller drives the task with Update, SetVariables,
// Complete and Fail. req may be nil for tasks created outside a request;
// the task then belongs to LocalOwner.
//
// It is the admission point of every task a component creates (workflow
// tasks from a prompt or a tool, forks, and any kind registered with
// HandleKind): the task counts against the requestor's quotas, as a tool
// task does, from now until it ends, and a request past a limit fails
// with a -32000 (mcptask.CodeTooManyTasks) naming it, before anything is
// stored. A request whose owner could not be identified fails with its
// OwnerErr.
func (r *Router) CreateTask(ctx context.Context, req *Request, origin store.Request, opts *CreateOptions) (*store.Task, error) {
	adm := admission{owner: LocalOwner}
	if req != nil {
		if req.OwnerErr != nil {
			return nil, req.OwnerErr
		}
		adm = admission{owner: req.Owner, source: req.Source}
	}
	rec := newRecord(&r.opts, r.shared, req, origin, opts)
	if err := r.door.admitTask(rec.ID, adm, false); err != nil {
		return nil, err
	}
	t, err := r.fan.create(ctx, rec)
	if err != nil {
		r.quotas.releaseTask(rec.ID)
		return nil, err
	}
	r.quotas.ended(t.ID, t.Status, false)
	r.peers.bindRequest(t.ID, req)
	return t, nil
}

// newRecord builds the record CreateTask stores, by the engine's
// options o (shared: the store is shared by several processes).
func newRecord(o *Options, shared bool, req *Request, origin store.Request, co *CreateOptions) *store.Task {
	opts := deref(co)
	labels := make(map[string]string, len(opts.Labels)+3)
	for k, v := range opts.Labels {
		labels[k] = v
	}
	if opts.Kind != "" {
		labels[LabelKind] = opts.Kind
	}
	owner := LocalOwner
	if req != nil {
		owner = req.Owner
		labels[LabelDialect] = req.Dialect.Label()
		if req.byID(o.SessionBound) {
			labels[labelAccess] = accessByID
		}
		if req.ownScope || req.anonymous() {
			labels[labelScope] = scopeTask
		}
	}
	now := o.Now()
	t := &store.Task{
		ID:            cmp.Or(opts.ID, NewTaskID()),
		Owner:         owner,
		Status:        mcptask.StatusWorking,
		StatusMessage: opts.StatusMessage,
		CreatedAt:     now,
		UpdatedAt:     now,
		TTL:           o.ttl(opts.TTL),
		PollInterval:  o.PollInterval,
		Request:       origin,
		Labels:        labels,
		Variables:     opts.Variables,
		WakeAt:        opts.WakeAt,
	}
	if opts.InputRequired {
		t.Status = mcptask.StatusInputRequired
	}
	if opts.Lease && shared {
		t.LeaseHolder, t.LeaseUntil = o.ReplicaID, o.Now().Add(o.LeaseDuration)
	}
	return t
}

// startToolTask creates a task for a tools/call and runs the tool in the
// background. When checked is set, in is the input the router already
// decoded from the call's arguments (see toolcall.go), which the tool's
// handler takes instead of decoding them again.
func (r *Router) startToolTask(ctx context.Context, q *Request, req *mcp.CallToolRequest, ttl time.Duration, checked bool, in any) (mcp.Result, error) {
	if q.OwnerErr != nil {
		return nil, q.OwnerErr
	}
	adm := admission{owner: q.Owner, source: q.Source}
	if err := r.door.admit(adm, false); err != nil {
		return nil, err
	}
	rec := newRecord(&r.opts, r.shared, q, store.Request{Method: mcptask.MethodToolsCall, Name: req.Params.Name, Arguments: req.Params.Arguments},
		&CreateOptions{TTL: ttl, Kind: KindTool, Lease: true})
	exec := toolExec(r.inner, req, checked, in)
	if r.opts.InstantWindow > 0 {
		// An instant task: its handler runs before its record is stored
		// (see below).
		o, t, err := r.runPending(ctx, q, adm, rec.ID, rec.Request.Name, func() *store.Task { return rec }, exec, r.opts.InstantWindow, false)
		switch {
		case err != nil:
			return nil, err
		case o != nil:
			return r.createEnded(ctx, q.Dialect, rec, *o)
		}
		return createReply(q.Dialect, rec.Request.Name, t, r.opts.ImmediateResponse), nil
	}
	t, err := r.fan.create(ctx, rec)
	if err != nil {
		r.quotas.release(adm, false)
		return nil, storeError(err)
	}
	r.pushers.bind(t.ID, q.connID)
	r.spawn(t.ID, t.Request.Name, t, adm, q.Dialect, exec, nil)
	return createReply(q.Dialect, req.Params.Name, t, r.opts.ImmediateResponse), nil
}

// toolExec is the work of a tool task: the tools/call req through the
// SDK's tool dispatch (inner), with the input the router decoded when
// checked.
func toolExec(inner mcp.MethodHandler, req *mcp.CallToolRequest, checked bool, in any) execFunc {
	return func(ctx context.Context) (mcp.Result, error) {
		if checked {
			ctx = withChecked(ctx, req, in)
		}
		return inner(ctx, mcptask.MethodToolsCall, req)
	}
}

// Instant tools. A task-augmented tools/call starts its handler before the
// task's record is stored, and waits up to Options.InstantWindow for it.
// When the handler returns in that window, the task is created already
// ended, its outcome in the same durable write: one commit instead of a
// create and an update, still durable before the reply. Otherwise the
// working record is created when the window ends, or as soon as the
// handler needs its task to exist: when it asks for its id (TaskID), asks
// for input, or has to wait for a running slot. Until then nobody but the
// handler knows the task id, so nobody can miss the record.

// pendingRecord is a task record not stored yet, shared by the request that
// creates it and the run of its handler.
type pendingRecord struct {
	mu    sync.Mutex
	state recordState
	// build makes the record to store, once it is needed (see record):
	// a plain call in host mode that ends in its window never needs one.
	build  func() *store.Task
	rec    *store.Task
	connID string // the connection that asked for the task
	// done is closed once the working record's create has returned; task
	// and err are its outcome.
	done chan struct{}
	task *store.Task
	err  error
	// ended receives the handler's outcome when it returned first.
	ended chan handlerOutcome
}

type recordState int

const (
	recordPending  recordState = iota // nothing stored yet
	recordCreating                    // the working record is being (or was) stored
	recordFolded                      // the handler returned first: its outcome goes into the create
)

// handlerOutcome is what a handler returned, and why its context ended if
// it did.
type handlerOutcome struct {
	res   mcp.Result
	err   error
	cause error
}

// errFolded tells the caller of materialize that the handler's outcome went
// to the request, which creates the ended task.
var errFolded = errors.New("taskrouter: the task is created ended")

// materialize stores the run's working record unless it is stored already
// (then it waits for that create and returns its result) or the handler's
// outcome is being folded into the create (errFolded).
func (ru *run) materialize() (*store.Task, error) {
	r, p := ru.r, ru.pending
	p.mu.Lock()
	switch p.state {
	case recordCreating:
		p.mu.Unlock()
		<-p.done
		return p.task, p.err
	case recordFolded:
		p.mu.Unlock()
		return nil, errFolded
	}
	p.state = recordCreating
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t, err := r.fan.create(ctx, p.record())
	if err == nil {
		r.pushers.bind(t.ID, p.connID)
		if t.LeaseHolder == r.opts.ReplicaID {
			ru.lease = &heldLease{fence: t.Fence(), stop: ru.cancel}
			r.leases.add(t.ID, ru.lease)
		}
	} else {
		// The handler works for a task that will never exist: stop it.
		ru.cancel(errShutdown)
	}
	p.task, p.err = t, err
	close(p.done)
	return t, err
}

// record returns the pending task's record, made on the first call. Only
// one side ever needs it (the run that stores the working record, or the
// request that stores the folded outcome: the state decides which), so
// it is never made twice.
func (p *pendingRecord) record() *store.Task {
	if p.rec == nil {
		p.rec = p.build()
	}
	return p.rec
}

// settled is called by finish before it records anything: it reports
// whether the outcome went to the request instead (the record was still
// pending), and otherwise waits until the working record is stored and
// reports whether that worked.
func (p *pendingRecord) settled(o handlerOutcome) (folded, stored bool) {
	p.mu.Lock()
	if p.state == recordPending {
		p.state = recordFolded
		p.mu.Unlock()
		p.ended <- o
		return true, false
	}
	p.mu.Unlock()
	<-p.done
	return false, p.err == nil
}

// runPending spawns exec for task id (of tool), not stored yet, and waits
// up to window for it (and, with leave, no longer than ctx: a caller that
// goes away makes the work a task at once). It returns the handler's
// outcome when the handler returned first (nothing is stored, and build
// has not been called), or the working task build makes, stored.
func (r *Router) runPending(ctx context.Context, q *Request, adm admission, id, tool string, build func() *store.Task, exec execFunc, window time.Duration, leave bool) (*handlerOutcome, *store.Task, error) {
	p := &pendingRecord{build: build, connID: q.connID, done: make(chan struct{}), ended: make(chan handlerOutcome, 1)}
	ru := r.spawn(id, tool, nil, adm, q.Dialect, exec, p)
	timer := time.NewTimer(window)
	defer timer.Stop()
	var gone <-chan struct{}
	if leave {
		gone = ctx.Done()
	}
	select {
	case o := <-p.ended:
		return &o, nil, nil
	case <-timer.C:
	case <-p.done:
	case <-gone:
	}
	t, err := ru.materialize()
	switch {
	case errors.Is(err, errFolded):
		o := <-p.ended
		return &o, nil, nil
	case err != nil:
		return nil, nil, storeError(err)
	}
	return nil, t, nil
}

// createEnded stores a task whose handler returned before its record was
// stored, with its outcome, in one write.
func (r *Router) createEnded(ctx context.Context, d mcptask.Dialect, rec *store.Task, o handlerOutcome) (mcp.Result, error) {
	if o.cause != nil && (errors.Is(o.cause, errShutdown) || errors.Is(o.cause, errEnded)) {
		return nil, errShutdown
	}
	u := outcome(o.res, o.err)
	t := *rec
	t.Status, t.Result, t.Error = u.Status, u.Result, u.Error
	if u.StatusMessage != nil {
		t.StatusMessage = *u.StatusMessage
	}
	t.LeaseHolder, t.LeaseUntil = "", time.Time{}
	t.UpdatedAt = r.opts.Now()
	created, err := r.fan.create(ctx, &t)
	if errors.Is(err, store.ErrTooLarge) {
		f := tooLargeFailure(err)
		t.Status, t.StatusMessage, t.Result, t.Error = f.Status, *f.StatusMessage, nil, f.Error
		created, err = r.fan.create(ctx, &t)
	}
	if err != nil {
		return nil, storeError(err)
	}
	return createReply(d, rec.Request.Name, created, r.opts.ImmediateResponse), nil
}

// ---- a plain call that becomes a task (host mode) ----

// LabelHost marks a task that a plain tools/call became when its tool
// outlived Options.HostDeadline.
const LabelHost = "host"

// plainCall serves a tools/call the client did not ask to run as a task.
// A task-capable tool runs for up to Options.HostDeadline; one still
// running then goes on as a durable task (see hostCall). Other tools run
// as plain calls, holding the request.
func (r *Router) plainCall(ctx context.Context, q *Request, req *mcp.CallToolRequest, te toolEntry) (mcp.Result, error) {
	if !r.opts.runsApart(te) || q.OwnerErr != nil {
		return r.inner(ctx, mcptask.MethodToolsCall, req)
	}
	var in any
	if te.check != nil {
		var err error
		if in, err = te.check(req.Params.Arguments); err != nil {
			return r.inner(ctx, mcptask.MethodToolsCall, req) // the tool's own answer, running nothing
		}
	}
	return r.hostCall(ctx, q, req, te, in)
}

// runsApart reports whether a plain call of tool te runs apart from the
// request, in host mode (see hostCall): a task-capable tool without
// Preflight, while Options.HostDeadline is on.
func (o *Options) runsApart(te toolEntry) bool {
	return o.HostDeadline >= 0 && te.opts.TaskSupport != mcptask.TaskForbidden && te.opts.Preflight == nil
}

// refusedAsToolError turns a quota's refusal (-32000, CodeTooManyTasks)
// of a plain tools/call into a tool result with isError naming the limit:
// a tool that creates a task (a workflow's tool, the fork tool) was
// refused admission, and a model in a host reads tool results, not
// JSON-RPC errors.
func refusedAsToolError(res mcp.Result, err error) (mcp.Result, error) {
	var je *jsonrpc.Error
	if errors.As(err, &je) && je.Code == mcptask.CodeTooManyTasks {
		return errorResult("%s", je.Message), nil
	}
	return res, err
}

// hostCall runs a plain call of a task-capable tool apart from the
// request: it answers with the tool's own result when the tool ends
// within Options.HostDeadline (nothing is stored), and otherwise stores the
// work as a task (owner, ttl, cancel, restart recovery and replicas as for
// any task) and answers with an ordinary tool result naming it. A caller
// that goes away before the deadline stops nothing: the work becomes a
// task at once.
func (r *Router) hostCall(ctx context.Context, q *Request, req *mcp.CallToolRequest, te toolEntry, in any) (mcp.Result, error) {
	checked := te.check != nil
	adm := admission{owner: q.Owner, source: q.Source}
	if err := r.door.admit(adm, false); err != nil {
		return toolExec(r.inner, req, checked, in)(ctx) // no room for a task: a plain call, as before
	}
	deadline := time.Now().Add(r.opts.HostDeadline)
	// The record is made only if the call outlives its window (or its
	// handler needs its task before): a quick tool's call stores nothing
	// and makes no record.
	id, name := NewTaskID(), req.Params.Name
	build := func() *store.Task {
		rec := newRecord(&r.opts, r.shared, q, store.Request{Method: mcptask.MethodToolsCall, Name: name, Arguments: req.Params.Arguments},
			&CreateOptions{Kind: KindTool, Lease: true, Labels: map[string]string{LabelHost: "1"}})
		rec.ID = id
		return rec
	}
	o, t, err := r.runPending(ctx, q, adm, id, name, build, toolExec(r.inner, req, checked, in), r.opts.HostDeadline, true)
	switch {
	case err != nil:
		return nil, err
	case o != nil:
		if o.cause != nil {
			return nil, mcptask.InternalError("the server is shutting down")
		}
		return o.res, o.err
	}
	// The task exists (its handler may have asked for its id early): it
	// may still end before the deadline.
	if rest := time.Until(deadline); rest > 0 && ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, rest)
		defer cancel()
		if done, err := r.Await(wctx, t.ID, func(t *store.Task) bool { return t.Status.Terminal() }); err == nil {
			return finalResult(done)
		}
	}
	if cur, err := r.st.Get(context.WithoutCancel(ctx), t.ID); err == nil {
		t = cur
	}
	return continuesAsTask(t, te.tool != nil && te.tool.OutputSchema != nil, r.tools.resultToolName(), r.opts.HostDeadline), nil
}

// continuesAsTask is the answer to a plain call whose tool outlived the
// host deadline: a tool result (a model reads its text) naming the task
// that now holds the work and how to get its result, with the task's
// state as structured content. A tool with an outputSchema cannot answer
// so: a client that checks results against it (the TypeScript SDK's
// does) refuses structured content of another shape, and a result
// without any unless it has isError. Its answer is then an isError
// result without structured content, whose text says that nothing
// failed: the work goes on as the task. resultTool names the built-in
// task_result tool ("" when none); deadline is Options.HostDeadline.
func continuesAsTask(t *store.Task, outputSchema bool, resultTool string, deadline time.Duration) *mcp.CallToolResult {
	id := strconv.Quote(t.ID)
	how := fmt.Sprintf("poll tasks/get with {\"taskId\": %s}", id)
	if name := resultTool; name != "" {
		how = fmt.Sprintf("call the tool %q with {\"task_id\": %s} to wait for its result (a client that speaks MCP tasks may use tasks/get or tasks/result instead)", name, id)
	}
	text := fmt.Sprintf("Tool %q is still working after %s, so the work goes on on the server as task %s (status: %s). Do not call the tool again: %s.",
		t.Request.Name, deadline.Round(time.Millisecond), t.ID, t.Status, how)
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, Meta: mcp.Meta(mcptask.RelatedTaskMeta(t.ID))}
	if outputSchema {
		res.IsError = true
		res.Content[0] = &mcp.TextContent{Text: "Not a failure: the call has no result yet. " + text}
		return res
	}
	res.StructuredContent = taskState(t)
	return res
}

// taskState is the structured content of the built-in tools' answers
// about a task.
func taskState(t *store.Task) map[string]any {
	m := map[string]any{"taskId": t.ID, "status": t.Status}
	if t.StatusMessage != "" {
		m["statusMessage"] = t.StatusMessage
	}
	return m
}

// ---- a call that becomes a task after it started (a leg) ----

// Legs. A tools/call whose work outlasts a short wait, from a client that
// takes tasks (it declared the tasks extension), can become a task after
// it started: the call answers with the task (CreateTaskResult), and the
// rest of the work (exec) runs as the task's handler, whose result is the
// task's result. The workflow bridge turns a workflow tool call or a
// continuation into such a "leg" when its server steps outlast
// PromptWait, so that a host that polls tasks (and shows its model only
// final results) never has its model poll: the leg ends at the workflow's
// next pause with the handoff as its result.

// CanStartLeg reports whether the client of request q takes a task as the
// answer to a tools/call it sent plainly: it speaks a dialect where the
// server decides, and declared the extension.
func CanStartLeg(q *Request) bool {
	return q != nil && q.Dialect.ServerDecidesTasks() && q.Declared
}

// StartLeg makes tools/call req of requestor q a task of kind kind (with
// labels) whose handler is exec, admitted like any tool task, and returns
// the answer to send (the task, as q's dialect shapes it). The call must
// be one CanStartLeg allows. A leg whose process stops is handed to its
// kind's Recover hook (see HandleKind), which may run it again with
// ResumeLeg.
func (r *Router) StartLeg(ctx context.Context, q *Request, req *mcp.CallToolRequest, kind string, labels map[string]string, exec func(ctx context.Context) (mcp.Result, error)) (mcp.Result, error) {
	if q.OwnerErr != nil {
		return nil, q.OwnerErr
	}
	if !CanStartLeg(q) {
		return nil, mcptask.InternalError("taskrouter: a leg for a client that takes no task")
	}
	adm := admission{owner: q.Owner, source: q.Source}
	if err := r.door.admit(adm, false); err != nil {
		return nil, err
	}
	rec := newRecord(&r.opts, r.shared, q, store.Request{Method: mcptask.MethodToolsCall, Name: req.Params.Name, Arguments: req.Params.Arguments},
		&CreateOptions{Kind: kind, Labels: labels, Lease: true})
	t, err := r.fan.create(ctx, rec)
	if err != nil {
		r.quotas.release(adm, false)
		return nil, storeError(err)
	}
	r.pushers.bind(t.ID, q.connID)
	r.peers.bindRequest(t.ID, q)
	r.spawn(t.ID, t.Request.Name, t, adm, q.Dialect, exec, nil)
	return createReply(q.Dialect, req.Params.Name, t, r.opts.ImmediateResponse), nil
}

// ResumeLeg runs exec as the handler of leg t again, after its process
// stopped (from its kind's Recover hook; reason is the hook's).
func (r *Router) ResumeLeg(ctx context.Context, t *store.Task, reason string, exec func(ctx context.Context) (mcp.Result, error)) error {
	return r.recovery.rerun(ctx, t, reason, exec)
}
