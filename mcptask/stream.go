package mcptask

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The resumable task event stream on the wire: tasks/stream and
// notifications/tasks/event, in the shape of SEP-2694's draft (a request
// naming a task and the sequence number to resume after; one notification
// per event, numbered per task, with a vendor-prefixed type), plus what
// the draft leaves open under taskbridge's names (EventTypePrefix,
// MetaEventAt, MetaStream). Both dialects serve it.
//
//	→ {"method": "tasks/stream", "params": {"taskId": "…", "after": 12}}
//	← {"method": "notifications/tasks/event", "params": {"taskId": "…", "seq": 13,
//	     "type": "io.taskbridge/progress", "data": {"progress": 3, "total": 4},
//	     "_meta": {"io.taskbridge/at": "2026-11-30T10:00:00Z"}}}
//	← … one per event, live, until the task has ended …
//	← {"result": {"_meta": {"io.taskbridge/stream": {"last": 20, "status": "completed"}}}}

const (
	// MethodTasksStream reads a task's events after a sequence number and
	// keeps the request open for new ones until the task has ended
	// (params: StreamParams; notifications: NotificationTaskEvent; result:
	// StreamResult).
	MethodTasksStream = "tasks/stream"
	// NotificationTaskEvent carries one event of a tasks/stream (params:
	// TaskEventParams).
	NotificationTaskEvent = "notifications/tasks/event"
	// EventTypePrefix prefixes taskbridge's event types on the wire
	// (EventType.Wire): the draft asks for vendor-prefixed types.
	EventTypePrefix = "io.taskbridge/"
	// MetaEventAt is the _meta key of TaskEventParams that says when the
	// event happened (RFC 3339, UTC).
	MetaEventAt = "io.taskbridge/at"
	// MetaStream is the _meta key of a tasks/stream result: a StreamEnd.
	MetaStream = "io.taskbridge/stream"
)

// Wire returns the event type as tasks/stream sends it: EventTypePrefix
// and the word.
func (t EventType) Wire() string { return EventTypePrefix + string(t) }

// EventTypeOf reads an event type tasks/stream sent: a type under
// EventTypePrefix loses the prefix; any other (another vendor's) is kept
// whole.
func EventTypeOf(wire string) EventType {
	return EventType(strings.TrimPrefix(wire, EventTypePrefix))
}

// StreamParams are the params of tasks/stream.
type StreamParams struct {
	// TaskID names the task.
	TaskID string `json:"taskId"`
	// After is the sequence number of the last event the client has: the
	// stream starts with the event after it (0, or absent: from the
	// oldest event the task's log keeps).
	After uint64 `json:"after,omitempty"`
}

// TaskEventParams are the params of NotificationTaskEvent: one event of a
// task's log.
type TaskEventParams struct {
	// TaskID names the task.
	TaskID string `json:"taskId"`
	// Seq numbers the event in its task's log: 1, 2, 3, ... in the order
	// the events happened, never reused. A dropped marker (EventDropped)
	// carries the number of the last event it stands for, so that a client
	// that resumes after it starts at the first event kept.
	Seq uint64 `json:"seq"`
	// Type is the event's type, vendor-prefixed (EventType.Wire).
	Type string `json:"type"`
	// Data is the event's payload (for taskbridge's types, the payload
	// struct of the type in events.go).
	Data json.RawMessage `json:"data,omitempty"`
	// Meta holds MetaEventAt.
	Meta map[string]any `json:"_meta,omitempty"`
}

// StreamEnd is the value of MetaStream in a tasks/stream result: where
// the stream ended.
type StreamEnd struct {
	// Last is the sequence number of the last event sent (the task's
	// terminal status event, normally): resuming after it sends nothing.
	Last uint64 `json:"last"`
	// Status is the task's status when the stream ended.
	Status Status `json:"status"`
}

// EventLine renders an event as one line a person reads (a CLI printing a
// task's progress, a dashboard, a model's "still working" answer): its
// step, what happened and the payload's words, without a newline. A
// payload it cannot read is shown as its JSON, cut short.
func EventLine(t EventType, data json.RawMessage) string {
	switch t {
	case EventProgress:
		var p ProgressEvent
		if json.Unmarshal(data, &p) == nil {
			return stepPrefix(p.Step) + progressText(p)
		}
	case EventLog:
		var l LogEvent
		if json.Unmarshal(data, &l) == nil {
			s := stepPrefix(l.Step) + l.Level + ": " + l.Message
			if len(l.Attrs) > 0 && string(l.Attrs) != "{}" {
				s += " " + cut(string(l.Attrs), 300)
			}
			return oneLine(s)
		}
	case EventStatus:
		var s StatusEvent
		if json.Unmarshal(data, &s) == nil {
			if s.StatusMessage != "" {
				return oneLine("status " + string(s.Status) + ": " + s.StatusMessage)
			}
			return "status " + string(s.Status)
		}
	case EventStepStarted, EventStepEnded:
		var s StepEvent
		if json.Unmarshal(data, &s) == nil {
			return stepText(t, s)
		}
	case EventStepQueued:
		var q QueueEvent
		if json.Unmarshal(data, &q) == nil {
			return oneLine(stepPrefix(q.Step) + q.Line())
		}
	case EventOutput:
		var o OutputEvent
		if json.Unmarshal(data, &o) == nil {
			return stepPrefix(o.Step) + "output: " + cut(string(o.Output), 300)
		}
	case EventInputRequest:
		var in InputRequestEvent
		if json.Unmarshal(data, &in) == nil {
			keys := make([]string, 0, len(in.InputRequests))
			for k := range in.InputRequests {
				keys = append(keys, k)
			}
			return "input requested: " + strings.Join(keys, ", ")
		}
	case EventPaused:
		var pe PausedEvent
		if json.Unmarshal(data, &pe) == nil {
			return oneLine("paused: " + pe.Reason)
		}
	case EventPushFailed:
		var f PushFailedEvent
		if json.Unmarshal(data, &f) == nil {
			return oneLine(fmt.Sprintf("push to webhook %s failed after %d attempt(s): %s", f.WebhookID, f.Attempts, f.Error))
		}
	case EventDropped:
		var d DroppedEvent
		if json.Unmarshal(data, &d) == nil {
			return fmt.Sprintf("… %d earlier events dropped (the log keeps the latest); continuing at %d", d.Count, d.Next)
		}
	}
	return oneLine(string(t) + " " + cut(string(data), 300))
}

// Line says where q waits, as a status line says it: queued on "deploys"
// (key "a"): why.
func (q QueueEvent) Line() string {
	s := fmt.Sprintf("queued on %q", q.Queue)
	if q.Key != "" {
		s += fmt.Sprintf(" (key %q)", q.Key)
	}
	if q.Why != "" {
		s += ": " + q.Why
	}
	return s
}

func stepPrefix(step string) string {
	if step == "" {
		return ""
	}
	return step + ": "
}

func progressText(p ProgressEvent) string {
	var s string
	switch {
	case p.Total > 0:
		s = fmt.Sprintf("%s/%s (%d%%)", number(p.Progress), number(p.Total), int(100*p.Progress/p.Total))
	default:
		s = number(p.Progress)
	}
	if p.Message != "" {
		s += " " + p.Message
	}
	return oneLine(s)
}

func stepText(t EventType, s StepEvent) string {
	attempt := ""
	if s.Attempt > 1 {
		attempt = fmt.Sprintf(" (attempt %d)", s.Attempt)
	}
	if t == EventStepStarted {
		return "step " + s.Step + " started" + attempt
	}
	what := string(s.Status)
	if s.Outcome != "" && s.Outcome != "ok" {
		what = s.Outcome
	}
	line := "step " + s.Step + " " + what + attempt
	if s.Error != "" {
		line += ": " + s.Error
	}
	return oneLine(line)
}

// number prints a progress count without trailing zeros.
func number(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// cut shortens s to about n bytes, ending in "…".
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// oneLine folds the line breaks of s into spaces.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(strings.NewReplacer("\r", " ", "\n", " ").Replace(s)), " ")
}
