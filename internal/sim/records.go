package sim

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/workflow"
)

// Reading a workflow task's records: the steps, the records containers
// keep (items, iterations), and the undo steps, by path.

// progressOf decodes task t's workflow progress; nil when it has none.
func progressOf(t *store.Task) *workflow.Progress {
	if t == nil {
		return nil
	}
	raw, ok := t.Variables[workflow.VarProgress]
	if !ok {
		return nil
	}
	var p workflow.Progress
	if json.Unmarshal(raw, &p) != nil {
		return nil
	}
	return &p
}

// record is one record of a progress and its path.
type record struct {
	path string
	sp   *workflow.StepProgress
	undo bool // a compensation's record (Progress.Undo.Steps)
}

// records lists every record of p, containers' records after their
// container, by path.
func records(p *workflow.Progress) []record {
	if p == nil {
		return nil
	}
	var out []record
	var walk func(path string, sp *workflow.StepProgress)
	walk = func(path string, sp *workflow.StepProgress) {
		out = append(out, record{path: path, sp: sp})
		for i := range sp.Items {
			walk(fmt.Sprintf("%s[%d]", path, sp.Items[i].N), &sp.Items[i])
		}
	}
	for i := range p.Steps {
		walk(p.Steps[i].Name, &p.Steps[i])
	}
	if p.Undo != nil {
		for i := range p.Undo.Steps {
			out = append(out, record{path: p.Undo.Steps[i].Name, sp: &p.Undo.Steps[i], undo: true})
		}
	}
	return out
}

// byPath indexes records by path.
func byPath(rs []record) map[string]*workflow.StepProgress {
	m := make(map[string]*workflow.StepProgress, len(rs))
	for _, r := range rs {
		m[r.path] = r.sp
	}
	return m
}

// serverOpened counts the attempts the server opened at a record
// between its previous state (nil: none) and now.
func serverOpened(prev, now *workflow.StepProgress) (n int, reasons []string) {
	before := 0
	if prev != nil {
		before = prev.Attempts
	}
	for _, a := range now.History {
		if a.N > before && a.By == string(mcptask.ExecServer) {
			n++
			reasons = append(reasons, a.Reason)
		}
	}
	return n, reasons
}

// waits reports a record that waits for someone: the client, an event,
// a child, a place on a queue.
func waits(sp *workflow.StepProgress) bool {
	switch sp.Status {
	case mcptask.StepAwaitingClient, mcptask.StepAwaitingEvent, mcptask.StepAwaitingChild:
		return true
	case mcptask.StepFailed:
		if sp.HandedToClient || sp.Execution == string(mcptask.ExecClient) && sp.RetryAt == nil {
			return true // the client performs it (again)
		}
	}
	return sp.Queue != nil && sp.Queue.GrantedAt == nil && !recordEnded(sp)
}

// recordEnded reports a record that ended (completed, skipped, cancelled).
func recordEnded(sp *workflow.StepProgress) bool {
	switch sp.Status {
	case mcptask.StepCompleted, mcptask.StepSkipped, mcptask.StepCancelled:
		return true
	}
	return false
}

// openAttempt reports a record with an attempt still running.
func openAttempt(sp *workflow.StepProgress) bool {
	n := len(sp.History)
	return n > 0 && sp.History[n-1].Outcome == workflow.OutcomeRunning
}

// live reports a record that is running or waiting: what an ended task
// must not keep.
func live(sp *workflow.StepProgress) bool {
	switch sp.Status {
	case mcptask.StepRunning, mcptask.StepAwaitingClient, mcptask.StepAwaitingEvent, mcptask.StepSleeping, mcptask.StepAwaitingChild:
		return true
	}
	return openAttempt(sp)
}

// taskRestless says why task t (p its workflow progress, nil for another
// kind) does not rest at now: "" when it ended or waits for something
// named; "due: ..." when a timer of it is due (the engine acts now); the
// silence otherwise. held reports a tool call of a record the caller
// holds on purpose; ended reports a task that ended (a leg's workflow).
func taskRestless(t *store.Task, p *workflow.Progress, now time.Time, held func(id, path string) bool, ended func(id string) bool) string {
	if t.Status.Terminal() {
		return ""
	}
	if of := t.Labels[workflow.LabelLegOf]; of != "" {
		// A leg waits for its workflow's next moment for the model.
		if ended(of) {
			return "follows workflow task " + of + ", which ended"
		}
		return ""
	}
	if !t.ExpiresAt.IsZero() && !t.ExpiresAt.After(now) {
		return "expired at " + stamp(t.ExpiresAt) + ", not swept"
	}
	if p == nil {
		return "no progress"
	}
	if p.DeadlineAt != nil && !p.DeadlineAt.After(now) {
		return "due: its deadline " + stamp(*p.DeadlineAt)
	}
	if !t.WakeAt.IsZero() && !t.WakeAt.After(now) {
		// The scheduler wakes it (a queue's look again, a debounce's
		// end, ...), after a lost wake-up at its next look.
		return "due: its wake-up at " + stamp(t.WakeAt)
	}
	// A timer: due (the engine acts now), or set in the task's wake-up
	// (the scheduler wakes it then; a timer without one is silence).
	timer := func(what, path string, at time.Time) string {
		switch {
		case p.Paused != nil:
			return "" // a paused task's timers wait for its resume
		case p.Queue != nil && p.Queue.GrantedAt == nil:
			return "" // a workflow waiting for its place judges its timers at the grant
		case !at.After(now):
			return "due: " + what + " " + path + " at " + stamp(at)
		case t.WakeAt.IsZero() || t.WakeAt.After(at):
			return what + " " + path + " at " + stamp(at) + ", and no wake-up is set before it"
		}
		return ""
	}
	for _, r := range records(p) {
		sp := r.sp
		var why string
		switch {
		case p.Undo != nil && !r.undo && sp.Status != mcptask.StepRunning:
			// Undoing: the workflow's own steps wait no more (their
			// timers are the undo steps').
		case recordEnded(sp):
		case sp.Status == mcptask.StepSleeping && sp.Until != nil:
			why = timer("the sleep", r.path, *sp.Until)
		case sp.RetryAt != nil && (sp.Queue == nil || sp.Queue.GrantedAt != nil):
			// (A retry waiting for its place runs at the grant.)
			why = timer("the retry of", r.path, *sp.RetryAt)
		}
		if why != "" {
			return why
		}
	}
	rests := p.Paused != nil || t.Status == mcptask.StatusInputRequired || !t.WakeAt.IsZero() || p.Queue != nil && p.Queue.GrantedAt == nil ||
		p.Undo != nil && p.Undo.Of != "" && p.Undo.Done
	for _, r := range records(p) {
		if r.sp.Tool != "" && (openAttempt(r.sp) || r.sp.Status == mcptask.StepRunning) {
			// A tool step runs: its call is held, or the engine is not
			// done with it.
			if held == nil || !held(t.ID, r.path) {
				return "runs " + r.path + " (" + describe(r.sp) + ") with no call held"
			}
			rests = true
		}
		if waits(r.sp) {
			rests = true
		}
	}
	if !rests {
		return "waits for nothing: " + summary(p)
	}
	return ""
}
