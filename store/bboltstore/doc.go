// Package bboltstore is a durable implementation of store.Store on a single
// bbolt (go.etcd.io/bbolt) file.
//
// # Layout
//
// All keys and values are binary; integers are big endian. Times are Unix
// nanoseconds; in index keys they are stored as uint64(nanos) with the sign
// bit flipped, so that byte order is time order (also before 1970).
//
//	tasks     id -> header: every field of the task except Variables, Result,
//	                Error and History (versioned binary record, see below)
//	vars      id -> nested bucket, one per task that has variables:
//	                variable name -> raw JSON value
//	results   id -> result record: raw result JSON and the JSON-RPC error
//	history   id -> the status history (versioned binary record); written
//	                on Create and on every status change only
//	by_owner  len(owner) (2 bytes) | owner | createdAt (8) | id -> empty
//	by_status len(status) (2 bytes) | status | createdAt (8) | id -> empty
//	by_name   len(name) (2 bytes) | request name | createdAt (8) | id -> empty
//	expiry    expiresAt (8) | id -> empty; only tasks with an ExpiresAt
//	          (TTL > 0, or moved there by Update.ExpiresAt)
//	leases    leaseUntil (8) | id -> empty; only tasks with a LeaseHolder
//	wake      wakeAt (8) | id -> empty; only tasks with a WakeAt (never a
//	          terminal one), for Due
//	active    id -> empty; tasks not in a terminal status
//	events    len(id) (2 bytes) | id | seq (8) -> an event of the task's
//	          log (versioned binary record: its offset in the log, time,
//	          type and JSON data); see events.go
//	meta      "schema" -> schema version (4);
//	          "cursor_key" -> 32 random bytes generated on first open, the
//	          HMAC key of List and Query cursors, so cursors survive a
//	          restart;
//	          "count:<status>" -> the number of tasks in that status
//	          (uint64), so Counts reads five keys instead of the tasks
//
// Every write keeps the indexes and counters in step with the headers in
// the same transaction (indexTask, unindexTask and reindex in index.go),
// and a task's event log with the write it reports (appendEvents in
// events.go); Check verifies that offline. Schema 1 files (before leases,
// queries, counts and history), schema 2 files (before wake-ups) and
// schema 3 files (before event logs) are upgraded by Open, see
// migrate.go.
//
// The owner index key is length-prefixed rather than separator-terminated,
// so owners may contain any bytes (including 0x00) without ambiguity. The
// header and result records are a small length-prefixed binary encoding
// rather than JSON because encoding/json would silently replace invalid
// UTF-8 in owners, ids and messages; records carry a format byte so the
// encoding can evolve.
//
// Splitting a task over four buckets means an update writes only what it
// changes: a status-only update rewrites the header, the history and the
// index entries it affects but neither the variables nor the result; a
// variable merge writes only the merged names and the header; a lease
// renewal writes only the header and its lease entry; moving a wake-up
// writes only the header and its wake entry; a pure append (a progress
// report, a log line) reads the header and writes only its events (and
// deletes the oldest the caps drop), never the header.
//
// # Queries
//
// Query drives each page from one index, chosen by store.PlanQuery:
// by_owner or by_name under one prefix, or by_status merged over the
// wanted statuses, walked backwards (newest first) with a bbolt cursor from
// the page cursor's position. The filters the index does not cover are
// applied to the decoded headers, and a call examines at most
// store.QueryScanBudget entries, so a page's cost is bounded whatever the
// filters and the number of tasks.
//
// # Group commit
//
// Every write (Create, Update, Delete, Claim, Renew) is an operation handed to one
// committer goroutine; the caller waits for the outcome. The committer takes
// the first queued operation, then drains whatever else is already queued
// (up to 512 operations) without waiting for more, runs them all inside ONE
// read-write transaction and commits it once — a single fsync pair for the
// whole batch. A lone writer therefore sees no added latency (there is no
// batching timer as with bbolt's DB.Batch), while concurrent writers share
// commits; Stats reports how well that works.
//
// Each operation validates completely (existence, transition, version,
// sizes) before it writes anything, so an operation that fails leaves no
// trace in the shared transaction and does not affect the others. Should a
// write itself fail part-way (which validation is designed to prevent), the
// transaction is rolled back, that operation fails, and the rest of the
// batch is re-run in a fresh transaction. If the commit fails, every
// operation that had succeeded in the batch fails with the commit error.
// Operations whose context is cancelled before the committer reaches them
// are dropped with the context's error; once an operation runs, its caller
// gets its true outcome.
//
// Reads (Get, List, Query, Counts, Expired, ExpiredLeases, Due, Active) use
// their own read-only transactions and run concurrently with each other and
// with the committer.
//
// Reads go through bbolt's memory map of the file: the first read of each
// page takes a page fault. With Options.Prefault (Linux) the map is
// populated at Open instead, which pays off for large stores read at
// random; see Options.Prefault for its costs.
//
// # Damaged files
//
// A file damaged by a disk fault or a bad copy must never take the process
// down. Open reads the meta pages first and refuses a truncated file or a
// malformed freelist (which bbolt would fault on, or allocate without
// bound for); panics and memory faults bbolt raises inside Open, reads and
// commits are recovered. All of these fail with an error matching
// ErrCorrupt that names the file and says to restore it from a backup or
// move it away. Check verifies a file offline, bbolt's page structure and
// the store's own invariants.
//
// # Durability
//
// A write is acknowledged (its call returns nil) only after the transaction
// containing it has been committed and, unless Options.NoSync was set,
// fsynced: an acknowledged write survives a process crash or power loss.
// With Options.NoSync a crash of the machine (not just the process) may
// lose acknowledged writes or corrupt the file.
//
// Writes share commits: one goroutine commits every write queued while the
// previous commit ran in one transaction and one pair of fsyncs. With a
// commit window (Options.CommitWindow, opt-in for saturated servers), when
// CommitWindowFrom or more writes are waiting at once, it holds the batch
// open for more to join; fewer writers never wait. Close finishes every queued
// operation before it closes the file; after Close every method fails with
// store.ErrClosed.
//
// A file may be open in one Store at a time (bbolt takes an exclusive file
// lock); a second Open fails after the open timeout (Options.OpenTimeout,
// default one second) instead of hanging.
package bboltstore
