package sim

import (
	"encoding/json"
	"fmt"

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
	return sp.Queue != nil && sp.Queue.GrantedAt == nil && !ended(sp)
}

// ended reports a record that ended (completed, skipped, cancelled).
func ended(sp *workflow.StepProgress) bool {
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
