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
	msg := fmt.Sprintf("waiting for the client to call tool %q for step %q (with _meta._task_id)", s.Tool, s.Name)
	if sp.Status == StepFailed && sp.Error != "" {
		msg += fmt.Sprintf("; its last call failed: %s", oneLine(sp.Error))
	}
	return msg
}

func handedMessage(s *Step, sp *StepProgress) string {
	return fmt.Sprintf("step %q (tool %q) failed after %d attempt(s): %s; the client may perform it by calling tool %q with _meta._task_id (correct its arguments if they caused the error), or resume the workflow (prompts/get with _meta._task_id) to have the server try again",
		s.Name, s.Tool, sp.Attempts, oneLine(sp.Error), s.Tool)
}

func retryingMessage(s *Step, msg string, try, max int, wait time.Duration) string {
	return fmt.Sprintf("step %q (tool %q) failed (attempt %d of %d in a row): %s; retrying in %s", s.Name, s.Tool, try, max, oneLine(msg), wait)
}

func failedWorkflowMessage(s *Step, msg string) string {
	return fmt.Sprintf("step %q (tool %q) failed: %s; the workflow failed", s.Name, s.Tool, oneLine(msg))
}

func clientFailedMessage(s *Step, msg string) string {
	return fmt.Sprintf("the client's call of tool %q for step %q failed: %s; call it again (with corrected arguments) and _meta._task_id", s.Tool, s.Name, oneLine(msg))
}

func completedMessage(p *WorkflowProgress) string {
	return fmt.Sprintf("completed: all %d steps done", len(p.Steps))
}

// oneLine bounds a message for a status line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}
