package mcptask

// The vocabulary of a workflow task's steps, shared by the workflow
// engine's progress (package workflow) and the handoff document a client
// reads (package handoff). The strings are spelled here only, and so is
// how a person names a step kind (StepKind.Label).

import "strings"

// StepStatus is the state of one step (workflow.StepProgress.Status,
// handoff.RemainingStep.Status, handoff.UndoStep.Status,
// StepEvent.Status): one of the Step* constants below. On the wire it is
// the plain string.
type StepStatus string

// Step statuses: the values of StepStatus.
const (
	// StepPending: not started.
	StepPending StepStatus = "pending"
	// StepRunning: the server is running the step (an attempt is open).
	StepRunning StepStatus = "running"
	// StepAwaitingClient: a client step whose inputs exist; the workflow
	// waits for the client to perform it.
	StepAwaitingClient StepStatus = "awaiting_client"
	// StepAwaitingEvent: an event step waits for its event.
	StepAwaitingEvent StepStatus = "awaiting_event"
	// StepSleeping: a sleep waits until its time.
	StepSleeping StepStatus = "sleeping"
	// StepAwaitingChild: a child workflow the step started runs its own
	// steps (on the server; its client steps, when it reaches them, are
	// the client's: the step is then awaiting_client).
	StepAwaitingChild StepStatus = "awaiting_child"
	// StepCompleted: done. (The same spelling as StatusCompleted, a
	// different vocabulary: a step's state, not a task's.)
	StepCompleted StepStatus = "completed"
	// StepFailed: the last attempt failed. (The same spelling as
	// StatusFailed.)
	StepFailed StepStatus = "failed"
	// StepSkipped: the step will not run.
	StepSkipped StepStatus = "skipped"
	// StepCancelled: the step was stopped before it ended because the
	// workflow failed without it. (The same spelling as StatusCancelled.)
	StepCancelled StepStatus = "cancelled"
)

// Execution says who performs a step: the server or the client.
type Execution string

// The executions.
const (
	// ExecServer steps are run by the server once their inputs exist.
	ExecServer Execution = "server"
	// ExecClient steps are performed by the client, which calls the step's
	// tool with _meta._task_id set to the task id.
	ExecClient Execution = "client"
)

// StepKind says what a step does. (Not to be confused with the kind of a
// task, taskrouter.LabelKind.)
type StepKind string

// The step kinds.
const (
	// StepKindTool calls a tool (the default).
	StepKindTool StepKind = "tool"
	// StepKindGroup runs its member steps in parallel.
	StepKindGroup StepKind = "group"
	// StepKindSleep waits, durably, for a time.
	StepKindSleep StepKind = "sleep"
	// StepKindEvent waits for a named event that an outsider delivers.
	StepKindEvent StepKind = "event"
	// StepKindForEach runs a step once per item of a list.
	StepKindForEach StepKind = "foreach"
	// StepKindLoop runs a step again until a condition holds.
	StepKindLoop StepKind = "loop"
	// StepKindChild starts another workflow, as its own task, and waits
	// for its end.
	StepKindChild StepKind = "child"
	// StepKindSampling has the client's own model write a text (a
	// sampling request).
	StepKindSampling StepKind = "sampling"
	// StepKindQuestion asks a person a question through the client (an
	// elicitation).
	StepKindQuestion StepKind = "question"
)

// stepKinds is every step kind with how a person names it: the one table
// of both, which the CLI, the terminal UI and the dashboard read (Label),
// and the workflow package's kinds are checked against.
var stepKinds = [...]struct {
	kind  StepKind
	label string
}{
	{StepKindTool, "tool call"},
	{StepKindGroup, "parallel group"},
	{StepKindSleep, "sleep"},
	{StepKindEvent, "event"},
	{StepKindForEach, "for-each"},
	{StepKindLoop, "loop"},
	{StepKindChild, "child workflow"},
	{StepKindSampling, "sampling"},
	{StepKindQuestion, "question"},
}

// StepKinds returns every step kind, in the order they were added.
func StepKinds() []StepKind {
	out := make([]StepKind, len(stepKinds))
	for i, k := range stepKinds {
		out[i] = k.kind
	}
	return out
}

// Label is how a person names the kind: "for-each", "child workflow",
// "parallel group". A kind this module does not know (a newer server's)
// is named by its wire name, underscores read as spaces.
func (k StepKind) Label() string {
	for _, sk := range stepKinds {
		if sk.kind == k {
			return sk.label
		}
	}
	return strings.ReplaceAll(string(k), "_", " ")
}
