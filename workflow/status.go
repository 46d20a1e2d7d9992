package workflow

import (
	"fmt"
	"strings"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The status lines of a workflow task: written as the task's status
// message and the progress's pause reason, so that tasks/get, the progress
// JSON, the handoff's pauseReason and its prose always say the same thing
// about where the workflow stands. What a step's line says is its kind's
// (kind.status); which step's line stands for the workflow is decided
// here, by rank.

func clientFailedMessage(path string, s *Step, msg string) string {
	ref := "the task id"
	if path != s.Name && strings.Contains(path, "[") {
		ref = fmt.Sprintf("the task id followed by %q", "#"+path)
	}
	return fmt.Sprintf("the client's call of tool %q for step %q failed: %s; call it again with corrected arguments and %s as argument _task_id", toolOf(s), path, oneLine(msg), ref)
}

func completedMessage(p *Progress) string {
	done, skipped := 0, 0
	for i := range p.Steps {
		if p.Steps[i].Status == mcptask.StepSkipped {
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
// failed: what runs, else what waits for the clock, else what the client
// may do, else what is about to run.
func pauseReason(wf *compiled, p *Progress) string {
	if p.undoing() {
		return undoStatus(p)
	}
	if line := pausedLine(p); line != "" {
		return line // paused, or waiting for the workflow's place (pause.go)
	}
	var running []int
	best, bestRank := "", rankNone
	for i, s := range wf.steps {
		sp := &p.Steps[i]
		if sp.ended() || sp.GaveUp {
			continue
		}
		line, r := s.kind.status(s, sp) // a kind that says more than the engine does
		switch {
		case r != rankNone:
		case sp.Status == mcptask.StepRunning:
			running = append(running, i)
			continue
		case sp.Queue.waiting():
			line, r = queuedLine(s, sp.Queue), rankTimer
		case sp.RetryAt != nil:
			line, r = retryMessage(s, sp), rankRetry
		case sp.HandedToClient:
			line, r = handedMessage(s, sp), rankHanded
		}
		if line != "" && r > bestRank {
			best, bestRank = line, r
		}
	}
	switch len(running) {
	case 0:
	case 1:
		return runningMessage(wf.steps[running[0]], &p.Steps[running[0]])
	default:
		names := make([]string, len(running))
		for k, i := range running {
			names[k] = fmt.Sprintf("%q (tool %q)", wf.steps[i].Name, toolOf(wf.steps[i]))
		}
		msg := "running steps " + strings.Join(names, ", ")
		if c := wf.parent[wf.steps[running[0]].Name]; c != nil {
			msg += c.kind.together(c)
		}
		return msg
	}
	if best != "" {
		return best
	}
	for i, s := range wf.steps {
		if sp := &p.Steps[i]; !sp.ended() && !sp.GaveUp {
			return fmt.Sprintf("%s is about to run", toolLine(s))
		}
	}
	return ""
}

// wantStatus is the status of active workflow task t at progress p:
// input_required while it waits only for a person or an outsider (events,
// questions asked through its input request), whatever started it and
// whatever its client's dialect (both have the status; a core client, a
// schedule's or a fork's task is told the same way); working otherwise,
// a pause included (its status message says who paused it; the status a
// paused workflow waits in is working, docs/INTEROP.md).
func wantStatus(_ *store.Task, p *Progress) mcptask.Status { return statusFor(p) }

// statusFor is wantStatus at progress p.
func statusFor(p *Progress) mcptask.Status {
	if p.Paused != nil {
		return mcptask.StatusWorking // a paused workflow waits for an operator, not for input
	}
	if p.waitsOnEventsOnly() {
		return mcptask.StatusInputRequired
	}
	return mcptask.StatusWorking
}

// waitsOnEventsOnly reports whether every step the workflow waits on is
// an event (the task is then input_required: its inputRequests name them).
func (p *Progress) waitsOnEventsOnly() bool {
	events := false
	for i := range p.Steps {
		sp := &p.Steps[i]
		switch {
		case sp.ended(), sp.GaveUp:
		case sp.Status == mcptask.StepAwaitingEvent:
			events = true
		case sp.Status == mcptask.StepPending && sp.RetryAt == nil && !sp.HandedToClient:
			// not reached: it waits for what comes before it
		default:
			return false
		}
	}
	return events
}

// oneLine bounds a message for a status line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}

// trimDot is s without its final period, for a message that goes on.
func trimDot(s string) string { return strings.TrimRight(s, ".") }
