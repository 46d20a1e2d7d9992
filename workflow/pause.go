package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Pause and resume. A paused workflow starts nothing new: no step starts
// (nor its retry), no sleep or wait is judged; its timers keep their
// times, and what is due when it resumes happens then. The steps running
// at the pause finish (their outcomes are recorded), or, with Cut, are
// stopped and run again on resume. The task's wire status stays working
// (the status the spec defines for it; clients such as the TypeScript SDK
// reject others): its status message, its handoff and the dashboard say
// it is paused, by whom, since when and why. A workflow with
// PauseOnFailure pauses itself instead of failing when the server gives
// up on a step whose failure would fail it; the resume runs that step
// again. Pause and resume are recorded in the task's event log (an
// mcptask.EventAction event), with who did it.
//
// The entry points: Bridge.Pause and Bridge.Resume (the Go API; the
// dashboard), and through taskrouter.Pauser (kindHooks) the engine's
// Router.PauseTask, the built-in tools task_pause and task_resume and the
// CLI. A queued run gives its place up while the workflow is paused (it
// queues again on resume): a paused workflow holds no place it does not
// use.

// Pause is the record of a paused workflow (Progress.Paused).
type Pause struct {
	// By names who paused it: a requestor's owner, an operator, or
	// PausedByServer.
	By string `json:"by"`
	// At is when it was paused.
	At time.Time `json:"at"`
	// Reason says why.
	Reason string `json:"reason,omitempty"`
	// Cut reports that the steps running at the pause were stopped (they
	// run again on resume).
	Cut bool `json:"cut,omitempty"`
	// Step is the step whose failure paused the workflow
	// (PauseOnFailure): it runs again on resume.
	Step string `json:"step,omitempty"`
}

// PausedByServer is Pause.By when the workflow paused itself
// (PauseOnFailure).
const PausedByServer = "the server"

// Errors of Pause and Resume; both match taskrouter.ErrNotPausable.
var (
	// ErrPaused: the workflow is paused already.
	ErrPaused = fmt.Errorf("%w: the workflow is paused already", taskrouter.ErrNotPausable)
	// ErrNotPaused: the workflow is not paused.
	ErrNotPaused = fmt.Errorf("%w: the workflow is not paused", taskrouter.ErrNotPausable)
)

// errPauseCut is the cause a pause with Cut stops a running step's tool
// with; the pause recorded the attempt stopped already.
var errPauseCut = errors.New("workflow: the workflow was paused and its running steps cut")

// pauseCut reports that a step's tool was stopped by a pause with Cut.
func pauseCut(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errPauseCut) }

// Pause pauses workflow task id (see the comment above): p.By says who
// (it defaults to "an operator"), p.Reason why, and p.Cut stops the steps
// running in this process too (a step running on another replica
// finishes there; its outcome is not recorded, and it runs again on
// resume). The workflow's children are paused with it. It returns the
// task as written and a sentence saying what happened. A task paused
// already fails with ErrPaused; an ended one with an error matching
// taskrouter.ErrNotPausable. Who may pause is the caller's to check (the
// tools check the requestor may see the task).
func (b *Bridge) Pause(ctx context.Context, id string, p taskrouter.PauseRequest) (*store.Task, string, error) {
	if p.By == "" {
		p.By = "an operator"
	}
	return b.hold(ctx, id, &occurrence{pause: &Pause{By: p.By, Reason: oneLine(p.Reason), Cut: p.Cut}})
}

// Resume resumes paused workflow task id, by by: what is due starts (a
// step the pause cut, or whose failure paused it, runs again), and the
// children its pause paused are resumed. It returns the task as written
// and a sentence saying what happened; a task that is not paused fails
// with ErrNotPaused.
func (b *Bridge) Resume(ctx context.Context, id, by string) (*store.Task, string, error) {
	if by == "" {
		by = "an operator"
	}
	return b.hold(ctx, id, &occurrence{resume: by, heldBy: b.pausedParent(ctx, id)})
}

// pausedParent returns the parent of workflow task id when it is paused
// (the event's input of a resume: a pause its parent made is its
// parent's to lift while the parent stays paused), or "".
func (b *Bridge) pausedParent(ctx context.Context, id string) string {
	t, err := b.engine.Task(ctx, id)
	if err != nil || t.Labels[LabelParent] == "" {
		return ""
	}
	if b.parentPause(ctx, t.Labels[LabelParent]) != nil {
		return t.Labels[LabelParent]
	}
	return ""
}

// parentPause returns the pause of workflow task parent, nil when it is
// not paused, has ended or cannot be read.
func (b *Bridge) parentPause(ctx context.Context, parent string) *Pause {
	pt, err := b.engine.Task(ctx, parent)
	if err != nil || pt.Status.Terminal() {
		return nil
	}
	if pp, err := decodeProgress(pt); err == nil {
		return pp.Paused
	}
	return nil
}

// A pause reaches a workflow's children twice over: the parent's
// decision pauses them after its write (holdChild), and a child's
// decision reads its parent's pause before it decides (heldByParent), so
// that a child whose decision was under way when its parent's pause was
// written, or whose parent's process stopped before it paused the
// children, pauses itself as its parent's pause would have, and starts
// nothing. The read comes before the child's write: a parent resumed
// between the two is looked at again after it (recheckParent).

// parentHold is the pause of a task's parent, as the executor read it
// before a decision (record.parent).
type parentHold struct {
	id    string
	pause *Pause
}

// parentHold reads the pause of the task's parent before a decision:
// nil for a task that is no child, or whose parent is not paused. Call
// with the turn held.
func (in *instance) parentHold(ctx context.Context) *parentHold {
	if in.task == nil || in.task.Labels[LabelParent] == "" {
		return nil
	}
	parent := in.task.Labels[LabelParent]
	if pz := in.b.parentPause(ctx, parent); pz != nil {
		return &parentHold{id: parent, pause: pz}
	}
	return nil
}

// heldByParent pauses a workflow whose parent is paused, as the parent's
// pause would (see parentHold): a pass of the decision (plan.go, 4).
func (r *record) heldByParent() {
	h := r.parent
	if h == nil || r.p.Paused != nil {
		return
	}
	r.pause(&Pause{By: parentBy(h.id), Reason: fmt.Sprintf("its parent workflow task %s was paused by %s", h.id, h.pause.By), Cut: h.pause.Cut})
	r.effect(recheckParent{parent: h.id})
}

// resumeChild resumes child workflow task id when its parent's pause
// paused it (one paused on its own stays paused).
func (b *Bridge) resumeChild(ctx context.Context, id, parent, by string) (*store.Task, string, error) {
	return b.hold(ctx, id, &occurrence{resume: by, parent: parent})
}

// hold decides a pause or a resume (ev) of task id, writes it, carries
// its effects out (cut the steps a pause stops, pause or resume the
// children) and sets the workflow off.
func (b *Bridge) hold(ctx context.Context, id string, ev *occurrence) (*store.Task, string, error) {
	in := b.use(id)
	defer b.done(in)
	var d decision
	err := in.commitTurn(ctx, func(p *Progress) (store.Update, error) {
		d = decide(in.recordOf(p), ev)
		return d.update, d.err
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	if err != nil {
		return nil, "", pauseErr(err)
	}
	in.handAnswers(in.carry(d.effects)) // decided by the drive loop the kick sets off
	in.kick("")
	t, _ := in.known()
	return t, d.said, nil
}

// parentBy is Pause.By of a child its parent's pause paused.
func parentBy(parent string) string { return "workflow task " + parent + " (its parent)" }

// pause is the decision of a pause (see Pause): the record says who
// paused it, when and why; with Cut, the attempts running are recorded
// stopped (they run again on resume; the cut is not a failure, and the
// count of failures stays) and cut after the write; the children running
// are paused as it is; the queue places it runs nothing on are given up.
func (r *record) pause(pz *Pause) {
	p, d := r.p, r.d
	if p.Paused != nil {
		d.err = fmt.Errorf("%w (by %s since %s)", ErrPaused, p.Paused.By, stamp(p.Paused.At))
		return
	}
	now := r.now
	p.Paused = &Pause{By: pz.By, At: now, Reason: pz.Reason, Cut: pz.Cut}
	var running, cut []string
	r.eachSlot(func(sl *slot) {
		if sl.sp.Child != "" && !sl.sp.ended() && !sl.sp.HandedToClient {
			r.effect(holdChild{id: sl.sp.Child, pause: p.Paused})
		}
		a := sl.sp.open()
		if a == nil || callOf(sl.s) == nil {
			return // a container's, a sleep's, a child's: nothing of its own runs
		}
		running = append(running, sl.path)
		if pz.Cut {
			n := a.N
			a.Outcome, a.Error = OutcomeStopped, fmt.Sprintf("cut: the workflow was paused by %s; the step runs again on resume", pz.By)
			a.DurationMs = max(0, now.Sub(a.At).Milliseconds())
			sl.sp.Status = mcptask.StepPending
			cut = append(cut, sl.path)
			r.effect(cutAttempt{path: sl.path, n: n, cause: errPauseCut})
		}
	})
	// The places it runs nothing on are given up in the pause's own write
	// (the store hears of it after the write): a paused workflow holds no
	// place it does not use, and no later decision is needed to free it.
	r.freePlaces(false)
	p.refresh()
	p.PauseReason = pauseReason(r.wf, p)
	d.said = fmt.Sprintf("Workflow task %s is paused: no step starts until it is resumed.", r.id)
	switch {
	case len(running) == 0:
	case pz.Cut:
		d.said += fmt.Sprintf(" The steps that were running (%s) were stopped; they run again on resume.", quoteList(running))
	default:
		d.said += fmt.Sprintf(" The steps running now (%s) finish; their outcomes are recorded.", quoteList(running))
	}
	d.update.Events = append(d.update.Events, actionEvent("paused", pz.By, pz.Reason))
	if ev, ok := pauseEvent(p); ok && r.ev.pause != nil {
		// Push webhooks hear of it (paused.go); a pause a decision of
		// another event makes (heldByParent) is told by its pass 9.
		d.update.Events = append(d.update.Events, ev)
	}
}

// resume is the decision of a resume by by (see Resume): the step whose
// failure paused the workflow runs again, and the children the pause
// paused are resumed after the write. A child's resume (ev.parent set)
// applies only to a pause its parent's made; and no other resume lifts
// a child's pause, its own or its parent's, while the parent stays
// paused (ev.heldBy): a paused tree starts nothing.
func (r *record) resume(by string) {
	p, d := r.p, r.d
	if p.Paused == nil || r.ev.parent != "" && p.Paused.By != parentBy(r.ev.parent) {
		d.err = ErrNotPaused
		return
	}
	if held := r.ev.heldBy; r.ev.parent == "" && held != "" {
		// A paused tree starts nothing: a child is resumed only while
		// its parent is not paused, whoever paused it (simulation seeds
		// 18 and 86).
		if p.Paused.By == parentBy(held) {
			d.err = fmt.Errorf("%w: workflow task %s was paused with its parent, workflow task %s, which is still paused: resume the parent", taskrouter.ErrNotPausable, r.id, held)
		} else {
			d.err = fmt.Errorf("%w: the parent of workflow task %s, workflow task %s, is paused: resume the parent first, then this task (it stays paused by %s until then)", taskrouter.ErrNotPausable, r.id, held, p.Paused.By)
		}
		return
	}
	was := p.Paused
	p.Paused = nil
	d.said = fmt.Sprintf("Workflow task %s is resumed (it was paused by %s since %s).", r.id, was.By, stamp(was.At))
	if was.Step != "" {
		if sl := r.wf.slotAt(p, was.Step); sl != nil && sl.sp.Status == mcptask.StepFailed && !sl.sp.HandedToClient {
			sl.sp.Status, sl.sp.Error, sl.sp.GaveUp = mcptask.StepPending, "", false
			d.said += fmt.Sprintf(" Step %q, whose failure paused it, runs again.", was.Step)
		}
	}
	r.eachSlot(func(sl *slot) {
		if sl.sp.Child != "" && !sl.sp.ended() && !sl.sp.HandedToClient {
			r.effect(holdChild{id: sl.sp.Child, resume: by})
		}
	})
	p.refresh()
	p.PauseReason = pauseReason(r.wf, p)
	d.update.Events = []store.Event{actionEvent("resumed", by, "")}
}

// pauseErr maps what a pause's write can fail with to the errors callers
// tell apart.
func pauseErr(err error) error {
	switch {
	case errors.Is(err, errEnded):
		return fmt.Errorf("%w: the workflow task has ended", taskrouter.ErrNotPausable)
	case errors.Is(err, errTakenOver):
		return fmt.Errorf("the workflow task changed on another server process meanwhile; try again: %w", err)
	}
	return err
}

// Pause and Resume make the bridge's kind hooks a taskrouter.Pauser:
// Router.PauseTask, task_pause and task_resume reach a workflow task.

// Pause pauses workflow task t (see Bridge.Pause).
func (k kindHooks) Pause(ctx context.Context, t *store.Task, p taskrouter.PauseRequest) (*store.Task, string, error) {
	return k.b.Pause(ctx, t.ID, p)
}

// Resume resumes workflow task t (see Bridge.Resume).
func (k kindHooks) Resume(ctx context.Context, t *store.Task, by string) (*store.Task, string, error) {
	return k.b.Resume(ctx, t.ID, by)
}

var _ taskrouter.Pauser = kindHooks{}

// actionEvent is the event-log entry of an action on the task.
func actionEvent(action, by, reason string) store.Event {
	raw, _ := json.Marshal(mcptask.ActionEvent{Action: action, By: by, Reason: oneLine(reason)})
	return store.Event{Type: mcptask.EventAction, Data: raw}
}

// eachSlot calls f for every slot of the record: the steps' records and,
// at any depth, the records their containers keep, then the undo steps'
// (a pause holds the compensation as it holds the steps).
func (r *record) eachSlot(f func(sl *slot)) {
	for _, sl := range r.wf.slots(r.p) {
		f(sl)
	}
	if u := r.p.Undo; u != nil {
		for i := range u.Steps {
			if sl := r.wf.undoSlot(r.p, u.Steps[i].Name); sl != nil {
				f(sl)
			}
		}
	}
}

// pauseOnGiveUp pauses the workflow instead of failing it when the server
// gives up on slot sl with msg and the workflow has PauseOnFailure: it
// reports whether it did. It asks as giveUp does whether the failure
// would fail the workflow (the step's policy, its container's rules).
func (r *record) pauseOnGiveUp(sl *slot, msg string) bool {
	p, now := r.p, r.now
	if !r.wf.def.PauseOnFailure || p.Paused != nil {
		return false
	}
	s, sp := sl.s, sl.sp
	c := callOf(s)
	if c == nil {
		return false
	}
	fails := c.failurePolicy() == FailWorkflow
	parent := r.wf.parent[s.Name]
	if sl.parent != nil {
		parent = sl.parent.s
	}
	if parent != nil {
		failure, _, hold := parent.kind.memberGaveUp(parent, s, msg, fails)
		fails = failure != "" || hold
	}
	if !fails {
		return false
	}
	sp.RetryAt, sp.Tries = nil, 0
	sp.Status, sp.Error = mcptask.StepFailed, msg
	p.Paused = &Pause{By: PausedByServer, At: now, Step: sl.path,
		Reason: fmt.Sprintf("%s failed after %d attempt(s): %s; fix the cause and resume it to run the step again", toolLine(s), sp.Attempts, oneLine(msg))}
	return true
}

// pausedLine is the status line of a paused workflow, or of one waiting
// for its place on its queue; "" for neither.
func pausedLine(p *Progress) string {
	if pz := p.Paused; pz != nil {
		line := fmt.Sprintf("paused by %s since %s", pz.By, stamp(pz.At))
		if pz.Reason != "" {
			line += ": " + pz.Reason
		}
		if pz.Cut {
			line += " (the steps that were running were stopped; they run again on resume)"
		}
		var running []string
		for i := range p.Steps {
			if sp := &p.Steps[i]; sp.open() != nil {
				running = append(running, sp.Name)
			}
		}
		if len(running) > 0 {
			line += fmt.Sprintf("; step %s still running, its outcome is recorded", strings.Join(quoted(running), ", "))
		}
		return line
	}
	if p.Queue.waiting() {
		return queuedLine(nil, p.Queue)
	}
	return ""
}

func quoted(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("%q", n)
	}
	return out
}

// holdDoc adds to a handoff document what it says of a paused workflow:
// who paused it, and how to resume it. resumeTool names the tool that
// resumes a task ("" when the server has none).
func holdDoc(doc *handoff.Document, t *store.Task, p *Progress, resumeTool string) {
	pz := p.Paused
	if pz == nil || t.Status.Terminal() {
		return
	}
	hp := &handoff.Paused{By: pz.By, At: pz.At, Reason: pz.Reason, Step: pz.Step}
	if resumeTool != "" {
		hp.Do = fmt.Sprintf("it goes on when someone allowed to resumes it (tool %q with {\"task_id\": %q})", resumeTool, t.ID)
	} else {
		hp.Do = "it goes on when an operator resumes it"
	}
	doc.Paused = hp
}

// holdEntry adds to a remaining step's handoff entry what holds it: its
// wait for a place on its queue; and, while the workflow is paused, that
// nothing is to be called for it now.
func (v *view) holdEntry(sp *StepProgress, rs *handoff.RemainingStep) {
	if q := sp.Queue; q.waiting() {
		rs.Queue = &handoff.Queued{Queue: q.Queue, Key: q.Key, Ahead: q.Ahead, Why: q.Why, Since: q.Since}
		rs.Do = queuedDo(q)
	}
	if v.p.Paused != nil && !v.t.Status.Terminal() {
		rs.Call = nil
	}
}

// closeInterrupted records, in a paused workflow, the attempts a process
// that stopped left open (none of them runs here, and this process holds
// the lease): each ends as interrupted, and its step runs again on
// resume, as a step found running after a restart does. A pass of a
// decision (plan.go).
func (r *record) closeInterrupted() {
	if !r.leased {
		return // another process may run them
	}
	now := r.now
	r.eachSlot(func(sl *slot) {
		sp := sl.sp
		a := sp.open()
		if a == nil || r.here[sl.path] != 0 || callOf(sl.s) == nil {
			return // running here, or not a tool's attempt (a container's, a sleep's, a child's)
		}
		a.Outcome, a.Error = OutcomeError, "interrupted: the server stopped while the step ran; it runs again on resume"
		a.DurationMs = max(0, now.Sub(a.At).Milliseconds())
		sp.Interrupted++
		sp.Status = mcptask.StepPending
	})
}

// mayUndo reports whether the compensation may start its next undo step:
// not while the workflow is paused (the undo goes on at the resume; an
// undo attempt a stopped process left open is closed as interrupted, as
// a step's is). The pause pass of the undo (compensation.go).
func (r *record) mayUndo() bool {
	if r.p.Paused == nil {
		return true
	}
	r.closeInterrupted()
	return false
}

// running reports whether some step's record says it runs, an undo
// step's included.
func (p *Progress) running() bool {
	for i := range p.Steps {
		if p.Steps[i].Status == mcptask.StepRunning {
			return true
		}
	}
	if p.undoing() {
		for i := range p.Undo.Steps {
			if p.Undo.Steps[i].Status == mcptask.StepRunning {
				return true
			}
		}
	}
	return false
}
