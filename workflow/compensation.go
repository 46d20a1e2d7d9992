package workflow

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Compensation. A step may name its undo step (Step.Undo): a server tool
// step that takes back what the step did (roll back a deploy, refund a
// charge). When the workflow fails after such steps completed, it does not
// end at once: it undoes them first, then fails, saying what it undid.
//
//   - The steps still running when the workflow failed are stopped, and
//     waited for: one that completed anyway is undone too.
//   - The undo steps run one at a time, in the reverse order their steps
//     completed (a for-each's items each have their own undo, reading the
//     same item), on the server, durably: each is a record in
//     Progress.Undo, addressed "undo:<path>", with its attempts, retries
//     (its own retry policy), restarts and idempotency key like any step
//     of the server's; at least once.
//   - An undo step the server gives up on is reported, and the next one
//     runs: nothing is dropped silently.
//   - The task's status message, the handoff (Document.Undo) and the
//     progress say what is being undone, and in the end what was undone
//     and what could not be.
//
// A workflow that is cancelled is undone the same way when it asks
// (Definition.UndoOnCancel): a cancelled task takes no more writes, so a
// new task (LabelUndoOf) runs its undo steps.

// undoPrefix starts the path of an undo record: "undo:deploy[1]" undoes
// deploy[1].
const undoPrefix = "undo:"

// Undoing is what Progress.Undo keeps of a compensation.
type Undoing struct {
	// Reason is why the workflow is being undone: its failure, or its
	// cancellation.
	Reason string `json:"reason" jsonschema:"description=Why the workflow is undone: its failure or its cancellation"`
	// Listed is set once the steps to undo are known (the steps still
	// running when the workflow failed have ended).
	Listed bool `json:"listed,omitempty" jsonschema:"description=The undo steps are listed (every step that was running has ended)"`
	// Steps are the undo steps' records, in the order they run; each is
	// named undo:<the path of the step it undoes>.
	Steps []StepProgress `json:"steps,omitempty" jsonschema:"description=The undo steps in the order they run (undo:<the step they undo>)"`
	// Of is the cancelled task whose undo this task runs (LabelUndoOf);
	// empty when the task undoes itself after failing.
	Of string `json:"of,omitempty" jsonschema:"description=The cancelled task this task undoes"`
	// Done is set when the undo of a cancelled task has run every undo
	// step (the task then ends).
	Done bool `json:"done,omitempty" jsonschema:"description=Every undo step of a cancelled task's undo has ended"`
}

// LabelUndoOf marks the task that undoes a cancelled workflow task: the
// cancelled task's id.
const LabelUndoOf = "workflow.undo_of"

// Undo names the step that takes back what this one did (a server tool
// step; see compensation.go): it runs when the workflow fails after this
// step completed. In a for-each's body, each item's undo reads the same
// item (Item).
func (s *Step) Undo(undo *Step) *Step {
	s.undo = undo
	return s
}

// checkUndo checks the undo step of c.step: a server tool step, whose
// reads are checked like a step's after c.step (an Item only in a
// for-each's body).
func (c *checker) checkUndo() {
	u := c.step.undo
	if u == nil {
		return
	}
	if u.kind == nil || callOf(u) == nil || u.Execution() != mcptask.ExecServer {
		c.add("its undo step must be a server tool step (Server)")
		return
	}
	if len(c.step.kind.members()) > 0 {
		c.add("a group has no undo of its own: give its members theirs")
	}
	uc := &checker{v: c.v, w: c.w, step: u, i: c.i, where: fmt.Sprintf("%s, its undo step %q", c.where, u.Name), inBody: c.inBody}
	for _, m := range u.misuse {
		uc.add("%s", m)
	}
	u.kind.check(uc)
	if u.Condition != nil {
		uc.add("an undo step has no condition: it runs when what it undoes completed")
	}
}

// hasUndo reports whether some step of w (or a container's body) has an
// undo step.
func (w *Definition) hasUndo() bool {
	for _, s := range w.all() {
		if s != nil && s.undo != nil {
			return true
		}
	}
	return false
}

// undoing reports whether p is being undone and not done with it.
func (p *Progress) undoing() bool { return p.Undo != nil }

// startUndo begins the compensation of p, which failed (or was cancelled)
// for why, when something is to be undone: a completed step with an undo,
// or a running one that may complete. The steps running here are cut
// (after the write) and waited for.
func (r *record) startUndo(why string) bool {
	if !r.wf.def.hasUndo() {
		return false
	}
	some := false
	for _, sl := range r.wf.slots(r.p) {
		some = some || sl.s.undo != nil && (sl.sp.Status == mcptask.StepCompleted || sl.sp.Status == mcptask.StepRunning || r.here[sl.path] != 0)
	}
	if !some {
		return false
	}
	r.p.Undo = &Undoing{Reason: why}
	for path, n := range r.here {
		if !undoRecord(path) {
			r.effect(cutAttempt{path: path, n: n, cause: errUndoing})
		}
	}
	return true
}

// errUndoing stops the steps running when the workflow failed.
var errUndoing = errors.New("stopped: the workflow failed, and what it did is being undone")

// compensate moves the compensation of p on: it waits for the steps that
// were running, lists what to undo, and runs the next undo step. It
// returns the workflow's failure once every undo step has ended, or "".
func (r *record) compensate() string {
	p, u := r.p, r.p.Undo
	if !u.Listed {
		for _, sl := range r.wf.slots(p) {
			if sl.sp.Status == mcptask.StepRunning && sl.sp.Items == nil {
				return "" // its outcome comes back through record
			}
		}
		for path := range r.here {
			if !undoRecord(path) {
				return "" // a tool of a step stopped by the failure has not returned
			}
		}
		u.Steps, u.Listed = r.undoList(), true
	}
	for i := range u.Steps {
		sp := &u.Steps[i]
		if sp.ended() || sp.GaveUp {
			continue
		}
		sl := r.wf.slotAt(p, sp.Name)
		if sl == nil { // a definition that lost the undo: report it
			sp.Status, sp.GaveUp, sp.Error = mcptask.StepFailed, true, "its undo step is not in the definition this server serves"
			continue
		}
		if !r.mayUndo() {
			return "" // paused: the undo waits for the resume (pause.go)
		}
		return r.runnable(sl, "") // one at a time
	}
	if u.Of != "" {
		u.Done = true // the undo of a cancelled task ends (plan)
		return ""
	}
	return undoneMessage(u)
}

// idempotencyKey is the key of every run of the record at path: the
// task's and the path's, except for an undo step the undo task of a
// cancelled workflow runs, which keeps the cancelled task's (a tool that
// deduplicates by key runs an undo once, across the cancel).
func (r *record) idempotencyKey(path string) string {
	if u := r.p.Undo; u != nil && u.Of != "" && undoRecord(path) {
		return idempotencyKey(u.Of, path)
	}
	return idempotencyKey(r.id, path)
}

// undoList lists the undo records of p: every completed record whose step
// has an undo, the last completed first.
func (r *record) undoList() []StepProgress {
	type done struct {
		sl *slot
		at time.Time
		n  int
	}
	var list []done
	for n, sl := range r.wf.slots(r.p) {
		if sl.s.undo != nil && sl.sp.Status == mcptask.StepCompleted {
			list = append(list, done{sl, completedAt(sl.sp), n})
		}
	}
	slices.SortStableFunc(list, func(a, b done) int {
		return cmp.Or(b.at.Compare(a.at), cmp.Compare(b.n, a.n))
	})
	if plantUndoForward {
		slices.Reverse(list)
	}
	out := make([]StepProgress, len(list))
	for i, d := range list {
		u := d.sl.s.undo
		out[i] = StepProgress{Name: undoPrefix + d.sl.path, Tool: toolOf(u), Execution: string(mcptask.ExecServer),
			Status: mcptask.StepPending, Output: u.binding(), N: i, Item: d.sl.item}
	}
	return out
}

// completedAt is when record sp's last attempt ended.
func completedAt(sp *StepProgress) time.Time {
	if n := len(sp.History); n > 0 {
		a := sp.History[n-1]
		return a.At.Add(time.Duration(a.DurationMs) * time.Millisecond)
	}
	return time.Time{}
}

// undoSlot is the slot of undo record path ("undo:deploy[1]") in p: its
// step is the undo step of the step it undoes, reading that record's item.
func (wf *compiled) undoSlot(p *Progress, path string) *slot {
	if p.Undo == nil {
		return nil
	}
	orig := wf.slotAt(p, strings.TrimPrefix(path, undoPrefix))
	if orig == nil || orig.s.undo == nil {
		return nil
	}
	for i := range p.Undo.Steps {
		if sp := &p.Undo.Steps[i]; sp.Name == path {
			return &slot{path: path, s: orig.s.undo, sp: sp, item: orig.item}
		}
	}
	return nil
}

// undoRecord reports whether path names an undo record.
func undoRecord(path string) bool { return strings.HasPrefix(path, undoPrefix) }

// undoneMessage is the workflow's failure once its compensation ended:
// its reason, then what was undone and what could not be (for the undo of
// a cancelled task, its end).
func undoneMessage(u *Undoing) string {
	reason := strings.TrimSuffix(strings.TrimSuffix(u.Reason, "; the workflow failed"), ".")
	var done, failed []string
	for _, sp := range u.Steps {
		what := strings.TrimPrefix(sp.Name, undoPrefix)
		if sp.Status == mcptask.StepCompleted {
			done = append(done, fmt.Sprintf("%s (%s)", what, sp.Tool))
		} else {
			failed = append(failed, fmt.Sprintf("%s (%s: %s)", what, sp.Tool, oneLine(sp.Error)))
		}
	}
	var b strings.Builder
	b.WriteString(reason)
	switch {
	case len(u.Steps) == 0:
		b.WriteString("; nothing it did needed undoing")
	case len(done) > 0:
		fmt.Fprintf(&b, "; undone, last first: %s", strings.Join(done, ", "))
	}
	if len(failed) > 0 {
		fmt.Fprintf(&b, "; NOT undone (the undo failed; take it back by hand): %s", strings.Join(failed, ", "))
	}
	if u.Of == "" {
		b.WriteString("; the workflow failed")
	}
	return b.String()
}

// undoTaskID is the id of the task that undoes cancelled task id.
func undoTaskID(id string) string { return childID(id, undoPrefix, 1) }

// undoFailed reports whether an undo step of u could not undo its step.
func (u *Undoing) undoFailed() bool {
	for _, sp := range u.Steps {
		if sp.Status != mcptask.StepCompleted {
			return true
		}
	}
	return false
}

// undoCancelled starts the undo of cancelled task t when it was undoing
// what it did (a cancel during an undo lets the undo finish), or its
// workflow asks for it (Definition.UndoOnCancel), and something it did has
// an undo (undoesOnCancel): a task of its own (once: its id is derived from
// t's), on the same version, from t's progress with what ran cut short,
// which runs the undo steps left and ends (completed, or failed when an
// undo failed). An undo step the cancel cut short runs again there with
// its idempotency key (record.idempotencyKey).
func (b *Bridge) undoCancelled(ctx context.Context, t *store.Task) {
	p, err := decodeProgress(t)
	if err != nil {
		return
	}
	wf, err := b.compiledFor(t, p)
	if err != nil || !undoesOnCancel(wf, p) {
		return
	}
	now := b.engine.Now()
	for _, sl := range wf.slots(p) {
		sp := sl.sp
		if sp.Status == mcptask.StepRunning && sp.Items == nil { // cut short by the cancel: not undone
			if a := sp.open(); a != nil {
				a.Outcome, a.Error = OutcomeCancelled, "the task was cancelled"
				a.DurationMs = max(0, now.Sub(a.At).Milliseconds())
			}
			sp.Status, sp.SkipReason = mcptask.StepCancelled, "the task was cancelled while it ran"
		}
	}
	why := "the workflow was cancelled"
	if msg := cancelCause(t.StatusMessage); msg != "" {
		why += " (" + msg + ")"
	}
	if p.Undo == nil {
		p.Undo = &Undoing{Reason: why}
	} else {
		why = fmt.Sprintf("%s, then the workflow was cancelled while it undid what it did", strings.TrimSuffix(oneLine(p.Undo.Reason), "; the workflow failed"))
	}
	p.Undo.Of, p.Undo.Reason = t.ID, why
	// The cancel ends a pause: the undo it asks for runs (a pause cut
	// its steps, and the cancel's write closed them; docs/SEMANTICS.md).
	p.Paused = nil
	for i := range p.Undo.Steps {
		sp := &p.Undo.Steps[i]
		if cutByEnd(sp) { // the cancel's write closed it while it ran (closeRecords)
			a := &sp.History[len(sp.History)-1]
			a.Outcome, a.Error = OutcomeStopped, "the task was cancelled while the undo ran; it runs again in the undo task"
			sp.Status, sp.SkipReason = mcptask.StepPending, ""
		}
		sp.handBack(now) // an undo the cancel cut short runs again
		if sp.IdempotencyKey == "" && sp.Attempts > 0 {
			sp.IdempotencyKey = idempotencyKey(t.ID, sp.Name)
		}
	}
	id := undoTaskID(t.ID)
	start := func(ctx context.Context) bool {
		in, err := b.create(ctx, taskrouter.RequestOf(t), wf, p, map[string]string{LabelUndoOf: t.ID, LabelTouched: "1"}, nil, id)
		if err == nil {
			b.done(in)
			b.undoKept(ctx, t)
			return true
		}
		if _, gerr := b.engine.Task(ctx, id); gerr == nil {
			b.undoKept(ctx, t)
			return true // started already (a cancel seen twice, a start that found the mark)
		}
		b.engine.Logger().Warn("starting the undo of a cancelled workflow task; trying again", "task", t.ID, "error", err)
		return permanent(err)
	}
	// The cancel's write promised the undo: a refusal that may pass is
	// tried again until the store takes it (simulation seed 349).
	b.until(ctx, start)
}

// undoKept clears the mark of cancelled task t that its undo task is
// owed (labelUndoOwed), now that the undo task exists: a later start
// leaves t alone even once the undo task is deleted. A mark left (the
// write failed) is cleared by the next start, which finds the undo task.
func (b *Bridge) undoKept(ctx context.Context, t *store.Task) {
	if t.Labels[labelUndoOwed] == "" {
		return
	}
	_, err := b.engine.Update(ctx, t.ID, store.Update{Annotate: true, Labels: map[string]string{labelUndoOwed: ""}})
	if err != nil && !isGone(err) {
		b.engine.Logger().Warn("clearing the mark of a cancelled workflow task's undo; the next start clears it", "task", t.ID, "error", err)
	}
}

// undoStatus is the status line while p is being undone.
func undoStatus(p *Progress) string {
	u := p.Undo
	what := fmt.Sprintf("the workflow failed (%s)", oneLine(u.Reason))
	if u.Of != "" {
		what = fmt.Sprintf("undoing cancelled workflow task %s", u.Of)
	}
	if !u.Listed {
		return what + "; waiting for the steps that were running to stop, then undoing what it did"
	}
	for i, sp := range u.Steps {
		if sp.ended() || sp.GaveUp {
			continue
		}
		line := fmt.Sprintf("%s; undoing what it did, last first: %s for %s (%d of %d)",
			what, sp.Tool, strings.TrimPrefix(sp.Name, undoPrefix), i+1, len(u.Steps))
		if sp.RetryAt != nil {
			line += fmt.Sprintf(", failed (%s), retrying at %s", oneLine(sp.Error), stamp(*sp.RetryAt))
		}
		return line
	}
	return undoneMessage(u)
}
