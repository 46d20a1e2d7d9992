package mcptask

import (
	"encoding/json"
	"time"
)

// CoreTask is the core-dialect (2025-11-25) wire form of a task: the body
// of tasks/get and tasks/cancel, each entry of tasks/list, the "task" of a
// create reply, and the params of notifications/tasks/status.
type CoreTask struct {
	TaskID        string `json:"taskId"`
	Status        Status `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// TTL is always present: milliseconds, or null for unlimited (the
	// TypeScript SDK rejects a task without it).
	TTL *int64 `json:"ttl"`
	// PollInterval is milliseconds, absent when unset, never null.
	PollInterval *int64 `json:"pollInterval,omitempty"`
}

// ExtTask is the extension-dialect (2026-07-28) wire form of a task, which
// results embed flat.
type ExtTask struct {
	TaskID         string `json:"taskId"`
	Status         Status `json:"status"`
	StatusMessage  string `json:"statusMessage,omitempty"`
	CreatedAt      string `json:"createdAt"`
	LastUpdatedAt  string `json:"lastUpdatedAt"`
	TTLMs          *int64 `json:"ttlMs"`
	PollIntervalMs *int64 `json:"pollIntervalMs,omitempty"`
}

// WireTask is the union of every task field of both dialects, for readers
// that accept either: core (ttl, pollInterval, possibly nested under
// "task" in a create reply) and extension (ttlMs, pollIntervalMs, flat,
// with result, error and inputRequests in tasks/get).
type WireTask struct {
	TaskID         json.RawMessage            `json:"taskId"`
	Status         string                     `json:"status"`
	StatusMessage  string                     `json:"statusMessage"`
	CreatedAt      string                     `json:"createdAt"`
	LastUpdatedAt  string                     `json:"lastUpdatedAt"`
	TTL            json.RawMessage            `json:"ttl"`
	TTLMs          json.RawMessage            `json:"ttlMs"`
	PollInterval   json.RawMessage            `json:"pollInterval"`
	PollIntervalMs json.RawMessage            `json:"pollIntervalMs"`
	Result         json.RawMessage            `json:"result"`
	Error          json.RawMessage            `json:"error"`
	InputRequests  map[string]json.RawMessage `json:"inputRequests"`
	Task           json.RawMessage            `json:"task"`
	ResultType     string                     `json:"resultType"`
}

// Result types of the 2026-07-28 protocol ("resultType").
const (
	ResultTypeComplete      = "complete"
	ResultTypeTask          = "task"
	ResultTypeInputRequired = "input_required"
)

// TimeLayout is how task timestamps are written: ISO 8601 in UTC with
// milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// FormatTime writes t as a wire timestamp.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// Millis returns d in whole milliseconds, or nil for zero and negative
// durations (unlimited ttl, no poll interval).
func Millis(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}
