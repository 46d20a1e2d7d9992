package store

import (
	"context"
	"github.com/taskbridge/taskbridge/mcptask"
)

// What a store that several processes share tells them: whether it is
// shared, and the feed of committed writes (and event appends) that keeps
// the processes in step.

// Change is one committed write, as delivered by a Notifier.
type Change struct {
	// ID is the task written.
	ID string
	// Status is the task's status after the write (before it, for a
	// delete).
	Status mcptask.Status
	// Version is the task's version after the write; 0 for a delete.
	Version uint64
	// Deleted reports that the write deleted the task.
	Deleted bool
	// Resync reports that the subscription lost its connection and may
	// have missed changes: the subscriber should re-read what it watches.
	// ID, Status and Version are empty.
	Resync bool
	// Events, when non-zero, makes the change an event append, which only
	// EventNotifier.SubscribeEvents delivers: a write appended events to
	// task ID's log, the newest numbered Events. Status, Version and
	// Deleted are empty then; a write that also changed the task's state
	// is reported twice, as a change and as an append.
	Events uint64
}

// Notifier is implemented by stores that several processes share (such as
// PostgreSQL), so that one process learns of writes made by another.
//
// Subscribe calls fn for the writes committed by any process, including
// this one, that bump a task's Version (Create, Update, Claim) or delete a
// task; Renew, which bumps nothing, is not reported.
//
// A change is notified after its write commits, never before (a
// subscriber that reads the task when it hears of a change sees that
// write or a later one), normally within milliseconds. Delivery is best
// effort: a process that dies between a commit and its notification loses
// that notification, and a store that cannot send its notifications for
// a long time may drop the oldest; rarely, a change arrives twice. So a
// subscriber must not rely on the feed alone: the engine also re-reads
// what it watches periodically (taskrouter's ChangePollInterval).
//
// The changes of one task written through one Store value arrive in
// commit order. Changes written through different Store values (other
// processes) may arrive in another order than their commits; Version
// tells the newer (a deletion has Version 0). fn is called from one
// goroutine at a time and should return quickly. After a lost connection
// the subscription reconnects and then calls fn once with
// Change{Resync: true}: changes may have been missed in between, and the
// subscriber should re-read what it watches. stop ends the subscription
// and waits until fn is no longer running (so fn must not call it);
// Subscribe's ctx bounds only the setup, and the subscription also ends
// when the store is closed.
type Notifier interface {
	Subscribe(ctx context.Context, fn func(Change)) (stop func(), err error)
}

// EventNotifier is implemented by shared stores whose change feed also
// carries appends to the tasks' event logs (PostgreSQL), so that a reader
// of a task's events in one process learns of the events written by
// another.
//
// SubscribeEvents is Subscribe (same delivery rules and stop) that also
// calls fn, after every committed write that appended events (a pure
// append, or a Create or Update with events or a status change), with a
// Change{ID: id, Events: n}: task id's log holds events up to Seq n. The
// appends of one task arrive in commit order. A reader that hears of one
// reads Store.Events after the last Seq it has; like the other changes,
// appends may be lost (a reader also re-reads periodically), and after a
// lost connection fn gets Change{Resync: true}. Subscribe, without the
// appends, keeps its own contract: a subscriber that does not read events
// never hears of them.
type EventNotifier interface {
	Notifier
	SubscribeEvents(ctx context.Context, fn func(Change)) (stop func(), err error)
}

// Shared is implemented by stores that report whether other processes may
// write to the same data at the same time. An exclusive store (bbolt holds a
// file lock; memory lives in one process) returns false: every write goes
// through this process. A shared one (PostgreSQL) returns true: the engine
// must use leases and a change feed to coordinate replicas.
type Shared interface {
	Shared() bool
}

// IsShared reports whether s says it is shared (see Shared); a store that
// does not implement Shared is exclusive.
func IsShared(s Store) bool {
	sh, ok := s.(Shared)
	return ok && sh.Shared()
}
