package workflow

import (
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"strings"
	"time"
)

// Attempts: how the server runs the tool of a step (a server step, a
// client step the server took over) across retries, restarts, graceful
// stops and crashes, and what giving up on it means: the attempt budget
// pass of a decision (plan.go). Kinds that call a tool start an attempt
// with turn.attempt; outcomes come back as the event of the next decision
// (outcome).
//
// The budget. Every attempt that starts is counted (StepProgress.Attempts,
// and its history), however it ends. Failures and timeouts count against
// the step's MaxAttempts (StepProgress.Tries, the failures of the current
// series): a step not marked retryable fails at its first failure, and a
// step with MaxAttempts n fails after exactly n failures or timeouts,
// across graceful stops and crashes. An attempt a graceful stop or a pause
// with Cut cut short is not a failure: the step runs again, and the count
// of failures stays as it was (it is never reset by a cut). An attempt a
// crash cut short (found open by a process that did not run it) is not a
// failure either; Options.MaxInterruptions bounds those in a row.

// runnable decides what happens to the slot sl, whose tool the server
// runs now: it runs (an attempt is opened), it waits for its retry or
// its place on its queue, or it runs here already. A step found running
// that does not run here was cut short by a process that stopped without
// handing it back (a crash): it runs again, and after
// Options.MaxInterruptions such cuts in a row the server gives up on it
// (a tool that crashes the process must not crash it forever). A step a
// graceful stop handed back runs again without counting.
func (r *record) runnable(sl *slot, reason string) string {
	sp, now := sl.sp, r.now
	if r.here[sl.path] != 0 {
		return "" // runs here now
	}
	interrupted := false
	if a := sp.open(); a != nil {
		if !r.leased {
			r.d.start = append(r.d.start, sl.path)
			return "" // only the lease holder may tell a cut attempt from a running one
		}
		a.Outcome, a.Error = OutcomeError, "interrupted: the server stopped while the step ran"
		a.DurationMs = max(0, now.Sub(a.At).Milliseconds())
		sp.Interrupted++
		sp.Status = mcptask.StepPending // until it runs again: it may wait for its place first (simulation seed 215)
		if sl.s.queue != nil {
			sp.Queue = nil // its place may have been given up as its tool returned (freeEarly): it asks again
		}
		if sp.Interrupted > r.opts.MaxInterruptions {
			msg := fmt.Sprintf("the server stopped %d times in a row while running this step without handing it back (crashes, not graceful stops)", sp.Interrupted)
			sp.Interrupted = 0
			return r.giveUp(sl, msg)
		}
		interrupted = true
	}
	if sp.RetryAt != nil && now.Before(*sp.RetryAt) && !interrupted {
		return "" // the scheduler (or the drive loop) wakes the task then
	}
	if !r.queueTurn(sl) {
		return "" // it waits for a place on its queue (queue.go)
	}
	if !r.leased {
		r.d.start = append(r.d.start, sl.path)
		return "" // plan asks for the lease first
	}
	switch {
	case interrupted, sp.handedBack():
		if reason != ReasonTakeover {
			reason = ReasonRestart
		}
	case reason == ReasonTimeout:
	case sp.Attempts == 0:
		reason = ReasonFirst
	case reason == ReasonResume, reason == ReasonRestart, reason == ReasonTakeover:
	default:
		reason = ReasonRetry
	}
	sp.begin(reason, string(mcptask.ExecServer), now)
	if sp.IdempotencyKey == "" {
		sp.IdempotencyKey = r.idempotencyKey(sl.path)
	}
	r.d.start = append(r.d.start, sl.path)
	return ""
}

// DefaultMaxInterruptions is the default Options.MaxInterruptions.
const DefaultMaxInterruptions = 3

// outcome applies the outcome res of an attempt to the record. It reports
// false when res no longer applies (its attempt is not the open one), and
// the failure that ends the workflow when the server gave up on a step
// whose failure fails it.
func (r *record) outcome(res stepResult) (applied bool, failure string) {
	p := r.p
	sl := r.wf.slotAt(p, res.step)
	if sl == nil || callOf(sl.s) == nil {
		return false, ""
	}
	sp := sl.sp
	if a := sp.open(); a == nil || a.N != res.attempt {
		if p.undoing() && res.msg == "" && stoppedAttempt(sp, res.attempt) {
			// Stopped when the workflow failed, it completed anyway:
			// recorded, so that it is undone too.
			a := &sp.History[len(sp.History)-1]
			a.Outcome, a.Error = OutcomeOK, ""
			sp.Status, sp.CompletedBy, sp.SkipReason, sp.Arguments = mcptask.StepCompleted, string(mcptask.ExecServer), "", res.args
			sl.output(p, OutputOf(res.res))
			return true, ""
		}
		return false, ""
	}
	sp.Interrupted = 0
	if res.msg == "" {
		complete(p, sl, string(mcptask.ExecServer), res.args, res.res, r.now)
		sp.Tries, sp.RetryAt = 0, nil
		r.notice(sl)
		return true, ""
	}
	fail(p, sl, string(mcptask.ExecServer), res.msg, r.now)
	r.notice(sl)
	sp.Tries++                                                 // a failure (or a timeout) of the series
	final := res.final || p.undoing() && !undoRecord(res.step) // a step stopped by the failure is not retried
	if pol := callOf(sl.s).policy(); !final && sp.Tries < pol.MaxAttempts {
		at := retryAt(pol, sp.Tries, r.now)
		sp.RetryAt = &at
		return true, ""
	}
	return true, r.giveUp(sl, res.msg)
}

// stoppedAttempt reports whether attempt n of sp was the last one, and
// stopped (recorded cancelled) because the workflow failed without it.
func stoppedAttempt(sp *StepProgress, n int) bool {
	k := len(sp.History)
	return sp.Status == mcptask.StepCancelled && k > 0 && sp.History[k-1].N == n && sp.History[k-1].Outcome == OutcomeCancelled
}

// handBackAll is the decision of a graceful stop (Bridge.Close): the
// outcomes that arrived are recorded, every attempt still open is handed
// back (handBack), and the places no longer used are given up (those of
// what ended; a paused task's, once nothing runs on them); the lease is
// given back in the same write. Nothing else is decided: the process
// stops.
func (r *record) handBackAll() {
	for _, res := range r.ev.results {
		if res.stopped == "" {
			r.outcome(res)
		}
	}
	walkRecords(r.p, func(sp *StepProgress) { sp.handBack(r.now) })
	r.freePlaces(false) // what ended gives its place up; a paused task, every place it runs nothing on (queue.go)
	r.p.refresh()
	r.p.PauseReason = pauseReason(r.wf, r.p)
	r.d.update.ReleaseLease = true
}

// handBack records that a graceful stop (Bridge.Close) cut the open
// attempt of step name short: the attempt ends "stopped", and the step
// runs again, on whichever process picks the task up. The cut attempt
// stays counted (Attempts), and is neither a failure (Tries) nor a crash
// (Interrupted).
func (sp *StepProgress) handBack(now time.Time) bool {
	a := sp.open()
	if a == nil {
		return false
	}
	a.Outcome, a.Error = OutcomeStopped, "the server stopped gracefully (a deploy or a restart); the step runs again"
	a.DurationMs = max(0, now.Sub(a.At).Milliseconds())
	sp.Status = mcptask.StepPending
	return true
}

// handedBack reports whether the step's last attempt was cut short by a
// graceful stop (see handBack).
func (sp *StepProgress) handedBack() bool {
	n := len(sp.History)
	return n > 0 && sp.History[n-1].Outcome == OutcomeStopped && sp.Status == mcptask.StepPending
}

// giveUp applies s's failure policy once the server gives up on it: the
// step is handed to the client, or the workflow fails (the returned
// message). A member of a container asks the container what its failure
// means for the whole (a group that fails fast fails at once and stops
// its other members; one that collects holds the failure until the group
// has ended).
func (r *record) giveUp(sl *slot, msg string) string {
	p := r.p
	if r.pauseOnGiveUp(sl, msg) {
		return "" // the workflow pauses instead of failing (pause.go)
	}
	s, sp := sl.s, sl.sp
	sp.RetryAt, sp.Tries = nil, 0
	if p.undoing() {
		// An undo step is reported, and the next one runs; a step that
		// was running when the workflow failed is not retried.
		sp.GaveUp, sp.Status, sp.Error = true, mcptask.StepFailed, msg
		return ""
	}
	fails := callOf(s).failurePolicy() == FailWorkflow
	parent := r.wf.parent[s.Name]
	if sl.parent != nil {
		parent = sl.parent.s // a container's record: the container decides
	}
	if parent != nil {
		failure, stopOthers, hold := parent.kind.memberGaveUp(parent, s, msg, fails)
		if stopOthers {
			r.stopSiblings(sl, parent.kind.stopped(parent))
		}
		switch {
		case failure != "":
			sp.Status, sp.Error = mcptask.StepFailed, msg
			return failure
		case hold:
			sp.GaveUp, sp.Status, sp.Error = true, mcptask.StepFailed, msg
			return ""
		}
	} else if fails {
		return failedWorkflowMessage(s, msg)
	}
	sp.HandedToClient = true
	sp.Status, sp.Error = mcptask.StepFailed, msg
	sp.ReachedAt, sp.Deadline = nil, nil
	return ""
}

// stopSiblings records the other records of sl's stage (or of its
// container) that have not ended as cancelled, for why: the workflow
// fails without them.
func (r *record) stopSiblings(sl *slot, why string) {
	p, wf, now := r.p, r.wf, r.now
	var others []*StepProgress
	if sl.parent != nil {
		for _, c := range sl.parent.children() {
			others = append(others, c.sp)
		}
	} else {
		for _, j := range wf.stages[wf.stage[wf.index[sl.s.Name]]] {
			others = append(others, &p.Steps[j])
		}
	}
	for _, sp := range others {
		if sp == sl.sp || sp.ended() || sp.GaveUp {
			continue
		}
		if a := sp.open(); a != nil {
			a.Outcome, a.Error = OutcomeCancelled, why
			a.DurationMs = max(0, now.Sub(a.At).Milliseconds())
		}
		sp.Status, sp.SkipReason = mcptask.StepCancelled, why
		sp.RetryAt, sp.ReachedAt, sp.Deadline, sp.Early = nil, nil, nil, nil
	}
}

// runningMessage is the status line of a step whose tool runs.
func runningMessage(s *Step, sp *StepProgress) string {
	var b strings.Builder
	fmt.Fprintf(&b, "running %s, attempt %d", toolLine(s), sp.Attempts)
	if c := callOf(s); c != nil {
		if max := c.policy().MaxAttempts; max > 1 {
			fmt.Fprintf(&b, " (up to %d in a row)", max)
		}
	}
	if a := sp.open(); a != nil {
		switch a.Reason {
		case ReasonRestart:
			b.WriteString(", re-running after a server restart")
		case ReasonTakeover:
			b.WriteString(", re-running here after another replica that ran it stopped (a takeover)")
		case ReasonResume:
			b.WriteString(", retried because the client resumed the workflow")
		case ReasonRetry:
			b.WriteString(", a retry")
		}
	}
	return b.String()
}

// retryMessage is the status line of a step waiting for its retry.
func retryMessage(s *Step, sp *StepProgress) string {
	max := 1
	if c := callOf(s); c != nil {
		max = c.policy().MaxAttempts
	}
	return fmt.Sprintf("%s failed (attempt %d of %d in a row): %s; retrying at %s",
		toolLine(s), sp.Tries, max, oneLine(sp.Error), sp.RetryAt.UTC().Format(time.RFC3339Nano))
}

func retryingMessage(s *Step, msg string, try, max int, wait time.Duration) string {
	return fmt.Sprintf("%s failed (attempt %d of %d in a row): %s; retrying in %s", toolLine(s), try, max, oneLine(msg), wait)
}

func failedWorkflowMessage(s *Step, msg string) string {
	return fmt.Sprintf("%s failed: %s; the workflow failed", toolLine(s), oneLine(msg))
}
