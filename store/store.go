// Package store defines the durable task record and the Store interface that
// every taskbridge backend implements.
//
// The package knows nothing about the MCP wire beyond the vocabulary of
// package mcptask (the status strings and the JSON-RPC error value): a task
// is a record with an owner, a status that follows a fixed state machine, an
// originating request, a set of variables and a final outcome. The engine in
// package taskrouter maps these records onto the wire.
//
// Invariants enforced by every backend (and checked by package storetest):
//
//   - A task id is unique; Create of an existing id fails with ErrExists.
//   - Terminal statuses (completed, failed, cancelled) never change. An update
//     that would move a task out of a terminal status, or along any
//     transition CanTransition rejects, fails with a *TransitionError that
//     matches ErrInvalidTransition (and ErrTerminal when the task had ended).
//   - Every successful write bumps Version by one. An Update with a non-zero
//     IfVersion that does not match fails with ErrConflict and writes nothing.
//   - Writing the JSON value null to a variable deletes it.
//   - Size limits are checked before anything is written (ErrTooLarge).
//   - A write is durable when the call returns (for durable backends).
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
)

// Status is the lifecycle state of a task: the MCP wire strings, declared
// once in package mcptask.
type Status = mcptask.Status

// The task statuses.
const (
	StatusWorking       = mcptask.StatusWorking
	StatusInputRequired = mcptask.StatusInputRequired
	StatusCompleted     = mcptask.StatusCompleted
	StatusFailed        = mcptask.StatusFailed
	StatusCancelled     = mcptask.StatusCancelled
)

// CanTransition reports whether a task may move from one status to another.
// working and input_required may move to each other and to any terminal
// status; a status may also be "moved" to itself while it is not terminal
// (an update that only changes the message or variables). Terminal statuses
// accept nothing.
func CanTransition(from, to Status) bool {
	if !from.Valid() || !to.Valid() || from.Terminal() {
		return false
	}
	return true
}

// Sentinel errors. Backends wrap them; test with errors.Is.
var (
	ErrNotFound          = errors.New("store: task not found")
	ErrExists            = errors.New("store: task already exists")
	ErrConflict          = errors.New("store: version conflict")
	ErrInvalidTransition = errors.New("store: invalid status transition")
	ErrTerminal          = errors.New("store: task is in a terminal status")
	ErrInvalidCursor     = errors.New("store: invalid cursor")
	ErrTooLarge          = errors.New("store: value too large")
	ErrInvalid           = errors.New("store: invalid task")
	ErrClosed            = errors.New("store: closed")
)

// TransitionError reports a rejected status change.
type TransitionError struct {
	ID   string
	From Status
	To   Status
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("store: task %s cannot move from %s to %s", e.ID, e.From, e.To)
}

// Is makes a TransitionError match ErrInvalidTransition, and also
// ErrTerminal when the task had already ended.
func (e *TransitionError) Is(target error) bool {
	return target == ErrInvalidTransition || (target == ErrTerminal && e.From.Terminal())
}

// Request is the request that created a task.
type Request struct {
	// Method is the MCP method, e.g. "tools/call" or "prompts/get".
	Method string `json:"method"`
	// Name is the tool or prompt name.
	Name string `json:"name,omitempty"`
	// Arguments are the request's arguments as sent.
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ErrorInfo is a JSON-RPC error that ended a task.
type ErrorInfo = mcptask.ErrorInfo

// Task is one task record.
type Task struct {
	ID            string
	Owner         string
	Status        Status
	StatusMessage string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	// TTL is the task's lifetime counted from CreatedAt; zero means unlimited.
	TTL time.Duration
	// ExpiresAt is CreatedAt+TTL, or the zero time when TTL is zero. Backends
	// compute it on Create; it feeds the expiry index.
	ExpiresAt time.Time
	// PollInterval is the suggested polling interval; zero means none.
	PollInterval time.Duration
	Request      Request
	// Labels are small engine-owned strings (dialect, retry policy, kind).
	Labels map[string]string
	// Variables are the task's named JSON values.
	Variables map[string]json.RawMessage
	// Result is the final result (JSON) of a finished task, if any.
	Result json.RawMessage
	// Error is the JSON-RPC error that ended the task, if any.
	Error *ErrorInfo
	// Version starts at 1 on Create and grows by one on every write.
	Version uint64
}

// Clone returns a deep copy of t.
func (t *Task) Clone() *Task {
	if t == nil {
		return nil
	}
	c := *t
	c.Request.Arguments = cloneRaw(t.Request.Arguments)
	c.Result = cloneRaw(t.Result)
	if t.Labels != nil {
		c.Labels = make(map[string]string, len(t.Labels))
		for k, v := range t.Labels {
			c.Labels[k] = v
		}
	}
	if t.Variables != nil {
		c.Variables = make(map[string]json.RawMessage, len(t.Variables))
		for k, v := range t.Variables {
			c.Variables[k] = cloneRaw(v)
		}
	}
	if t.Error != nil {
		e := *t.Error
		e.Data = cloneRaw(t.Error.Data)
		c.Error = &e
	}
	return &c
}

func cloneRaw(r json.RawMessage) json.RawMessage {
	if r == nil {
		return nil
	}
	return append(json.RawMessage(nil), r...)
}

// Update describes a change to a task. Zero fields leave the record as is.
type Update struct {
	// IfVersion, when non-zero, makes the update conditional on the task's
	// current Version (compare-and-swap).
	IfVersion uint64
	// Status, when non-empty, is the new status; it must pass CanTransition.
	Status Status
	// StatusMessage, when non-nil, replaces the status message.
	StatusMessage *string
	// Variables are merged into the task's variables; a JSON null value
	// deletes the key.
	Variables map[string]json.RawMessage
	// Result, when non-nil, sets the final result.
	Result json.RawMessage
	// Error, when non-nil, sets the final JSON-RPC error.
	Error *ErrorInfo
	// Labels are merged into the task's labels; an empty value deletes.
	Labels map[string]string
	// ExpiresAt, when non-nil, moves the task's expiry (and its place in the
	// expiry index); the zero time means never. TTL is left as it was.
	ExpiresAt *time.Time
}

// ListOptions selects a page of tasks.
type ListOptions struct {
	// Owner limits the listing to one owner's tasks. Required.
	Owner string
	// Cursor is the NextCursor of a previous page, or empty for the first.
	Cursor string
	// Limit is the page size; zero or less means DefaultPageSize, and it is
	// capped at MaxPageSize.
	Limit int
	// HeadersOnly leaves Variables, Result and Error out of the returned
	// tasks, which lets a backend read one record per task instead of
	// three (tasks/list needs only the headers).
	HeadersOnly bool
}

// Page sizes for List.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// Page is one page of a listing, ordered by creation time then id.
type Page struct {
	Tasks []*Task
	// NextCursor is empty on the last page.
	NextCursor string
}

// Limits bound what a task may hold. Zero fields mean "use the default".
type Limits struct {
	// MaxVariableBytes bounds one variable's JSON value.
	MaxVariableBytes int
	// MaxVariablesBytes bounds the sum of all variable keys and values.
	MaxVariablesBytes int
	// MaxResultBytes bounds the result (or error data).
	MaxResultBytes int
	// MaxArgumentsBytes bounds the originating request's arguments.
	MaxArgumentsBytes int
}

// Default limits.
const (
	DefaultMaxVariableBytes  = 1 << 20
	DefaultMaxVariablesBytes = 4 << 20
	DefaultMaxResultBytes    = 8 << 20
	DefaultMaxArgumentsBytes = 1 << 20
)

// Store is a durable home for task records. Implementations are safe for
// concurrent use.
type Store interface {
	// Create stores a new task. The caller sets ID, Owner, Status (working or
	// input_required), CreatedAt, TTL and the rest; the store sets Version to
	// 1, UpdatedAt to CreatedAt when zero, and ExpiresAt from TTL. It returns
	// the stored copy.
	Create(ctx context.Context, t *Task) (*Task, error)
	// Get returns the task with its variables, result and error.
	Get(ctx context.Context, id string) (*Task, error)
	// Update applies u atomically and returns the new record.
	Update(ctx context.Context, id string, u Update) (*Task, error)
	// Delete removes a task and its index entries. Deleting a missing task
	// returns ErrNotFound.
	Delete(ctx context.Context, id string) error
	// List returns one page of an owner's tasks, oldest first. A cursor
	// that was not produced by this store for this owner fails with
	// ErrInvalidCursor.
	List(ctx context.Context, opts ListOptions) (Page, error)
	// Expired returns up to limit tasks whose ExpiresAt is at or before now,
	// soonest first, using the expiry index.
	Expired(ctx context.Context, now time.Time, limit int) ([]*Task, error)
	// Active returns every task that is not in a terminal status, using the
	// active index (used on start to resolve work a dead process left).
	Active(ctx context.Context) ([]*Task, error)
	// Close releases the store. Further calls fail with ErrClosed.
	Close() error
}
