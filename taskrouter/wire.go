package taskrouter

import (
	"encoding/json"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
)

// Wire names shared by both dialects.
const (
	// ExtensionID is the identifier of the 2026-07-28 tasks extension.
	ExtensionID = "io.modelcontextprotocol/tasks"
	// MetaRelatedTask is the _meta key that ties a message to a task.
	MetaRelatedTask = "io.modelcontextprotocol/related-task"
	// MetaModelImmediateResponse is the optional _meta key of a core-dialect
	// CreateTaskResult holding text for the model to read at once.
	MetaModelImmediateResponse = "io.modelcontextprotocol/model-immediate-response"
	// MetaTaskRequest is the private _meta key under which the transport
	// shims move a core-dialect params.task object, because the SDK drops
	// unknown params before middleware runs.
	MetaTaskRequest = "taskbridge/task"

	// ExtensionVersion is the first protocol version that speaks the tasks
	// extension instead of core tasks.
	ExtensionVersion = "2026-07-28"

	methodToolsCall   = "tools/call"
	methodToolsList   = "tools/list"
	methodInitialize  = "initialize"
	methodDiscover    = "server/discover"
	methodTasksGet    = "tasks/get"
	methodTasksResult = "tasks/result"
	methodTasksList   = "tasks/list"
	methodTasksCancel = "tasks/cancel"
	methodTasksUpdate = "tasks/update"

	notificationTaskStatus = "notifications/tasks/status"
)

// JSON-RPC error codes used by the engine.
const (
	CodeInvalidParams     = -32602
	CodeMethodNotFound    = -32601
	CodeInvalidRequest    = -32600
	CodeInternalError     = -32603
	CodeMissingCapability = mcp.CodeMissingRequiredClientCapabilities // -32021
	CodeHeaderMismatch    = mcp.CodeHeaderMismatch                    // -32020
	CodeTooManyTasks      = -32000
)

// TaskSupport is a tool's task support level, as advertised in tools/list.
type TaskSupport string

// The task support levels.
const (
	TaskForbidden TaskSupport = "forbidden"
	TaskOptional  TaskSupport = "optional"
	TaskRequired  TaskSupport = "required"
)

// Task is the core-dialect (2025-11-25) wire form of a task.
type Task struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// TTL is always present: milliseconds, or null for unlimited.
	TTL *int64 `json:"ttl"`
	// PollInterval is milliseconds, absent when unset (never null).
	PollInterval *int64 `json:"pollInterval,omitempty"`
}

// ExtTask is the extension-dialect (2026-07-28) wire form of a task,
// embedded flat in results.
type ExtTask struct {
	TaskID         string `json:"taskId"`
	Status         string `json:"status"`
	StatusMessage  string `json:"statusMessage,omitempty"`
	CreatedAt      string `json:"createdAt"`
	LastUpdatedAt  string `json:"lastUpdatedAt"`
	TTLMs          *int64 `json:"ttlMs"`
	PollIntervalMs *int64 `json:"pollIntervalMs,omitempty"`
}

func wireTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func msPtr(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

// CoreTask converts a stored task to its core wire form.
func CoreTask(t *store.Task) Task {
	return Task{
		TaskID:        t.ID,
		Status:        string(t.Status),
		StatusMessage: t.StatusMessage,
		CreatedAt:     wireTime(t.CreatedAt),
		LastUpdatedAt: wireTime(t.UpdatedAt),
		TTL:           msPtr(t.TTL),
		PollInterval:  msPtr(t.PollInterval),
	}
}

func extTask(t *store.Task) ExtTask {
	return ExtTask{
		TaskID:         t.ID,
		Status:         string(t.Status),
		StatusMessage:  t.StatusMessage,
		CreatedAt:      wireTime(t.CreatedAt),
		LastUpdatedAt:  wireTime(t.UpdatedAt),
		TTLMs:          msPtr(t.TTL),
		PollIntervalMs: msPtr(t.PollInterval),
	}
}

// CreateTaskResult is the core-dialect reply to a task-augmented request.
type CreateTaskResult struct {
	mcp.ResultBase
	Task Task `json:"task"`
}

// ExtCreateTaskResult is the extension-dialect reply to a tools/call the
// server turned into a task.
//
// Content is always an empty array: the 2026-07-28 schema validates every
// tools/call response as a CallToolResult, which requires it.
type ExtCreateTaskResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
	ExtTask
	Content []mcp.Content `json:"content"`
}

// TaskIDParams are the params of tasks/get, tasks/result and tasks/cancel.
type TaskIDParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

// ListTasksParams are the params of tasks/list.
type ListTasksParams struct {
	mcp.ParamsBase
	Cursor string `json:"cursor,omitempty"`
}

// UpdateTaskParams are the params of the extension's tasks/update.
type UpdateTaskParams struct {
	mcp.ParamsBase
	TaskID         string                     `json:"taskId"`
	InputResponses map[string]json.RawMessage `json:"inputResponses,omitempty"`
}

// GetTaskResult is the core-dialect reply to tasks/get and tasks/cancel.
type GetTaskResult struct {
	mcp.ResultBase
	Task
}

// ListTasksResult is the reply to tasks/list.
type ListTasksResult struct {
	mcp.ResultBase
	Tasks      []Task `json:"tasks"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// ExtGetTaskResult is the extension-dialect reply to tasks/get.
type ExtGetTaskResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
	ExtTask
	Result        json.RawMessage            `json:"result,omitempty"`
	Error         *store.ErrorInfo           `json:"error,omitempty"`
	InputRequests map[string]json.RawMessage `json:"inputRequests,omitempty"`
}

// AckResult is the extension-dialect empty acknowledgement.
type AckResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// rawResult carries an already-encoded result (a stored CallToolResult)
// with _meta merged in.
type rawResult struct {
	mcp.ResultBase
	raw json.RawMessage
}

func (r *rawResult) MarshalJSON() ([]byte, error) { return mergeMeta(r.raw, r.Meta) }

// mergeMeta returns the JSON object raw with add merged into its _meta
// (keys in add win). A raw value that is not an object becomes {}.
func mergeMeta(raw json.RawMessage, add map[string]any) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		m = map[string]json.RawMessage{}
	}
	meta := map[string]any{}
	if old, ok := m["_meta"]; ok {
		_ = json.Unmarshal(old, &meta)
	}
	for k, v := range add {
		meta[k] = v
	}
	if len(meta) > 0 {
		b, err := json.Marshal(meta)
		if err != nil {
			return nil, err
		}
		m["_meta"] = b
	}
	return json.Marshal(m)
}
