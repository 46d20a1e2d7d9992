package taskrouter

import (
	"encoding/json"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
)

// The result and params types of the tasks/* methods. The task bodies are
// mcptask's wire shapes; these add what the SDK needs (ParamsBase,
// ResultBase) and the dialect-specific envelopes.

// wireTTL is the ttl a task reports: how long after its creation it is
// kept, which is its ttl unless its expiry moved (a workflow task's
// deadline moves with its progress, a task that ran out of time is kept a
// little longer to be read).
func wireTTL(t *store.Task) time.Duration {
	if !t.ExpiresAt.IsZero() && t.ExpiresAt.After(t.CreatedAt) {
		return t.ExpiresAt.Sub(t.CreatedAt)
	}
	return t.TTL
}

// CoreTask converts a stored task to its core wire form.
func CoreTask(t *store.Task) mcptask.CoreTask {
	return mcptask.CoreTask{
		TaskID:        t.ID,
		Status:        t.Status,
		StatusMessage: t.StatusMessage,
		CreatedAt:     mcptask.FormatTime(t.CreatedAt),
		LastUpdatedAt: mcptask.FormatTime(t.UpdatedAt),
		TTL:           mcptask.Millis(wireTTL(t)),
		PollInterval:  mcptask.Millis(t.PollInterval),
	}
}

// extensionTask converts a stored task to its extension wire form: a
// task that failed with a tool result (isError) reads as completed, the
// status the extension gives it (see outcome).
func extensionTask(t *store.Task) mcptask.ExtTask {
	return mcptask.ExtTask{
		TaskID:         t.ID,
		Status:         statusIn(mcptask.Extension, t),
		StatusMessage:  t.StatusMessage,
		CreatedAt:      mcptask.FormatTime(t.CreatedAt),
		LastUpdatedAt:  mcptask.FormatTime(t.UpdatedAt),
		TTLMs:          mcptask.Millis(wireTTL(t)),
		PollIntervalMs: mcptask.Millis(t.PollInterval),
	}
}

// CreateTaskResult is the core-dialect reply to a task-augmented request.
type CreateTaskResult struct {
	mcp.ResultBase
	Task mcptask.CoreTask `json:"task"`
}

// extCreateTaskResult is the extension-dialect reply to a tools/call the
// server turned into a task.
//
// Content is always an empty array: the 2026-07-28 schema validates every
// tools/call response as a CallToolResult, which requires it.
type extCreateTaskResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
	mcptask.ExtTask
	Content []mcp.Content `json:"content"`
}

// TaskIDParams are the params of tasks/get, tasks/result and tasks/cancel:
// taskId (TaskID) and _meta.
type TaskIDParams = wire.TaskIDParams

// ListTasksParams are the params of tasks/list: cursor (Cursor) and
// _meta.
type ListTasksParams = wire.ListTasksParams

// UpdateTaskParams are the params of the extension's tasks/update:
// taskId (TaskID), inputResponses (InputResponses) and _meta.
type UpdateTaskParams = wire.UpdateTaskParams

// getTaskResult is the core-dialect reply to tasks/get and tasks/cancel.
type getTaskResult struct {
	mcp.ResultBase
	mcptask.CoreTask
}

// listTasksResult is the reply to tasks/list.
type listTasksResult struct {
	mcp.ResultBase
	Tasks      []mcptask.CoreTask `json:"tasks"`
	NextCursor string             `json:"nextCursor,omitempty"`
}

// extGetTaskResult is the extension-dialect reply to tasks/get.
type extGetTaskResult struct {
	mcp.ResultBase
	// ResultType is "complete" in a tasks/get reply (getReply sets it);
	// empty, and left out, in a notifications/tasks.
	ResultType string `json:"resultType,omitempty"`
	mcptask.ExtTask
	Result        json.RawMessage            `json:"result,omitempty"`
	Error         *mcptask.ErrorInfo         `json:"error,omitempty"`
	InputRequests map[string]json.RawMessage `json:"inputRequests,omitempty"`
}

// ackResult is the extension-dialect empty acknowledgement.
type ackResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// inputRequiredResult is a SEP-2322 input_required reply to tools/call.
type inputRequiredResult struct {
	mcp.ResultBase
	ResultType    string              `json:"resultType"`
	InputRequests mcp.InputRequestMap `json:"inputRequests"`
}

// rawResult carries an already-encoded result (a stored CallToolResult)
// with _meta merged in.
type rawResult struct {
	mcp.ResultBase
	raw json.RawMessage
}

// MarshalJSON writes the stored result with the _meta merged in.
func (r *rawResult) MarshalJSON() ([]byte, error) { return wire.MergeMeta(r.raw, r.Meta) }

// EncodeJSON is what the fast path's wire.Response would make of
// MarshalJSON's bytes (compacted, no HTML escaping), without scanning
// them again when they hold no whitespace: finalResult, the only maker
// of a rawResult, checked the stored result valid (damaged), and
// MergeMeta keeps it so.
func (r *rawResult) EncodeJSON() (json.RawMessage, error) {
	b, err := r.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return wire.CompactValid(b)
}
