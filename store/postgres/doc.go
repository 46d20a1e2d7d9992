// Package postgres is an implementation of store.Store on PostgreSQL (13 or
// later) with pgx v5, for several server replicas sharing one store.
//
// It passes the whole storetest suite, like the embedded backends, and adds
// what replicas need: every write is atomic in SQL so that two processes
// can never both win a compare-and-swap, a fenced update or a claim, and a
// change feed (store.Notifier) carries every committed write to every
// process. Store.Shared reports true.
//
// # Schema
//
// The tables live in one PostgreSQL schema (WithSchema, default
// "taskbridge"), created and migrated by Open: versioned migrations run in
// a transaction that holds a transaction-scoped advisory lock on the
// schema's name, so replicas starting at once migrate it exactly once. The
// migrations table records the versions applied; a schema newer than the
// package is refused.
//
//	tasks        one row per task: every header field as a column; strings
//	             (ids, owners, names, messages, labels) are bytea, because
//	             a Go string may hold bytes PostgreSQL text cannot (NUL,
//	             invalid UTF-8); times are bigint Unix nanoseconds (the
//	             store keeps nanoseconds, timestamptz has microseconds);
//	             labels and the status history are arrays; the result and
//	             error are columns too
//	task_vars    (task_id, name) -> value: one row per variable, so that a
//	             merge writes only the names it sets or deletes
//	task_counts  (status, shard) -> n: the Counts counters, updated in the
//	             transaction of every create, status change and delete;
//	             16 shards per status (by a hash of the task id) keep
//	             concurrent writers from queueing on one row
//	meta         key -> value: the HMAC key of List and Query cursors,
//	             generated once, so cursors survive restarts and work on
//	             every replica
//	migrations   the schema versions applied
//
// Indexes keep every operation off full scans: (owner, created_at, id) for
// List and owner queries, (status, created_at, id) for Active and status
// queries, (name, created_at, id) for name queries, (created_at, id) for
// unfiltered queries, and partial indexes holding only the rows they serve:
// (expires_at, id) for Expired, (lease_until, id) for ExpiredLeases and
// (created_at, id) of the non-terminal tasks for Active.
//
// # Atomicity
//
// Update and Claim lock the task row (SELECT ... FOR UPDATE, in the same
// round trip as BEGIN), apply the shared rules of package store in Go
// (store.PreparedUpdate.Apply, store.ApplyClaim), then write and commit in
// a second round trip: a second writer waits for the row and then sees the
// first one's result, so IfVersion, Fence and the lease checks hold across
// processes. Create,
// Delete and Renew are single statements (or one implicit transaction).
// Locks are taken in one order — the task row, then its counter rows
// sorted by status — so writers never deadlock.
//
// # Change feed
//
// Every write that bumps a version or deletes a task calls pg_notify in its
// transaction, on a channel named after the schema, with the payload
// "version|status|hex(id)" (a delete sends version 0). PostgreSQL delivers
// notifications after commit, in commit order. Subscribe LISTENs on a
// connection of its own and reconnects with backoff when it is lost,
// reporting store.Change{Resync: true} once it listens again.
package postgres
