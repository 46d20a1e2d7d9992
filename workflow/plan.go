package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The decision. A workflow task changes by events (event, effects.go: the
// outcomes of its steps' attempts, a timer or a kick, a recovery after a
// crash, a graceful stop, a pause, a resume, the answers of queues and
// child workflows). For each, decide takes the task's record (record: the
// task as stored, its progress, the version it runs on, and what
// the executor observes of this process), the event and the time, and
// returns the next progress (it moves the record's progress on, in place),
// the update to write with it, and the effects to carry out once that
// write is made (start or cut attempts, take or free queue places, start,
// look at, pause or resume children, tell the observer). decide is a
// function of the record and the event alone: it calls no store, queue,
// child or tool, starts nothing and takes no lock, and the same record
// and event decide the same. The instance writes
// what it decided once (instance.commit) and carries the effects out
// after the write, outside every lock (instance.carry); every effect is
// idempotent, and what a crash between the write and an effect loses the
// next decision asks for again (a step due, a child not yet read, a place
// not yet freed at a recovery). The answers of effects (a place granted, a
// child's state) come back as the next event.
//
// A decision applies its passes in this order, each policy in its file:
//
//  1. The event. Outcomes of attempts (attempt.go: the attempt budget,
//     counting every attempt, failures and timeouts against MaxAttempts);
//     the answers of queues (queue.go); a graceful stop hands every open
//     attempt back and decides nothing else (attempt.go); a pause or a
//     resume (pause.go), and a cancel (cancel.go), decide on their own.
//  2. Timeouts: the workflow's deadline (timerules.go).
//  3. Queues: the places of what ended, handed to the client or paused
//     are freed (queue.go).
//  4. Pause: a child whose parent is paused (read before the decision)
//     pauses with it; a paused workflow walks no step (pause.go).
//  5. Queues: the workflow's own place is taken before any step runs.
//  6. The walk: every step reached takes its turn, by its kind (kind.serve,
//     the kind's own pass: a tool step's attempt opens (attempt.go) once
//     its place is held, a sleep's timer, a child's start and reads
//     (kind_child.go)); client waits time out (timerules.go).
//  7. Undo: a failure with something to undo starts the compensation, and
//     the compensation runs its next undo step (compensation.go).
//  8. The end: the task fails, completes, or its undo ends; every place
//     it holds is freed, and no record is left running or waiting.
//  9. The write's rules: the lease given back when nothing runs, the
//     paused notice, and for every write (instance.write) the wake-up,
//     the expiry (ttl.go) and the status.
//
// docs/SEMANTICS.md says what each kind does under each event.

// record is what a decision reads and moves on. task, wf and the
// observations are read only; p, the progress, is moved on in place (the
// instance holds its write turn, and reloads the task when the write
// fails).
type record struct {
	id   string
	task *store.Task // the task as stored
	p    *Progress   // its progress, which the decision moves on
	wf   *compiled   // the version it runs on
	opts *Options
	now  time.Time
	ev   *occurrence // what the decision is about
	d    *decision

	// What the executor observes of this process.
	here    map[string]int // the attempts whose tool runs here now, by slot path
	leased  bool           // this process holds the task's lease: it may open attempts, and tells a cut attempt from a running one
	fenced  bool           // the lease is the store's (a shared store): a write gives it back
	written time.Time      // when this process last wrote the task
	queues  bool           // the engine keeps queues
	parent  *parentHold    // the pause of the task's parent, read before the decision (pause.go)
	// peer says whether the workflow's client can be sent a request of
	// method (reach: the engine reaches clients at all; refuses: the
	// client is connected and declared no capability for it).
	peer func(method string) (reach, refuses bool)
	// result renders the result of the task ending at p with status and
	// message (Bridge.resultJSON).
	result func(t *store.Task, p *Progress, status mcptask.Status, message string) (json.RawMessage, error)
}

// decision is what a decision decided: the update written with the
// record's progress, the effects carried out after the write, and an
// error: errNeedLease (take the lease, then decide again), errNoWrite
// (keep the change unwritten), errUnchanged (nothing to write; the effects
// still run), or a refusal (nothing is written).
type decision struct {
	update  store.Update
	err     error
	effects []effect
	start   []string // the slots whose attempts the write opens (their start effects)
	said    string   // what a pause or a resume says to whoever asked for it
}

// vars reads task variables for TaskVar sources.
func (r *record) vars(name string) (json.RawMessage, bool) { return userVar(name, r.task.Variables) }

// resolver reads sources for a record with item.
func (r *record) resolver(item json.RawMessage) *resolver {
	return &resolver{w: r.wf.def, vars: r.vars, item: item}
}

// effect adds e to the decision's effects.
func (r *record) effect(e effect) { r.d.effects = append(r.d.effects, e) }

// notice tells the observer of the slot's last attempt, after the write.
func (r *record) notice(sl *slot) {
	if e, ok := observed(r.id, r.p, sl, nil); ok && r.opts.Observer != nil {
		r.effect(noticeStep{e})
	}
}

// turn is a slot's turn in a decision: what its kind's serve works with
// (s and sp are the slot's step and record).
type turn struct {
	r      *record
	p      *Progress
	sl     *slot
	s      *Step
	sp     *StepProgress
	now    time.Time
	reason string // why steps that ran before run again (ReasonRestart, ReasonTakeover, ReasonResume, ReasonTimeout)
}

// newTurn is the turn of slot sl.
func (r *record) newTurn(sl *slot, reason string) *turn {
	return &turn{r: r, p: r.p, sl: sl, s: sl.s, sp: sl.sp, now: r.now, reason: reason}
}

// sub is the turn of sl, a record x's container holds.
func (x *turn) sub(sl *slot) *turn { return x.r.newTurn(sl, x.reason) }

// attempt runs the slot's tool: an attempt opens (its tool starts after
// the write), or the step waits for its retry or its place, or runs here
// already. It returns a failure that ends the workflow, or "".
func (x *turn) attempt() string { return x.r.runnable(x.sl, x.reason) }

// value reads src against the progress, the task's variables and the
// slot's item.
func (x *turn) value(src Source) (json.RawMessage, error) {
	return x.resolver().value(x.p, src)
}

// resolver reads sources for the slot.
func (x *turn) resolver() *resolver { return x.r.resolver(x.sl.item) }

// emit tells the observer of the slot's last attempt.
func (x *turn) emit() { x.r.notice(x.sl) }

// decide is the decision of event ev on record r (see the top of this
// file): it moves r.p on and returns the update and the effects.
func decide(r *record, ev *occurrence) decision {
	var d decision
	r.ev, r.d = ev, &d
	switch {
	case ev.stop:
		r.handBackAll() // attempt.go
		return d
	case ev.pause != nil:
		r.pause(ev.pause) // pause.go
		return d
	case ev.resume != "":
		r.resume(ev.resume) // pause.go
		return d
	}
	r.plan()
	return d
}

// plan applies the passes 1 to 9 (see the top of this file) for an event
// that moves the workflow on: outcomes, a timer, a kick, a recovery, the
// answers of effects.
//
// The steps are walked in order. Ended steps are passed; a step that needs
// a skipped step's output is skipped; a client step is reached (the client
// may perform it, and consecutive client steps in any order) and the walk
// goes on; a step handed to the client, or a server step, ends the walk:
// nothing after it may run before it ends.
func (r *record) plan() {
	p, wf, now, d := r.p, r.wf, r.now, r.d
	quick := r.opts.ProgressInterval > 0 && len(r.ev.results) > 0 && now.Sub(r.written) < r.opts.ProgressInterval
	var failure string
	applied := false
	for _, res := range r.ev.results { // 1. outcomes (attempt.go)
		ok, fails := r.outcome(res)
		if !ok {
			continue
		}
		applied = true
		quick = quick && res.msg == "" && callOf(wf.slotAt(p, res.step).s).retryable
		if fails != "" && failure == "" {
			failure = fails
		}
	}
	applied = r.answered() || applied // 1. queue answers (queue.go)
	// A decision that applied no outcome may change nothing: keep p as it
	// was to tell (an applied outcome always changes the step it ends).
	var before []byte
	if !applied {
		before, _ = json.Marshal(p)
	}
	if failure == "" && !p.undoing() {
		failure = p.pastDeadline(wf.def, now) // 2. timeouts
	}
	r.heldByParent()    // 4. pause: a child of a paused parent pauses with it
	r.freePlaces(false) // 3. places of what ended first, for what waits for them
	if lostPlaces(r.task, p, r.ev.reason, now) {
		r.freeLost() // 3. places a stopped process may not have freed
	}
	if failure == "" && !p.undoing() && r.mayWalk() { // 4. pause, 5. the workflow's place
		failure = r.walk() // 6. the walk
	}
	if failure != "" && !p.undoing() && r.startUndo(failure) { // 7. undo
		d.start, failure = nil, "" // what it did is undone first (compensation.go)
	}
	if p.undoing() {
		failure = r.compensate()
	}
	p.refresh()
	r.freePlaces(failure != "" || p.done()) // 8. the end
	if r.ending(failure) {
		return
	}
	if len(d.start) > 0 && !r.leased {
		d.err = errNeedLease
		return
	}
	for _, path := range d.start {
		sl := wf.slotAt(p, path)
		sl.sp.Status = mcptask.StepRunning
		sl.sp.RetryAt = nil
		r.effect(startAttempt{path: path, n: sl.sp.open().N})
	}
	p.PauseReason = pauseReason(wf, p) // 9. the write's rules
	if r.fenced && len(d.start) == 0 && len(r.here) == 0 && !waitSoon(p, now) {
		d.update.ReleaseLease = true
	}
	if ev, ok := pausedEvent(r.task, p, len(d.start)+len(r.here)); ok {
		d.update.Events = append(d.update.Events, ev)
	}
	if before != nil && !d.update.ReleaseLease && len(d.start) == 0 && r.task.Status == wantStatus(r.task, p) && !staleWake(r.task, p, now) {
		if after, _ := json.Marshal(p); bytes.Equal(before, after) {
			d.err = errUnchanged // nothing new to record
			return
		}
	}
	if !applied && len(d.start) == 0 && !d.update.ReleaseLease && len(d.update.Events) == 0 && r.task.Status == wantStatus(r.task, p) && asksOnly(d.effects) {
		// Its only news is a question (a queue's place, a child): the
		// decision of the answer, which follows at once, writes it with
		// what it changed; a stop before then asks again.
		d.err = errNoWrite
		return
	}
	if quick && len(d.start) > 0 {
		allRetryable := true
		for _, path := range d.start {
			allRetryable = allRetryable && callOf(wf.slotAt(p, path).s).retryable
		}
		if allRetryable {
			d.err = errNoWrite
		}
	}
}

// asksOnly reports whether every effect of a decision (at least one) is a
// question whose answer is the next decision's event: a queue asked for a
// place, a child started or read.
func asksOnly(effects []effect) bool {
	for _, e := range effects {
		switch e.(type) {
		case takePlace, startChild, readChild:
		default:
			return false
		}
	}
	return len(effects) > 0
}

// walk moves p forward stage by stage (a step alone is a stage, a
// container's members are one). A stage's steps that need a skipped
// step's output, or whose condition does not hold, are skipped. Its
// client-side steps are reached: the client may perform them (a client
// step, an event) and, through consecutive client stages, in any order.
// Its server-side steps run, unless a client step of an earlier stage is
// not done yet: the server waits for every stage before its own. A stage
// that has not ended and holds a server-side step, or a step handed to
// the client, holds back every later stage. It returns a failure that
// ends the workflow, or "".
func (r *record) walk() string {
	p, wf := r.p, r.wf
	waits := false // a client step of an earlier stage is not done
	for stage, members := range wf.stages {
		blocks := false
		for _, i := range members {
			s, sp := wf.steps[i], &p.Steps[i]
			if sp.ended() || sp.GaveUp {
				continue
			}
			if why := r.skipReason(s, waits); why != "" {
				sp.Status, sp.SkipReason = mcptask.StepSkipped, why
				sp.RetryAt, sp.ReachedAt, sp.Deadline, sp.Early = nil, nil, nil, nil
				continue
			}
			why := r.ev.reason
			if clientSide(s, sp) {
				failure, back := reach(p, s, sp, r.now)
				switch {
				case failure != "":
					return failure
				case sp.ended():
					continue // skipped (its wait ran out), or ended on arrival
				case !back:
					// A server step handed to the client holds back what
					// follows; a step the client performs by design does
					// not.
					blocks = blocks || s.kind.execution() == mcptask.ExecServer
					continue
				}
				why = ReasonTimeout
			}
			blocks = true
			if waits {
				continue // the server waits for the client's earlier step
			}
			if failure := s.kind.serve(r.newTurn(wf.slotOf(p, i), why)); failure != "" {
				return failure
			}
		}
		open, gaveUp := false, []string{}
		for _, i := range members {
			switch sp := &p.Steps[i]; {
			case sp.GaveUp:
				gaveUp = append(gaveUp, fmt.Sprintf("%s: %s", toolLine(wf.steps[i]), oneLine(sp.Error)))
			case !sp.ended():
				open = true
			}
		}
		switch {
		case !open && len(gaveUp) > 0:
			parent := wf.container[stage]
			return parent.kind.stageFailed(parent, gaveUp)
		case !open:
			continue
		case blocks || len(gaveUp) > 0:
			return ""
		}
		waits = true
	}
	return ""
}

// ending decides the write that ends the task at p, when it ends: its
// failure, the end of a cancelled task's undo, or its completion. It
// reports whether it does. A task that ends leaves no record running or
// waiting (closeRecords). A workflow ends with a tool result, isError when
// it failed (resultJSON): tasks/result answers it, never a JSON-RPC
// error.
func (r *record) ending(failure string) bool {
	p, d := r.p, r.d
	end := func(status mcptask.Status, msg, why string) {
		p.PauseReason = msg
		closeRecords(p, r.now, why, false) // its places are freed by this decision (pass 8)
		raw, err := r.result(r.task, p, status, msg)
		if err != nil {
			d.err = err
			return
		}
		d.update = store.Update{Status: status, Result: raw, StatusMessage: &p.PauseReason}
	}
	failed := func(msg string) {
		end(mcptask.StatusFailed, msg, "the workflow failed before it ended")
		d.start = nil
	}
	completed := func(msg string) { end(mcptask.StatusCompleted, msg, "the workflow ended before it ran") }
	switch {
	case failure != "":
		failed(failure)
	case p.undoing() && p.Undo.Done && p.Undo.undoFailed(): // the undo of a cancelled task ended
		failed(undoneMessage(p.Undo))
	case p.undoing() && p.Undo.Done:
		completed(undoneMessage(p.Undo))
	case !p.undoing() && p.done():
		completed(completedMessage(p))
	default:
		return false
	}
	return true
}

// closeRecords closes every record of a task that ends (p) that has not
// ended: an open attempt ends cancelled, and a record still running or
// waiting (for the client, an event, a child, the clock, a place) is
// recorded cancelled with why; a record the server gave up on stays
// failed. Nothing of an ended task reads as running or waiting, whoever
// ended it: the decision's end (ending), the engine's (a cancel, an
// expiry: kindHooks.EndWrite) or the last resort's (failTask). A place
// still waited for is forgotten, unless keepPlaces: the end's effects
// give the places up after the write (ended), reading them there.
func closeRecords(p *Progress, now time.Time, why string, keepPlaces bool) {
	walkRecords(p, func(sp *StepProgress) {
		if a := sp.open(); a != nil {
			a.Outcome, a.Error = OutcomeCancelled, why
			a.DurationMs = max(0, now.Sub(a.At).Milliseconds())
		}
		if sp.ended() {
			return // what it recorded stays (a sleep's end, say)
		}
		switch sp.Status {
		case mcptask.StepRunning, mcptask.StepAwaitingClient, mcptask.StepAwaitingEvent, mcptask.StepAwaitingChild, mcptask.StepSleeping:
			if failedRecord(sp) {
				sp.Status = mcptask.StepFailed // a container whose record failed: it failed
				break
			}
			sp.Status, sp.SkipReason = mcptask.StepCancelled, why
		}
		sp.RetryAt, sp.Until, sp.Deadline = nil, nil, nil
		if sp.Queue.waiting() && !keepPlaces {
			sp.Queue = nil
		}
	})
	if p.Queue.waiting() && !keepPlaces {
		p.Queue = nil
	}
}

// failedRecord reports whether a record a container keeps (at any
// depth) failed.
func failedRecord(sp *StepProgress) bool {
	for i := range sp.Items {
		if r := &sp.Items[i]; r.Status == mcptask.StepFailed || r.GaveUp || failedRecord(r) {
			return true
		}
	}
	return false
}

// skipReason says why step s will not run, or "": it needs the output of a
// skipped step (for what it reads, or its condition), or its condition
// does not hold. A condition is judged once the step's stage is reached
// (for a server step, once no earlier client step waits).
func (r *record) skipReason(s *Step, waits bool) string {
	res := r.resolver(nil)
	if waits && !clientSide(s, r.p.step(s.Name)) {
		return skipInput(res.w, r.p, s) // the condition waits too
	}
	return res.skipReason(r.p, s)
}

// clientSide reports whether the client performs step s now: its kind
// says so (a client step, unless the server took it over; an event), or
// the server gave up on it and handed it over.
func clientSide(s *Step, sp *StepProgress) bool {
	return sp.HandedToClient || s.kind.clientSide(sp)
}

// waitSoon reports whether a retry is due within inProcessWait, which the
// drive loop waits for holding the lease.
func waitSoon(p *Progress, now time.Time) bool {
	for i := range p.Steps {
		if at := p.Steps[i].RetryAt; at != nil && !p.Steps[i].ended() && at.Sub(now) < inProcessWait {
			return true
		}
	}
	return false
}

// reached reports whether step i is reached for the client: every stage
// before its own has ended, or holds only steps the client may perform
// (the client performs consecutive client steps in any order).
func reached(wf *compiled, p *Progress, i int) bool {
	for j := range p.Steps[:i] {
		if wf.stage[j] == wf.stage[i] {
			break
		}
		sp, s := &p.Steps[j], wf.steps[j]
		if sp.ended() || (clientSide(s, sp) && !sp.HandedToClient) {
			continue
		}
		return false
	}
	return true
}

// markReached marks the client steps now reached as waiting for the
// client (starting their waits), as plan does, without running anything:
// a continuation records the next client steps with its own outcome.
func markReached(wf *compiled, p *Progress, now time.Time) {
	for i, s := range wf.steps {
		sp := &p.Steps[i]
		if sp.ended() || !reached(wf, p, i) {
			continue
		}
		if clientSide(s, sp) {
			markStep(p, s, sp, now)
		}
	}
}

// markStep marks a reached client-side step as waiting for the client:
// its kind may end it on arrival (an event delivered early), or its wait
// starts.
func markStep(p *Progress, s *Step, sp *StepProgress, now time.Time) {
	if !sp.HandedToClient && sp.Status == mcptask.StepPending {
		sp.Status = s.kind.awaiting()
	}
	if s.kind.onReach(p, s, sp, now) {
		return
	}
	startWait(s, sp, now)
}

// reach marks a client-side step as waiting for the client, starting its
// wait, and applies its timeout when the wait has run out: it returns a
// failure that ends the workflow (TimeoutFail), or reports that the
// server takes the step back (TimeoutServer); a step skipped by
// TimeoutSkip, or ended on arrival, is ended.
func reach(p *Progress, s *Step, sp *StepProgress, now time.Time) (failure string, back bool) {
	markStep(p, s, sp, now)
	if sp.ended() {
		return "", false
	}
	w := waitOf(s)
	if sp.Deadline != nil && w.max <= 0 {
		sp.Deadline = nil // a deadline the definition does not set: a damaged record
	}
	if sp.Deadline == nil || now.Before(*sp.Deadline) {
		return "", false
	}
	why := fmt.Sprintf("%s within %s", s.kind.missed(s), w.max)
	switch w.policy() {
	case TimeoutSkip:
		sp.Status, sp.SkipReason = mcptask.StepSkipped, why
		sp.ReachedAt, sp.Deadline = nil, nil
		return "", false
	case TimeoutServer:
		sp.HandedToClient, sp.ReachedAt, sp.Deadline = false, nil, nil
		sp.Status, sp.Tries = mcptask.StepPending, 0
		s.kind.takeBack(sp)
		return "", true
	}
	return why + "; the workflow failed", false
}

// skipInput says why s cannot run because a step whose output it needs
// (for what it reads) was skipped, or "".
func skipInput(w *Definition, p *Progress, s *Step) string {
	for _, r := range s.kind.reads() {
		if skippedOutput(w, p, r.src) {
			return fmt.Sprintf("it needs the output of step %q, which was skipped", w.producer(r.src.Name).Name)
		}
	}
	return ""
}

// skippedOutput reports whether src reads the output of a skipped step.
func skippedOutput(w *Definition, p *Progress, src Source) bool {
	if src.Kind != SourceStepOutput {
		return false
	}
	from := w.producer(src.Name)
	if from == nil {
		return false
	}
	sp := p.step(from.Name)
	return sp != nil && (sp.Status == mcptask.StepSkipped || sp.Status == mcptask.StepCancelled)
}
