package workflow

import (
	"bytes"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// A workflow task's step events: every write of the progress (instance
// write) also appends, in the same store write, an
// mcptask.EventStepStarted for each attempt it opens and an
// mcptask.EventStepEnded for each attempt it closes, found by comparing
// the attempts of the progress written with those of the progress the
// task held (the step histories: an attempt is numbered, and open while
// its outcome is running). So a reader of the task's events sees every
// attempt the progress records begin and end, in the write that records
// it, and nothing else in the engine has to say so.

// maxStepEventError bounds the error an EventStepEnded carries (the
// progress keeps the whole of it).
const maxStepEventError = 1024

// recordedAttempts is the part of a stored progress that step events
// compare: each record's attempt count and its attempts' outcomes, the
// steps', the records they hold (a for-each's items, a loop's runs), and
// the undo steps'.
type recordedAttempts struct {
	Steps []recordedStep `json:"steps"`
	Undo  *struct {
		Steps []recordedStep `json:"steps"`
	} `json:"undo"`
	Queue *struct {
		GrantedAt *time.Time `json:"grantedAt"`
	} `json:"queue"`
}

// recordedStep is one record of recordedAttempts.
type recordedStep struct {
	Name     string `json:"name"`
	Attempts int    `json:"attempts"`
	History  []struct {
		N       int    `json:"n"`
		Outcome string `json:"outcome"`
	} `json:"history"`
	Items []recordedStep `json:"items"`
	Queue *struct {
		GrantedAt *time.Time `json:"grantedAt"`
	} `json:"queue"`
}

// priorAttempts are the attempts of the records a task held, by record
// name.
type priorAttempts map[string]stepAttempts

// note adds the attempts of records rs (and those they hold).
func (before priorAttempts) note(rs []recordedStep) {
	for _, s := range rs {
		sa := stepAttempts{count: s.Attempts, open: map[int]bool{}, queued: s.Queue != nil && s.Queue.GrantedAt == nil}
		for _, a := range s.History {
			if a.Outcome == OutcomeRunning {
				sa.open[a.N] = true
			}
		}
		before[s.Name] = sa
		before.note(s.Items)
	}
}

// writtenAttempts is the progress an instance wrote last, as the next
// write's step events compare with it: its encoding, and the attempts
// read from it when it was written (attemptsOf). A task that holds
// exactly that encoding (no other process wrote since) is not decoded
// again: that decode reads every record, a for-each's items included, on
// every write, so it grew with the items (bench row 22). Anything else
// the task holds is decoded as before.
type writtenAttempts struct {
	raw    []byte
	before priorAttempts
	queued bool
}

// attemptsOf returns what stepEvents reads from raw, p encoded: the
// attempts of p's records (and those they hold, and the undo steps'), and
// whether p waits for its place on its queue.
func attemptsOf(raw []byte, p *Progress) *writtenAttempts {
	w := &writtenAttempts{raw: raw, before: priorAttempts{}, queued: p.Queue.waiting()}
	w.before.noteProgress(p.Steps)
	if p.Undo != nil {
		w.before.noteProgress(p.Undo.Steps)
	}
	return w
}

// noteProgress is note of records rs as they are, not encoded.
func (before priorAttempts) noteProgress(rs []StepProgress) {
	for i := range rs {
		s := &rs[i]
		sa := stepAttempts{count: s.Attempts, open: map[int]bool{}, queued: s.Queue.waiting()}
		for _, a := range s.History {
			if a.Outcome == OutcomeRunning {
				sa.open[a.N] = true
			}
		}
		before[s.Name] = sa
		before.noteProgress(s.Items)
	}
}

// stepAttempts is one step's attempts as the task held them.
type stepAttempts struct {
	count  int          // attempts made (StepProgress.Attempts)
	open   map[int]bool // attempts whose outcome was running, by number
	queued bool         // it waited for a place on its queue
}

// stepEvents returns the step events of writing p over the progress t
// holds (none when t holds none that reads: a first write reports every
// attempt p has): of every record, a step's, an item's or a run's a
// container keeps, an undo step's, so a reader sees an item fail, retry
// or be taken over, and the undo run, as it sees a step. last is what
// this instance wrote last (see writtenAttempts), or nil.
func stepEvents(t *store.Task, p *Progress, last *writtenAttempts) []store.Event {
	before := priorAttempts{}
	wasQueued := false
	if t != nil {
		raw, ok := t.Variables[VarProgress]
		var rec recordedAttempts
		switch {
		case ok && last != nil && bytes.Equal(raw, last.raw):
			before, wasQueued = last.before, last.queued
		case ok && json.Unmarshal(raw, &rec) == nil:
			before.note(rec.Steps)
			if rec.Undo != nil {
				before.note(rec.Undo.Steps)
			}
			wasQueued = rec.Queue != nil && rec.Queue.GrantedAt == nil
		}
	}
	var ended, started []store.Event
	if p.Queue.waiting() && !wasQueued {
		started = append(started, queueEvent("", p.Queue))
	}
	var walk func(records []StepProgress)
	walk = func(records []StepProgress) {
		for i := range records {
			sp := &records[i]
			prev := before[sp.Name]
			for _, a := range sp.History {
				switch {
				case a.N > prev.count: // opened by this write
					started = append(started, stepEvent(mcptask.EventStepStarted, sp, a))
					if a.Outcome != OutcomeRunning {
						started = append(started, stepEvent(mcptask.EventStepEnded, sp, a))
					}
				case prev.open[a.N] && a.Outcome != OutcomeRunning: // closed by this write
					ended = append(ended, stepEvent(mcptask.EventStepEnded, sp, a))
				}
			}
			if sp.Queue.waiting() && !prev.queued {
				started = append(started, queueEvent(sp.Name, sp.Queue))
			}
			walk(sp.Items)
		}
	}
	walk(p.Steps)
	if p.Undo != nil {
		walk(p.Undo.Steps)
	}
	return append(ended, started...)
}

// queueEvent is the EventStepQueued of record step ("" for the
// workflow) starting to wait for place q on its queue, so that a reader
// of the task's events, and a webhook told of steps, sees the wait as it
// sees an attempt.
func queueEvent(step string, q *QueuePlace) store.Event {
	data, _ := json.Marshal(mcptask.QueueEvent{Step: step, Queue: q.Queue, Key: q.Key, Why: q.Why}) // plain strings
	return store.Event{Type: mcptask.EventStepQueued, Data: data}
}

// stepEvent is the event of attempt a of step sp beginning
// (EventStepStarted) or ending (EventStepEnded).
func stepEvent(typ mcptask.EventType, sp *StepProgress, a Attempt) store.Event {
	ev := mcptask.StepEvent{Step: sp.Name, Attempt: a.N, Reason: a.Reason}
	if typ == mcptask.EventStepEnded {
		ev.Status, ev.Outcome, ev.Error = sp.Status, a.Outcome, a.Error
		if n := maxStepEventError; len(ev.Error) > n {
			for n > 0 && !utf8.RuneStart(ev.Error[n]) {
				n--
			}
			ev.Error = ev.Error[:n] + "…"
		}
	}
	data, _ := json.Marshal(ev) // plain strings and numbers
	return store.Event{Type: typ, Data: data}
}
