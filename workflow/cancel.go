package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// The cancel pass. The engine ends a workflow task from outside its work
// (a cancel: tasks/cancel, task_cancel, a parent's end; or its expiry):
// the end is written first, by the engine, and the task takes no more
// writes. The bridge then decides what the end means (ended, the decision
// of an ended event) and carries it out at once, in the engine's call:
//
//   - every place the task holds or waits for on a queue is given up, so
//     the next run starts now (not at its next look);
//   - its children still running are cancelled (lineage.go);
//   - a cancelled workflow that was undoing what it did (its failure's
//     compensation), or that asks for it (Definition.UndoOnCancel), has
//     its undo steps run to their end by a task of its own (LabelUndoOf),
//     which keeps each undo step's idempotency key; the cancel's status
//     message says so (CancelMessage); the cancel's write marks the task
//     as owing it (labelUndoOwed), so that a start, or on a shared store
//     the takeover of a replica that saw the process gone, creates it
//     when that process stopped before it did (Owed). Cancelling that
//     undo task cuts the undo: its status message says which undo steps
//     ran, which failed, and which never ran;
//   - its parent hears of it (lineage.go).

// ended is the decision of an ended event: the effects of an end the
// engine wrote (see the top of this file). It writes nothing.
func (r *record) ended() {
	t, p := r.task, r.p
	for _, sl := range r.wf.slots(p) {
		if pl := sl.s.queue; pl != nil && pl.q != nil && sl.sp.Queue != nil {
			r.givePlace(pl, slotEntry(r.id, sl.path))
		}
	}
	if pl := r.wf.def.queue; pl != nil && pl.q != nil && p.Queue != nil {
		r.givePlace(pl, r.id)
	}
	walkRecords(p, func(sp *StepProgress) {
		if sp.Child != "" && sp.Status != mcptask.StepCompleted {
			r.effect(cancelChild{id: sp.Child, why: string(t.Status)})
		}
	})
	if t.Status == mcptask.StatusCancelled && undoesOnCancel(r.wf, p) {
		r.effect(undoTask{})
	}
	if t.Labels[LabelParent] != "" {
		r.effect(pokeParent{})
	}
}

// undoesOnCancel reports whether a cancelled task at p (before or after
// the cancel's write closed its records) has its undo steps run by an
// undo task: it was undoing what it did, or its workflow asks for it, and
// something it did has an undo. The undo task itself does not: its
// cancel cuts the undo (docs/SEMANTICS.md), and says what it left.
func undoesOnCancel(wf *compiled, p *Progress) bool {
	if !wf.def.hasUndo() || !wf.def.UndoOnCancel && !p.undoing() || p.undoing() && p.Undo.Of != "" {
		return false
	}
	if p.undoing() && p.Undo.Listed {
		for _, sp := range p.Undo.Steps {
			if !sp.ended() && !sp.GaveUp || cutByEnd(&sp) {
				return true
			}
		}
	}
	for _, sl := range wf.slots(p) {
		if sl.s.undo != nil && sl.sp.Status == mcptask.StepCompleted {
			return true
		}
	}
	return false
}

// cutByEnd reports whether the engine's end of the task (a cancel, an
// expiry) cut record sp while its attempt ran (closeRecords): an undo
// step so cut runs again in the undo task.
func cutByEnd(sp *StepProgress) bool {
	n := len(sp.History)
	return sp.Status == mcptask.StepCancelled && n > 0 && sp.History[n-1].Outcome == OutcomeCancelled
}

type (
	// cancelChild cancels child id (its parent ended: why).
	cancelChild struct{ id, why string }
	// undoTask starts the undo task of the cancelled task.
	undoTask struct{}
	// pokeParent tells the task's parent it ended.
	pokeParent struct{}
)

func (cancelChild) effectName() string { return "cancel a child" }
func (undoTask) effectName() string    { return "start the undo of a cancelled task" }
func (pokeParent) effectName() string  { return "tell the parent" }

// ended is told that the engine ended workflow task t from outside (a
// cancel, an expiry): it decides what the end means (record.ended) and
// carries it out.
func (b *Bridge) ended(ctx context.Context, t *store.Task) {
	p, err := decodeProgress(t)
	if err != nil {
		if t.Labels[LabelParent] != "" {
			b.pokeParent(ctx, t)
		}
		return
	}
	wf, err := b.compiledFor(t, p)
	if err != nil {
		if hasChildren(p) {
			b.cancelChildren(ctx, t, p)
		}
		if t.Labels[LabelParent] != "" {
			b.pokeParent(ctx, t)
		}
		return
	}
	r := &record{id: t.ID, task: t, p: p, wf: wf, opts: &b.opts, now: b.engine.Now(), queues: b.queues() != nil, ev: &occurrence{}}
	r.d = &decision{}
	r.ended()
	for _, e := range r.d.effects {
		switch e := e.(type) {
		case freePlace:
			b.freePlace(ctx, t.ID, e)
		case cancelChild:
			b.cancelChild(ctx, e.id, t.ID, e.why)
		case undoTask:
			b.undoCancelled(ctx, t)
		case pokeParent:
			b.pokeParent(ctx, t)
		}
	}
}

// EndWrite closes the record of workflow task t in the end the engine
// writes of it (u: a cancel or an expiry; see taskrouter.EndWriter): a
// cancel is worded (cancelMessage), and every record that has not ended
// is closed as the engine's own end closes it (closeRecords: an open
// attempt ends cancelled, nothing reads running or waiting), in the same
// write. The places the records hold stay named, for the end's effects
// to give them up after the write (ended).
func (k kindHooks) EndWrite(t *store.Task, u *store.Update) {
	p, err := decodeProgress(t)
	if err != nil {
		return // not a progress this process reads: the end is written as the engine words it
	}
	b := k.b
	why := "the task expired"
	if u.Status == mcptask.StatusCancelled {
		why = "the task was cancelled"
		if wf, err := b.compiledFor(t, p); err == nil && undoesOnCancel(wf, p) {
			if u.Labels == nil {
				u.Labels = map[string]string{}
			}
			u.Labels[labelUndoOwed] = "1" // the cancel's write promises the undo task (Owed)
		}
		if u.StatusMessage != nil {
			msg := b.cancelMessage(t, p, *u.StatusMessage)
			u.StatusMessage = &msg
		}
	}
	now := b.engine.Now()
	closeRecords(p, now, why, true)
	if u.StatusMessage != nil {
		p.PauseReason = *u.StatusMessage
	}
	p.Revision++
	p.UpdatedAt = now
	raw, err := json.Marshal(p)
	if err != nil {
		return
	}
	if u.Variables == nil {
		u.Variables = map[string]json.RawMessage{}
	}
	u.Variables[VarProgress] = raw
}

var _ taskrouter.EndWriter = kindHooks{}

// labelUndoOwed marks a cancelled workflow task whose cancel's write
// promised an undo task (EndWrite), until the undo task exists (its id is
// derived from the task's: undoTaskID; undoKept clears the mark).
const labelUndoOwed = "workflow.undo_owed"

// Owed starts, on the engine's Start (and on a shared store, in the
// takeover of each replica that sees another gone), the undo task a
// cancelled workflow task t is owed when it has none: a process stopped
// between the cancel's write and the undo task's creation (simulation
// seed 935); one found made clears the mark. Replicas that call it at
// once make the undo task once (its id is derived: undoTaskID). Any
// other task is left alone.
func (k kindHooks) Owed(ctx context.Context, t *store.Task) {
	if t.Labels[labelUndoOwed] == "" {
		return
	}
	full, err := k.b.engine.Task(ctx, t.ID) // a listing may leave the progress out
	if err != nil {
		return
	}
	k.b.undoCancelled(ctx, full)
}

// cancelMessage words the cancel of workflow task t (at p, before the
// cancel; message is the engine's wording): a task whose undo goes on in
// an undo task says which, and what was undone so far; a cancelled undo
// task says which undo steps ran, which failed and which never ran.
func (b *Bridge) cancelMessage(t *store.Task, p *Progress, message string) string {
	wf, err := b.compiledFor(t, p)
	if err != nil {
		return message
	}
	switch {
	case t.Labels[LabelUndoOf] != "" && p.undoing():
		return fmt.Sprintf("%s: the undo of workflow task %s was cut; %s", message, p.Undo.Of, undoTally(p.Undo, true))
	case undoesOnCancel(wf, p):
		msg := fmt.Sprintf("%s%s%s", message, undoneBy, undoTaskID(t.ID))
		if p.undoing() && p.Undo.Listed {
			msg = fmt.Sprintf("%s"+undoingSince+"%s); the undo goes on in workflow task %s, so far %s",
				message, strings.TrimSuffix(oneLine(p.Undo.Reason), "; the workflow failed"), undoTaskID(t.ID), undoTally(p.Undo, false))
		}
		return msg
	}
	return message
}

// Where cancelMessage's wording starts after the engine's.
const (
	undoneBy     = "; what it did is undone by workflow task "
	undoingSince = " while it was undoing what it did ("
)

// cancelCause is the engine's wording of a cancel cancelMessage worded.
func cancelCause(msg string) string {
	msg, _, _ = strings.Cut(msg, undoneBy)
	msg, _, _ = strings.Cut(msg, undoingSince)
	return msg
}

// undoTally says, of the undo steps of u, which completed, which failed,
// which were cut while they ran and which never ran (cut: and that the
// undo ended there).
func undoTally(u *Undoing, cut bool) string {
	var done, failed, stopped, never []string
	for _, sp := range u.Steps {
		what := fmt.Sprintf("%s (%s)", strings.TrimPrefix(sp.Name, undoPrefix), sp.Tool)
		switch {
		case sp.Status == mcptask.StepCompleted:
			done = append(done, what)
		case sp.GaveUp || sp.Status == mcptask.StepFailed && sp.RetryAt == nil:
			failed = append(failed, fmt.Sprintf("%s: %s", what, oneLine(sp.Error)))
		case sp.open() != nil || sp.Status == mcptask.StepRunning || sp.Attempts > 0:
			stopped = append(stopped, what)
		default:
			never = append(never, what)
		}
	}
	list := func(xs []string) string {
		if len(xs) == 0 {
			return "none"
		}
		return strings.Join(xs, ", ")
	}
	s := fmt.Sprintf("undone: %s; failed: %s; cut while it ran: %s; never ran: %s", list(done), list(failed), list(stopped), list(never))
	if cut && len(failed)+len(stopped)+len(never) > 0 {
		s += " (take back by hand what was not undone)"
	}
	return s
}
