package postgres

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// advisoryLockClass is the first key of the advisory lock Open takes while
// it migrates a schema (the second is hashtext(schema)); "tbrg".
const advisoryLockClass = 0x74627267

// counterShards is the number of counter rows per status; see doc.go.
const counterShards = 16

// migrations are the schema versions, in order; {s} is the quoted schema.
// Migration n (1-based) takes the schema from version n-1 to n. Never edit
// one that has shipped: add another.
var migrations = []string{
	// 1: tasks, variables, counters, meta.
	`
CREATE TABLE {s}.tasks (
	id             bytea PRIMARY KEY,
	owner          bytea NOT NULL,
	status         text NOT NULL CHECK (status IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
	status_message bytea NOT NULL,
	created_at     bigint NOT NULL,
	updated_at     bigint NOT NULL,
	ttl            bigint NOT NULL,
	expires_at     bigint,
	poll_interval  bigint NOT NULL,
	method         bytea NOT NULL,
	name           bytea NOT NULL,
	arguments      bytea,
	label_keys     bytea[],
	label_values   bytea[],
	version        bigint NOT NULL,
	lease_holder   bytea,
	lease_epoch    bigint NOT NULL,
	lease_until    bigint,
	history_status  text[],
	history_message bytea[],
	history_at      bigint[],
	result         bytea,
	has_error      boolean NOT NULL,
	error_code     bigint,
	error_message  bytea,
	error_data     bytea,
	CHECK ((lease_holder IS NULL) = (lease_until IS NULL))
);
CREATE INDEX tasks_owner ON {s}.tasks (owner, created_at, id);
CREATE INDEX tasks_status ON {s}.tasks (status, created_at, id);
CREATE INDEX tasks_name ON {s}.tasks (name, created_at, id);
CREATE INDEX tasks_created ON {s}.tasks (created_at, id);
CREATE INDEX tasks_expiry ON {s}.tasks (expires_at, id) WHERE expires_at IS NOT NULL;
CREATE INDEX tasks_leases ON {s}.tasks (lease_until, id) WHERE lease_holder IS NOT NULL;
CREATE INDEX tasks_active ON {s}.tasks (created_at, id) WHERE status IN ('working', 'input_required');

CREATE TABLE {s}.task_vars (
	task_id bytea NOT NULL REFERENCES {s}.tasks (id) ON DELETE CASCADE,
	name    bytea NOT NULL,
	value   bytea NOT NULL,
	PRIMARY KEY (task_id, name)
);

CREATE TABLE {s}.task_counts (
	status text NOT NULL,
	shard  int NOT NULL,
	n      bigint NOT NULL,
	PRIMARY KEY (status, shard)
);
INSERT INTO {s}.task_counts (status, shard, n)
	SELECT st, sh, 0
	FROM unnest(ARRAY['working', 'input_required', 'completed', 'failed', 'cancelled']) AS st,
	     generate_series(0, 15) AS sh;

CREATE TABLE {s}.meta (
	key   text PRIMARY KEY,
	value bytea NOT NULL
);
`,
	// 2: the wake-up time and its index (Store.Due). The column is
	// nullable without a default, so adding it rewrites no row; every
	// existing task gets no wake-up. The index holds only the rows Due
	// reads: a wake-up time on a task that is not terminal (the status
	// predicate also keeps out a terminal row that a replica of an older
	// version, which does not know the column, ended without clearing
	// it). IF NOT EXISTS makes the step idempotent on its own, beside the
	// advisory lock and the migrations table that already run it once.
	`
ALTER TABLE {s}.tasks ADD COLUMN IF NOT EXISTS wake_at bigint;
CREATE INDEX IF NOT EXISTS tasks_wake ON {s}.tasks (wake_at, id)
	WHERE wake_at IS NOT NULL AND status IN ('working', 'input_required');
`,
	// 3: the tasks' event logs. A new table: no existing row changes, and
	// every existing task reads as an empty log. pos is the event's
	// offset in its log (store.LoggedEvent.Pos); a task's newest event
	// tells where its log ends, so no counter row is kept. The events go
	// with their task (ON DELETE CASCADE), also when a replica of an older
	// version deletes it.
	`
CREATE TABLE IF NOT EXISTS {s}.task_events (
	task_id bytea NOT NULL REFERENCES {s}.tasks (id) ON DELETE CASCADE,
	seq     bigint NOT NULL,
	pos     bigint NOT NULL,
	at      bigint NOT NULL,
	type    text NOT NULL,
	data    bytea,
	PRIMARY KEY (task_id, seq)
);
`,
	// 4: the engine's queues and schedules (queues.go, schedules.go). New
	// tables: no existing row changes. A queue's row is what its
	// operations lock (SELECT ... FOR UPDATE), so that they serialize
	// across replicas; its entries hold no reference to their task (a
	// task is deleted without them: an entry of a missing task holds no
	// place and is dropped by the next operation), but are indexed by it.
	`
CREATE TABLE IF NOT EXISTS {s}.queues (
	name  bytea PRIMARY KEY,
	state bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.queue_entries (
	queue       bytea NOT NULL,
	id          bytea NOT NULL,
	task_id     bytea NOT NULL,
	key         bytea NOT NULL,
	priority    bigint NOT NULL,
	seq         bigint NOT NULL,
	enqueued_at bigint NOT NULL,
	not_before  bigint,
	granted_at  bigint,
	PRIMARY KEY (queue, id)
);
CREATE INDEX IF NOT EXISTS queue_entries_task ON {s}.queue_entries (task_id);
CREATE TABLE IF NOT EXISTS {s}.schedules (
	name    bytea PRIMARY KEY,
	version bigint NOT NULL,
	record  bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.schedule_fires (
	schedule bytea NOT NULL,
	at       bigint NOT NULL,
	started  boolean NOT NULL,
	fire     bytea NOT NULL,
	PRIMARY KEY (schedule, at)
);
`,
	// 5: the replicas' registry (replicas.go). A new table: no existing
	// row changes. A row is one replica's record (store.ReplicaRecord,
	// JSON), its latest heartbeat a column for the forgetting.
	`
CREATE TABLE IF NOT EXISTS {s}.replicas (
	id      bytea PRIMARY KEY,
	seen_at bigint NOT NULL,
	record  bytea NOT NULL
);
`,
}

// migrate brings the schema up to date and returns the cursor key. It runs
// in one transaction holding an advisory lock on the schema, so concurrent
// Opens of one schema run it one at a time: the first migrates, the others
// find nothing to do.
func migrate(ctx context.Context, conn *pgx.Conn, schema string, quoted string) (cursorKey []byte, err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", int32(advisoryLockClass), schema); err != nil {
		return nil, fmt.Errorf("advisory lock: %w", err)
	}
	// Only under the lock: CREATE SCHEMA IF NOT EXISTS itself races.
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+quoted); err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+quoted+`.migrations (
	version    int PRIMARY KEY,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return nil, fmt.Errorf("create migrations table: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+quoted+".migrations").Scan(&current); err != nil {
		return nil, err
	}
	if current > len(migrations) {
		return nil, fmt.Errorf("schema %s is at version %d, newer than this package (%d): upgrade the binary", schema, current, len(migrations))
	}
	for v := current + 1; v <= len(migrations); v++ {
		// No arguments: the simple protocol runs the whole script.
		if _, err := tx.Exec(ctx, expand(migrations[v-1], quoted)); err != nil {
			return nil, fmt.Errorf("migration %d: %w", v, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+quoted+".migrations (version) VALUES ($1)", v); err != nil {
			return nil, fmt.Errorf("record migration %d: %w", v, err)
		}
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand.Read never fails
	if _, err := tx.Exec(ctx, "INSERT INTO "+quoted+".meta (key, value) VALUES ('cursor_key', $1) ON CONFLICT (key) DO NOTHING", key); err != nil {
		return nil, fmt.Errorf("cursor key: %w", err)
	}
	if err := tx.QueryRow(ctx, "SELECT value FROM "+quoted+".meta WHERE key = 'cursor_key'").Scan(&cursorKey); err != nil {
		return nil, fmt.Errorf("cursor key: %w", err)
	}
	if len(cursorKey) < 32 {
		return nil, fmt.Errorf("cursor key of %d bytes in %s.meta", len(cursorKey), schema)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return cursorKey, nil
}
