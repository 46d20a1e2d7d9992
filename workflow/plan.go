package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// A pass of the drive loop (drive.go) plans in this file: it applies the
// outcomes that came in, walks the steps in order (reached, skipped,
// handed to the client, due to start, given up) and decides the one write
// of the pass and the tools it starts. What a step does when its turn
// comes is its kind's (kind.serve); this file names no kind.

// plan is what one pass decided.
type plan struct {
	update store.Update
	err    error
	start  []string // the slots (paths) whose attempts the write opens
}

// turn is a slot's turn in a pass: what its kind's serve works with (s
// and sp are the slot's step and record).
type turn struct {
	in     *instance
	p      *Progress
	sl     *slot
	s      *Step
	sp     *StepProgress
	now    time.Time
	reason string // why steps that ran before run again (ReasonRestart, ReasonResume, ReasonTimeout)
	pl     *plan
}

// newTurn is the turn of slot sl in a pass.
func (in *instance) newTurn(p *Progress, sl *slot, now time.Time, reason string, pl *plan) *turn {
	return &turn{in: in, p: p, sl: sl, s: sl.s, sp: sl.sp, now: now, reason: reason, pl: pl}
}

// sub is the turn of sl, a record x's container holds.
func (x *turn) sub(sl *slot) *turn { return x.in.newTurn(x.p, sl, x.now, x.reason, x.pl) }

// attempt runs the slot's tool: an attempt opens (its tool starts after
// the pass's write), or the step waits for its retry, or runs here
// already. It returns a failure that ends the workflow, or "".
func (x *turn) attempt() string { return x.in.runnable(x.p, x.sl, x.now, x.reason, x.pl) }

// running reports whether the slot's tool runs here now.
func (x *turn) running() bool { return x.in.running[x.sl.path] != nil }

// value reads src against the progress, the task's variables and the
// slot's item.
func (x *turn) value(src Source) (json.RawMessage, error) {
	return x.resolver().value(x.p, src)
}

// resolver reads sources for the slot.
func (x *turn) resolver() *resolver {
	return &resolver{w: x.in.wf.def, vars: x.in.vars, item: x.sl.item}
}

// emit reports the slot's last attempt to the observer.
func (x *turn) emit() { emit(x.in.b.opts.Observer, x.in.id, x.p, x.sl, nil) }

// plan applies the outcomes to p, then moves p forward: steps reached,
// retries and waits whose time came, the end of the workflow. It decides
// the write (status, result, lease release) and which tools to start.
//
// The steps are walked in order. Ended steps are passed; a step that needs
// a skipped step's output is skipped; a client step is reached (the client
// may perform it, and consecutive client steps in any order) and the walk
// goes on; a step handed to the client, or a server step, ends the walk:
// nothing after it may run before it ends.
func (in *instance) plan(p *Progress, results []stepResult, reason string) plan {
	b, wf := in.b, in.wf
	now := b.engine.Now()
	var pl plan
	quick := b.opts.ProgressInterval > 0 && len(results) > 0 && now.Sub(in.written) < b.opts.ProgressInterval
	var failure string
	applied := false
	for _, r := range results {
		ok, fails := in.record(p, r, now)
		if !ok {
			continue
		}
		applied = true
		quick = quick && r.msg == "" && callOf(wf.slotAt(p, r.step).s).retryable
		if fails != "" && failure == "" {
			failure = fails
		}
	}
	// A pass that applied no outcome may change nothing: keep p as it was
	// to tell (an applied outcome always changes the step it ends).
	var before []byte
	if !applied {
		before, _ = json.Marshal(p)
	}
	if failure == "" && !p.undoing() {
		failure = p.pastDeadline(wf.def, now)
	}
	in.freePlaces(p, now, false) // places of what ended first, for what waits for them (queue.go)
	if failure == "" && !p.undoing() && in.mayWalk(p, now) {
		failure = in.walk(p, now, reason, &pl)
	}
	if failure != "" && !p.undoing() && in.startUndo(p, failure) {
		pl.start, failure = nil, "" // what it did is undone first (compensation.go)
	}
	if p.undoing() {
		failure = in.compensate(p, now, &pl)
	}
	p.refresh()
	in.freePlaces(p, now, failure != "" || p.done())
	if in.ending(p, failure, &pl) {
		return pl
	}
	if len(pl.start) > 0 && in.lease == nil {
		pl.err = errNeedLease
		return pl
	}
	for _, path := range pl.start {
		sp := wf.slotAt(p, path).sp
		sp.Status = mcptask.StepRunning
		sp.RetryAt = nil
	}
	p.PauseReason = pauseReason(wf, p)
	if in.lease != nil && in.lease.Held() && len(pl.start) == 0 && len(in.running) == 0 && !waitSoon(p, now) {
		pl.update.ReleaseLease = true
	}
	if ev, ok := pausedEvent(in.task, p, len(pl.start)+len(in.running)); ok {
		pl.update.Events = append(pl.update.Events, ev)
	}
	if before != nil && !pl.update.ReleaseLease && len(pl.start) == 0 && in.task.Status == wantStatus(in.task, p) {
		if after, _ := json.Marshal(p); bytes.Equal(before, after) {
			pl.err = errUnchanged // nothing new to record
			return pl
		}
	}
	if quick && len(pl.start) > 0 {
		allRetryable := true
		for _, path := range pl.start {
			allRetryable = allRetryable && callOf(wf.slotAt(p, path).s).retryable
		}
		if allRetryable {
			pl.err = errNoWrite
		}
	}
	return pl
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
func (in *instance) walk(p *Progress, now time.Time, reason string, pl *plan) string {
	wf := in.wf
	waits := false // a client step of an earlier stage is not done
	for stage, members := range wf.stages {
		blocks := false
		for _, i := range members {
			s, sp := wf.steps[i], &p.Steps[i]
			if sp.ended() || sp.GaveUp {
				continue
			}
			if why := in.skipReason(p, s, waits); why != "" {
				sp.Status, sp.SkipReason = mcptask.StepSkipped, why
				sp.RetryAt, sp.ReachedAt, sp.Deadline, sp.Early = nil, nil, nil, nil
				continue
			}
			why := reason
			if clientSide(s, sp) {
				failure, back := in.reach(p, s, sp, now)
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
			x := in.newTurn(p, wf.slotOf(p, i), now, why, pl)
			if failure := s.kind.serve(x); failure != "" {
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
// reports whether it does.
func (in *instance) ending(p *Progress, failure string, pl *plan) bool {
	// A workflow ends with a tool result, isError when it failed
	// (resultJSON): tasks/result answers it, never a JSON-RPC error.
	end := func(status mcptask.Status, msg string) {
		p.PauseReason = msg
		raw, err := in.b.resultJSON(in.task, p, status, msg)
		if err != nil {
			pl.err = err
			return
		}
		pl.update = store.Update{Status: status, Result: raw, StatusMessage: &p.PauseReason}
	}
	failed := func(msg string) {
		end(mcptask.StatusFailed, msg)
		pl.start = nil
	}
	completed := func(msg string) { end(mcptask.StatusCompleted, msg) }
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

// skipReason says why step s will not run, or "": it needs the output of a
// skipped step (for what it reads, or its condition), or its condition
// does not hold. A condition is judged once the step's stage is reached
// (for a server step, once no earlier client step waits).
func (in *instance) skipReason(p *Progress, s *Step, waits bool) string {
	r := &resolver{w: in.wf.def, vars: in.vars}
	if waits && !clientSide(s, p.step(s.Name)) {
		return skipInput(r.w, p, s) // the condition waits too
	}
	return r.skipReason(p, s)
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
func (in *instance) reach(p *Progress, s *Step, sp *StepProgress, now time.Time) (failure string, back bool) {
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
