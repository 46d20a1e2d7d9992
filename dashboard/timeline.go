package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/workflow"
)

// The workflow timeline of a task's page: each step of the progress, in
// order, with its attempts; the records a container step keeps nested
// under it (a for-each's items, each with its item, status, attempts and
// result; a loop's latest runs, and how many it ran); the child task a
// child step started, linked; the workflow's deadline; and, for a
// workflow undone after it failed, each undo step and what became of it.
// The timeline draws from the progress alone (workflow.Progress), so a
// kind of step needs nothing here: its name is mcptask.StepKind.Label.

type attemptView struct {
	N                   int
	Reason, By, Outcome string
	At                  time.Time
	Duration            time.Duration
	Error               string
	Running             bool
	// Unfinished marks an attempt still open when the task ended: it
	// has no outcome and no duration.
	Unfinished bool
	// Cut says how the attempt was cut short, when it was: "timed out"
	// (the step's timeout) or "lost" (no heartbeat in time).
	Cut string
}

type stepView struct {
	// Name is the step's name, or a record's path ("build[2]",
	// "smoke[1][3]", "undo:deploy[0]").
	Name, Tool, Execution string
	// Kind is the step's kind when it calls no tool of its own (sleep,
	// event, foreach, loop, child), KindLabel how a person says it;
	// Group the parallel group the step belongs to.
	Kind, KindLabel, Group string
	// State is done, waiting, handed, failed, running, sleeping, skipped,
	// cancelled, stopped (the workflow ended first) or pending.
	State, StateLabel string
	CompletedBy       string
	Error             string
	// Note says more on the state: why the step was skipped, when a
	// sleep ends, when a retry runs, how far a container's records are.
	Note     string
	Attempts []attemptView
	// ShowAttempts is false for a record whose one attempt went well
	// (the title says it): a for-each of many items stays readable.
	ShowAttempts bool
	Total        time.Duration
	// ForkFrom, when set, is what an admin's "rerun from here" forks the
	// task at (the step, or its group).
	ForkFrom string

	// Label names a record in its container: "[2]" for a for-each's
	// item, "run 3" for a loop's.
	Label string
	// Item is the value a for-each's item works on; Result a step's or a
	// record's output: compact JSON, clipped.
	Item, Result string
	// Records are the records the step keeps (nested steps of their
	// own); Hidden counts those left out past maxRecords.
	Records []stepView
	Hidden  int
	// Child is the task a child-workflow step started.
	Child string
	// Undoes is the path of the step an undo record takes back.
	Undoes string
}

type progressView struct {
	Workflow, Goal, PauseReason string
	Steps                       []stepView
	Done, Count                 int
	// DeadlineAt is when the workflow fails if it has not ended;
	// DeadlineNote says how far that is.
	DeadlineAt   *time.Time
	DeadlineNote string
	// Undo is the compensation of a workflow that failed after steps
	// with an undo step completed.
	Undo *undoView
}

// undoView is what the page shows of a compensation.
type undoView struct {
	Reason string
	// Listed is set once every step that was running has ended and the
	// undo steps are known.
	Listed bool
	// Ended is set when the workflow has ended: every undo step ran.
	Ended bool
	Steps []stepView
	// Undone and NotUndone count the undo steps that completed and those
	// the server gave up on.
	Undone, NotUndone int
}

// maxRecords bounds the records one container draws; maxShownValue the
// bytes of an item or a result.
const (
	maxRecords    = 100
	maxShownValue = 300
)

// timeline turns a workflow's progress into the steps the page draws.
// ended is the task's status once it has ended ("" while it runs): a step
// still running then was stopped by the end.
func timeline(p *workflow.Progress, now time.Time, ended string) *progressView {
	pv := &progressView{Workflow: p.Workflow, Goal: p.Goal, PauseReason: p.PauseReason, Count: len(p.Steps), DeadlineAt: p.DeadlineAt}
	for i := range p.Steps {
		s := &p.Steps[i]
		sv := stepOf(s, "", now, ended)
		if s.Status == mcptask.StepCompleted && s.Items == nil {
			sv.Result = shown(p.Outputs[s.Output])
		}
		if sv.State == "done" || sv.State == "skipped" || sv.State == "cancelled" {
			pv.Done++
		}
		pv.Steps = append(pv.Steps, sv)
	}
	if d := p.DeadlineAt; d != nil {
		switch {
		case ended != "":
			pv.DeadlineNote = "the workflow had until then to end"
		case d.After(now):
			pv.DeadlineNote = "it fails then unless it has ended: " + human(d.Sub(now)) + " from now"
		default:
			pv.DeadlineNote = "passed " + human(now.Sub(*d)) + " ago"
		}
	}
	if u := p.Undo; u != nil {
		uv := &undoView{Reason: u.Reason, Listed: u.Listed, Ended: ended != ""}
		for i := range u.Steps {
			sv := undoOf(&u.Steps[i], now, ended)
			switch {
			case u.Steps[i].Status == mcptask.StepCompleted:
				uv.Undone++
			case u.Steps[i].GaveUp:
				uv.NotUndone++
			}
			uv.Steps = append(uv.Steps, sv)
		}
		pv.Undo = uv
	}
	return pv
}

// stepOf is the view of record s of a step (or the step's own), in a
// container of kind container ("" for a step of the workflow).
func stepOf(s *workflow.StepProgress, container string, now time.Time, ended string) stepView {
	sv := stepView{Name: s.Name, Tool: s.Tool, Execution: s.Execution, Kind: s.Kind, KindLabel: mcptask.StepKind(s.Kind).Label(), Group: s.Group,
		CompletedBy: s.CompletedBy, Error: s.Error, Child: s.Child}
	sv.State, sv.StateLabel, sv.Note = stateOf(s, ended)
	for _, a := range s.History {
		av := attemptView{N: a.N, Reason: a.Reason, By: a.By, Outcome: a.Outcome, At: a.At, Error: a.Error,
			Duration: time.Duration(a.DurationMs) * time.Millisecond, Running: a.Outcome == workflow.OutcomeRunning}
		switch {
		case av.Running && ended != "":
			av.Running, av.Unfinished, av.Outcome = false, true, "unfinished"
		case av.Running:
			av.Duration = now.Sub(a.At)
		}
		switch {
		case strings.HasPrefix(a.Error, "timed out after"):
			av.Cut = "timed out"
		case strings.HasPrefix(a.Error, "lost:"):
			av.Cut = "lost"
		}
		sv.Total += av.Duration
		sv.Attempts = append(sv.Attempts, av)
	}
	sv.ShowAttempts = container == "" || len(sv.Attempts) > 1 || slices.ContainsFunc(sv.Attempts, func(a attemptView) bool { return a.Outcome != workflow.OutcomeOK })
	switch container {
	case string(mcptask.StepKindForEach):
		sv.Label = fmt.Sprintf("[%d]", s.N)
		sv.Item = shown(s.Item)
	case string(mcptask.StepKindLoop):
		sv.Label = fmt.Sprintf("run %d", s.N)
	}
	if container != "" && s.Items == nil {
		sv.Result = shown(s.Result)
	}
	if s.Items != nil {
		sv.Records, sv.Hidden = recordsOf(s, now, ended)
		if note := recordsNote(s); note != "" {
			sv.Note = joinNote(note, sv.Note)
		}
		if s.Kind != string(mcptask.StepKindLoop) && s.Status == mcptask.StepCompleted {
			sv.Result = "" // the items' results are the records'
		} else if container != "" {
			sv.Result = shown(s.Result)
		}
	}
	return sv
}

// stateOf is a record's state class, its label and a note.
func stateOf(s *workflow.StepProgress, ended string) (state, label, note string) {
	switch {
	case s.Status == mcptask.StepCompleted:
		state, label = "done", "done"
		if s.CompletedBy != "" {
			label = "done by " + s.CompletedBy
		}
		return state, label, ""
	case s.Status == mcptask.StepSkipped:
		return "skipped", "skipped", s.SkipReason
	case s.Status == mcptask.StepCancelled:
		return "cancelled", "cancelled", s.SkipReason
	case ended != "" && s.Status == mcptask.StepPending:
		return "pending", "not run", ""
	case ended != "":
		return "stopped", "stopped: the workflow " + ended + " first", ""
	case s.GaveUp:
		state, label = "failed", "gave up"
	case s.HandedToClient:
		state, label = "handed", "handed to client"
	case s.Status == mcptask.StepAwaitingClient:
		state, label = "waiting", "waiting for the client"
	case s.Status == mcptask.StepAwaitingEvent:
		state, label = "waiting", "waiting for its event"
	case s.Status == mcptask.StepAwaitingChild:
		state, label = "running", "its child workflow runs"
	case s.Status == mcptask.StepSleeping:
		state, label = "sleeping", "sleeping"
	case s.Status == mcptask.StepFailed:
		state, label = "failed", "failed"
	case s.Status == mcptask.StepRunning:
		state, label = "running", "running"
	case s.Queue != nil && s.Queue.GrantedAt == nil:
		return "queued", "queued on " + s.Queue.Queue, s.Queue.Why
	default:
		state, label = "pending", "pending"
	}
	switch {
	case s.Until != nil && s.Kind == string(mcptask.StepKindLoop):
		note = "the next run starts at " + stamp(*s.Until)
	case s.Until != nil:
		note = "until " + stamp(*s.Until)
	case s.RetryAt != nil:
		note = "the server tries again at " + stamp(*s.RetryAt)
	case s.Deadline != nil:
		note = "the client has until " + stamp(*s.Deadline)
	}
	return state, label, note
}

// undoOf is the view of undo record s.
func undoOf(s *workflow.StepProgress, now time.Time, ended string) stepView {
	sv := stepOf(s, "", now, "")
	sv.Undoes = strings.TrimPrefix(s.Name, "undo:")
	sv.Item = shown(s.Item)
	switch {
	case s.Status == mcptask.StepCompleted:
		sv.State, sv.StateLabel = "done", "undone"
	case s.GaveUp:
		sv.State, sv.StateLabel = "failed", "NOT undone: take it back by hand"
	case s.Status == mcptask.StepFailed:
		sv.State, sv.StateLabel = "running", "failed; the server tries again"
	case ended != "":
		sv.State, sv.StateLabel = "stopped", "not undone: the task ended first"
	case s.Status == mcptask.StepRunning:
		sv.State, sv.StateLabel = "running", "undoing"
	default:
		sv.State, sv.StateLabel = "pending", "to undo"
	}
	return sv
}

// recordsOf are the views of the records container s keeps: all of them,
// or, past maxRecords, those that have not ended and then the first
// others, in order; hidden counts the rest.
func recordsOf(s *workflow.StepProgress, now time.Time, ended string) (views []stepView, hidden int) {
	show := make([]bool, len(s.Items))
	n := 0
	for pass := range 2 { // the records still going first, then the others
		for i := range s.Items {
			if n < maxRecords && !show[i] && (pass == 1 || !recordEnded(&s.Items[i])) {
				show[i] = true
				n++
			}
		}
	}
	for i := range s.Items {
		if show[i] {
			views = append(views, stepOf(&s.Items[i], s.Kind, now, ended))
		}
	}
	return views, len(s.Items) - n
}

func recordEnded(s *workflow.StepProgress) bool {
	return s.Status == mcptask.StepCompleted || s.Status == mcptask.StepSkipped || s.Status == mcptask.StepCancelled
}

// recordsNote says how far a container's records are: "2 of 3 items
// done, 1 failed", "run 3 (the latest 3 kept)".
func recordsNote(s *workflow.StepProgress) string {
	if s.Kind == string(mcptask.StepKindLoop) {
		if s.Runs == 0 {
			return ""
		}
		note := fmt.Sprintf("ran %d time(s)", s.Runs)
		if s.Runs > len(s.Items) {
			note += fmt.Sprintf("; the latest %d are kept", len(s.Items))
		}
		return note
	}
	counts := map[string]int{}
	for i := range s.Items {
		st, _, _ := stateOf(&s.Items[i], "")
		counts[st]++
	}
	note := fmt.Sprintf("%d of %d item(s) done", counts["done"]+counts["skipped"]+counts["cancelled"], len(s.Items))
	for _, st := range []string{"running", "waiting", "handed", "sleeping", "failed"} {
		if counts[st] > 0 {
			note += fmt.Sprintf(", %d %s", counts[st], st)
		}
	}
	return note
}

func joinNote(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}

// shown is a JSON value on one line, clipped: a string as itself.
func shown(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	var s string
	if raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return clip(s, maxShownValue)
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) == nil {
		return clip(b.String(), maxShownValue)
	}
	return clip(string(raw), maxShownValue)
}

func stamp(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05") }

// stepCtx is what the step template draws one step with: the step, and
// what its buttons and links need of the page.
type stepCtx struct {
	Prefix, TaskID, CSRF string
	CanFork              bool
	S                    stepView
}

// With is c drawing s (a record nested in c's step).
func (c stepCtx) With(s stepView) stepCtx {
	c.S = s
	c.CanFork = false // a record is forked with its step
	return c
}

// StepCtx is what the step template draws s of the page with.
func (d taskData) StepCtx(s stepView) stepCtx {
	return stepCtx{Prefix: d.Prefix, TaskID: d.T.ID, CSRF: d.CSRF, CanFork: d.CanFork, S: s}
}
