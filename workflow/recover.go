package workflow

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// recoverTask resumes a workflow task whose process is gone (a restart, or
// on a shared store a takeover of its expired lease) when it has something
// to do now: a server step was running or is due, a retry or a client's
// wait is due, or every step is done but the task was not completed. A
// task waiting for its client (or for a later time) is left as it is, with
// no write, except giving back a lease taken over. A task whose version is
// not served, or whose progress does not match its definition, is handled
// by the version policy; one bad task never keeps the others from
// recovering, and never crashes the process.
//
// reason is taskrouter.ReasonRestart or ReasonTakeover (steps found
// running ran in a process that is gone: they run again, recorded as a
// restart or a takeover, so that the step events and the status line say
// which), or "" for a wake-up of the scheduler.
func (b *Bridge) recoverTask(ctx context.Context, t *store.Task, reason string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			b.engine.Logger().Error("panic recovering a workflow task", "task", t.ID, "panic", p, "stack", string(debug.Stack()))
			b.failTask(context.WithoutCancel(ctx), t.ID, fmt.Sprintf("internal error while recovering the workflow: %v", p))
			err = nil
		}
	}()
	if reason != "" && b.outlivesParent(ctx, t) {
		return nil // its parent ended while no process was up to cancel it
	}
	in := b.use(t.ID)
	defer b.done(in)
	var due, unserved, unpark bool
	var release *store.Task
	in.writing(func() {
		l := b.engine.AdoptLease(t)
		in.locked(func() {
			if in.task == nil || t.Version > in.task.Version {
				in.adopt(t)
			}
			if l != nil {
				in.lease = l // the engine claimed it for us (a takeover, a wake-up), or the store needs none
			}
		})
		if in.verr != nil {
			in.unserved(ctx)
			unserved = true
			return
		}
		now := b.engine.Now()
		// Due: what its progress waits for came; a wake-up that came for
		// nothing (its decision moves it: staleWake); or a recovery of a
		// task on a queue (places a stopped process may not have freed:
		// freeLost).
		due = dueNow(in.p, now) || reason == "" && staleWake(in.task, in.p, now) ||
			reason != "" && b.queues() != nil && in.wf != nil && in.wf.queued(in.p)
		unpark = !due && parked(in.task) // it waited for its version: served here now
		if !due && in.lease != nil && in.lease.Held() {
			release = in.lease.Task
			in.dropLease()
		}
	})
	switch {
	case unserved:
		return nil
	case unpark:
		// Its wait for a process that serves its version ends: the write
		// puts back its own status message and wake-up time (unserved.go).
		if err := in.commitTurn(ctx, func(*Progress) (store.Update, error) { return store.Update{ReleaseLease: release != nil}, nil }); err != nil && !errors.Is(err, errEnded) {
			return err
		}
		return nil
	case release != nil:
		return b.releaseLease(ctx, release)
	}
	if due {
		switch reason {
		case taskrouter.ReasonTakeover:
			reason = ReasonTakeover // a step found running ran in another replica, which stopped
		case taskrouter.ReasonRestart:
			reason = ReasonRestart // a step found running ran in a process that stopped
		}
		passed := in.kick(reason)
		if reason == "" { // a wake-up: see wake
			t := time.NewTimer(wakeWait)
			defer t.Stop()
			select {
			case <-passed:
			case <-t.C:
			case <-ctx.Done():
			case <-b.ctx.Done():
			}
		}
	}
	return nil
}

// wake runs a workflow task whose wake-up time came (a retry's backoff, a
// client's wait running out), on whichever process the engine's scheduler
// picked.
//
// It returns once the drive loop's pass has written what was due (or
// after wakeWait), so that the scheduler, which keeps the task to itself
// until then, does not wake it again before its wake-up time moved.
func (b *Bridge) wake(ctx context.Context, t *store.Task) error {
	return b.recoverTask(ctx, t, "")
}

// wakeWait bounds how long a wake-up waits for the pass it set off.
const wakeWait = 10 * time.Second

// releaseLease gives up the lease of t (as claimed) in the store.
func (b *Bridge) releaseLease(ctx context.Context, t *store.Task) error {
	fence := t.Fence()
	_, err := b.engine.Update(context.WithoutCancel(ctx), t.ID, store.Update{Fence: &fence, ReleaseLease: true})
	if err != nil && isGone(err) {
		return nil // someone else holds it now, or it ended
	}
	return err
}

// expiryMessage words the failure of a workflow task whose expiry passed
// while it was active: an orphan when no client held its id.
func (b *Bridge) expiryMessage(t *store.Task) string {
	if parked(t) {
		return fmt.Sprintf("expired: the workflow rested for its ttl of %s while it waited for a server process that serves its version (%s); it was cancelled", t.TTL, strings.TrimPrefix(t.StatusMessage, "waiting: "))
	}
	if msg := pausedExpiry(t); msg != "" {
		return msg
	}
	if t.Labels[LabelTouched] != "" || t.Labels[LabelDeadline] != DeadlineOrphan {
		return fmt.Sprintf("expired: the workflow rested for its ttl of %s without a step being recorded; it was cancelled", t.TTL)
	}
	return fmt.Sprintf("orphaned: the handoff of this workflow task never reached a client (its prompt request ended before it was answered) and no client named the task within %s of it waiting for one, so nobody holds its id; it was failed instead of waiting out its ttl", b.opts.OrphanTimeout.Round(time.Second))
}

// touched marks a workflow task as held by a client the first time a
// client names it (tasks/*), restoring its ttl deadline in place of the
// orphan deadline. It writes once per task.
//
// It also applies the version policy to a task whose workflow version is
// not served (on a shared store nothing else may look at such a task
// before its ttl ends): a map lookup, no write, for a served one. A child
// workflow whose parent ended is cancelled (outlivesParent: one read).
func (b *Bridge) touched(ctx context.Context, t *store.Task) {
	if t.Status.Terminal() || b.outlivesParent(ctx, t) {
		return
	}
	served := b.serves(t)
	if t.Labels[LabelTouched] != "" && served {
		return
	}
	in := b.use(t.ID)
	defer b.done(in)
	if !served {
		_, _ = in.refresh(ctx, t) // applies the version policy
	}
	in.touch(ctx)
}

// serves reports whether t's workflow version is registered (a task
// recorded before versions existed is checked when it is loaded).
func (b *Bridge) serves(t *store.Task) bool {
	v := t.Labels[LabelVersion]
	if v == "" {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.workflows[t.Labels[LabelWorkflow]]
	return w != nil && w.byVersion[v] != nil
}

// touch marks the task held by a client (its handoff was delivered, or a
// client named it): the orphan rule no longer applies to it.
func (in *instance) touch(ctx context.Context) {
	in.writing(func() { in.touchTurn(ctx) })
}

// touchTurn is touch. Call with the turn held.
func (in *instance) touchTurn(ctx context.Context) {
	for attempt := 0; attempt < 4; attempt++ {
		if err := in.load(ctx); err != nil {
			return
		}
		t := in.task
		if t.Labels[LabelTouched] != "" || t.Status.Terminal() {
			return
		}
		u := store.Update{IfVersion: t.Version, Labels: map[string]string{LabelTouched: "1"}}
		in.b.deadline(t, in.p, &u, in.b.engine.Now())
		nt, err := in.b.engine.Update(ctx, t.ID, u)
		if err == nil {
			in.locked(func() { in.task = nt }) // the progress did not change
			return
		}
		in.invalidate()
		if isGone(err) {
			return
		}
	}
}
