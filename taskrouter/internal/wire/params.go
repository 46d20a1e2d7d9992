package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

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

// Private _meta keys the transport shims add; the router's middleware
// removes them (DropPrivateMeta) before any handler sees the request.
const (
	// MetaTaskRequest is the private _meta key under which the transport
	// shims move a core-dialect params.task object, because the SDK drops
	// unknown params before middleware runs.
	MetaTaskRequest = mcptask.PrivateMetaPrefix + "task"
	// MetaConnID carries the stdio/in-memory shim's connection id.
	MetaConnID = mcptask.PrivateMetaPrefix + "conn"
)

// DropPrivateMeta removes the private _meta keys (mcptask.PrivateMetaPrefix)
// from m: no handler sees them, whatever a client sent.
func DropPrivateMeta(m mcp.Meta) {
	for k := range m {
		if strings.HasPrefix(k, mcptask.PrivateMetaPrefix) {
			delete(m, k)
		}
	}
}

// TaskRequest is the params.task object of a core-dialect request.
type TaskRequest struct {
	TTL *float64 `json:"ttl,omitempty"`
}

// TakeTaskParam decodes the moved params.task marker (MetaTaskRequest) of
// meta: the task request, whether the client asked for a task at all, and
// why the request is malformed if it is.
func TakeTaskParam(meta mcp.Meta) (*TaskRequest, bool, error) {
	raw, ok := meta[MetaTaskRequest]
	if !ok || raw == nil {
		return nil, false, nil
	}
	if tr, ok := plainTaskRequest(raw); ok {
		return tr, true, nil
	}
	tr, err := decodeTaskRequest(raw)
	return tr, true, err
}

// decodeTaskRequest reads a params.task value of any shape, by encoding
// it again and decoding that into a TaskRequest.
func decodeTaskRequest(raw any) (*TaskRequest, error) {
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var tr TaskRequest
	if err := json.Unmarshal(b, &tr); err != nil {
		return nil, fmt.Errorf("params.task must be an object with an optional numeric ttl: %v", err)
	}
	if tr.TTL != nil && (*tr.TTL < 0 || *tr.TTL != *tr.TTL) {
		return nil, fmt.Errorf("params.task.ttl must be a non-negative number of milliseconds")
	}
	return &tr, nil
}

// plainTaskRequest reads the common params.task values without encoding
// them again: {} and {"ttl": n} (n a non-negative number, or null).
// Anything else (other keys, which encoding/json matches without regard
// to case, a ttl of another type, a negative one) reports false, for
// TakeTaskParam's general path and its errors.
func plainTaskRequest(raw any) (*TaskRequest, bool) {
	m, ok := raw.(map[string]any)
	if !ok || len(m) > 1 {
		return nil, false
	}
	tr := &TaskRequest{}
	for k, v := range m {
		if k != "ttl" {
			return nil, false
		}
		switch v := v.(type) {
		case nil:
		case float64:
			if v < 0 {
				return nil, false
			}
			tr.TTL = &v
		default:
			return nil, false
		}
	}
	return tr, true
}

// Duration is the requested ttl; zero when none was asked for.
func (tr *TaskRequest) Duration() time.Duration {
	if tr == nil || tr.TTL == nil {
		return 0
	}
	ms := *tr.TTL
	// Clamp before converting: beyond ~292 years of nanoseconds the
	// product overflows int64. The engine caps at its MaxTTL anyway.
	if ms >= float64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms * float64(time.Millisecond))
}
