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
//   - A task may be created in any status. One created in a terminal
//     status carries a Result or an Error and no lease (ErrInvalid
//     otherwise); it is never in the active index.
//   - Terminal statuses (completed, failed, cancelled) never change. An update
//     that would move a task out of a terminal status, or along any
//     transition CanTransition rejects, fails with a *TransitionError that
//     matches ErrInvalidTransition (and ErrTerminal when the task had ended).
//   - Every successful write bumps Version by one, except Renew and a pure
//     append (an Update that only appends events: Update.AppendOnly): a
//     lease renewal or a log line must never make a compare-and-swap
//     writer conflict. An Update with a non-zero IfVersion that does not
//     match fails with ErrConflict and writes nothing.
//   - A lease (LeaseHolder, LeaseEpoch, LeaseUntil) fences writes: an Update
//     with a Fence fails with ErrFenced unless the task's holder and epoch
//     equal it. Every Claim bumps LeaseEpoch; a task that reaches a
//     terminal status, or an Update with ReleaseLease, clears the holder
//     and LeaseUntil (the epoch stays, so an old fence never matches again).
//   - An Update's checks run in one order: not found, fence, terminal
//     status and transition, IfVersion, sizes. The fence comes before the
//     terminal status, so a holder whose task ended meanwhile (a terminal
//     move clears the holder) learns that it was fenced (ErrFenced), and
//     a write without a fence to an ended task fails with ErrTerminal.
//   - WakeAt, when set, puts a task in the wake index that Due reads; only
//     a task that is not terminal has one (a move to a terminal status
//     clears it, and Create refuses an ended task with one).
//   - History holds the first status of a task and at most the
//     MaxStatusHistory-1 latest status changes.
//   - Every task has an event log (Event, Store.Events), written in the
//     same atomic write as the state it reports: Create appends
//     Task.Events and Update appends Update.Events, then, for every status
//     the task enters (its first included), the store appends an
//     mcptask.EventStatus event itself; a write that fails appends
//     nothing. An ended task's last event is its terminal status: ended
//     tasks take no more events (ErrTerminal). Events are numbered 1, 2,
//     3, ... per task, densely, in commit order; a number never repeats or
//     goes back, across restarts and after drops too. The log keeps at
//     most Limits.MaxEvents events and Limits.MaxEventLogBytes bytes of
//     them, dropping the oldest (a read reports them as Dropped), one
//     event over Limits.MaxEventBytes fails with ErrTooLarge, and Delete
//     removes the log. A pure append changes neither Version nor
//     UpdatedAt and writes only the events.
//   - Counts reflects every committed Create, status change and Delete.
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

// CanTransition reports whether a task may move from one status to another.
// working and input_required may move to each other and to any terminal
// status; a status may also be "moved" to itself while it is not terminal
// (an update that only changes the message or variables). Terminal statuses
// accept nothing.
func CanTransition(from, to mcptask.Status) bool {
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
	// ErrFenced reports an Update whose Fence no longer matches the task's
	// lease: another holder claimed the task (or the lease was released),
	// so the caller must stop working on it. Nothing was written.
	ErrFenced = errors.New("store: lease lost")
	// ErrLeased reports a Claim of a task whose lease another holder still
	// holds (LeaseUntil is after the claim's now).
	ErrLeased = errors.New("store: task is leased by another holder")
)

// TransitionError reports a rejected status change.
type TransitionError struct {
	ID   string
	From mcptask.Status
	To   mcptask.Status
}

// Error implements error.
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

// StatusChange is one entry of a task's status history.
type StatusChange struct {
	// Status is the status the task entered.
	Status mcptask.Status
	// Message is the task's status message right after the change.
	Message string
	// At is the UpdatedAt of the write that made the change (the creation's
	// UpdatedAt for the first entry).
	At time.Time
}

// MaxStatusHistory caps Task.History: the store keeps the first entry (the
// status the task was created with) and the latest MaxStatusHistory-1
// changes, dropping the oldest of those when a new one arrives. A task's
// life has few status changes (working, input_required back and forth, one
// terminal status), so the cap only matters for tasks that bounce.
const MaxStatusHistory = 32

// Task is one task record.
type Task struct {
	// ID is the task id, unique in the store (at most MaxIDBytes).
	ID string
	// Owner is the principal the task belongs to (at most MaxOwnerBytes).
	Owner string
	// Status is the task's lifecycle state (see CanTransition).
	Status mcptask.Status
	// StatusMessage is a human-readable note on the status.
	StatusMessage string
	// CreatedAt is when the task was created; it orders List and Query.
	CreatedAt time.Time
	// UpdatedAt is when the task was last written (Claim and Renew leave
	// it alone).
	UpdatedAt time.Time
	// TTL is the task's lifetime counted from CreatedAt; zero means unlimited.
	TTL time.Duration
	// ExpiresAt is CreatedAt+TTL, or the zero time when TTL is zero. Backends
	// compute it on Create; it feeds the expiry index.
	ExpiresAt time.Time
	// WakeAt is when the engine should next run work for the task (a
	// retry backoff, a durable sleep, a wait's timeout); the zero time
	// means no wake-up. Backends keep it in a wake index (see Store.Due).
	// Create stores it as given (it must be ValidTime; a task created in a
	// terminal status must have none: ErrInvalid); a move to a terminal
	// status clears it.
	WakeAt time.Time
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
	Error *mcptask.ErrorInfo
	// Version starts at 1 on Create and grows by one on every write except
	// Renew.
	Version uint64

	// LeaseHolder names the process running work for the task ("" when
	// none). Set by Create or Claim; cleared by Update.ReleaseLease and by
	// every move to a terminal status.
	LeaseHolder string
	// LeaseEpoch grows by one on every Claim (Create with a LeaseHolder
	// sets 1, without one 0). Writers pass it back in Update.Fence, so
	// that a holder that lost the lease cannot write any more.
	LeaseEpoch uint64
	// LeaseUntil is when the lease ends unless renewed; zero when there is
	// no holder. A lease whose LeaseUntil is at or before now may be
	// claimed by anyone.
	LeaseUntil time.Time

	// History is the task's status history, oldest first: one entry for
	// Create and one for every write that changed Status, capped at
	// MaxStatusHistory entries. The store maintains it (History passed to
	// Create is ignored). Get, Update, Claim, Expired, ExpiredLeases,
	// Active, Due and List without HeadersOnly return it; List with
	// HeadersOnly and Query leave it out.
	History []StatusChange

	// Events are appended to the task's event log by Create, in order,
	// before the store's status event for the task's first status (so
	// they are numbered from 1; see Update.Events for the rest). Reads
	// never fill it, and Create returns the task without them: read the
	// log with Store.Events.
	Events []Event
}

// Fence identifies a lease: the holder and the epoch it got from Create or
// Claim. See Update.Fence.
type Fence struct {
	// Holder is the lease holder (Task.LeaseHolder).
	Holder string
	// Epoch is the lease's epoch (Task.LeaseEpoch).
	Epoch uint64
}

// Fence returns the task's current lease as a Fence.
func (t *Task) Fence() Fence { return Fence{Holder: t.LeaseHolder, Epoch: t.LeaseEpoch} }

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
	if t.History != nil {
		c.History = append([]StatusChange(nil), t.History...)
	}
	c.Events = cloneEvents(t.Events)
	return &c
}

func cloneEvents(events []Event) []Event {
	if events == nil {
		return nil
	}
	out := make([]Event, len(events))
	for i, e := range events {
		e.Data = cloneRaw(e.Data)
		out[i] = e
	}
	return out
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
	Status mcptask.Status
	// StatusMessage, when non-nil, replaces the status message.
	StatusMessage *string
	// Variables are merged into the task's variables; a JSON null value
	// deletes the key.
	Variables map[string]json.RawMessage
	// Result, when non-nil, sets the final result.
	Result json.RawMessage
	// Error, when non-nil, sets the final JSON-RPC error.
	Error *mcptask.ErrorInfo
	// Labels are merged into the task's labels; an empty value deletes.
	Labels map[string]string
	// ExpiresAt, when non-nil, moves the task's expiry (and its place in the
	// expiry index); the zero time means never. TTL is left as it was.
	ExpiresAt *time.Time
	// WakeAt, when non-nil, sets the task's wake-up time; the zero time
	// clears it. Its index entry moves with it. A non-zero time must be
	// ValidTime (ErrInvalid). An update that moves the task to a terminal
	// status clears WakeAt whatever this says.
	WakeAt *time.Time
	// Fence, when non-nil, makes the update conditional on the task's lease:
	// it fails with ErrFenced, writing nothing, unless the task's
	// LeaseHolder and LeaseEpoch equal the fence. The fence checks only
	// who holds the lease, not whether it is still valid: a holder whose
	// lease ran out may keep writing until someone else claims the task.
	//
	// The checks run in this order: not found, fence, terminal status and
	// transition, IfVersion, sizes. So a fenced write to a task that has
	// ended fails with ErrFenced, not ErrTerminal: a move to a terminal
	// status clears the holder, so no fence matches an ended task any more
	// (not even the fence of the holder that ended it), and the writer
	// learns that its lease is gone. It may then read the task to tell a
	// takeover (another holder) from an end (a terminal status). An
	// unfenced write to an ended task fails with ErrTerminal.
	Fence *Fence
	// ReleaseLease clears LeaseHolder and LeaseUntil in the same write
	// (LeaseEpoch is kept). A move to a terminal status releases the lease
	// without it.
	ReleaseLease bool
	// Annotate makes an update that only merges Labels (IfVersion may go
	// with it; anything else is ErrInvalid) apply to an ended task too:
	// a note that outlives the task's work, such as the tasks forked from
	// it. The status, result and expiry of an ended task never change.
	Annotate bool
	// Events are appended to the task's event log in the same atomic
	// write as the rest of the update, in order, numbered after the
	// log's newest (a Seq given is ignored); a zero At is the write's
	// time. When the update changes the status, the store appends its
	// mcptask.EventStatus event after them. A refused update appends
	// nothing; an ended task takes no events (ErrTerminal, ErrFenced with
	// a Fence). Each event must fit Limits.MaxEventBytes (ErrTooLarge)
	// and have a valid Type and JSON Data (ErrInvalid).
	//
	// An update that carries Events and nothing else but Fence and
	// IfVersion is a pure append (AppendOnly): the cheap write of a
	// progress report or a log line. It makes the update's checks (not
	// found, fence, terminal, IfVersion, sizes) and writes the events
	// only: Version and UpdatedAt stay as they were (so a log line never
	// makes a compare-and-swap writer conflict, as Renew does not), and
	// Update returns the task's header (Variables, Result, Error and
	// History left out, as List's HeadersOnly), so that a log line neither
	// copies nor rewrites the task's big parts.
	Events []Event
}

// AppendOnly reports whether u is a pure append (see Update.Events): it
// carries Events and nothing else but Fence and IfVersion.
func (u Update) AppendOnly() bool {
	return len(u.Events) > 0 && u.Status == "" && u.StatusMessage == nil && u.Variables == nil &&
		u.Result == nil && u.Error == nil && u.Labels == nil && u.ExpiresAt == nil && u.WakeAt == nil &&
		!u.ReleaseLease && !u.Annotate
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
	// HeadersOnly leaves Variables, Result, Error and History out of the
	// returned tasks, which lets a backend read one record per task
	// instead of four (tasks/list needs only the headers).
	HeadersOnly bool
}

// Page sizes for List.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// Page is one page of a listing: List orders it by creation time then id,
// Query by creation time then id, newest first (oldest first with
// Query.Oldest).
type Page struct {
	// Tasks are the page's tasks, in the listing's order.
	Tasks []*Task
	// NextCursor is empty on the last page. A Query page may hold fewer
	// than Limit tasks (even none) while NextCursor is non-empty: the
	// backend stopped after examining its bound of index entries.
	NextCursor string
}

// Query selects tasks across all owners for an operator (Store.Query),
// newest first (oldest first with Oldest). Zero fields select everything. Each call examines a
// bounded number of index entries (QueryScanBudget), so a page may come
// back with fewer than Limit tasks, even none, and a non-empty NextCursor:
// keep paging until NextCursor is empty.
type Query struct {
	// Statuses keeps tasks in any of these statuses; empty means all.
	Statuses []mcptask.Status
	// Name keeps tasks whose Request.Name is exactly this; "" means any.
	Name string
	// Owner keeps tasks of exactly this owner; "" means any.
	Owner string
	// Cursor is the NextCursor of a previous page of the same query (same
	// Statuses, Name and Owner), or empty for the first page.
	Cursor string
	// Limit is the page size; zero or less means DefaultPageSize, and it is
	// capped at MaxPageSize.
	Limit int
	// Oldest lists oldest first (CreatedAt, then id, ascending) instead of
	// newest first, from the same indexes and under the same scan budget
	// (an operator's "oldest working task"). A cursor is bound to the
	// direction: a newest-first cursor is refused by an oldest-first query
	// and the other way round.
	Oldest bool
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
	// MaxEventBytes bounds one event: the bytes of its Type and Data
	// (EventSize). A larger event fails its write with ErrTooLarge. It is
	// at least MinEventBytes.
	MaxEventBytes int
	// MaxEvents bounds the number of events a task's log keeps: beyond
	// it, an append drops the oldest.
	MaxEvents int
	// MaxEventLogBytes bounds the total EventSize of the events a task's
	// log keeps: beyond it, an append drops the oldest. It is at least
	// MaxEventBytes, so the newest event always stays.
	MaxEventLogBytes int
}

// Default limits.
const (
	DefaultMaxVariableBytes  = 1 << 20
	DefaultMaxVariablesBytes = 4 << 20
	DefaultMaxResultBytes    = 8 << 20
	DefaultMaxArgumentsBytes = 1 << 20
	// An event is a status, a progress report, a log line, a chunk of
	// partial output: 64 KiB holds a generous chunk (larger outputs
	// belong in variables or the result).
	DefaultMaxEventBytes = 64 << 10
	// A thousand events follow a ten-minute step that reports every
	// second, with room for its log lines; 1 MiB keeps a log of average
	// events (a few hundred bytes) whole and bounds a task's log at an
	// eighth of its largest result. Readers that fall further behind see
	// a dropped marker.
	DefaultMaxEvents        = 1000
	DefaultMaxEventLogBytes = 1 << 20
	// MinEventBytes is the least MaxEventBytes: room for the store's own
	// status event.
	MinEventBytes = 256
)

// Store is a durable home for task records. Implementations are safe for
// concurrent use.
type Store interface {
	// Create stores a new task. The caller sets ID, Owner, Status,
	// CreatedAt, TTL, optionally LeaseHolder and LeaseUntil, optionally
	// WakeAt, and the rest; the store sets Version to 1, UpdatedAt to
	// CreatedAt when zero, ExpiresAt from TTL, LeaseEpoch (1 with a
	// holder, 0 without, when LeaseUntil is cleared too) and History (one
	// entry), and starts the task's event log with Events and the status
	// event of its first status. It returns the stored copy (without
	// Events).
	//
	// Status is usually working or input_required. It may also be a
	// terminal status, for a task that ended before it was first stored
	// (an instant tool whose creation and completion are one durable
	// write): such a task must carry a Result or an Error, within the
	// limits an Update's obey, and no LeaseHolder or WakeAt (ErrInvalid
	// otherwise). It is stored as if it had been created and then ended:
	// counted under its status, with one History entry, an ExpiresAt from
	// TTL as usual, never in Active or Due, and every later Update fails
	// (ErrTerminal; ErrFenced when it carries a Fence).
	Create(ctx context.Context, t *Task) (*Task, error)
	// Get returns the task with its variables, result, error and history.
	Get(ctx context.Context, id string) (*Task, error)
	// Update applies u atomically and returns the new record (its header
	// only for a pure append, see Update.Events).
	Update(ctx context.Context, id string, u Update) (*Task, error)
	// Delete removes a task, its event log and its index entries.
	// Deleting a missing task returns ErrNotFound.
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
	// Due returns up to limit non-terminal tasks whose WakeAt is set and at
	// or before now, soonest first (WakeAt, then id), from the wake index:
	// never a scan of all tasks. A limit of zero or less means
	// DefaultPageSize; it is capped at MaxPageSize. It returns full tasks
	// (as Expired does).
	Due(ctx context.Context, now time.Time, limit int) ([]*Task, error)

	// Claim takes the lease of a non-terminal task for holder until until,
	// if the lease is free (no holder) or expired (LeaseUntil at or before
	// now). It sets LeaseHolder and LeaseUntil, increments LeaseEpoch and
	// Version (UpdatedAt is left as it was) and returns the full task. A
	// holder may re-claim its own valid lease (getting a new epoch). It
	// fails with ErrNotFound, ErrTerminal (the task ended), ErrLeased
	// (another holder's lease is valid) or ErrInvalid (empty or oversized
	// holder, until not after now).
	Claim(ctx context.Context, id, holder string, now, until time.Time) (*Task, error)
	// Renew sets LeaseUntil to until on each listed task whose LeaseHolder
	// is holder, and returns the ids it renewed, in the order given
	// (duplicates once). The others were lost: missing, ended, released or
	// claimed by another holder. Renew changes neither Version nor
	// UpdatedAt, so it never makes a compare-and-swap writer conflict, and
	// it renews an expired lease nobody has claimed yet.
	Renew(ctx context.Context, holder string, until time.Time, ids []string) ([]string, error)
	// ExpiredLeases returns up to limit tasks that have a LeaseHolder whose
	// LeaseUntil is at or before now, soonest first, from the lease index
	// (candidates for Claim by another process). A limit of zero or less
	// means DefaultPageSize; it is capped at MaxPageSize.
	ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*Task, error)

	// Query returns one page of tasks across all owners matching q, newest
	// first (CreatedAt, then id, descending; ascending with q.Oldest),
	// headers only: no Variables,
	// Result, Error or History. The backend drives the page from its most
	// selective index for q's filters and examines at most
	// QueryScanBudget(limit) index entries per call, so a page may hold
	// fewer than Limit tasks, even none, while NextCursor is non-empty;
	// callers page on until NextCursor is empty. A cursor issued for other
	// filters, or by another store, fails with ErrInvalidCursor; an
	// unknown status fails with ErrInvalid.
	Query(ctx context.Context, q Query) (Page, error)
	// Counts returns the number of stored tasks by status, every status
	// present (zero included). It reads counters the store keeps up to
	// date in the same transaction as every write: O(1), never a scan.
	Counts(ctx context.Context) (map[mcptask.Status]int, error)

	// Events reads task id's event log: up to limit events with Seq after
	// after, oldest first, and the log's bounds (see EventPage; Dropped
	// tells a reader about events dropped before it read them). A limit
	// of zero or less means DefaultPageSize; it is capped at MaxPageSize.
	// An after at or past the newest event returns no events. It fails
	// with ErrNotFound when the task does not exist; a task stored before
	// its backend kept event logs reads as an empty log. Who may read is
	// the engine's business, not the store's.
	Events(ctx context.Context, id string, after uint64, limit int) (EventPage, error)

	// Queues keeps the entries of the engine's queues (queues.go): who
	// waits for a place and who holds one, decided in the store so that
	// limits hold across replicas.
	Queues
	// Schedules keeps the schedules' records and their fires
	// (schedules.go): each firing recorded once.
	Schedules
	// ReplicaRegistry keeps the replicas' heartbeats and the keys they
	// serve (replicas.go): which process may run which task.
	ReplicaRegistry

	// Close releases the store. Further calls fail with ErrClosed.
	Close() error
}
