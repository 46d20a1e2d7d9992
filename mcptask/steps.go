package mcptask

// The vocabulary of a workflow task's steps, shared by the workflow
// engine's progress (package workflow) and the handoff document a client
// reads (package handoff). The strings are spelled here only; the names
// those packages re-exported them under are deprecated.

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
)
