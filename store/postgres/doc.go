// Package postgres is an implementation of store.Store on PostgreSQL (13 or
// later) with pgx v5, for several server replicas sharing one store.
//
// It passes the whole storetest suite, like the embedded backends, and adds
// what replicas need: every write is atomic in SQL so that two processes
// can never both win a compare-and-swap, a fenced update or a claim, and a
// change feed (store.Notifier) carries committed writes to every process
// soon after they commit. Store.Shared reports true.
//
// # Schema
//
// The tables live in one PostgreSQL schema (Options.Schema, default
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
//	             error are columns too; wake_at (migration 2) is NULL
//	             when the task has no wake-up time
//	task_vars    (task_id, name) -> value: one row per variable, so that a
//	             merge writes only the names it sets or deletes
//	task_events  (task_id, seq) -> pos, at, type, data: one row per event
//	             a task's log keeps (migration 3), pos its offset in the
//	             log (store.LoggedEvent); the newest row tells where the
//	             log ends, so an append inserts rows and deletes the
//	             oldest the caps drop, and writes no other row
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
// (expires_at, id) for Expired, (lease_until, id) for ExpiredLeases,
// (wake_at, id) of the non-terminal tasks with a wake-up time for Due, and
// (created_at, id) of the non-terminal tasks for Active.
//
// # Atomicity
//
// Update and Claim lock the task row (SELECT ... FOR UPDATE) and read the
// task in a statement of its own, both in the round trip of BEGIN; apply
// the shared rules of package store in Go (store.PreparedUpdate.Apply,
// store.ApplyClaim); then write and commit in a second round trip. A
// second writer waits for the row and then sees everything the first one
// committed — the read comes after the lock, not in the locking statement,
// which would see the row as committed but the variables and events as
// they were when it began to wait — so IfVersion, Fence, the lease checks
// and the numbering of events hold across processes. A pure append locks
// the row the same way, reads the header and the log's tail, and writes
// only its events. Delete works the same way (BEGIN and the DELETE, then
// COMMIT); Create and Renew are one implicit transaction each. A queue
// operation (Enqueue, Dequeue) takes two round trips too: BEGIN, the
// queue's row made sure of and locked, and its entries read (after the
// lock) pipelined in the first, the writes and COMMIT in the second.
// Stats counts the statements and round trips the store sends (a pgx
// tracer on every connection it opens). Locks are
// taken in one order — the task row, then its counter rows sorted by
// status — so writers never deadlock.
//
// # Change feed
//
// Notifications are sent after commit, not inside the write's
// transaction: PostgreSQL serializes the commits of every transaction that
// called NOTIFY on one cluster-wide lock, so notifying inside each write
// made writers queue behind each other. Instead, a write reserves a slot
// for its change with the Store's notifier just before its COMMIT (while
// it holds the task's row lock) and marks it ready once the commit
// returned (or drops it when the commit failed). The notifier, one
// goroutine per Store, sends every ready change in one round trip on a
// connection of its own (named NotifierApplicationName, opened at the
// first write): the changes are records "version|status|hex(id)" (a
// delete sends version 0), packed, one per line, into payloads under
// PostgreSQL's 8000-byte limit, several payloads in one statement (pg_notify
// over unnest: its own transaction, the notifications in order). The
// channel is named after the schema. A failed send is retried after a
// reconnect (50ms to 5s backoff) ahead of later changes; Close sends what
// is ready, waiting at most two seconds.
//
// An append to an event log is notified the same way, as a record
// "seq|hex(id)" (the log's newest Seq) on a second channel, the schema's
// events channel: SubscribeEvents LISTENs on both, Subscribe on the first
// only, so a subscriber that does not read events (and a replica of an
// older version) never hears of them. A write that changed the task and
// appended events sends one record on each.
//
// What a subscriber can rely on: a change is notified after it commits,
// normally within milliseconds. A process that dies between a commit and
// the notification loses that notification (and one whose notifier
// cannot reach the database keeps at most 100,000 changes, dropping the
// oldest), which is why subscribers, the engine among them, also poll.
// The changes of one task made through one Store arrive in commit order:
// its writers reserve their slots in commit order (the row lock admits
// the next one only after the previous one committed), and a ready change
// is held back while an earlier one of the same task is still pending;
// other tasks' changes never wait for it. Changes made through different
// Stores may arrive in another order than their commits; Version tells
// the newer.
//
// Subscribe LISTENs on a connection of its own and reconnects with backoff
// when it is lost, reporting store.Change{Resync: true} once it listens
// again.
package postgres
