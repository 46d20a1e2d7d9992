package mcptask

import "encoding/json"

// The vocabulary of a task's event log: the kinds of events a task's log
// holds (the store keeps them, numbered per task; see store.Event) and the
// JSON payload of each. A resumable task event stream (SEP-2694's
// tasks/stream, taskbridge's own before it) sends these words as event
// types; a wire form that wants vendor-prefixed types prefixes them there.
//
// The store writes EventStatus itself, for every status a task enters;
// the engine writes the others. An EventType is a short word of visible
// ASCII (no spaces, no control characters), so it can name an SSE event
// as is; a server may log kinds of its own beside these ones.

// EventType names the kind of a task event.
type EventType string

// The event types.
const (
	// EventStatus: the task entered a status (its first, at creation, or
	// a new one). Written by the store in the same write as the status,
	// after the write's other events: an ended task's last event is its
	// terminal status. Payload: StatusEvent.
	EventStatus EventType = "status"
	// EventStepStarted: a step of a workflow task began an attempt.
	// Payload: StepEvent.
	EventStepStarted EventType = "step_started"
	// EventStepEnded: a step's attempt ended (completed, failed, ...).
	// Payload: StepEvent.
	EventStepEnded EventType = "step_ended"
	// EventStepQueued: a workflow, or one of its steps or items, waits
	// for its place on a queue. Payload: QueueEvent.
	EventStepQueued EventType = "step_queued"
	// EventProgress: a handler or step reported progress. Payload:
	// ProgressEvent.
	EventProgress EventType = "progress"
	// EventLog: a handler or step wrote a log line. Payload: LogEvent.
	EventLog EventType = "log"
	// EventOutput: a step published partial output. Payload: OutputEvent.
	EventOutput EventType = "output"
	// EventInputRequest: the task asks its client for input. Payload:
	// InputRequestEvent.
	EventInputRequest EventType = "input_request"
	// EventAction: someone acted on the task (paused or resumed a
	// workflow, ...). Payload: ActionEvent.
	EventAction EventType = "action"
	// EventDropped is never stored: a reader shows it where the log
	// dropped events (its caps keep only the latest) before the reader
	// read them. Payload: DroppedEvent.
	EventDropped EventType = "dropped"
)

// StatusEvent is the payload of EventStatus.
type StatusEvent struct {
	// Status is the status the task entered.
	Status Status `json:"status"`
	// StatusMessage is the task's status message right after the change,
	// cut short (ending in "…") when it would not fit an event.
	StatusMessage string `json:"statusMessage,omitempty"`
}

// StepEvent is the payload of EventStepStarted and EventStepEnded.
type StepEvent struct {
	// Step names the step.
	Step string `json:"step"`
	// Attempt counts the step's attempts, from 1.
	Attempt int `json:"attempt,omitempty"`
	// Reason says why the attempt was made: "first", "retry", "restart"
	// (its process stopped), "takeover" (another replica took the task
	// over: the process running it stopped renewing its lease), "resume",
	// "client", "timeout" (the workflow package's Reason values).
	Reason string `json:"reason,omitempty"`
	// Status is the step's status after an EventStepEnded (a step status:
	// StepCompleted, StepFailed, ...).
	Status StepStatus `json:"status,omitempty"`
	// Outcome is how an EventStepEnded's attempt ended: "ok", "error",
	// "stopped" (a graceful stop handed it back) or "cancelled".
	Outcome string `json:"outcome,omitempty"`
	// Error says why an attempt failed.
	Error string `json:"error,omitempty"`
}

// QueueEvent is the payload of EventStepQueued.
type QueueEvent struct {
	// Step names the step (an item as "step[i]"); empty when the
	// workflow as a whole waits for its place.
	Step string `json:"step,omitempty"`
	// Queue names the queue.
	Queue string `json:"queue"`
	// Key is the place's key on the queue, if it has one.
	Key string `json:"key,omitempty"`
	// Why says what the place waits for (the limit that is full).
	Why string `json:"why,omitempty"`
}

// ProgressEvent is the payload of EventProgress, the fields of MCP's
// notifications/progress.
type ProgressEvent struct {
	// Progress is how much is done; it grows with each report.
	Progress float64 `json:"progress"`
	// Total is the whole, when known.
	Total float64 `json:"total,omitempty"`
	// Message says what is happening.
	Message string `json:"message,omitempty"`
	// Step names the workflow step reporting, if any.
	Step string `json:"step,omitempty"`
}

// LogEvent is the payload of EventLog.
type LogEvent struct {
	// Level is the line's level: "debug", "info", "warn" or "error" (as
	// log/slog spells them, lower case).
	Level string `json:"level"`
	// Message is the line.
	Message string `json:"message"`
	// Attrs are the line's attributes, a JSON object.
	Attrs json.RawMessage `json:"attrs,omitempty"`
	// Step names the workflow step logging, if any.
	Step string `json:"step,omitempty"`
}

// OutputEvent is the payload of EventOutput.
type OutputEvent struct {
	// Step names the step publishing, if any.
	Step string `json:"step,omitempty"`
	// Output is the partial output, any JSON value (MCP content blocks,
	// say).
	Output json.RawMessage `json:"output"`
}

// InputRequestEvent is the payload of EventInputRequest.
type InputRequestEvent struct {
	// InputRequests are the requests, by key, in the form tasks/get shows
	// them (TaskWire.InputRequests).
	InputRequests map[string]json.RawMessage `json:"inputRequests"`
}

// ActionEvent is the payload of EventAction.
type ActionEvent struct {
	// Action says what was done: "paused", "resumed", ...
	Action string `json:"action"`
	// By names who did it: a requestor's owner, an operator's name, or
	// the server.
	By string `json:"by"`
	// Reason says why, when they said.
	Reason string `json:"reason,omitempty"`
}

// DroppedEvent is the payload of EventDropped.
type DroppedEvent struct {
	// Count is the number of events dropped.
	Count uint64 `json:"count"`
	// Next is the sequence number of the first event kept after them.
	Next uint64 `json:"next,omitempty"`
}
