// Package mcptask is the vocabulary of MCP tasks that every other
// taskbridge package shares: task statuses, the two wire dialects, protocol
// versions, method names, _meta keys, JSON-RPC error codes and their
// constructors, tool task support levels, the wire shapes of a task, the
// workflow summary a taskbridge server attaches to continuation results,
// and the step vocabulary of workflow tasks (step statuses, executions and
// step kinds) that the workflow progress and the handoff document share.
//
// It is a leaf: it imports only the standard library and go-sdk's small
// jsonrpc package, so the store, the engine (taskrouter), the workflow
// bridge, the handoff document and the Go client can all depend on it
// without depending on each other (River's rivertype plays the same role).
//
// # Dialects
//
// Two incompatible wire dialects of MCP tasks exist. A [Dialect] is resolved
// once per request (from the negotiated protocol version, see [DialectFor])
// and answers the questions the code asks about the difference (the
// method column):
//
//	question                           Core (2025-11-25)             Extension (2026-07-28)   method
//	tasks/result, tasks/list           yes                           no (-32601)              HasMethod
//	tasks/update                       no (-32601)                   yes                      HasMethod
//	who decides a call is a task       the client (params.task)      the server               ServerDecidesTasks
//	create reply                       {"task": {...}}               flat, resultType "task"
//	status of an isError tool result   failed                        completed                ToolErrorStatus
//	tasks/cancel of a finished task    -32602                        acknowledged             AcksFinishedCancel
//	tasks/cancel reply                 the task                      an acknowledgement       AcksCancel
//	input a call needs before a task   asked on its stream           input_required, retried  ClientRetriesWithInput
//	who chooses a task's ttl           the client (params.task.ttl)  the server               ServerSetsTTL
//	a tool without taskSupport         no task (forbidden)           the server decides       UndeclaredForbidsTasks
//	task capabilities of a server      one per request               the extension, whole     ServerDeclaresTaskMethods
//	version, capabilities, clientInfo  initialize, once              _meta of every request   NegotiatesPerRequest
//	server's task requests to client   yes (capabilities.tasks)      no                       ClientRunsTasks
package mcptask

import (
	"encoding/json"
	"fmt"
)

// Status is the lifecycle state of a task; the values are the MCP wire
// strings.
type Status string

// The task statuses. The last three are terminal: a task in one of them
// never changes again.
const (
	StatusWorking       Status = "working"
	StatusInputRequired Status = "input_required"
	StatusCompleted     Status = "completed"
	StatusFailed        Status = "failed"
	StatusCancelled     Status = "cancelled"
)

// Statuses lists every status, in lifecycle order.
var Statuses = []Status{StatusWorking, StatusInputRequired, StatusCompleted, StatusFailed, StatusCancelled}

// Valid reports whether s is one of the five statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusWorking, StatusInputRequired, StatusCompleted, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// Terminal reports whether s is a final status that never changes.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Protocol versions and the extension's identifier.
const (
	// CoreVersion is the protocol version of the core tasks dialect.
	CoreVersion = "2025-11-25"
	// ExtensionVersion is the first protocol version that speaks the tasks
	// extension instead of core tasks.
	ExtensionVersion = "2026-07-28"
	// ExtensionID identifies the tasks extension in capabilities.
	ExtensionID = "io.modelcontextprotocol/tasks"
)

// Dialect is an MCP tasks wire dialect. The zero value is no dialect (a
// client that has not negotiated yet); servers resolve every request to
// Core or Extension with DialectFor.
type Dialect uint8

// The dialects.
const (
	// Core is the 2025-11-25 core tasks dialect (SEP-1686).
	Core Dialect = 1
	// Extension is the 2026-07-28 io.modelcontextprotocol/tasks extension
	// (SEP-2663).
	Extension Dialect = 2
)

// DialectFor returns the dialect a request at protocolVersion speaks:
// Extension from ExtensionVersion on, Core before it (and for an empty
// version, which predates negotiation).
func DialectFor(protocolVersion string) Dialect {
	if protocolVersion >= ExtensionVersion {
		return Extension
	}
	return Core
}

// ParseDialect reads a dialect name: "core", or "extension" (also its
// stored label "ext").
func ParseDialect(s string) (Dialect, error) {
	switch s {
	case "core":
		return Core, nil
	case "extension", "ext":
		return Extension, nil
	}
	return 0, fmt.Errorf("unknown dialect %q (want core or extension)", s)
}

// String returns "core", "extension", or "none" for the zero value.
func (d Dialect) String() string {
	switch d {
	case Core:
		return "core"
	case Extension:
		return "extension"
	}
	return "none"
}

// Label is the short form kept on stored task records: "core" or "ext".
func (d Dialect) Label() string {
	if d == Extension {
		return "ext"
	}
	return "core"
}

// ProtocolVersion is the protocol version a client negotiates for d.
func (d Dialect) ProtocolVersion() string {
	if d == Extension {
		return ExtensionVersion
	}
	return CoreVersion
}

// HasMethod reports whether method exists in the dialect. Only the task
// methods differ: tasks/result and tasks/list are core only, tasks/update is
// extension only; every other method exists in both.
func (d Dialect) HasMethod(method string) bool {
	switch method {
	case MethodTasksResult, MethodTasksList:
		return d == Core
	case MethodTasksUpdate:
		return d == Extension
	}
	return true
}

// ToolErrorStatus is the status dialect d shows for a task that ended
// with a tool result with isError set: failed in the core dialect;
// completed in the extension, which reserves failed for JSON-RPC errors.
// (taskbridge's store records such a task as failed in either dialect;
// the extension's replies show it as completed.)
func (d Dialect) ToolErrorStatus() Status {
	if d == Extension {
		return StatusCompleted
	}
	return StatusFailed
}

// AcksFinishedCancel reports whether tasks/cancel of a task that has
// already ended is acknowledged (extension) rather than refused with -32602
// (core).
func (d Dialect) AcksFinishedCancel() bool { return d == Extension }

// ServerDecidesTasks reports whether the server decides which tools/call
// requests become tasks (extension) rather than the client asking with
// params.task (core).
func (d Dialect) ServerDecidesTasks() bool { return d == Extension }

// AcksCancel reports whether tasks/cancel is only acknowledged, its reply
// carrying no task, so that a client reads the task's state with tasks/get
// (extension), rather than answered with the task (core). For a task that
// has already ended, see AcksFinishedCancel.
func (d Dialect) AcksCancel() bool { return d == Extension }

// ClientRetriesWithInput reports whether a tools/call that needs input
// before its task exists is answered with an input_required result, which
// the client retries with inputResponses (extension, SEP-2322), rather
// than the server asking the client on the request's own stream (core).
func (d Dialect) ClientRetriesWithInput() bool { return d == Extension }

// ServerSetsTTL reports whether the server chooses every task's ttl
// (extension) rather than the client asking for one with params.task.ttl
// (core).
func (d Dialect) ServerSetsTTL() bool { return d == Extension }

// UndeclaredForbidsTasks reports whether a tool that states no
// execution.taskSupport cannot be called as a task (core, where the level
// defaults to forbidden), rather than the server deciding (extension).
func (d Dialect) UndeclaredForbidsTasks() bool { return d == Core }

// ServerDeclaresTaskMethods reports whether a server declares, one by one,
// the task requests it answers (capabilities.tasks: list, cancel,
// requests.tools.call; core), so that a client checks the one it is about
// to send, rather than advertising the tasks extension as a whole
// (extension).
func (d Dialect) ServerDeclaresTaskMethods() bool { return d == Core }

// NegotiatesPerRequest reports whether every request carries its protocol
// version, client capabilities and client info in _meta (extension; see
// MetaProtocolVersion), rather than the session negotiating them once with
// initialize (core).
func (d Dialect) NegotiatesPerRequest() bool { return d == Extension }

// ClientRunsTasks reports whether the client may run tasks for the server:
// answer a task-augmented sampling/createMessage or elicitation/create
// (params.task) with a task it then serves with tasks/*, as it declares
// with capabilities.tasks in initialize (core). taskbridge's client does
// not in the extension dialect.
func (d Dialect) ClientRunsTasks() bool { return d == Core }

// Method names.
const (
	MethodInitialize          = "initialize"
	MethodInitialized         = "notifications/initialized"
	MethodDiscover            = "server/discover"
	MethodToolsList           = "tools/list"
	MethodToolsCall           = "tools/call"
	MethodPromptsGet          = "prompts/get"
	MethodPromptsList         = "prompts/list"
	MethodTasksGet            = "tasks/get"
	MethodTasksResult         = "tasks/result"
	MethodTasksList           = "tasks/list"
	MethodTasksCancel         = "tasks/cancel"
	MethodTasksUpdate         = "tasks/update"
	MethodSubscriptionsListen = "subscriptions/listen"
	MethodElicit              = "elicitation/create"
	MethodSampling            = "sampling/createMessage"
	MethodRootsList           = "roots/list"
	MethodPing                = "ping"
	// MethodCancelled is the notification that cancels a request.
	MethodCancelled = "notifications/cancelled"

	// NotificationTaskStatus is the core dialect's status push
	// (params: the full task).
	NotificationTaskStatus = "notifications/tasks/status"
	// NotificationTasks is the extension dialect's status push, sent on a
	// subscriptions/listen stream (params: the full task).
	NotificationTasks = "notifications/tasks"
)

// IsTaskMethod reports whether method is one of the tasks/* requests.
func IsTaskMethod(method string) bool {
	switch method {
	case MethodTasksGet, MethodTasksResult, MethodTasksList, MethodTasksCancel, MethodTasksUpdate:
		return true
	}
	return false
}

// _meta keys defined by MCP.
const (
	// MetaRelatedTask ties a message to a task: {"taskId": "..."}.
	MetaRelatedTask = "io.modelcontextprotocol/related-task"
	// MetaModelImmediateResponse is the optional text for the model in a
	// core-dialect create reply.
	MetaModelImmediateResponse = "io.modelcontextprotocol/model-immediate-response"
	// MetaProtocolVersion, MetaClientCapabilities and MetaClientInfo carry
	// the per-request negotiation of 2026-07-28 and later.
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	// MetaServerInfo carries the server's implementation in server/discover.
	MetaServerInfo = "io.modelcontextprotocol/serverInfo"
)

// _meta keys defined by taskbridge.
const (
	// MetaTaskID binds a tools/call (or, to resume, a prompts/get) to an
	// existing workflow task: "_meta": {"_task_id": "<id>"}.
	MetaTaskID = "_task_id"
	// ArgTaskID is the same binding as a tool or prompt argument, for
	// clients that cannot set _meta (a model in an LLM host):
	// "arguments": {"_task_id": "<id>", ...}. The engine removes it before
	// the tool sees its arguments.
	ArgTaskID = "_task_id"
	// MetaTaskVars carries task variables a continuation call sets (an
	// object of JSON values).
	MetaTaskVars = "_task_vars"
	// MetaWorkflow is the key of the WorkflowSummary a taskbridge server
	// adds to the result of a continuation call.
	MetaWorkflow = "taskbridge/workflow"
	// MetaHandoff is the key of the handoff document in a workflow
	// prompt's GetPromptResult.
	MetaHandoff = "taskbridge/handoff"
	// MetaIdempotencyKey is set on the tools/call of a workflow server
	// step: the same value for every run of one step of one task, so a tool
	// with side effects can recognise a re-run.
	MetaIdempotencyKey = "taskbridge/idempotency-key"
	// PrivateMetaPrefix starts the _meta keys the library adds for itself
	// on the way in (the transport shims); they are removed before any
	// handler sees the request.
	PrivateMetaPrefix = "taskbridge/private/"
)

// RelatedTask is the value of MetaRelatedTask.
type RelatedTask struct {
	TaskID string `json:"taskId"`
}

// RelatedTaskMeta returns a _meta map naming the related task.
func RelatedTaskMeta(taskID string) map[string]any {
	return map[string]any{MetaRelatedTask: RelatedTask{TaskID: taskID}}
}

// TaskSupport is a tool's execution.taskSupport.
type TaskSupport string

// The task support levels. A tool that does not state one is
// TaskForbidden.
const (
	TaskForbidden TaskSupport = "forbidden"
	TaskOptional  TaskSupport = "optional"
	TaskRequired  TaskSupport = "required"
)

// Valid reports whether s is one of the three levels.
func (s TaskSupport) Valid() bool {
	return s == TaskForbidden || s == TaskOptional || s == TaskRequired
}

// WorkflowSummary is _meta["taskbridge/workflow"] of a continuation call's
// result: where the workflow stands after the call.
type WorkflowSummary struct {
	// TaskID is the workflow task.
	TaskID string `json:"taskId"`
	// Workflow is the workflow (prompt) name.
	Workflow string `json:"workflow,omitempty"`
	// Status is the task status after the call.
	Status Status `json:"status"`
	// StatusMessage is the task's status message after the call.
	StatusMessage string `json:"statusMessage,omitempty"`
	// Step is the step the call performed.
	Step string `json:"step,omitempty"`
	// Replayed is true when the call repeated a step that was already
	// recorded with the same arguments: the result is the recorded one and
	// the tool did not run again.
	Replayed bool `json:"replayed,omitempty"`
	// RemainingSteps names the steps still to do, in order.
	RemainingSteps []string `json:"remainingSteps"`
	// ClientSteps names the remaining steps the client may perform now.
	ClientSteps []string `json:"clientSteps,omitempty"`
	// PauseReason says why the server stopped running steps.
	PauseReason string `json:"pauseReason,omitempty"`
}

// SummaryFromMeta reads the WorkflowSummary in meta[MetaWorkflow] (a
// continuation call's result _meta, as decoded into a map); nil without an
// error when there is none.
func SummaryFromMeta(meta map[string]any) (*WorkflowSummary, error) {
	raw, ok := meta[MetaWorkflow]
	if !ok {
		return nil, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var sum WorkflowSummary
	if err := json.Unmarshal(b, &sum); err != nil {
		return nil, err
	}
	return &sum, nil
}
