package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Task is a task as the server reported it, in either dialect.
type Task struct {
	// ID is the server-generated task id.
	ID string
	// Status is the task's status, one truth whatever the dialect: a task
	// the extension dialect shows completed with a tool result with
	// isError (the extension keeps failed for JSON-RPC errors) reads
	// failed, as the core dialect shows it.
	Status mcptask.Status
	// StatusMessage optionally explains the status.
	StatusMessage string
	// CreatedAt and LastUpdatedAt are the server's timestamps (zero when
	// the server sent none).
	CreatedAt, LastUpdatedAt time.Time
	// TTL is how long the server keeps the task; nil means unlimited.
	TTL *time.Duration
	// PollInterval is the polling interval the server suggests; zero when
	// it suggests none.
	PollInterval time.Duration

	// Result is the task's result (a CallToolResult for a tool task), as
	// the extension dialect's tasks/get carries it inline once the task is
	// completed. Nil in the core dialect, where it comes from tasks/result.
	Result json.RawMessage
	// Error is the JSON-RPC error a failed task carries inline in the
	// extension dialect.
	Error *RPCError
	// InputRequests are the requests for client input an input_required
	// task carries in the extension dialect, by key.
	InputRequests map[string]InputRequest
}

// InputRequest is a request for client input that a task (or, in the
// extension dialect, a tools/call) makes: an elicitation, a sampling
// request or a roots listing.
type InputRequest struct {
	// Key identifies the request in the extension dialect's inputRequests;
	// empty in the core dialect, where the request arrives as a JSON-RPC
	// request of its own.
	Key string
	// Method is the request method: "elicitation/create",
	// "sampling/createMessage" or "roots/list".
	Method string
	// Params are the request's params, as sent.
	Params json.RawMessage
}

// Elicitation decodes the params of an elicitation/create request.
func (r InputRequest) Elicitation() (*mcp.ElicitParams, error) {
	if r.Method != mcptask.MethodElicit {
		return nil, fmt.Errorf("client: input request is %s, not %s", r.Method, mcptask.MethodElicit)
	}
	var p mcp.ElicitParams
	if err := json.Unmarshal(r.Params, &p); err != nil {
		return nil, fmt.Errorf("client: decoding %s params: %w", r.Method, err)
	}
	return &p, nil
}

// Sampling decodes the params of a sampling/createMessage request.
func (r InputRequest) Sampling() (*mcp.CreateMessageParams, error) {
	if r.Method != mcptask.MethodSampling {
		return nil, fmt.Errorf("client: input request is %s, not %s", r.Method, mcptask.MethodSampling)
	}
	var p mcp.CreateMessageParams
	if err := json.Unmarshal(r.Params, &p); err != nil {
		return nil, fmt.Errorf("client: decoding %s params: %w", r.Method, err)
	}
	return &p, nil
}

// decodeTask decodes a task from a tasks/get, tasks/cancel or
// notifications/tasks/status payload, or a CreateTaskResult of either
// dialect (nested {"task": {...}} or flat).
func decodeTask(raw json.RawMessage) (*Task, error) {
	var w mcptask.WireTask
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, malformed("task: %v", err)
	}
	if isAbsent(w.TaskID) && !isAbsent(w.Task) {
		return decodeTask(w.Task)
	}
	var id string
	if isAbsent(w.TaskID) || json.Unmarshal(w.TaskID, &id) != nil || id == "" {
		return nil, malformed("task without a string taskId")
	}
	t := &Task{ID: id, Status: mcptask.Status(w.Status), StatusMessage: w.StatusMessage}
	if !t.Status.Valid() {
		return nil, malformed("task %s has unknown status %q", id, w.Status)
	}
	var err error
	if t.CreatedAt, err = parseTime(w.CreatedAt); err != nil {
		return nil, malformed("task %s: createdAt: %v", id, err)
	}
	if t.LastUpdatedAt, err = parseTime(w.LastUpdatedAt); err != nil {
		return nil, malformed("task %s: lastUpdatedAt: %v", id, err)
	}
	ttlRaw := w.TTL
	if isAbsent(ttlRaw) {
		ttlRaw = w.TTLMs
	}
	if t.TTL, err = parseMillis(ttlRaw); err != nil {
		return nil, malformed("task %s: ttl: %v", id, err)
	}
	pollRaw := w.PollInterval
	if isAbsent(pollRaw) {
		pollRaw = w.PollIntervalMs
	}
	poll, err := parseMillis(pollRaw)
	if err != nil {
		return nil, malformed("task %s: pollInterval: %v", id, err)
	}
	if poll != nil {
		t.PollInterval = *poll
	}
	if !isAbsent(w.Result) {
		t.Result = w.Result
		if t.Status == mcptask.StatusCompleted && toolError(w.Result) {
			t.Status = mcptask.StatusFailed
		}
	}
	if !isAbsent(w.Error) {
		var ei errorInfo
		if err := json.Unmarshal(w.Error, &ei); err != nil {
			return nil, malformed("task %s: error: %v", id, err)
		}
		t.Error = ei.toRPCError()
	}
	if len(w.InputRequests) > 0 {
		t.InputRequests, err = decodeInputRequests(w.InputRequests)
		if err != nil {
			return nil, malformed("task %s: %v", id, err)
		}
	}
	return t, nil
}

// toolError reports whether raw is a tool result with isError set.
func toolError(raw json.RawMessage) bool {
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(raw, &r) == nil && r.IsError
}

// decodeInputRequests decodes the extension's inputRequests map
// (key -> {"method", "params"}).
func decodeInputRequests(in map[string]json.RawMessage) (map[string]InputRequest, error) {
	out := make(map[string]InputRequest, len(in))
	for key, raw := range in {
		var r struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("inputRequests[%q]: %v", key, err)
		}
		if r.Method == "" {
			return nil, fmt.Errorf("inputRequests[%q] has no method", key)
		}
		if isAbsent(r.Params) {
			r.Params = json.RawMessage("{}")
		}
		out[key] = InputRequest{Key: key, Method: r.Method, Params: r.Params}
	}
	return out, nil
}

// isAbsent reports whether a raw member is missing or null.
func isAbsent(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// parseMillis decodes a number of milliseconds; absent or null is nil.
func parseMillis(raw json.RawMessage) (*time.Duration, error) {
	if isAbsent(raw) {
		return nil, nil
	}
	var ms float64
	if err := json.Unmarshal(raw, &ms); err != nil {
		return nil, fmt.Errorf("not a number: %s", raw)
	}
	if ms < 0 || math.IsNaN(ms) {
		return nil, fmt.Errorf("negative: %v", ms)
	}
	const maxMs = float64(math.MaxInt64 / int64(time.Millisecond))
	if ms > maxMs {
		ms = maxMs
	}
	d := time.Duration(ms * float64(time.Millisecond))
	return &d, nil
}

// clone returns a copy of t that shares no maps with it.
func (t *Task) clone() *Task {
	if t == nil {
		return nil
	}
	c := *t
	if t.TTL != nil {
		ttl := *t.TTL
		c.TTL = &ttl
	}
	if t.InputRequests != nil {
		c.InputRequests = make(map[string]InputRequest, len(t.InputRequests))
		for k, v := range t.InputRequests {
			c.InputRequests[k] = v
		}
	}
	return &c
}
