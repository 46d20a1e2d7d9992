package taskrouter

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

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
	if err := r.admit(adm, false); err != nil {
		return nil, err
	}
	rec := r.newRecord(q, store.Request{Method: mcptask.MethodToolsCall, Name: req.Params.Name, Arguments: req.Params.Arguments},
		CreateOptions{Kind: kind, Labels: labels, Lease: true})
	t, err := r.createRecord(ctx, rec)
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
	return r.rerun(ctx, t, reason, exec)
}
