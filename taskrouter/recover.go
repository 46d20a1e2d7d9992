package taskrouter

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// recover resolves the tasks a previous process left active: a kind with a
// hook registered by OnRecover (workflows) is handed to it; tool tasks are
// re-run when the tool is Retryable and failed otherwise; anything else is
// failed with a reason. Every failure to resolve a task is logged; the task
// is then left for the next start.
func (r *Router) recover(ctx context.Context) error {
	active, err := r.st.Active(ctx)
	if err != nil {
		return fmt.Errorf("taskrouter: listing active tasks: %w", err)
	}
	resolved := 0
	for _, t := range active {
		kind := t.Labels[LabelKind]
		r.mu.Lock()
		hook := r.recovery[kind]
		r.mu.Unlock()
		switch {
		case hook != nil:
			if err := hook(ctx, t); err != nil {
				r.log.Error("recovering task", "task", t.ID, "kind", kind, "error", err)
				continue
			}
		case kind == KindTool:
			if err := r.recoverTool(ctx, t); err != nil {
				r.log.Error("recovering tool task", "task", t.ID, "tool", t.Request.Name, "error", err)
				continue
			}
		default:
			msg := fmt.Sprintf("interrupted: the server restarted while this task was %s and no recovery is registered for kind %q", t.Status, kind)
			if _, err := r.Fail(ctx, t.ID, msg, &store.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg}); err != nil {
				r.log.Error("failing interrupted task", "task", t.ID, "error", err)
				continue
			}
		}
		resolved++
	}
	if len(active) > 0 {
		r.log.Info("resolved tasks left active by a previous process", "active", len(active), "resolved", resolved)
	}
	return nil
}

// recoverTool re-runs a Retryable tool's task from the start, or fails it.
func (r *Router) recoverTool(ctx context.Context, t *store.Task) error {
	te, _ := r.tool(t.Request.Name)
	if !te.opts.Retryable {
		msg := fmt.Sprintf("interrupted: the server restarted while tool %q was running, and the tool is not registered as safe to retry", t.Request.Name)
		_, err := r.Fail(ctx, t.ID, msg, &store.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg})
		return err
	}
	// The owner's quota was taken before the crash; the source is gone.
	adm := admission{owner: t.Owner, source: "recovered"}
	if err := r.admit(adm, true); err != nil {
		return err // only a closed router refuses; the next start resolves the task
	}
	msg := "re-running after a server restart"
	nt, err := r.Update(ctx, t.ID, store.Update{IfVersion: t.Version, Status: store.StatusWorking, StatusMessage: &msg})
	if err != nil {
		r.release(adm, false)
		return err
	}
	d, err := mcptask.ParseDialect(nt.Labels[LabelDialect])
	if err != nil {
		d = mcptask.Core
	}
	name, args := nt.Request.Name, nt.Request.Arguments
	r.log.Info("re-running interrupted task", "task", nt.ID, "tool", name)
	r.spawn(nt, adm, d, func(ctx context.Context) (mcp.Result, error) {
		return r.CallTool(ctx, nil, name, args, nil)
	})
	return nil
}
