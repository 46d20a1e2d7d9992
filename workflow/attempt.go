package workflow

import (
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"strings"
	"time"
)

// Attempts: how the server runs the tool of a step (a server step, a
// client step the server took over) across retries, restarts, graceful
// stops and crashes, and what giving up on it means. Kinds that call a
// tool start an attempt with turn.attempt; outcomes come back through the
// drive loop (record).

// runnable decides what happens to step s, whose tool the server runs
// now: it runs (an attempt is opened), it waits for its retry, or it runs
// here already. A step found running that does not run here was cut short
// by a process that stopped without handing it back (a crash): it runs
// again, and after Options.MaxInterruptions such cuts in a row the server
// gives up on it (a tool that crashes the process must not crash it
// forever). A step a graceful stop handed back runs again without
// counting.
func (in *instance) runnable(p *Progress, sl *slot, now time.Time, reason string, pl *plan) string {
	sp := sl.sp
	if in.running[sl.path] != nil {
		return "" // runs here now
	}
	interrupted := false
	if a := sp.open(); a != nil {
		if in.lease == nil {
			pl.start = append(pl.start, sl.path)
			return "" // only the lease holder may tell a cut attempt from a running one
		}
		a.Outcome, a.Error = OutcomeError, "interrupted: the server stopped while the step ran"
		a.DurationMs = max(0, now.Sub(a.At).Milliseconds())
		sp.Interrupted++
		if sp.Interrupted > in.b.opts.MaxInterruptions {
			msg := fmt.Sprintf("the server stopped %d times in a row while running this step without handing it back (crashes, not graceful stops)", sp.Interrupted)
			sp.Interrupted = 0
			return in.giveUp(p, sl, msg, now)
		}
		interrupted = true
	}
	if sp.RetryAt != nil && now.Before(*sp.RetryAt) && !interrupted {
		return "" // the scheduler (or the drive loop) wakes the task then
	}
	if !in.queueTurn(p, sl, now) {
		return "" // it waits for a place on its queue (queue.go)
	}
	if in.lease == nil {
		pl.start = append(pl.start, sl.path)
		return "" // plan asks for the lease first
	}
	switch {
	case interrupted, sp.handedBack():
		reason = ReasonRestart
	case reason == ReasonTimeout:
	case sp.Attempts == 0:
		reason = ReasonFirst
	case reason == ReasonResume, reason == ReasonRestart:
	default:
		reason = ReasonRetry
	}
	handedBack := sp.handedBack()
	sp.begin(reason, string(mcptask.ExecServer), now)
	if !interrupted && !handedBack {
		sp.Tries++
	}
	if sp.IdempotencyKey == "" {
		sp.IdempotencyKey = idempotencyKey(in.id, sl.path)
	}
	pl.start = append(pl.start, sl.path)
	return ""
}

// DefaultMaxInterruptions is the default Options.MaxInterruptions.
const DefaultMaxInterruptions = 3

// record applies the outcome r of an attempt to p. It reports false when r
// no longer applies (its attempt is not the open one), and the failure
// that ends the workflow when the server gave up on a step whose failure
// fails it.
func (in *instance) record(p *Progress, r stepResult, now time.Time) (applied bool, failure string) {
	sl := in.wf.slotAt(p, r.step)
	if sl == nil || callOf(sl.s) == nil {
		return false, ""
	}
	sp := sl.sp
	if a := sp.open(); a == nil || a.N != r.attempt {
		if p.undoing() && r.msg == "" && stoppedAttempt(sp, r.attempt) {
			// Stopped when the workflow failed, it completed anyway:
			// recorded, so that it is undone too.
			a := &sp.History[len(sp.History)-1]
			a.Outcome, a.Error = OutcomeOK, ""
			sp.Status, sp.CompletedBy, sp.SkipReason, sp.Arguments = mcptask.StepCompleted, string(mcptask.ExecServer), "", r.args
			sl.output(p, OutputOf(r.res))
			return true, ""
		}
		return false, ""
	}
	sp.Interrupted = 0
	if r.msg == "" {
		complete(p, sl, string(mcptask.ExecServer), r.args, r.res, now)
		sp.Tries, sp.RetryAt = 0, nil
		emit(in.b.opts.Observer, in.id, p, sl, nil)
		return true, ""
	}
	fail(p, sl, string(mcptask.ExecServer), r.msg, now)
	emit(in.b.opts.Observer, in.id, p, sl, nil)
	final := r.final || p.undoing() && !undoRecord(r.step) // a step stopped by the failure is not retried
	if pol := callOf(sl.s).policy(); !final && sp.Tries < pol.MaxAttempts {
		at := retryAt(pol, sp.Tries, now)
		sp.RetryAt = &at
		return true, ""
	}
	return true, in.giveUp(p, sl, r.msg, now)
}

// stoppedAttempt reports whether attempt n of sp was the last one, and
// stopped (recorded cancelled) because the workflow failed without it.
func stoppedAttempt(sp *StepProgress, n int) bool {
	k := len(sp.History)
	return sp.Status == mcptask.StepCancelled && k > 0 && sp.History[k-1].N == n && sp.History[k-1].Outcome == OutcomeCancelled
}

// handBack records that a graceful stop (Bridge.Close) cut the open
// attempt of step name short: the attempt ends "stopped", and the step
// runs again, on whichever process picks the task up, without counting
// as a crash or a retry.
func (sp *StepProgress) handBack(now time.Time) bool {
	a := sp.open()
	if a == nil {
		return false
	}
	a.Outcome, a.Error = OutcomeStopped, "the server stopped gracefully (a deploy or a restart); the step runs again"
	a.DurationMs = max(0, now.Sub(a.At).Milliseconds())
	sp.Status = mcptask.StepPending
	sp.Tries = max(0, sp.Tries-1)
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
func (in *instance) giveUp(p *Progress, sl *slot, msg string, now time.Time) string {
	if in.pauseOnGiveUp(p, sl, msg, now) {
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
	parent := in.wf.parent[s.Name]
	if sl.parent != nil {
		parent = sl.parent.s // a container's record: the container decides
	}
	if parent != nil {
		failure, stopOthers, hold := parent.kind.memberGaveUp(parent, s, msg, fails)
		if stopOthers {
			in.stopSiblings(p, sl, parent.kind.stopped(parent), now)
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
func (in *instance) stopSiblings(p *Progress, sl *slot, why string, now time.Time) {
	var others []*StepProgress
	if sl.parent != nil {
		for _, c := range sl.parent.children() {
			others = append(others, c.sp)
		}
	} else {
		for _, j := range in.wf.stages[in.wf.stage[in.wf.index[sl.s.Name]]] {
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
