package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// recoverTask resumes a workflow task whose process is gone (a restart,
// or on a shared store a takeover of its expired lease), when it has
// something to do: a server step was running or due (it runs again,
// recorded as a re-run after a restart, with the same idempotency key), or
// every step is done but the task was not completed. A task waiting for
// the client is left exactly as it is: no write, except giving back a
// lease taken over.
func (b *Bridge) recoverTask(ctx context.Context, t *store.Task, reason string) error {
	h := b.handler(t.Labels[LabelWorkflow])
	if h == nil {
		return fmt.Errorf("workflow %q is not registered with this server", t.Labels[LabelWorkflow])
	}
	p, err := decodeProgress(t)
	if err != nil {
		return err
	}
	if !h.due(p) {
		if reason == taskrouter.ReasonTakeover {
			return b.releaseLease(ctx, t)
		}
		return nil
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx := context.WithoutCancel(ctx)
		unlock := b.lock(t.ID)
		defer unlock()
		// The claim reads the task again (another request may have
		// advanced it before the lock was ours); due is checked on that.
		st := &taskState{task: t, progress: p}
		rec, err := b.claim(ctx, st)
		if err != nil {
			if !errors.Is(err, store.ErrTerminal) {
				b.engine.Logger().Error("claiming a workflow task to resume it", "task", t.ID, "error", err)
			}
			return
		}
		if !h.due(st.progress) {
			rec.giveBack(ctx)
			return
		}
		if _, err := h.run(ctx, rec, st.progress, ReasonRestart, nil); err != nil {
			b.engine.Logger().Error("resuming workflow task after a restart", "task", t.ID, "workflow", st.progress.Workflow, "error", err)
		}
	}()
	return nil
}

// due reports whether the server has work to do on p: a server step that
// is not handed to the client comes next, or nothing remains.
func (h *TaskWorkflowPromptHandler) due(p *WorkflowProgress) bool {
	for _, s := range h.Plain.Workflow.Steps {
		sp := p.step(s.Name)
		if sp == nil {
			return false
		}
		if sp.Status == StepCompleted {
			continue
		}
		return s.execution() == ServerExecutable && !sp.HandedToClient
	}
	return true
}

// expiryMessage words the failure of a workflow task whose expiry passed
// while it was active: an orphan when no client ever touched it.
func (b *Bridge) expiryMessage(t *store.Task) string {
	if t.Labels[LabelTouched] != "" {
		return ""
	}
	if exp := ttlExpiry(t); !exp.IsZero() && !t.ExpiresAt.Before(exp) {
		return "" // its ttl, not the orphan timeout
	}
	return fmt.Sprintf("orphaned: no client named this workflow task in any request (tasks/get, a continuation, a resume) within %s of it waiting for one, so nobody holds its id; it was failed instead of waiting out its ttl", b.orphanTimeout().Round(time.Second))
}

// touched marks a workflow task as held by a client the first time a
// client names it, restoring its ttl in place of the orphan deadline. It
// writes once per task.
func (b *Bridge) touched(ctx context.Context, t *store.Task) {
	if t.Labels[LabelTouched] != "" || t.Status.Terminal() {
		return
	}
	at := ttlExpiry(t)
	if _, err := b.engine.Update(ctx, t.ID, store.Update{Labels: map[string]string{LabelTouched: "1"}, ExpiresAt: &at}); err != nil {
		b.engine.Logger().Warn("marking a workflow task touched", "task", t.ID, "error", err)
	}
}
