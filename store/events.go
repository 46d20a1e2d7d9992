package store

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/taskbridge/taskbridge/mcptask"
)

// A task's event log: what happened to it, in order (status changes, step
// attempts, progress, log lines, partial output, input requests; the
// vocabulary is mcptask.EventType). Events are appended by the writes that
// make them happen (Update.Events, Task.Events on Create, and the status
// event the store adds itself), numbered 1, 2, 3, ... per task, bounded by
// Limits (the oldest are dropped), read with Store.Events, and deleted
// with the task.

// Event is one entry of a task's event log.
type Event struct {
	// Seq numbers the event in its task's log: 1 for the first, one more
	// for each next. The store assigns it (a Seq given to Create or Update
	// is ignored); it never repeats or goes back, also after old events
	// were dropped and across restarts.
	Seq uint64
	// At is when the event happened. A zero At given to Create or Update
	// becomes the write's time (the task's UpdatedAt for Create and for an
	// update that bumps Version, the store's clock for a pure append).
	At time.Time
	// Type is the event's kind: one of the mcptask.EventType values, or a
	// server's own word. It is 1 to MaxEventTypeBytes bytes of visible
	// ASCII (no space, no control character).
	Type mcptask.EventType
	// Data is the event's JSON payload (for the mcptask types, the
	// matching mcptask payload struct); nil for none.
	Data json.RawMessage
}

// MaxEventTypeBytes bounds Event.Type.
const MaxEventTypeBytes = 128

// EventSize is the size of an event as its limits count it: the bytes of
// its Type and Data.
func EventSize(e Event) int { return len(e.Type) + len(e.Data) }

// EventPage is one read of a task's event log (Store.Events).
type EventPage struct {
	// Events are the task's events with Seq after the read's after, oldest
	// first, at most the read's limit.
	Events []Event
	// First is the Seq of the oldest event the log keeps; 0 when it keeps
	// none.
	First uint64
	// Last is the Seq of the newest event; 0 when the task has none. A
	// read with after >= Last returns no events.
	Last uint64
	// Dropped is the number of events after the read's after that the log
	// dropped (its caps keep only the latest) before they were read:
	// Seq after+1 to First-1. A reader shows a marker for them
	// (mcptask.EventDropped).
	Dropped uint64
}

// NewEventPage returns the page of a read after after of a log that keeps
// the events first..last (both 0 when it keeps none), events being the
// ones read: it computes Dropped.
func NewEventPage(after, first, last uint64, events []Event) EventPage {
	p := EventPage{Events: events, First: first, Last: last}
	if first > after+1 {
		p.Dropped = first - after - 1
	}
	return p
}

// LoggedEvent is an event as a backend stores it: with its place in its
// task's log.
type LoggedEvent struct {
	Event
	// Pos is the event's offset in the log: the total EventSize of the
	// task's events before it, dropped ones included. The byte cap drops
	// events by it (see AppendPlan).
	Pos int64
}

// End is the offset just after e: the Pos the next event gets.
func (e LoggedEvent) End() int64 { return e.Pos + int64(EventSize(e.Event)) }

// AppendPlan is an append to a task's event log as a backend carries it
// out (Limits.PlanAppend): store Events, then drop every stored event of
// the task whose Seq is below DropSeq or whose Pos is below DropPos. Both
// grow along the log, so the dropped events are the oldest ones: a
// backend drops from the first while either bound holds. The newest
// event is always kept, so a log's newest stored event tells its Last and
// End after a restart.
type AppendPlan struct {
	// Events are the new events to store, numbered and placed, without
	// those the caps drop at once (a write of more events than MaxEvents
	// keeps its latest).
	Events []LoggedEvent
	// DropSeq keeps the latest MaxEvents events.
	DropSeq uint64
	// DropPos keeps the latest MaxEventLogBytes bytes of events.
	DropPos int64
	// Last is the Seq of the newest event after the append.
	Last uint64
	// End is the End of the newest event after the append.
	End int64
}

// PlanAppend plans the append of events (checked, their At set: as
// Changes.Events or Create's record carry them) to a log whose newest
// event has Seq last and End end (0 and 0 for a log that never had one),
// under l's caps (after WithDefaults).
func (l Limits) PlanAppend(last uint64, end int64, events []Event) AppendPlan {
	p := AppendPlan{Last: last, End: end}
	all := make([]LoggedEvent, len(events))
	for i, e := range events {
		p.Last++
		e.Seq = p.Last
		all[i] = LoggedEvent{Event: e, Pos: p.End}
		p.End += int64(EventSize(e))
	}
	if p.Last > uint64(l.MaxEvents) {
		p.DropSeq = p.Last - uint64(l.MaxEvents) + 1
	}
	p.DropPos = p.End - int64(l.MaxEventLogBytes)
	keep := 0
	for keep < len(all) && (all[keep].Seq < p.DropSeq || all[keep].Pos < p.DropPos) {
		keep++
	}
	p.Events = all[keep:]
	return p
}

// Dropped reports whether the plan drops a stored event e.
func (p AppendPlan) Dropped(e LoggedEvent) bool { return e.Seq < p.DropSeq || e.Pos < p.DropPos }

// checkEvents checks events given to Create or Update: a Type of visible
// ASCII within MaxEventTypeBytes, Data valid JSON, the event within
// MaxEventBytes, At representable.
func checkEvents(events []Event, lim Limits) error {
	for i, e := range events {
		if err := checkEventType(e.Type); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		if n := EventSize(e); n > lim.MaxEventBytes {
			return tooLarge(fmt.Sprintf("event %d (%s)", i, e.Type), n, lim.MaxEventBytes)
		}
		if len(e.Data) > 0 && !json.Valid(e.Data) {
			return invalid("event %d (%s): data is not valid JSON", i, e.Type)
		}
		if !e.At.IsZero() && !ValidTime(e.At) {
			return invalid("event %d (%s): At %v out of range", i, e.Type, e.At)
		}
	}
	return nil
}

func checkEventType(t mcptask.EventType) error {
	if t == "" {
		return invalid("empty event type")
	}
	if len(t) > MaxEventTypeBytes {
		return invalid("event type is %d bytes, limit %d", len(t), MaxEventTypeBytes)
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c > '~' {
			return invalid("event type %q: only visible ASCII", t)
		}
	}
	return nil
}

// stampEvents returns private copies of events with a zero At set to at
// and every At in UTC.
func stampEvents(events []Event, at time.Time) []Event {
	if len(events) == 0 {
		return nil
	}
	out := make([]Event, len(events))
	for i, e := range events {
		if e.At.IsZero() {
			e.At = at
		}
		e.At = e.At.UTC()
		e.Seq = 0
		e.Data = cloneRaw(e.Data)
		if len(e.Data) == 0 {
			e.Data = nil
		}
		out[i] = e
	}
	return out
}

// statusEvent is the EventStatus event of t's current status, at
// t.UpdatedAt, its message cut short (ending in "…") to fit
// lim.MaxEventBytes: the longest cut that fits, found by bisection, since
// escaping makes a message's JSON up to six times its length.
func statusEvent(t *Task, lim Limits) Event {
	build := func(msg string) Event {
		data, err := json.Marshal(mcptask.StatusEvent{Status: t.Status, StatusMessage: msg})
		if err != nil { // a struct of two strings always marshals
			panic(err)
		}
		return Event{At: t.UpdatedAt, Type: mcptask.EventStatus, Data: data}
	}
	fits := func(e Event) bool { return EventSize(e) <= lim.MaxEventBytes }
	if e := build(t.StatusMessage); fits(e) {
		return e
	}
	cut := func(n int) string {
		if c := cutString(t.StatusMessage, n); c != "" {
			return c + "…"
		}
		return ""
	}
	// Cut at lo fits (no message at all does: MinEventBytes), at hi not.
	lo, hi := 0, len(t.StatusMessage)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if fits(build(cut(mid))) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return build(cut(lo))
}

// cutString returns s cut to at most n bytes, not inside a UTF-8
// sequence; "" when n <= 0.
func cutString(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
