package taskrouter

import (
	"context"
	"errors"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
)

// storeError maps a store error to the JSON-RPC error a client sees.
func storeError(err error) error {
	var je *jsonrpc.Error
	switch {
	case errors.As(err, &je):
		return err
	case errors.Is(err, store.ErrNotFound):
		return rpcError(CodeInvalidParams, "task not found")
	case errors.Is(err, store.ErrInvalidCursor):
		return rpcError(CodeInvalidParams, "invalid cursor")
	case errors.Is(err, store.ErrTerminal):
		return rpcError(CodeInvalidParams, "task is already in a terminal status")
	case errors.Is(err, store.ErrTooLarge), errors.Is(err, store.ErrInvalid):
		return rpcError(CodeInvalidParams, "%v", err)
	case errors.Is(err, errShutdown):
		return rpcError(CodeInternalError, "server is shutting down")
	}
	return rpcError(CodeInternalError, "task store: %v", err)
}

// taskCall is the common prologue of tasks/* methods: it works out the
// dialect, checks the extension declaration and Mcp-Name header, and loads
// the caller's task.
type taskCall struct {
	req   mcp.Request
	ext   bool
	owner string
}

// Extension-dialect checks run in the order the extension's conformance
// suite expects: removed methods (-32601), then the Mcp-Name header
// (-32020), then the capability gate (-32021), and only then the task
// lookup (-32602).
func (r *Router) begin(ctx context.Context, method, id string) (*taskCall, error) {
	req := requestFrom(ctx)
	if req == nil {
		return nil, rpcError(CodeInternalError, "taskrouter middleware not installed")
	}
	tc := &taskCall{req: req, ext: isExtension(req)}
	if tc.ext {
		switch method {
		case methodTasksResult, methodTasksList:
			return nil, rpcError(CodeMethodNotFound, "%s is not part of the %s extension; poll tasks/get", method, ExtensionID)
		case methodTasksGet, methodTasksCancel, methodTasksUpdate:
			if err := checkNameHeader(req, id); err != nil {
				return nil, err
			}
		}
		if !declaresExtension(req) {
			return nil, missingExtension(method)
		}
	} else if method == methodTasksUpdate {
		return nil, rpcError(CodeMethodNotFound, "tasks/update belongs to the %s extension (protocol %s and later)", ExtensionID, ExtensionVersion)
	}
	owner, err := r.Owner(ctx, req)
	if err != nil {
		return nil, err
	}
	tc.owner = owner
	return tc, nil
}

func (r *Router) load(ctx context.Context, tc *taskCall, id string) (*store.Task, error) {
	if id == "" {
		return nil, rpcError(CodeInvalidParams, "taskId is required")
	}
	t, err := r.OwnedTask(ctx, tc.owner, id)
	if err != nil {
		return nil, storeError(err)
	}
	return t, nil
}

// checkNameHeader enforces that an extension-dialect tasks/* request over
// HTTP names its task in the Mcp-Name header, when the header is present.
func checkNameHeader(req mcp.Request, id string) error {
	extra := req.GetExtra()
	if extra == nil || extra.Header == nil {
		return nil
	}
	var h http.Header = extra.Header
	if name := h.Get("Mcp-Name"); name != "" && name != id {
		return rpcError(CodeHeaderMismatch, "header mismatch: Mcp-Name header value %q does not match taskId %q", name, id)
	}
	return nil
}

func (r *Router) tasksGet(ctx context.Context, _ *mcp.ServerSession, p *TaskIDParams) (mcp.Result, error) {
	tc, err := r.begin(ctx, methodTasksGet, taskIDOf(p))
	if err != nil {
		return nil, err
	}
	t, err := r.load(ctx, tc, taskIDOf(p))
	if err != nil {
		return nil, err
	}
	if !tc.ext {
		return &GetTaskResult{Task: CoreTask(t)}, nil
	}
	res := &ExtGetTaskResult{ResultType: "complete", ExtTask: extTask(t)}
	switch t.Status {
	case store.StatusInputRequired:
		if ru := r.runFor(t.ID); ru != nil {
			res.InputRequests = ru.inputRequests()
		}
	case store.StatusCompleted:
		res.Result = t.Result
	case store.StatusFailed:
		if t.Error != nil {
			res.Error = t.Error
		} else {
			res.Result = t.Result
		}
	}
	return res, nil
}

func taskIDOf(p *TaskIDParams) string {
	if p == nil {
		return ""
	}
	return p.TaskID
}

func (r *Router) tasksResult(ctx context.Context, ss *mcp.ServerSession, p *TaskIDParams) (mcp.Result, error) {
	tc, err := r.begin(ctx, methodTasksResult, taskIDOf(p))
	if err != nil {
		return nil, err
	}
	id := taskIDOf(p)
	if _, err := r.load(ctx, tc, id); err != nil {
		// Unknown and foreign ids never register a watch.
		return nil, err
	}
	for {
		// Watch first, then read, so no change between the two is missed.
		w := r.watch(id)
		t, err := r.load(ctx, tc, id)
		if err != nil {
			r.unwatch(id, w)
			return nil, err
		}
		if t.Status.Terminal() {
			return finalResult(t)
		}
		if t.Status == store.StatusInputRequired {
			if ru := r.runFor(id); ru != nil {
				r.serviceInputs(ctx, ss, ru)
			}
		}
		select {
		case <-w:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// finalResult is what tasks/result returns for a terminal task: exactly
// what the original request would have returned, tagged with the task.
func finalResult(t *store.Task) (mcp.Result, error) {
	meta := mcp.Meta{MetaRelatedTask: map[string]string{"taskId": t.ID}}
	if t.Error != nil {
		return nil, &jsonrpc.Error{Code: t.Error.Code, Message: t.Error.Message, Data: t.Error.Data}
	}
	if t.Status == store.StatusCancelled {
		return nil, rpcError(CodeInvalidParams, "task %s was cancelled: %s", t.ID, t.StatusMessage)
	}
	if len(t.Result) == 0 {
		return nil, rpcError(CodeInternalError, "task %s ended without a result", t.ID)
	}
	res := &rawResult{raw: t.Result}
	res.Meta = meta
	return res, nil
}

func (r *Router) tasksList(ctx context.Context, _ *mcp.ServerSession, p *ListTasksParams) (mcp.Result, error) {
	tc, err := r.begin(ctx, methodTasksList, "")
	if err != nil {
		return nil, err
	}
	cursor := ""
	if p != nil {
		cursor = p.Cursor
	}
	page, err := r.st.List(ctx, store.ListOptions{Owner: tc.owner, Cursor: cursor, HeadersOnly: true})
	if err != nil {
		return nil, storeError(err)
	}
	res := &ListTasksResult{Tasks: make([]Task, 0, len(page.Tasks)), NextCursor: page.NextCursor}
	for _, t := range page.Tasks {
		res.Tasks = append(res.Tasks, CoreTask(t))
	}
	return res, nil
}

func (r *Router) tasksCancel(ctx context.Context, _ *mcp.ServerSession, p *TaskIDParams) (mcp.Result, error) {
	tc, err := r.begin(ctx, methodTasksCancel, taskIDOf(p))
	if err != nil {
		return nil, err
	}
	t, err := r.load(ctx, tc, taskIDOf(p))
	if err != nil {
		return nil, err
	}
	if t.Status.Terminal() {
		if tc.ext {
			return &AckResult{ResultType: "complete"}, nil
		}
		return nil, rpcError(CodeInvalidParams, "task %s is already %s and cannot be cancelled", t.ID, t.Status)
	}
	nt, err := r.cancelTask(ctx, t, "cancelled by request")
	if err != nil {
		if errors.Is(err, store.ErrTerminal) && tc.ext {
			return &AckResult{ResultType: "complete"}, nil
		}
		return nil, storeError(err)
	}
	if tc.ext {
		return &AckResult{ResultType: "complete"}, nil
	}
	return &GetTaskResult{Task: CoreTask(nt)}, nil
}

func (r *Router) tasksUpdate(ctx context.Context, _ *mcp.ServerSession, p *UpdateTaskParams) (mcp.Result, error) {
	if p == nil {
		p = &UpdateTaskParams{}
	}
	tc, err := r.begin(ctx, methodTasksUpdate, p.TaskID)
	if err != nil {
		return nil, err
	}
	t, err := r.load(ctx, tc, p.TaskID)
	if err != nil {
		return nil, err
	}
	if ru := r.runFor(t.ID); ru != nil {
		for key, val := range p.InputResponses {
			ru.answer(key, inputAnswer{result: val})
		}
	}
	return &AckResult{ResultType: "complete"}, nil
}
