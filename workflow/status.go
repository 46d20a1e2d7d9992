package workflow

import (
	"fmt"
	"strings"
	"time"
)

// The status lines of a workflow task: written as the task's status
// message and the progress's pause reason, so that tasks/get, the progress
// JSON, the handoff's pauseReason and its prose always say the same thing
// about where the workflow stands.

func runningMessage(s *Step, sp *StepProgress) string {
	var b strings.Builder
	fmt.Fprintf(&b, "running step %q (tool %q), attempt %d", s.Name, s.Tool, sp.Attempts)
	if max := s.policy().MaxAttempts; max > 1 {
		fmt.Fprintf(&b, " (up to %d in a row)", max)
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

func awaitingMessage(s *Step, sp *StepProgress) string {
	msg := fmt.Sprintf("waiting for the client to call tool %q for step %q (with the task id as argument _task_id)", s.Tool, s.Name)
	if sp.Status == StepFailed && sp.Error != "" {
		msg += fmt.Sprintf("; its last call failed: %s", oneLine(sp.Error))
	}
	return msg
}

func handedMessage(s *Step, sp *StepProgress) string {
	return fmt.Sprintf("step %q (tool %q) failed after %d attempt(s): %s; the client may perform it by calling tool %q with the task id as argument _task_id (correct its arguments if they caused the error), or resume the workflow to have the server try again",
		s.Name, s.Tool, sp.Attempts, oneLine(sp.Error), s.Tool)
}

func retryingMessage(s *Step, msg string, try, max int, wait time.Duration) string {
	return fmt.Sprintf("step %q (tool %q) failed (attempt %d of %d in a row): %s; retrying in %s", s.Name, s.Tool, try, max, oneLine(msg), wait)
}

func failedWorkflowMessage(s *Step, msg string) string {
	return fmt.Sprintf("step %q (tool %q) failed: %s; the workflow failed", s.Name, s.Tool, oneLine(msg))
}

func clientFailedMessage(s *Step, msg string) string {
	return fmt.Sprintf("the client's call of tool %q for step %q failed: %s; call it again with corrected arguments and the task id as argument _task_id", s.Tool, s.Name, oneLine(msg))
}

func completedMessage(p *Progress) string {
	done, skipped := 0, 0
	for i := range p.Steps {
		if p.Steps[i].Status == StepSkipped {
			skipped++
		} else {
			done++
		}
	}
	if skipped > 0 {
		return fmt.Sprintf("completed: %d steps done, %d skipped", done, skipped)
	}
	return fmt.Sprintf("completed: all %d steps done", done)
}

// pauseReason is the status line of a workflow that is neither done nor
// failed: what runs, else what waits for the clock, else what waits for
// the client.
func pauseReason(wf *compiled, p *Progress) string {
	var running []int
	var retry, sleeping, handed, awaiting string
	for i, s := range wf.steps {
		sp := &p.Steps[i]
		switch {
		case sp.ended(), sp.GaveUp:
		case sp.Status == StepRunning:
			running = append(running, i)
		case sp.RetryAt != nil && retry == "":
			retry = fmt.Sprintf("step %q (tool %q) failed (attempt %d of %d in a row): %s; retrying at %s",
				s.Name, s.Tool, sp.Tries, s.policy().MaxAttempts, oneLine(sp.Error), sp.RetryAt.UTC().Format(time.RFC3339Nano))
		case sp.Status == StepSleeping && sp.Until != nil && sleeping == "":
			sleeping = fmt.Sprintf("sleeping until %s (step %q)", sp.Until.UTC().Format(time.RFC3339), s.Name)
		case sp.HandedToClient && handed == "":
			handed = handedMessage(s, sp)
		case sp.Status == StepAwaitingEvent && awaiting == "":
			awaiting = eventMessage(s)
		case clientSide(s, sp) && awaiting == "" && sp.Status != StepPending:
			awaiting = awaitingMessage(s, sp)
		}
	}
	switch len(running) {
	case 0:
	case 1:
		return runningMessage(wf.steps[running[0]], &p.Steps[running[0]])
	default:
		names := make([]string, len(running))
		for k, i := range running {
			names[k] = fmt.Sprintf("%q (tool %q)", wf.steps[i].Name, wf.steps[i].Tool)
		}
		msg := "running steps " + strings.Join(names, ", ")
		if g := wf.groupOf[wf.steps[running[0]].Name]; g != nil {
			msg += fmt.Sprintf(" of group %q together", g.Name)
		}
		return msg
	}
	for _, m := range []string{retry, sleeping, handed, awaiting} {
		if m != "" {
			return m
		}
	}
	for i, s := range wf.steps {
		if sp := &p.Steps[i]; !sp.ended() && !sp.GaveUp {
			return fmt.Sprintf("step %q (tool %q) is about to run", s.Name, s.Tool)
		}
	}
	return ""
}

// eventMessage is the status line of a workflow waiting for an event.
func eventMessage(s *Step) string {
	msg := fmt.Sprintf("waiting for event %q", s.Name)
	if s.Guidance != "" {
		msg += " (" + oneLine(s.Guidance) + ")"
	}
	return msg + ": deliver it with tasks/update (inputResponses) or the task's webhook"
}

// oneLine bounds a message for a status line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}
