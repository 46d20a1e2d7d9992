package postgres_test

// The schema's migrations: replicas opening at once, a schema newer than
// the package, and each migration run on a schema of the version before.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/postgres"
)

// downgrade runs sql, which takes schema back to an older version, and
// returns the connection it used (closed when t ends).
func downgrade(t *testing.T, dsn, schema, sql string) *pgx.Conn {
	t.Helper()
	admin, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	_, err = admin.Exec(t.Context(), sql)
	require.NoError(t, err, "downgrading %s", schema)
	return admin
}

// openAtOnce opens n stores on schema at the same time (as replicas
// starting together do), and closes them when t ends.
func openAtOnce(t *testing.T, dsn, schema string, n int) []*postgres.Store {
	t.Helper()
	stores := make([]*postgres.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			stores[i], errs[i] = postgres.Open(t.Context(), dsn, &postgres.Options{Schema: schema})
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		t.Cleanup(func() { _ = stores[i].Close() })
	}
	return stores
}

// TestConcurrentOpen opens one fresh schema from five goroutines at once:
// the advisory lock lets exactly one of them migrate it, and all of them
// end up with the same cursor key.
func TestConcurrentOpen(t *testing.T) {
	dsn := pgtest.DSN(t)
	stores := openAtOnce(t, dsn, "fresh", 5)
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(t.Context())
	var versions, keys int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM fresh.migrations").Scan(&versions))
	require.Equal(t, 5, versions, "each migration ran once")
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM fresh.meta").Scan(&keys))
	require.Equal(t, 1, keys)

	// Every replica reads the others' cursors.
	ctx := t.Context()
	for i := range 3 {
		_, err := stores[0].Create(ctx, &store.Task{ID: fmt.Sprint(i), Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Unix(int64(i), 0)})
		require.NoError(t, err)
	}
	page, err := stores[1].List(ctx, store.ListOptions{Owner: "o", Limit: 1})
	require.NoError(t, err)
	for _, s := range stores {
		next, err := s.List(ctx, store.ListOptions{Owner: "o", Limit: 1, Cursor: page.NextCursor})
		require.NoError(t, err)
		require.Equal(t, "1", next.Tasks[0].ID)
	}
}

func TestSchemaNewerThanPackage(t *testing.T) {
	dsn := pgtest.DSN(t)
	s, err := postgres.Open(t.Context(), dsn, &postgres.Options{Schema: "future"})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(t.Context())
	_, err = conn.Exec(t.Context(), "INSERT INTO future.migrations (version) VALUES (99)")
	require.NoError(t, err)
	_, err = postgres.Open(t.Context(), dsn, &postgres.Options{Schema: "future"})
	require.ErrorContains(t, err, "newer than this package")

	_, err = postgres.Open(t.Context(), dsn, &postgres.Options{MaxConns: -1})
	require.ErrorIs(t, err, store.ErrInvalid)
	require.ErrorContains(t, err, "MaxConns is negative", "the field is named")
	_, err = postgres.Open(t.Context(), "postgres://nowhere.invalid:1/x?connect_timeout=1", nil)
	require.Error(t, err)
}

// TestMigrateWake takes a schema back to version 1 (before wake-ups) and
// opens it from three replicas at once: migration 2 runs exactly once, the
// old tasks have no wake-up time and Due finds nothing, and then the wake
// index works on them. A row ended by a replica that does not know the
// column (its wake_at left set) never comes back from Due.
func TestMigrateWake(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := t.Context()
	now := time.Unix(1700000000, 0).UTC()
	s, err := postgres.Open(ctx, dsn, &postgres.Options{Schema: "v1"})
	require.NoError(t, err)
	for _, id := range []string{"old-a", "old-b", "old-c"} {
		_, err := s.Create(ctx, &store.Task{ID: id, Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	admin := downgrade(t, dsn, "v1", `DROP TABLE v1.task_events; DROP INDEX v1.tasks_wake; ALTER TABLE v1.tasks DROP COLUMN wake_at;
		DELETE FROM v1.migrations WHERE version >= 2`)
	stores := openAtOnce(t, dsn, "v1", 3)
	var versions int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM v1.migrations").Scan(&versions))
	require.Equal(t, 5, versions, "each migration ran once")

	s = stores[0]
	old, err := s.Get(ctx, "old-a")
	require.NoError(t, err)
	require.True(t, old.WakeAt.IsZero())
	due, err := s.Due(ctx, now.Add(1000*time.Hour), 10)
	require.NoError(t, err)
	require.Empty(t, due)

	for i, id := range []string{"old-a", "old-b", "old-c"} {
		at := now.Add(time.Duration(i+1) * time.Second)
		_, err = stores[i].Update(ctx, id, store.Update{WakeAt: &at})
		require.NoError(t, err)
	}
	// An older replica ends old-b without knowing wake_at.
	_, err = admin.Exec(ctx, `UPDATE v1.tasks SET status = 'completed', version = version + 1 WHERE id = 'old-b'::bytea`)
	require.NoError(t, err)
	due, err = stores[1].Due(ctx, now.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Len(t, due, 2)
	require.Equal(t, "old-a", due[0].ID)
	require.Equal(t, "old-c", due[1].ID)
	require.True(t, due[1].WakeAt.Equal(now.Add(3*time.Second)))
}

// TestMigrateEvents takes a schema back to version 2 (before event logs)
// and opens it from three replicas at once: migration 3 runs exactly once,
// the old tasks read as empty logs, their first event is numbered 1, and a
// delete takes the log with the task.
func TestMigrateEvents(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := t.Context()
	now := time.Unix(1700000000, 0).UTC()
	s, err := postgres.Open(ctx, dsn, &postgres.Options{Schema: "v2"})
	require.NoError(t, err)
	for _, id := range []string{"old-a", "old-b"} {
		_, err := s.Create(ctx, &store.Task{ID: id, Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	admin := downgrade(t, dsn, "v2", `DROP TABLE v2.task_events; DELETE FROM v2.migrations WHERE version >= 3`)
	stores := openAtOnce(t, dsn, "v2", 3)
	var versions int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM v2.migrations WHERE version = 3").Scan(&versions))
	require.Equal(t, 1, versions, "migration 3 ran")

	s = stores[0]
	page, err := s.Events(ctx, "old-a", 0, 0)
	require.NoError(t, err)
	require.Equal(t, store.EventPage{}, page, "an old task has an empty log")
	_, err = stores[1].Update(ctx, "old-a", store.Update{Events: []store.Event{logLine("first")}})
	require.NoError(t, err)
	_, err = stores[2].Update(ctx, "old-a", store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`1`)})
	require.NoError(t, err)
	page, err = s.Events(ctx, "old-a", 0, 0)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, seqs(page.Events))
	require.Equal(t, mcptask.EventStatus, page.Events[1].Type)
	require.NoError(t, s.Delete(ctx, "old-a"))
	var left int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM v2.task_events").Scan(&left))
	require.Zero(t, left, "the log went with its task")
}

// TestMigrateQueues takes a schema back to version 3 (before queues and
// schedules) and opens it from three replicas at once: migration 4 runs
// exactly once, and the old tasks can be queued and schedules saved.
func TestMigrateQueues(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := t.Context()
	now := time.Unix(1700000000, 0).UTC()
	s, err := postgres.Open(ctx, dsn, &postgres.Options{Schema: "v3"})
	require.NoError(t, err)
	_, err = s.Create(ctx, &store.Task{ID: "old-a", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	admin := downgrade(t, dsn, "v3", `DROP TABLE v3.queues; DROP TABLE v3.queue_entries; DROP TABLE v3.schedules;
		DROP TABLE v3.schedule_fires; DROP TABLE v3.replicas; DELETE FROM v3.migrations WHERE version >= 4`)
	stores := openAtOnce(t, dsn, "v3", 3)
	var versions int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM v3.migrations WHERE version = 4").Scan(&versions))
	require.Equal(t, 1, versions, "migration 4 ran once")

	res, err := stores[0].Enqueue(ctx, store.QueueEntry{Queue: "q", ID: "old-a", TaskID: "old-a"}, store.QueueLimits{PerKey: 1}, now)
	require.NoError(t, err)
	require.True(t, res.Entry.Granted())
	es, err := stores[1].QueueEntries(ctx, "q")
	require.NoError(t, err)
	require.Len(t, es, 1)
	_, err = stores[2].SaveSchedule(ctx, &store.ScheduleRecord{Name: "nightly"}, []store.Fire{{Schedule: "nightly", At: now, TaskID: "x"}})
	require.NoError(t, err)
}
