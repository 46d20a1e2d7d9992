package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Receiver makes the client the receiver of task-augmented requests from
// the server (core dialect, 2025-11-25): a sampling/createMessage or
// elicitation/create whose params carry "task" is answered at once with a
// CreateTaskResult, the handler runs in the background, and the server
// follows the task with tasks/get, tasks/result, tasks/list and
// tasks/cancel on the client. Status changes are pushed with
// notifications/tasks/status. Tasks are dropped when their ttl runs out.
//
// With a Receiver set, Dial declares capabilities.tasks (list, cancel, and
// requests.sampling.createMessage / requests.elicitation.create for the
// handlers that are set) in initialize. The same handlers also answer
// plain (non-task) requests, and, in the extension dialect (2026-07-28,
// where the server asks through a task's input requests), the input
// requests of the tasks the client waits on (TaskResult, CallTool), when
// Options.InputHandler is nil. A Receiver must not be shared between
// clients.
//
// With a Store, what the handlers computed survives a restart of the
// client: the tasks it runs for the server are saved when they are
// created and when they end (a client dialled again with the same store
// serves them to the server on its new connection, and runs again the
// handlers that had not finished), and an answer to an input request is
// saved before it is sent and dropped once the server took it (a client
// that restarts before then sends the saved answer instead of asking the
// handler again).
type Receiver struct {
	// Sampling answers sampling/createMessage; nil declines task-augmented
	// sampling.
	Sampling func(ctx context.Context, params *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error)
	// Elicitation answers elicitation/create; nil declines task-augmented
	// elicitation.
	Elicitation func(ctx context.Context, params *mcp.ElicitParams) (*mcp.ElicitResult, error)
	// MaxTTL caps the ttl a server may ask for; zero means one hour.
	MaxTTL time.Duration
	// DefaultTTL applies when the server asks for none; zero means MaxTTL.
	DefaultTTL time.Duration
	// PollInterval is suggested to the server in every task; zero means
	// 500ms.
	PollInterval time.Duration
	// SweepInterval is how often expired tasks are dropped; zero means one
	// second.
	SweepInterval time.Duration
	// Store, when set, keeps the tasks and answers across restarts of the
	// client (see OpenReceiverStore). The caller closes it.
	Store ReceiverStore
}

// answerSync answers a plain (non-task) request with the receiver's
// handlers; ok is false when no handler fits.
func (r *Receiver) answerSync(ctx context.Context, req InputRequest) (any, bool, error) {
	switch {
	case req.Method == mcptask.MethodSampling && r.Sampling != nil:
		p, err := req.Sampling()
		if err != nil {
			return nil, true, invalidParams("%v", err)
		}
		res, err := r.Sampling(ctx, p)
		return res, true, err
	case req.Method == mcptask.MethodElicit && r.Elicitation != nil:
		p, err := req.Elicitation()
		if err != nil {
			return nil, true, invalidParams("%v", err)
		}
		res, err := r.Elicitation(ctx, p)
		return res, true, err
	}
	return nil, false, nil
}

func invalidParams(format string, args ...any) error {
	return mcptask.InvalidParams(format, args...)
}

// receiverState holds the tasks the client runs for the server.
type receiverState struct {
	c   *Client
	cfg Receiver

	mu     sync.Mutex
	tasks  map[string]*recvTask
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup // the sweeper
}

// recvTask is one task the client runs for the server.
type recvTask struct {
	id      string
	method  string
	params  json.RawMessage
	status  mcptask.Status
	message string
	created time.Time
	updated time.Time
	ttl     time.Duration
	expires time.Time
	result  json.RawMessage
	err     *jsonrpc.Error
	done    chan struct{} // closed once terminal (or expired)
	cancel  context.CancelFunc
	expired bool
}

func newReceiverState(c *Client, cfg *Receiver) *receiverState {
	r := &receiverState{c: c, cfg: *cfg, tasks: map[string]*recvTask{}, stop: make(chan struct{})}
	r.cfg.defaults()
	r.load()
	r.wg.Add(1)
	go r.sweepLoop()
	return r
}

// defaults fills in the zero settings.
func (cfg *Receiver) defaults() {
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = time.Hour
	}
	if cfg.DefaultTTL <= 0 || cfg.DefaultTTL > cfg.MaxTTL {
		cfg.DefaultTTL = cfg.MaxTTL
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = time.Second
	}
}

func (r *receiverState) close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	for _, t := range r.tasks {
		t.cancel()
	}
	r.mu.Unlock()
	close(r.stop)
	r.wg.Wait()
}

func (r *receiverState) sweepLoop() {
	defer r.wg.Done()
	tick := time.NewTicker(r.cfg.SweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-tick.C:
			r.sweep(now)
		}
	}
}

// sweep drops every task whose ttl has run out, stopping its handler if it
// still runs.
func (r *receiverState) sweep(now time.Time) int {
	r.mu.Lock()
	var gone []*recvTask
	for id, t := range r.tasks {
		if !now.Before(t.expires) {
			delete(r.tasks, id)
			gone = append(gone, t)
		}
	}
	r.mu.Unlock()
	for _, t := range gone {
		r.forget(t.id)
		r.mu.Lock()
		t.expired = true
		if !t.status.Terminal() {
			close(t.done)
		}
		r.mu.Unlock()
		t.cancel()
	}
	return len(gone)
}

// wire is the core-dialect wire form of the task.
func (t *recvTask) wire() map[string]any {
	m := map[string]any{
		"taskId":        t.id,
		"status":        string(t.status),
		"createdAt":     t.created.UTC().Format(time.RFC3339Nano),
		"lastUpdatedAt": t.updated.UTC().Format(time.RFC3339Nano),
		"ttl":           t.ttl.Milliseconds(),
	}
	if t.message != "" {
		m["statusMessage"] = t.message
	}
	return m
}

func (r *receiverState) wire(t *recvTask) map[string]any {
	m := t.wire()
	m["pollInterval"] = r.cfg.PollInterval.Milliseconds()
	return m
}

// createReply is the CreateTaskResult; once it is written the handler
// starts (so no status notification can overtake the reply).
type createReply struct {
	Task  map[string]any `json:"task"`
	start func()
}

func (c *createReply) AfterReply() { c.start() }

// create answers a task-augmented sampling or elicitation request.
func (r *receiverState) create(ctx context.Context, method string, params json.RawMessage) (any, error) {
	var p struct {
		Task struct {
			TTL *float64 `json:"ttl"`
		} `json:"task"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams("%s: params.task must be an object with an optional numeric ttl: %v", method, err)
	}
	run, err := r.runner(method, params)
	if err != nil {
		return nil, err
	}
	ttl := r.cfg.DefaultTTL
	if p.Task.TTL != nil {
		ms := *p.Task.TTL
		if ms < 0 || ms != ms {
			return nil, invalidParams("params.task.ttl must be a non-negative number of milliseconds")
		}
		if ms > 0 {
			ttl = time.Duration(min(ms, float64(r.cfg.MaxTTL.Milliseconds())) * float64(time.Millisecond))
		}
	}
	now := time.Now()
	hctx, cancel := context.WithCancel(context.Background())
	t := &recvTask{
		id: newTaskID(), method: method, params: params, status: mcptask.StatusWorking,
		created: now, updated: now, ttl: ttl, expires: now.Add(ttl),
		done: make(chan struct{}), cancel: cancel,
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		cancel()
		return nil, mcptask.InternalError("client is closing")
	}
	r.tasks[t.id] = t
	reply := &createReply{Task: r.wire(t)}
	rec := t.record()
	r.mu.Unlock()
	if err := r.save(rec); err != nil {
		// The server must not follow a task the client could lose.
		r.mu.Lock()
		delete(r.tasks, t.id)
		r.mu.Unlock()
		cancel()
		return nil, mcptask.InternalError("the client could not record the task: %v", err)
	}
	reply.start = func() { go r.execute(hctx, t, run) }
	return reply, nil
}

// runner is the handler that answers method with params.
func (r *receiverState) runner(method string, params json.RawMessage) (func(ctx context.Context) (any, error), error) {
	switch method {
	case mcptask.MethodSampling:
		if r.cfg.Sampling == nil {
			return nil, mcptask.MethodNotFound("this client does not accept task-augmented sampling/createMessage")
		}
		var sp mcp.CreateMessageParams
		if err := json.Unmarshal(params, &sp); err != nil {
			return nil, invalidParams("sampling/createMessage params: %v", err)
		}
		return func(ctx context.Context) (any, error) { return r.cfg.Sampling(ctx, &sp) }, nil
	case mcptask.MethodElicit:
		if r.cfg.Elicitation == nil {
			return nil, mcptask.MethodNotFound("this client does not accept task-augmented elicitation/create")
		}
		var ep mcp.ElicitParams
		if err := json.Unmarshal(params, &ep); err != nil {
			return nil, invalidParams("elicitation/create params: %v", err)
		}
		return func(ctx context.Context) (any, error) { return r.cfg.Elicitation(ctx, &ep) }, nil
	}
	return nil, mcptask.MethodNotFound("%s cannot be task-augmented", method)
}

func newTaskID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// execute runs a task's handler and records its outcome.
func (r *receiverState) execute(ctx context.Context, t *recvTask, run func(context.Context) (any, error)) {
	res, err := func() (res any, err error) {
		defer func() {
			if p := recover(); p != nil {
				res, err = nil, fmt.Errorf("handler panicked: %v", p)
			}
		}()
		return run(ctx)
	}()
	var raw json.RawMessage
	if err == nil {
		raw, err = json.Marshal(res)
	}
	r.mu.Lock()
	if t.status.Terminal() || t.expired || r.closed {
		r.mu.Unlock()
		return // cancelled or expired meanwhile, or the client is closing (a restart with the store runs it again)
	}
	t.updated = time.Now()
	if err != nil {
		var je *jsonrpc.Error
		if !errors.As(err, &je) {
			je = mcptask.InternalError("%s", err.Error())
		}
		t.status, t.message, t.err = mcptask.StatusFailed, je.Message, je
	} else {
		t.status, t.result = mcptask.StatusCompleted, raw
	}
	close(t.done)
	note := r.wire(t)
	rec := t.record()
	r.mu.Unlock()
	if err := r.save(rec); err != nil {
		r.c.log.Warn("saving a receiver task's outcome", "task", t.id, "error", err)
	}
	r.notify(note)
}

// notify sends notifications/tasks/status, best effort.
func (r *receiverState) notify(task map[string]any) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.c.conn.Notify(ctx, mcptask.NotificationTaskStatus, task); err != nil {
		r.c.log.Debug("sending task status", "task", task["taskId"], "error", err)
	}
}

func (r *receiverState) lookup(id string) (*recvTask, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tasks[id]
	if !ok || id == "" {
		return nil, invalidParams("task not found")
	}
	return t, nil
}

// serve answers tasks/* requests from the server.
func (r *receiverState) serve(ctx context.Context, method string, params json.RawMessage) (any, error) {
	var p struct {
		TaskID string `json:"taskId"`
		Cursor string `json:"cursor"`
	}
	if len(params) > 0 {
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, invalidParams("%s params: %v", method, err)
		}
	}
	switch method {
	case mcptask.MethodTasksGet:
		t, err := r.lookup(p.TaskID)
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.wire(t), nil
	case mcptask.MethodTasksResult:
		return r.result(ctx, p.TaskID)
	case mcptask.MethodTasksList:
		return r.list(p.Cursor)
	case mcptask.MethodTasksCancel:
		return r.cancelTask(p.TaskID)
	}
	return nil, mcptask.MethodNotFound("%s", method)
}

// result blocks until the task ends and returns the handler's result with
// the related-task _meta, or its error.
func (r *receiverState) result(ctx context.Context, id string) (any, error) {
	t, err := r.lookup(id)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		return nil, mcptask.InternalError("tasks/result abandoned: %s", ctx.Err().Error())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case t.expired:
		return nil, invalidParams("task not found (expired)")
	case t.status == mcptask.StatusCancelled:
		return nil, invalidParams("task %s was cancelled", t.id)
	case t.err != nil:
		return nil, t.err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(t.result, &m); err != nil || m == nil {
		return nil, mcptask.InternalError("task result is not a JSON object")
	}
	meta := map[string]json.RawMessage{}
	if old, ok := m["_meta"]; ok {
		_ = json.Unmarshal(old, &meta)
	}
	meta[mcptask.MetaRelatedTask], _ = json.Marshal(map[string]string{"taskId": t.id})
	m["_meta"], _ = json.Marshal(meta)
	return m, nil
}

// listPage is how many tasks one tasks/list page holds.
const listPage = 50

// listKey orders tasks for tasks/list; cursors are the key of the last
// task of a page, so a page boundary survives tasks expiring.
func listKey(t *recvTask) string {
	return fmt.Sprintf("%020d.%s", t.created.UnixNano(), t.id)
}

func (r *receiverState) list(cursor string) (any, error) {
	if cursor != "" && (len(cursor) < 22 || cursor[20] != '.') {
		return nil, invalidParams("invalid cursor")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	all := make([]*recvTask, 0, len(r.tasks))
	for _, t := range r.tasks {
		if cursor == "" || listKey(t) > cursor {
			all = append(all, t)
		}
	}
	sort.Slice(all, func(i, j int) bool { return listKey(all[i]) < listKey(all[j]) })
	end := min(listPage, len(all))
	tasks := make([]map[string]any, 0, end)
	for _, t := range all[:end] {
		tasks = append(tasks, r.wire(t))
	}
	out := map[string]any{"tasks": tasks}
	if end < len(all) {
		out["nextCursor"] = listKey(all[end-1])
	}
	return out, nil
}

func (r *receiverState) cancelTask(id string) (any, error) {
	t, err := r.lookup(id)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if t.status.Terminal() {
		st := t.status
		r.mu.Unlock()
		return nil, invalidParams("task %s is already %s and cannot be cancelled", id, st)
	}
	t.status, t.message, t.updated = mcptask.StatusCancelled, "cancelled by the server", time.Now()
	close(t.done)
	note := r.wire(t)
	rec := t.record()
	r.mu.Unlock()
	t.cancel()
	if err := r.save(rec); err != nil {
		r.c.log.Warn("saving a receiver task's cancellation", "task", t.id, "error", err)
	}
	r.notify(note)
	return note, nil
}
