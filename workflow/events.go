package workflow

import (
	"encoding/json"
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
// compare: each step's attempt count and its attempts' outcomes.
type recordedAttempts struct {
	Steps []struct {
		Name     string `json:"name"`
		Attempts int    `json:"attempts"`
		History  []struct {
			N       int    `json:"n"`
			Outcome string `json:"outcome"`
		} `json:"history"`
	} `json:"steps"`
}

// stepAttempts is one step's attempts as the task held them.
type stepAttempts struct {
	count int          // attempts made (StepProgress.Attempts)
	open  map[int]bool // attempts whose outcome was running, by number
}

// stepEvents returns the step events of writing p over the progress t
// holds (none when t holds none that reads: a first write reports every
// attempt p has).
func stepEvents(t *store.Task, p *Progress) []store.Event {
	before := map[string]stepAttempts{}
	if t != nil {
		var rec recordedAttempts
		if raw, ok := t.Variables[VarProgress]; ok && json.Unmarshal(raw, &rec) == nil {
			for _, s := range rec.Steps {
				sa := stepAttempts{count: s.Attempts, open: map[int]bool{}}
				for _, a := range s.History {
					if a.Outcome == OutcomeRunning {
						sa.open[a.N] = true
					}
				}
				before[s.Name] = sa
			}
		}
	}
	var ended, started []store.Event
	for i := range p.Steps {
		sp := &p.Steps[i]
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
	}
	return append(ended, started...)
}

// stepEvent is the event of attempt a of step sp beginning
// (EventStepStarted) or ending (EventStepEnded).
func stepEvent(typ mcptask.EventType, sp *StepProgress, a Attempt) store.Event {
	ev := mcptask.StepEvent{Step: sp.Name, Attempt: a.N}
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
