package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// A pass of the drive loop (drive.go) plans in this file: it applies the
// outcomes that came in, walks the steps in order (reached, skipped,
// handed to the client, due to start, given up) and decides the one write
// of the pass and the tools it starts.

// plan is what one pass decided.
type plan struct {
	update store.Update
	err    error
	start  []string // steps whose attempts the write opens
}

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
		s := wf.byName[r.step]
		ok, fails := in.record(p, s, r, now)
		if !ok {
			continue
		}
		applied = true
		quick = quick && r.msg == "" && s.Retryable
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
	if failure == "" {
		failure = in.walk(p, now, reason, &pl)
	}
	p.refresh()
	switch {
	case failure != "":
		p.PauseReason = failure
		pl.update = store.Update{Status: store.StatusFailed, StatusMessage: &failure,
			Error: &store.ErrorInfo{Code: mcptask.CodeInternalError, Message: failure}}
		pl.start = nil
		return pl
	case p.done():
		p.PauseReason = completedMessage(p)
		raw, err := b.resultJSON(in.task, p)
		if err != nil {
			pl.err = err
			return pl
		}
		pl.update = store.Update{Status: store.StatusCompleted, Result: raw, StatusMessage: &p.PauseReason}
		return pl
	}
	if len(pl.start) > 0 && in.lease == nil {
		pl.err = errNeedLease
		return pl
	}
	for _, name := range pl.start {
		sp := p.step(name)
		sp.Status = StepRunning
		sp.RetryAt = nil
	}
	p.PauseReason = pauseReason(wf, p)
	if in.lease != nil && in.lease.Held() && len(pl.start) == 0 && len(in.running) == 0 && !waitSoon(p, now) {
		pl.update.ReleaseLease = true
	}
	if before != nil && !pl.update.ReleaseLease && len(pl.start) == 0 && in.task.Status == wantStatus(in.task, p) {
		if after, _ := json.Marshal(p); bytes.Equal(before, after) {
			pl.err = errUnchanged // nothing new to record
			return pl
		}
	}
	if quick && len(pl.start) > 0 {
		allRetryable := true
		for _, name := range pl.start {
			allRetryable = allRetryable && wf.byName[name].Retryable
		}
		if allRetryable {
			pl.err = errNoWrite
		}
	}
	return pl
}

// walk moves p forward stage by stage (a step alone is a stage, a
// group's members are one). A stage's steps that need a skipped step's
// output, or whose condition does not hold, are skipped. Its client-side
// steps are reached: the client may perform them (a client step, an event)
// and, through consecutive client stages, in any order. Its server-side
// steps run, unless a client step of an earlier stage is not done yet: the
// server waits for every stage before its own. A stage that has not ended
// and holds a server-side step, or a step handed to the client, holds back
// every later stage. It returns a failure that ends the workflow, or "".
func (in *instance) walk(p *Progress, now time.Time, reason string, pl *plan) string {
	wf := in.wf
	waits := false // a client step of an earlier stage is not done
	for _, members := range wf.stages {
		blocks := false
		for _, i := range members {
			s, sp := wf.steps[i], &p.Steps[i]
			if sp.ended() || sp.GaveUp {
				continue
			}
			if why := in.skipReason(p, s, waits); why != "" {
				sp.Status, sp.SkipReason = StepSkipped, why
				sp.RetryAt, sp.ReachedAt, sp.Deadline = nil, nil, nil
				continue
			}
			why := reason
			if clientSide(s, sp) {
				failure, back := in.reach(s, sp, now)
				switch {
				case failure != "":
					return failure
				case sp.ended():
					continue // skipped: its wait ran out
				case !back:
					blocks = blocks || sp.HandedToClient
					continue
				}
				why = ReasonTimeout
			}
			blocks = true
			if waits {
				continue // the server waits for the client's earlier step
			}
			if failure := in.serve(p, s, sp, now, why, pl); failure != "" {
				return failure
			}
		}
		open, gaveUp := false, []string{}
		for _, i := range members {
			switch sp := &p.Steps[i]; {
			case sp.GaveUp:
				gaveUp = append(gaveUp, fmt.Sprintf("step %q (tool %q): %s", sp.Name, sp.Tool, oneLine(sp.Error)))
			case !sp.ended():
				open = true
			}
		}
		switch {
		case !open && len(gaveUp) > 0:
			return fmt.Sprintf("group %q failed: %s; the workflow failed", wf.groupOf[wf.steps[members[0]].Name].Name, strings.Join(gaveUp, "; "))
		case !open:
			continue
		case blocks || len(gaveUp) > 0:
			return ""
		}
		waits = true
	}
	return ""
}

// skipReason says why step s will not run, or "": it needs the output of a
// skipped step (for its arguments, its condition or its sleep), or its
// condition does not hold. A condition is judged once the step's stage is
// reached (for a server step, once no earlier client step waits).
func (in *instance) skipReason(p *Progress, s *Step, waits bool) string {
	if waits && !clientSide(s, p.step(s.Name)) {
		return skipInput(in.wf.def, p, s) // the condition waits too
	}
	return (&runner{wf: in.wf.def, vars: in.vars}).skipReason(p, s)
}

// serve does the server's part of step s, reached: a tool step runs (or
// waits for its retry), a sleep starts or ends. It returns a failure that
// ends the workflow, or "".
func (in *instance) serve(p *Progress, s *Step, sp *StepProgress, now time.Time, reason string, pl *plan) string {
	if s.kind() == KindSleep {
		return in.sleep(p, s, sp, now)
	}
	return in.runnable(p, s, sp, now, reason, pl)
}

// clientSide reports whether the client performs step s now: a client
// step (unless the server took it back), an event, or a server step
// handed to the client.
func clientSide(s *Step, sp *StepProgress) bool {
	return (s.execution() == ClientDeferred && !sp.ServerTakeover) || sp.HandedToClient
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
			markStep(s, sp, now)
		}
	}
}

// markStep marks a reached client-side step as waiting for the client and
// starts its wait.
func markStep(s *Step, sp *StepProgress, now time.Time) {
	if !sp.HandedToClient && sp.Status == StepPending {
		sp.Status = StepAwaitingClient
		if s.kind() == KindEvent {
			sp.Status = StepAwaitingEvent
		}
	}
	if sp.ReachedAt == nil {
		at := now
		sp.ReachedAt = &at
		if s.ClientWait > 0 {
			end := now.Add(s.ClientWait)
			sp.Deadline = &end
		}
	}
}

// reach marks a client step (or a server step handed to the client) as
// waiting for the client, starting its wait, and applies its timeout when
// the wait has run out: it returns a failure that ends the workflow
// (TimeoutFail), or reports that the server takes the step back
// (TimeoutServer); a step skipped by TimeoutSkip is ended.
func (in *instance) reach(s *Step, sp *StepProgress, now time.Time) (failure string, back bool) {
	markStep(s, sp, now)
	if sp.Deadline != nil && s.ClientWait <= 0 {
		sp.Deadline = nil // a deadline the definition does not set: a damaged record
	}
	if sp.Deadline == nil || now.Before(*sp.Deadline) {
		return "", false
	}
	what := fmt.Sprintf("the client did not perform step %q (tool %q)", s.Name, s.Tool)
	if s.kind() == KindEvent {
		what = fmt.Sprintf("the event of step %q did not arrive", s.Name)
	}
	why := fmt.Sprintf("%s within %s", what, s.ClientWait)
	switch s.timeoutPolicy() {
	case TimeoutSkip:
		sp.Status, sp.SkipReason = StepSkipped, why
		sp.ReachedAt, sp.Deadline = nil, nil
		return "", false
	case TimeoutServer:
		sp.HandedToClient, sp.ReachedAt, sp.Deadline = false, nil, nil
		sp.ServerTakeover = s.execution() == ClientDeferred
		sp.Status, sp.Tries = StepPending, 0
		return "", true
	}
	return why + "; the workflow failed", false
}

// runnable decides what happens to the server step s, the first step not
// done: it runs (an attempt is opened), it waits for its retry, or it runs
// here already. A step found running that does not run here was cut short
// by a process that stopped: it runs again. It returns a failure that ends
// the workflow, or "".
func (in *instance) runnable(p *Progress, s *Step, sp *StepProgress, now time.Time, reason string, pl *plan) string {
	if in.running[s.Name] != nil {
		return "" // runs here now
	}
	interrupted := false
	if a := sp.open(); a != nil {
		if in.lease == nil {
			pl.start = append(pl.start, s.Name)
			return "" // only the lease holder may tell a cut attempt from a running one
		}
		a.Outcome, a.Error = OutcomeError, "interrupted: the server stopped while the step ran"
		a.DurationMs = max(0, now.Sub(a.At).Milliseconds())
		sp.Interrupted++
		if sp.Interrupted > maxInterrupted {
			msg := fmt.Sprintf("the server stopped %d times in a row while running this step", sp.Interrupted)
			sp.Interrupted = 0
			return in.giveUp(s, sp, msg)
		}
		interrupted = true
	}
	if sp.RetryAt != nil && now.Before(*sp.RetryAt) && !interrupted {
		return "" // the scheduler (or the drive loop) wakes the task then
	}
	if in.lease == nil {
		pl.start = append(pl.start, s.Name)
		return "" // plan asks for the lease first
	}
	switch {
	case interrupted:
		reason = ReasonRestart
	case reason == ReasonTimeout:
	case sp.Attempts == 0:
		reason = ReasonFirst
	case reason == ReasonResume, reason == ReasonRestart:
	default:
		reason = ReasonRetry
	}
	sp.begin(reason, ByServer, now)
	if !interrupted {
		sp.Tries++
	}
	if sp.IdempotencyKey == "" {
		sp.IdempotencyKey = idempotencyKey(in.id, s.Name)
	}
	pl.start = append(pl.start, s.Name)
	return ""
}

// maxInterrupted bounds how many times in a row a step may be cut short by
// the server stopping before the engine stops running it (a tool that
// crashes the process must not crash it forever).
const maxInterrupted = 3

// record applies the outcome r of a server step's attempt to p. It
// reports false when r no longer applies (its attempt is not the open
// one), and the failure that ends the workflow when the server gave up on
// a FailWorkflow step.
func (in *instance) record(p *Progress, s *Step, r stepResult, now time.Time) (applied bool, failure string) {
	sp := p.step(r.step)
	if s == nil || sp == nil {
		return false, ""
	}
	if a := sp.open(); a == nil || a.N != r.attempt {
		return false, ""
	}
	sp.Interrupted = 0
	if r.msg == "" {
		complete(p, s, ByServer, r.args, r.res, now)
		sp.Tries, sp.RetryAt = 0, nil
		emit(in.b.opts.Observer, in.id, p, s, nil)
		return true, ""
	}
	fail(p, s, ByServer, r.msg, now)
	emit(in.b.opts.Observer, in.id, p, s, nil)
	if pol := s.policy(); !r.final && sp.Tries < pol.MaxAttempts {
		at := now.Add(pol.backoff(sp.Tries + 1))
		sp.RetryAt = &at
		return true, ""
	}
	return true, in.giveUp(s, sp, r.msg)
}

// giveUp applies s's failure policy once the server gives up on it: the
// step is handed to the client, or the workflow fails (the returned
// message). In a group that fails fast, the workflow fails at once; in one
// that collects, a step whose failure fails the workflow waits for the
// group's other steps to end (GaveUp).
func (in *instance) giveUp(s *Step, sp *StepProgress, msg string) string {
	sp.RetryAt, sp.Tries = nil, 0
	if g := in.wf.groupOf[s.Name]; g != nil && g.FailFast {
		return fmt.Sprintf("step %q (tool %q) of group %q failed: %s; the group fails fast, so the workflow failed", s.Name, s.Tool, g.Name, oneLine(msg))
	}
	if s.failurePolicy() == FailWorkflow {
		if in.wf.groupOf[s.Name] != nil {
			sp.GaveUp, sp.Status, sp.Error = true, StepFailed, msg
			return ""
		}
		return failedWorkflowMessage(s, msg)
	}
	sp.HandedToClient = true
	sp.Status, sp.Error = StepFailed, msg
	sp.ReachedAt, sp.Deadline = nil, nil
	return ""
}

// skipInput says why s cannot run because a step whose output it needs
// (for an argument or its sleep) was skipped, or "".
func skipInput(w *Definition, p *Progress, s *Step) string {
	for _, src := range s.inputs() {
		if skippedOutput(w, p, src) {
			return fmt.Sprintf("it needs the output of step %q, which was skipped", w.producer(src.Name).Name)
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
	return sp != nil && sp.Status == StepSkipped
}
