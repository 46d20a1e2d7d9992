package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// Why a task's work is resolved by this process rather than by the one
// that started it.
const (
	// ReasonRestart: Start found the task active in an exclusive store; the
	// process that ran it is gone.
	ReasonRestart = "restart"
	// ReasonTakeover: on a shared store, the process running the task
	// stopped renewing its lease, and this one claimed the task.
	ReasonTakeover = "takeover"
)

// recovery resolves the work a process that is gone left behind: on
// Start, every task active in an exclusive store (restart); on a shared
// store, each task whose lease the takeover claimed (its resolveTask); a
// leg re-run after either (Router.ResumeLeg). It sees the engine through
// recoverEngine and reads the parts it needs (the door, the kinds' hooks,
// the tool registry, the leases, the scheduler's note of a wake-up).
type recovery struct {
	e       recoverEngine
	st      store.Store
	log     *slog.Logger
	shared  bool   // a shared store: claim a task before re-running it
	replica string // Options.ReplicaID
	door    door
	quotas  *quotas
	kinds   *kinds
	tools   *toolRegistry
	leases  *leases
	sched   *scheduler
}

// recoverEngine is what recovery needs of the engine; *Router has it.
type recoverEngine interface {
	Fail(ctx context.Context, id string, message string, rpcErr *mcptask.ErrorInfo) (*store.Task, error)
	Update(ctx context.Context, id string, u store.Update) (*store.Task, error)
	CallTool(ctx context.Context, session *mcp.ServerSession, name string, args any, meta mcp.Meta) (*mcp.CallToolResult, error)
	spawn(id, tool string, t *store.Task, adm admission, d mcptask.Dialect, exec execFunc, pending *pendingRecord) *run
}

// restart resolves, on Start, the tasks a previous process left active
// in an exclusive store: every one now (no other process can be running
// it). On a shared store Start takes over expired leases instead: tasks
// whose process died are found by them, and an active task without a
// lease (a workflow waiting for its client) needs nothing. Every failure
// to resolve a task is logged; the task is then left for the next start
// (or takeover).
func (r *recovery) restart(ctx context.Context) error {
	active, err := r.st.Active(ctx)
	if err != nil {
		return fmt.Errorf("taskrouter: listing active tasks: %w", err)
	}
	resolved := 0
	for _, t := range active {
		r.sched.note(t.WakeAt) // a wake-up from before the restart

		if err := r.resolveTask(ctx, t, ReasonRestart); err != nil {
			r.log.Error("recovering task", "task", t.ID, "kind", t.Labels[LabelKind], "error", err)
			continue
		}
		resolved++
	}
	if len(active) > 0 {
		r.log.Info("resolved tasks left active by a previous process", "active", len(active), "resolved", resolved)
	}
	return nil
}

// An endOwer is a KindHandler some of whose cancelled tasks may owe an
// effect of their cancel that a process stopped before carrying out (the
// workflow bridge: a cancelled workflow's undo task, which the cancel's
// write promised). On Start, after the active tasks are resolved, and on
// a shared store each time a replica leaves (the takeover's
// owedOfDeparted), the engine hands it each cancelled task of its kind
// (Owed), which carries out what the task still owes, idempotently (two
// replicas may hand it the same task at once), and ignores the others.
type endOwer interface {
	Owed(ctx context.Context, t *store.Task)
}

// owed hands every cancelled task whose kind is an endOwer to its Owed
// (on Start, on every store; on a shared store, after a replica left):
// a page of the status index at a time.
func (r *recovery) owed(ctx context.Context) error {
	if !r.kinds.owers() {
		return nil
	}
	q := store.Query{Statuses: []mcptask.Status{mcptask.StatusCancelled}, Limit: store.MaxPageSize, Oldest: true}
	for {
		page, err := r.st.Query(ctx, q)
		if err != nil {
			return fmt.Errorf("taskrouter: listing cancelled tasks: %w", err)
		}
		for _, t := range page.Tasks {
			if o, ok := r.kinds.of(t).(endOwer); ok {
				o.Owed(ctx, t)
			}
		}
		if page.NextCursor == "" {
			return nil
		}
		q.Cursor = page.NextCursor
	}
}

// resolveTask hands a task whose process is gone to the policy of its kind: its
// KindHandler's Recover (workflows), the tool policy, or failure with a
// reason.
func (r *recovery) resolveTask(ctx context.Context, t *store.Task, reason string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			// One bad task must not keep the others from recovering, nor
			// crash every start.
			r.log.Error("panic resolving a task", "task", t.ID, "panic", p, "stack", string(debug.Stack()))
			msg := fmt.Sprintf("interrupted, and resolving it after the restart failed: internal error: %v", p)
			_, err = r.e.Fail(ctx, t.ID, msg, &mcptask.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg})
		}
	}()
	kind := t.Labels[LabelKind]
	hook := r.kinds.recoverHook(t)
	switch {
	case hook != nil:
		// Admitted before the crash (or by the process it takes over
		// from): it counts again here, and is never refused.
		if err := r.door.admitTask(t.ID, admission{owner: t.Owner, source: "recovered"}, true); err != nil {
			return err
		}
		return hook(ctx, t, reason)
	case kind == KindTool:
		return r.recoverTool(ctx, t, reason)
	}
	msg := fmt.Sprintf("interrupted: the process running this task stopped while it was %s, and no recovery is registered for kind %q", t.Status, kind)
	_, err = r.e.Fail(ctx, t.ID, msg, &mcptask.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg})
	return err
}

// recoverTool re-runs a Retryable tool's task from the start, or fails it.
func (r *recovery) recoverTool(ctx context.Context, t *store.Task, reason string) error {
	te, _ := r.tools.lookup(t.Request.Name)
	if !te.opts.Retryable {
		msg := fmt.Sprintf("interrupted: the process running tool %q stopped, and the tool is not registered as safe to retry", t.Request.Name)
		_, err := r.e.Fail(ctx, t.ID, msg, &mcptask.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg})
		return err
	}
	name, args := t.Request.Name, t.Request.Arguments
	return r.rerun(ctx, t, reason, func(ctx context.Context) (mcp.Result, error) {
		return r.e.CallTool(ctx, nil, name, args, nil)
	})
}

// rerun runs exec again as the handler of interrupted task t (claimed
// first on a shared store), recording that it runs again and why.
func (r *recovery) rerun(ctx context.Context, t *store.Task, reason string, exec func(ctx context.Context) (mcp.Result, error)) error {
	claimed := t
	if r.shared {
		var err error
		if claimed, err = r.leases.claim(ctx, t.ID); err != nil {
			return err
		}
	}
	// The owner's quota was taken before the crash; the source is gone.
	adm := admission{owner: claimed.Owner, source: "recovered"}
	if err := r.door.admit(adm, true); err != nil {
		return err // only a closed router refuses; the next start resolves the task
	}
	msg := "re-running after a server restart"
	if reason == ReasonTakeover {
		msg = fmt.Sprintf("re-running on %s: the process running it stopped", r.replica)
	}
	u := store.Update{Status: mcptask.StatusWorking, StatusMessage: &msg}
	if r.shared {
		fence := claimed.Fence()
		u.Fence = &fence
	}
	nt, err := r.e.Update(ctx, claimed.ID, u)
	if err != nil {
		r.quotas.release(adm, false)
		if errors.Is(err, store.ErrFenced) {
			// The store checks the fence before the terminal status: a
			// task cancelled (or ended) by another process since the
			// claim refuses the fence too. That leaves nothing to re-run.
			if err = fenceLost(ctx, r.st, claimed.ID, err); errors.Is(err, errEnded) {
				r.log.Info("not re-running an interrupted task: it ended meanwhile", "task", claimed.ID, "reason", reason)
				return nil
			}
		}
		return err
	}
	d, err := mcptask.ParseDialect(nt.Labels[LabelDialect])
	if err != nil {
		d = mcptask.Core
	}
	r.log.Info("re-running interrupted task", "task", nt.ID, "tool", nt.Request.Name, "reason", reason)
	r.e.spawn(nt.ID, nt.Request.Name, nt, adm, d, exec, nil)
	return nil
}
