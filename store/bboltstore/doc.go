// Package bboltstore is a durable implementation of store.Store on a single
// bbolt (go.etcd.io/bbolt) file.
//
// # Layout
//
// All keys and values are binary; integers are big endian. Times are Unix
// nanoseconds; in index keys they are stored as uint64(nanos) with the sign
// bit flipped, so that byte order is time order (also before 1970).
//
//	tasks     id -> header: every field of the task except Variables, Result
//	                and Error (versioned binary record, see below)
//	vars      id -> nested bucket, one per task that has variables:
//	                variable name -> raw JSON value
//	results   id -> result record: raw result JSON and the JSON-RPC error
//	by_owner  len(owner) (2 bytes) | owner | createdAt (8) | id -> empty
//	expiry    expiresAt (8) | id -> empty; only tasks with an ExpiresAt
//	          (TTL > 0, or moved there by Update.ExpiresAt)
//	active    id -> empty; tasks not in a terminal status
//	meta      "schema" -> schema version (1);
//	          "cursor_key" -> 32 random bytes generated on first open, the
//	          HMAC key of List cursors, so cursors survive a restart
//
// The owner index key is length-prefixed rather than separator-terminated,
// so owners may contain any bytes (including 0x00) without ambiguity. The
// header and result records are a small length-prefixed binary encoding
// rather than JSON because encoding/json would silently replace invalid
// UTF-8 in owners, ids and messages; records carry a format byte so the
// encoding can evolve.
//
// Splitting a task over three buckets means an update writes only what it
// changes: a status-only update rewrites the header (and the index entries
// it affects) but neither the variables nor the result; a variable merge
// writes only the merged names.
//
// # Group commit
//
// Every write (Create, Update, Delete) is an operation handed to one
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
// Reads (Get, List, Expired, Active) use their own read-only transactions
// and run concurrently with each other and with the committer.
//
// # Durability
//
// A write is acknowledged (its call returns nil) only after the transaction
// containing it has been committed and, unless WithNoSync(true) was given,
// fsynced: an acknowledged write survives a process crash or power loss.
// With WithNoSync(true) a crash of the machine (not just the process) may
// lose acknowledged writes or corrupt the file. Close finishes every queued
// operation before it closes the file; after Close every method fails with
// store.ErrClosed.
//
// A file may be open in one Store at a time (bbolt takes an exclusive file
// lock); a second Open fails after the open timeout (WithOpenTimeout,
// default one second) instead of hanging.
package bboltstore
