package taskrouter

import (
	"context"
	"errors"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/internal/storerpc"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The tasks/* methods. Each resolves its request from ctx (the router's
// middleware stored it there), passes the dialect's gates, and loads the
// task the requestor may see.

// storeErrors words the store errors the task methods meet (see
// storerpc.Mapping; an empty message is the error's own text).
var storeErrors = storerpc.Mapping{
	{Err: store.ErrNotFound, Code: mcptask.CodeInvalidParams, Message: "task not found"},
	{Err: store.ErrInvalidCursor, Code: mcptask.CodeInvalidParams, Message: "invalid cursor"},
	{Err: store.ErrTerminal, Code: mcptask.CodeInvalidParams, Message: "task is already in a terminal status"},
	{Err: store.ErrTooLarge, Code: mcptask.CodeInvalidParams},
	{Err: store.ErrInvalid, Code: mcptask.CodeInvalidParams},
	{Err: errShutdown, Code: mcptask.CodeInternalError, Message: "server is shutting down"},
}

// storeError maps a store error to the JSON-RPC error a client sees.
func storeError(err error) error { return storeErrors.Error(err) }

// begin is the prologue of every tasks/* method.
func begin(ctx context.Context, method, id string) (*Request, error) {
	q := RequestFrom(ctx)
	if q == nil {
		return nil, mcptask.InternalError("taskrouter middleware not installed")
	}
	if err := gate(q, method, id); err != nil {
		return nil, err
	}
	return q, nil
}

// load reads the task id if the requestor may see it.
func (r *Router) load(ctx context.Context, q *Request, id string) (*store.Task, error) {
	if id == "" {
		return nil, mcptask.InvalidParams("taskId is required")
	}
	t, err := r.TaskFor(ctx, q, id)
	if err != nil {
		return nil, storeError(err)
	}
	if q.touched != id {
		r.kinds.touched(ctx, t)
	}
	return t, nil
}

func taskIDOf(p *TaskIDParams) string {
	if p == nil {
		return ""
	}
	return p.TaskID
}

func (r *Router) tasksGet(ctx context.Context, _ *mcp.ServerSession, p *TaskIDParams) (mcp.Result, error) {
	q, err := begin(ctx, mcptask.MethodTasksGet, taskIDOf(p))
	if err != nil {
		return nil, err
	}
	t, err := r.load(ctx, q, taskIDOf(p))
	if err != nil {
		return nil, err
	}
	return getReply(q.Dialect, t, r.inputs)
}

func (r *Router) tasksResult(ctx context.Context, ss *mcp.ServerSession, p *TaskIDParams) (mcp.Result, error) {
	id := taskIDOf(p)
	q, err := begin(ctx, mcptask.MethodTasksResult, id)
	if err != nil {
		return nil, err
	}
	if t := r.recent.peek(id, r.opts.Now()); t != nil && q.mayAccess(&r.opts, t) && r.kinds.of(t) == nil {
		// A task this process ended moments ago (the common round trip):
		// what load does (TaskFor, and no kind handler to tell of the
		// read), answered from the kept record itself rather than a copy
		// of it (a copy was ~2% of an instant task round trip's CPU);
		// finalResult only reads it.
		r.peers.bindRequest(id, q)
		return finalResult(t)
	}
	first, err := r.load(ctx, q, id)
	if err != nil {
		// Unknown and hidden ids never register a watch.
		return nil, err
	}
	if first.Status.Terminal() {
		// A finished task never changes again: no second read (on a
		// shared store, a round trip to the database).
		return finalResult(first)
	}
	session := ""
	if q.connID == "" && strings.HasPrefix(q.Source, "session:") {
		session = q.Source // a stateful HTTP session: a DELETE ends the wait
	}
	sw := r.quotas.wait(session)
	defer r.quotas.doneWaiting(sw)
	for {
		// Watch first, then read, so no change between the two is missed.
		w := r.watches.watch(id)
		t, err := r.TaskFor(ctx, q, id)
		if err != nil {
			r.watches.unwatch(id, w)
			return nil, storeError(err)
		}
		if t.Status.Terminal() {
			r.watches.unwatch(id, w)
			return finalResult(t)
		}
		if t.Status == mcptask.StatusInputRequired {
			if ru := r.runs.get(id); ru != nil {
				if handsOff(ctx) && ru.hasUnclaimedInput() {
					r.watches.unwatch(id, w)
					return nil, errHandoff // the SDK's path delivers the input requests
				}
				serviceInputs(ctx, ss, ru)
			}
		}
		select {
		case <-w:
		case <-pollTick(r.poll):
			// A shared store's safety net: re-read in case a change
			// notification from another process was lost.
			r.watches.unwatch(id, w)
		case <-sw.endedC():
			r.watches.unwatch(id, w)
			return nil, mcptask.InternalError("the session was deleted while this tasks/result waited; task %s goes on (read it with tasks/get)", id)
		case <-ctx.Done():
			r.watches.unwatch(id, w)
			return nil, ctx.Err()
		}
	}
}

// finalResult is what tasks/result returns for a terminal task: exactly
// what the original request would have returned, tagged with the task.
func finalResult(t *store.Task) (mcp.Result, error) {
	if err := damaged(t); err != nil {
		return nil, err
	}
	if t.Error != nil {
		return nil, t.Error.RPC()
	}
	if t.Status == mcptask.StatusCancelled {
		return nil, mcptask.InvalidParams("task %s was cancelled: %s", t.ID, t.StatusMessage)
	}
	if len(t.Result) == 0 {
		return nil, mcptask.InternalError("task %s ended without a result", t.ID)
	}
	res := &rawResult{raw: t.Result}
	res.Meta = mcptask.RelatedTaskMeta(t.ID)
	return res, nil
}

func (r *Router) tasksList(ctx context.Context, _ *mcp.ServerSession, p *ListTasksParams) (mcp.Result, error) {
	q, err := begin(ctx, mcptask.MethodTasksList, "")
	if err != nil {
		return nil, err
	}
	cursor := ""
	if p != nil {
		cursor = p.Cursor
	}
	page, err := r.st.List(ctx, store.ListOptions{Owner: q.Owner, Cursor: cursor, HeadersOnly: true})
	if err != nil {
		return nil, storeError(err)
	}
	res := &listTasksResult{Tasks: make([]mcptask.CoreTask, 0, len(page.Tasks)), NextCursor: page.NextCursor}
	for _, t := range page.Tasks {
		res.Tasks = append(res.Tasks, CoreTask(t))
	}
	return res, nil
}

func (r *Router) tasksCancel(ctx context.Context, _ *mcp.ServerSession, p *TaskIDParams) (mcp.Result, error) {
	q, err := begin(ctx, mcptask.MethodTasksCancel, taskIDOf(p))
	if err != nil {
		return nil, err
	}
	t, err := r.load(ctx, q, taskIDOf(p))
	if err != nil {
		return nil, err
	}
	if t.Status.Terminal() {
		if q.Dialect.AcksFinishedCancel() {
			return cancelReply(q.Dialect, t), nil
		}
		return nil, mcptask.InvalidParams("task %s is already %s and cannot be cancelled", t.ID, t.Status)
	}
	nt, err := r.cancelTask(ctx, t, "cancelled by request")
	if err != nil {
		if errors.Is(err, store.ErrTerminal) && q.Dialect.AcksFinishedCancel() {
			return cancelReply(q.Dialect, t), nil
		}
		return nil, storeError(err)
	}
	return cancelReply(q.Dialect, nt), nil
}

func (r *Router) tasksUpdate(ctx context.Context, _ *mcp.ServerSession, p *UpdateTaskParams) (mcp.Result, error) {
	if p == nil {
		p = &UpdateTaskParams{}
	}
	q, err := begin(ctx, mcptask.MethodTasksUpdate, p.TaskID)
	if err != nil {
		return nil, err
	}
	t, err := r.load(ctx, q, p.TaskID)
	if err != nil {
		return nil, err
	}
	if ik := r.kinds.inputKind(t); ik != nil {
		if err := ik.Answer(ctx, t, p.InputResponses); err != nil {
			return nil, err
		}
		return &ackResult{ResultType: mcptask.ResultTypeComplete}, nil
	}
	if r.shared {
		// The handler may wait on another replica: the answers go
		// through the store (see varInputRequestPrefix).
		if err := deliverInputs(ctx, r, t, p.InputResponses); err != nil {
			return nil, storeError(err)
		}
	}
	if ru := r.runs.get(t.ID); ru != nil {
		for key, val := range p.InputResponses {
			ru.answer(key, inputAnswer{result: val})
		}
	}
	return &ackResult{ResultType: mcptask.ResultTypeComplete}, nil
}
