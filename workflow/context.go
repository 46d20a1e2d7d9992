package workflow

import (
	"context"

	"github.com/taskbridge/taskbridge/taskrouter"
)

// StepInfo says which workflow step a tool call performs, for a handler
// that makes its side effect idempotent or logs which attempt it is.
type StepInfo struct {
	// TaskID is the workflow task.
	TaskID string
	// Step is the step's name.
	Step string
	// Attempt numbers the step's attempts from 1 (server runs, retries,
	// re-runs after a restart, and the client's calls all count).
	Attempt int
	// IdempotencyKey is the same for every attempt of this step of this
	// task (TaskID + "/" + Step; an undo step that the undo task of a
	// cancelled workflow runs keeps the cancelled task's key); it is also
	// in the call's _meta["taskbridge/idempotency-key"].
	IdempotencyKey string
	// By says who performs the step: string(mcptask.ExecServer),
	// string(mcptask.ExecClient) or ByWebhook.
	By string
}

type stepKey struct{}

// withStep returns ctx carrying the StepInfo of attempt n of step of
// task id.
func withStep(ctx context.Context, id, step string, n int, by string) context.Context {
	return withStepKey(ctx, id, step, n, by, "")
}

// withStepKey is withStep with the record's idempotency key (an undo step
// run by the undo task of a cancelled one keeps the cancelled task's key);
// "" is the task's own key of the step.
func withStepKey(ctx context.Context, id, step string, n int, by, key string) context.Context {
	if key == "" {
		key = idempotencyKey(id, step)
	}
	ctx = context.WithValue(ctx, stepKey{}, StepInfo{TaskID: id, Step: step, Attempt: n, IdempotencyKey: key, By: by})
	return taskrouter.WithEventStep(ctx, step) // the tool's progress and log lines name the step
}

// StepFrom returns the workflow step the tool call running in ctx
// performs: a server step the engine runs, or a client step a
// continuation (or the webhook) performs. ok is false for a tool call
// that performs no workflow step.
func StepFrom(ctx context.Context) (info StepInfo, ok bool) {
	info, ok = ctx.Value(stepKey{}).(StepInfo)
	return info, ok
}

// nextAttempt is the number the next attempt of the record at path will
// have.
func (in *instance) nextAttempt(path string) (n int) {
	in.writing(func() {
		n = 1
		if in.p != nil && in.wf != nil {
			if sl := in.wf.slotAt(in.p, path); sl != nil {
				n = sl.sp.Attempts + 1
			}
		}
	})
	return n
}
