package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// recorder writes a workflow's progress into its task: the progress
// variable and the status message (the progress's pause reason) in one
// write, conditional on the task's version. A write refused because the
// task changed in between is retried when the change was not to the
// progress (a client's tasks/get marking the task touched, say); when the
// progress itself changed (another process advanced it), it fails.
//
// While the bridge runs a task's server steps it holds the task's lease:
// every write carries the lease's fence (a process that lost the lease
// cannot overwrite the new holder's work), and the write that leaves the
// workflow waiting for its client releases the lease.
type recorder struct {
	b     *Bridge
	task  *store.Task
	extra map[string]json.RawMessage // variables to write with the next record
	touch bool                       // mark the task touched in the next write
	lease *taskrouter.Lease          // held while steps run; nil otherwise
}

// release stops renewing the lease (after the write that released it in
// the store, or when the pass ends without one and it must expire).
func (r *recorder) release() {
	if r.lease != nil {
		r.lease.Release()
		r.lease = nil
	}
}

// giveBack releases a lease still held in the store and stops renewing
// it: for a pass that claimed the task but had nothing to do.
func (r *recorder) giveBack(ctx context.Context) {
	if r.lease == nil || !r.lease.Held() {
		r.release()
		return
	}
	r.lease.Release() // stop renewing first: see taskrouter.Lease.Release
	if err := r.b.releaseLease(ctx, r.lease.Task); err != nil {
		r.b.engine.Logger().Warn("releasing a workflow task's lease", "task", r.task.ID, "error", err)
	}
	r.release()
}

// releaseLease gives up the lease of t (as claimed) in the store.
func (b *Bridge) releaseLease(ctx context.Context, t *store.Task) error {
	fence := t.Fence()
	_, err := b.engine.Update(context.WithoutCancel(ctx), t.ID, store.Update{Fence: &fence, ReleaseLease: true})
	if errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrTerminal) {
		return nil // someone else holds it now, or it ended
	}
	return err
}

func (r *recorder) Record(ctx context.Context, p *WorkflowProgress) error {
	_, err := r.write(ctx, p, store.Update{StatusMessage: &p.PauseReason})
	return err
}

// write records p together with u (and the pending extra variables and
// touch), and returns the new task.
func (r *recorder) write(ctx context.Context, p *WorkflowProgress, u store.Update) (*store.Task, error) {
	rev := p.Revision
	p.Revision++
	raw, err := json.Marshal(p)
	if err != nil {
		p.Revision = rev
		return nil, mcptask.InternalError("encoding workflow progress: %v", err)
	}
	vars := map[string]json.RawMessage{VarProgress: raw}
	for k, v := range u.Variables {
		vars[k] = v
	}
	for k, v := range r.extra {
		vars[k] = v
	}
	u.Variables = vars
	releasing := false
	if r.lease != nil && r.lease.Held() {
		u.Fence = r.lease.Fence()
		releasing = u.Status == "" && waiting(p)
		u.ReleaseLease = releasing
		if releasing || u.Status.Terminal() {
			r.lease.Release() // stop renewing first: see taskrouter.Lease.Release
		}
	}
	for attempt := 0; ; attempt++ {
		u.IfVersion = r.task.Version
		r.orphanRules(p, &u)
		t, err := r.b.engine.Update(ctx, r.task.ID, u)
		if err == nil {
			r.task, r.extra, r.touch = t, nil, false
			if releasing || t.Status.Terminal() {
				r.release()
			}
			return t, nil
		}
		if errors.Is(err, store.ErrFenced) {
			p.Revision = rev
			r.release()
			return nil, mcptask.InternalError("workflow task %s was taken over by another server process while this one ran its steps; nothing more was recorded here: get the prompt again with _meta._task_id to see where it stands", r.task.ID)
		}
		if !errors.Is(err, store.ErrConflict) || attempt >= 5 {
			p.Revision = rev
			return nil, storeErr(err)
		}
		// Someone else wrote the task: retry unless it was the progress.
		cur, gerr := r.b.engine.Task(ctx, r.task.ID)
		if gerr != nil {
			p.Revision = rev
			return nil, storeErr(gerr)
		}
		other, derr := decodeProgress(cur)
		if derr != nil || other.Revision != rev {
			p.Revision = rev
			return nil, mcptask.InternalError("workflow task %s was advanced concurrently by another request; get the prompt again with _meta._task_id to see where it stands", r.task.ID)
		}
		r.task = cur
	}
}

// orphanRules adds the orphan deadline to u: a task nobody touched yet
// that now waits for a client expires after the bridge's OrphanTimeout;
// the first touch restores its ttl.
func (r *recorder) orphanRules(p *WorkflowProgress, u *store.Update) {
	t := r.task
	touched := t.Labels[LabelTouched] != ""
	switch {
	case r.touch && !touched:
		u.Labels = map[string]string{LabelTouched: "1"}
		at := ttlExpiry(t)
		u.ExpiresAt = &at
	case !touched && r.b.orphanTimeout() > 0 && waiting(p) && u.Status == "":
		at := r.b.engine.Now().Add(r.b.orphanTimeout())
		if ttl := ttlExpiry(t); !ttl.IsZero() && ttl.Before(at) {
			at = ttl
		}
		u.ExpiresAt = &at
	}
}

// ttlExpiry is when a task expires by its ttl; zero for no ttl.
func ttlExpiry(t *store.Task) time.Time {
	if t.TTL <= 0 {
		return time.Time{}
	}
	return t.CreatedAt.Add(t.TTL)
}

// waiting reports whether p waits for the client: not done, and no server
// step is running.
func waiting(p *WorkflowProgress) bool {
	for _, s := range p.Steps {
		switch s.Status {
		case StepCompleted:
			continue
		case StepRunning:
			return false
		}
		return true
	}
	return false
}

// vars reads task variables for TaskVar sources: the ones about to be
// written first, then the task's.
func (r *recorder) vars(name string) (json.RawMessage, bool) {
	return userVar(name, r.extra, r.task.Variables)
}

// userVar looks a task variable up in layers, first match wins, hiding the
// engine's reserved variables from TaskVar sources.
func userVar(name string, layers ...map[string]json.RawMessage) (json.RawMessage, bool) {
	if strings.HasPrefix(name, ReservedPrefix) {
		return nil, false
	}
	for _, l := range layers {
		if v, ok := l[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func decodeProgress(t *store.Task) (*WorkflowProgress, error) {
	raw, ok := t.Variables[VarProgress]
	if !ok {
		return nil, fmt.Errorf("task %s has no workflow progress", t.ID)
	}
	var p WorkflowProgress
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("task %s: decoding workflow progress: %w", t.ID, err)
	}
	if p.Outputs == nil {
		p.Outputs = map[string]json.RawMessage{}
	}
	return &p, nil
}

// storeErr maps a store error to the JSON-RPC error a client sees.
func storeErr(err error) error {
	var je *jsonrpc.Error
	switch {
	case errors.As(err, &je):
		return err
	case errors.Is(err, store.ErrConflict):
		return mcptask.InternalError("the workflow task was changed concurrently; retry")
	case errors.Is(err, store.ErrTerminal):
		return mcptask.InvalidParams("the workflow task has already ended")
	case errors.Is(err, store.ErrTooLarge):
		return mcptask.InvalidParams("%v", err)
	case errors.Is(err, store.ErrNotFound):
		return mcptask.InvalidParams("workflow task not found")
	}
	return mcptask.InternalError("task store: %v", err)
}

// taskState is a loaded workflow task.
type taskState struct {
	task     *store.Task
	progress *WorkflowProgress
}

// load reads a workflow task the requestor may access.
func (b *Bridge) load(ctx context.Context, q *taskrouter.Request, id string) (*taskState, error) {
	t, err := b.engine.TaskFor(ctx, q, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, mcptask.InvalidParams("unknown workflow task %q", id)
		}
		return nil, storeErr(err)
	}
	if t.Labels[taskrouter.LabelKind] != taskrouter.KindWorkflow {
		return nil, mcptask.InvalidParams("task %q is not a workflow task", id)
	}
	p, err := decodeProgress(t)
	if err != nil {
		return nil, mcptask.InternalError("%v", err)
	}
	return &taskState{task: t, progress: p}, nil
}

// claim takes the lease of a loaded workflow task for a pass of its steps
// and returns a recorder holding it, with st refreshed from the claimed
// task (another process may have advanced it since it was loaded). Store
// errors are returned as they are (store.ErrTerminal when the task ended
// meanwhile).
func (b *Bridge) claim(ctx context.Context, st *taskState) (*recorder, error) {
	lease, err := b.engine.Lease(ctx, st.task.ID)
	if err != nil {
		return nil, err
	}
	// The progress decoded by load still holds unless the task changed
	// since (always on a shared store, where the claim itself is a write).
	p := st.progress
	if p == nil || lease.Task.Version != st.task.Version {
		if p, err = decodeProgress(lease.Task); err != nil {
			lease.Release()
			return nil, mcptask.InternalError("%v", err)
		}
	}
	st.task, st.progress = lease.Task, p
	return &recorder{b: b, task: lease.Task, lease: lease}, nil
}
