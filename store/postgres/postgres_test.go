package postgres_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/postgres"
	"github.com/taskbridge/taskbridge/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var schemaSeq atomic.Int64

// openSchema opens a store on a fresh schema of dsn and closes it when t
// ends.
func openSchema(t testing.TB, dsn string, opts *postgres.Options) *postgres.Store {
	t.Helper()
	var o postgres.Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = fmt.Sprintf("s%d", schemaSeq.Add(1))
	}
	s, err := postgres.Open(context.Background(), dsn, &o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestConformance runs the shared suite; every store it opens gets a schema
// of its own in one database.
func TestConformance(t *testing.T) {
	dsn := pgtest.DSN(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		return openSchema(t, dsn, &postgres.Options{MaxConns: 8})
	})
}

// TestDurable maps each of the suite's paths to a schema: closing and
// reopening a path reopens the same schema.
func TestDurable(t *testing.T) {
	dsn := pgtest.DSN(t)
	storetest.RunDurable(t, func(t *testing.T, path string) store.Store {
		sum := sha256.Sum256([]byte(path))
		s, err := postgres.Open(t.Context(), dsn, &postgres.Options{Schema: "d_" + hex.EncodeToString(sum[:8])})
		require.NoError(t, err)
		return s
	})
}

func TestShared(t *testing.T) {
	s := openSchema(t, pgtest.DSN(t), nil)
	require.True(t, s.Shared())
	require.True(t, store.IsShared(s))
}

// TestReplicasCannotBothWin races two Store values (two replicas) on one
// schema: compare-and-swap updates, claims and fenced writes each have
// exactly one winner.
func TestReplicasCannotBothWin(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := openSchema(t, dsn, &postgres.Options{Schema: "shared"})
	b, err := postgres.Open(t.Context(), dsn, &postgres.Options{Schema: "shared"})
	require.NoError(t, err)
	defer b.Close()
	ctx := t.Context()
	replicas := []*postgres.Store{a, b}
	now := time.Unix(1700000000, 0)

	for round := range 10 {
		id := fmt.Sprintf("race-%d", round)
		created, err := a.Create(ctx, &store.Task{ID: id, Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now,
			LeaseHolder: "dead", LeaseUntil: now.Add(time.Second)})
		require.NoError(t, err)
		race := func(what string, fn func(i int, r *postgres.Store) error, loses error) {
			t.Helper()
			var (
				wg         sync.WaitGroup
				wins       atomic.Int32
				unexpected = make(chan error, len(replicas))
			)
			start := make(chan struct{})
			for i, r := range replicas {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					switch err := fn(i, r); {
					case err == nil:
						wins.Add(1)
					case !errors.Is(err, loses):
						unexpected <- err
					}
				}()
			}
			close(start)
			wg.Wait()
			close(unexpected)
			for err := range unexpected {
				require.NoError(t, err)
			}
			require.Equal(t, int32(1), wins.Load(), "round %d: one %s winner", round, what)
		}
		race("compare-and-swap", func(_ int, r *postgres.Store) error {
			_, err := r.Update(ctx, id, store.Update{IfVersion: created.Version, StatusMessage: new(string)})
			return err
		}, store.ErrConflict)
		race("claim", func(i int, r *postgres.Store) error {
			_, err := r.Claim(ctx, id, fmt.Sprintf("replica-%d", i), now.Add(time.Minute), now.Add(time.Hour))
			return err
		}, store.ErrLeased)
		got, err := b.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, uint64(2), got.LeaseEpoch)
		// Only the winner's fence writes.
		for i, r := range replicas {
			f := store.Fence{Holder: fmt.Sprintf("replica-%d", i), Epoch: 2}
			_, err := r.Update(ctx, id, store.Update{Fence: &f, StatusMessage: new(string)})
			if f.Holder == got.LeaseHolder {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, store.ErrFenced)
			}
		}
	}
}

// collector gathers the changes a subscription delivers.
type collector struct {
	mu      sync.Mutex
	changes []store.Change
	notify  chan struct{}
}

func newCollector() *collector { return &collector{notify: make(chan struct{}, 1)} }

func (c *collector) add(ch store.Change) {
	c.mu.Lock()
	c.changes = append(c.changes, ch)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// waitFor waits until pred holds for the changes seen so far.
func (c *collector) waitFor(t *testing.T, within time.Duration, what string, pred func([]store.Change) bool) []store.Change {
	t.Helper()
	deadline := time.After(within)
	for {
		c.mu.Lock()
		got := append([]store.Change(nil), c.changes...)
		c.mu.Unlock()
		if pred(got) {
			return got
		}
		select {
		case <-c.notify:
		case <-deadline:
			t.Fatalf("%s: not seen within %v; changes: %+v", what, within, got)
		}
	}
}

func strPtr(s string) *string { return &s }

func hasChange(want store.Change) func([]store.Change) bool {
	return func(cs []store.Change) bool {
		for _, c := range cs {
			if c == want {
				return true
			}
		}
		return false
	}
}

func TestNotifierAcrossStores(t *testing.T) {
	dsn := pgtest.DSN(t)
	reader := openSchema(t, dsn, &postgres.Options{Schema: "feed"})
	writer, err := postgres.Open(t.Context(), dsn, &postgres.Options{Schema: "feed"})
	require.NoError(t, err)
	defer writer.Close()
	other := openSchema(t, dsn, &postgres.Options{Schema: "elsewhere"})
	ctx := t.Context()

	seen := newCollector()
	stop, err := reader.Subscribe(ctx, seen.add)
	require.NoError(t, err)
	defer stop()

	id := "task\x00\xff/é" // any bytes survive the payload
	start := time.Now()
	_, err = writer.Create(ctx, &store.Task{ID: id, Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Now()})
	require.NoError(t, err)
	seen.waitFor(t, 30*time.Second, "create", hasChange(store.Change{ID: id, Status: mcptask.StatusWorking, Version: 1}))
	// Subscribe is fed by NOTIFY alone (subscribers poll on their own):
	// the change arriving is the push. How soon is logged, not asserted.
	t.Logf("a write through another Store value reached the subscriber in %v", time.Since(start))

	_, err = other.Create(ctx, &store.Task{ID: "other-schema", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Now()})
	require.NoError(t, err)
	_, err = writer.Update(ctx, id, store.Update{Status: mcptask.StatusInputRequired})
	require.NoError(t, err)
	_, err = writer.Claim(ctx, id, "h", time.Now(), time.Now().Add(time.Minute))
	require.NoError(t, err)
	_, err = writer.Renew(ctx, "h", time.Now().Add(time.Hour), []string{id})
	require.NoError(t, err)
	// Each Store notifies its own writes in commit order; writes through
	// two Stores arrive in commit order when the second starts after the
	// first was heard (see store.Notifier).
	seen.waitFor(t, 30*time.Second, "the claim", hasChange(store.Change{ID: id, Status: mcptask.StatusInputRequired, Version: 3}))
	_, err = reader.Update(ctx, id, store.Update{Status: mcptask.StatusCompleted}) // its own writes too
	require.NoError(t, err)
	seen.waitFor(t, 30*time.Second, "the completion", hasChange(store.Change{ID: id, Status: mcptask.StatusCompleted, Version: 4}))
	require.NoError(t, writer.Delete(ctx, id))
	want := []store.Change{
		{ID: id, Status: mcptask.StatusWorking, Version: 1},
		{ID: id, Status: mcptask.StatusInputRequired, Version: 2},
		{ID: id, Status: mcptask.StatusInputRequired, Version: 3},
		{ID: id, Status: mcptask.StatusCompleted, Version: 4},
		{ID: id, Status: mcptask.StatusCompleted, Deleted: true},
	}
	got := seen.waitFor(t, 30*time.Second, "every change", func(cs []store.Change) bool { return len(cs) >= len(want) })
	require.Equal(t, want, got, "in commit order, nothing from another schema, no renewal")

	// stop ends delivery.
	stop()
	_, err = writer.Create(ctx, &store.Task{ID: "after-stop", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Now()})
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	seen.mu.Lock()
	require.Len(t, seen.changes, len(want))
	seen.mu.Unlock()
	stop() // idempotent
}

// TestNotifierBatches writes from many goroutines at once, through one
// Store, to tasks of their own and to one task they share: every change
// arrives at a subscriber on another Store, each task's in commit order
// (versions 1, 2, 3, ... without gaps), and the notifier sent them in
// fewer round trips than there were changes.
func TestNotifierBatches(t *testing.T) {
	dsn := pgtest.DSN(t)
	writer := openSchema(t, dsn, &postgres.Options{Schema: "batches", MaxConns: 16})
	reader, err := postgres.Open(t.Context(), dsn, &postgres.Options{Schema: "batches"})
	require.NoError(t, err)
	defer reader.Close()
	ctx := t.Context()
	seen := newCollector()
	stop, err := reader.Subscribe(ctx, seen.add)
	require.NoError(t, err)
	defer stop()

	const (
		writers   = 24
		perWriter = 8 // tasks per writer, and writes of the shared task
	)
	_, err = writer.Create(ctx, &store.Task{ID: "hot", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Now()})
	require.NoError(t, err)
	// Long ids make long records, so that some batches need several
	// payloads.
	pad := strings.Repeat("x", 200)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				id := fmt.Sprintf("%s-%d-%d", pad, w, i)
				steps := []func() error{
					func() error {
						_, err := writer.Create(ctx, &store.Task{ID: id, Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Now()})
						return err
					},
					func() error {
						_, err := writer.Update(ctx, id, store.Update{Status: mcptask.StatusInputRequired})
						return err
					},
					func() error {
						_, err := writer.Update(ctx, "hot", store.Update{StatusMessage: strPtr(id)})
						return err
					},
					func() error {
						_, err := writer.Update(ctx, id, store.Update{Status: mcptask.StatusCompleted, Result: []byte(`{}`)})
						return err
					},
				}
				for _, step := range steps {
					if err := step(); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	hot := 1 + writers*perWriter
	total := writers*perWriter*3 + hot
	got := seen.waitFor(t, 30*time.Second, "every change", func(cs []store.Change) bool { return len(cs) >= total })
	require.Len(t, got, total, "no change twice")
	versions := map[string][]uint64{}
	for _, c := range got {
		versions[c.ID] = append(versions[c.ID], c.Version)
	}
	require.Len(t, versions, writers*perWriter+1)
	for id, vs := range versions {
		want := []uint64{1, 2, 3}
		if id == "hot" {
			want = make([]uint64, hot)
			for i := range want {
				want[i] = uint64(i + 1)
			}
		}
		require.Equal(t, want, vs, "task %.20s...: in commit order", id)
	}
	// The notifier counts a send after PostgreSQL took it, which may be
	// after the subscriber heard of it.
	// Beside the changes, every create and status change appended an
	// event, notified on the events channel (which this subscriber does
	// not hear).
	appends := writers*perWriter*3 + 1
	var records, roundTrips uint64
	require.Eventually(t, func() bool {
		records, roundTrips = postgres.NotifierCounts(writer)
		return records == uint64(total+appends)
	}, 30*time.Second, 5*time.Millisecond, "every change and append sent once")
	t.Logf("%d changes sent in %d round trips", records, roundTrips)
	require.Less(t, roundTrips, records, "concurrent writes share round trips")
}

// TestNotifierReconnects kills the notifier's connection: the next writes
// are still delivered (the notifier reconnects and sends them).
func TestNotifierReconnects(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := openSchema(t, dsn, nil)
	ctx := t.Context()
	seen := newCollector()
	stop, err := s.Subscribe(ctx, seen.add)
	require.NoError(t, err)
	defer stop()
	_, err = s.Create(ctx, &store.Task{ID: "before", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Now()})
	require.NoError(t, err)
	seen.waitFor(t, 30*time.Second, "the first write", hasChange(store.Change{ID: "before", Status: mcptask.StatusWorking, Version: 1}))

	admin, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer admin.Close(ctx)
	var killed int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()) k`, postgres.NotifierApplicationName).Scan(&killed))
	require.Equal(t, 1, killed)

	for i := range 3 {
		_, err = s.Create(ctx, &store.Task{ID: fmt.Sprint("after-", i), Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Now()})
		require.NoError(t, err)
	}
	got := seen.waitFor(t, 30*time.Second, "the writes after the kill", func(cs []store.Change) bool { return len(cs) >= 4 })
	require.Equal(t, []string{"before", "after-0", "after-1", "after-2"}, []string{got[0].ID, got[1].ID, got[2].ID, got[3].ID})
	for _, c := range got {
		require.False(t, c.Resync, "the listener's connection was not touched")
	}
}

// TestNotifierResync kills the listener's connection: the subscriber hears
// Resync once the subscription listens again, then changes as before
// (the suite's check, with PostgreSQL's way of losing a connection).
func TestNotifierResync(t *testing.T) {
	dsn := pgtest.DSN(t)
	storetest.RunNotifierResync(t, func(t *testing.T) store.Store { return openSchema(t, dsn, nil) }, func(t *testing.T, s store.Store) {
		admin, err := pgx.Connect(t.Context(), dsn)
		require.NoError(t, err)
		defer admin.Close(t.Context())
		var killed int
		require.NoError(t, admin.QueryRow(t.Context(), `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name = $1 AND datname = current_database()) k`, postgres.ListenerApplicationName).Scan(&killed))
		require.Equal(t, 1, killed)
	})
}

func TestNotifierAndClose(t *testing.T) {
	dsn := pgtest.DSN(t)
	s, err := postgres.Open(t.Context(), dsn, nil)
	require.NoError(t, err)
	require.Equal(t, postgres.DefaultSchema, s.Schema())
	watcher, err := postgres.Open(t.Context(), dsn, nil)
	require.NoError(t, err)
	seen := newCollector()
	stopWatching, err := watcher.Subscribe(t.Context(), seen.add)
	require.NoError(t, err)
	var calls atomic.Int32
	_, err = s.Subscribe(t.Context(), func(store.Change) { calls.Add(1) })
	require.NoError(t, err)

	// Close sends the notifications of the writes that returned before it.
	for i := range 3 {
		_, err = s.Create(t.Context(), &store.Task{ID: fmt.Sprint("last-", i), Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Now()})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close(), "Close ends the subscriptions")
	_, err = s.Subscribe(t.Context(), func(store.Change) {})
	require.ErrorIs(t, err, store.ErrClosed)
	got := seen.waitFor(t, 30*time.Second, "the writes before Close", func(cs []store.Change) bool { return len(cs) >= 3 })
	require.Equal(t, "last-2", got[2].ID)
	stopWatching()
	require.NoError(t, watcher.Close())

	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(t.Context())
	for _, app := range []string{postgres.ListenerApplicationName, postgres.NotifierApplicationName} {
		// A backend leaves pg_stat_activity a moment after its client
		// hung up.
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()`,
				app).Scan(&n))
			return n == 0
		}, 30*time.Second, 10*time.Millisecond, "the %s connections are closed", app)
	}
}

// TestPlansUseIndexes asks PostgreSQL how it runs each query shape with
// sequential scans and sorts disabled: every one must be served by an
// index, in the order it needs (so none reads more than its page at 1M
// rows).
func TestPlansUseIndexes(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := openSchema(t, dsn, &postgres.Options{Schema: "plans"})
	_ = s
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(t.Context())
	ctx := t.Context()
	// With these off, PostgreSQL still uses them when nothing else can
	// answer: a Sort or Seq Scan left in a plan means no index serves it.
	_, err = conn.Exec(ctx, "SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_sort = off")
	require.NoError(t, err)
	for name, sql := range map[string]string{
		"get":           `SELECT * FROM plans.tasks WHERE id = '\x01'::bytea`,
		"list page":     `SELECT * FROM plans.tasks t WHERE t.owner = 'o'::bytea AND (t.created_at, t.id) > (5, ''::bytea) ORDER BY t.created_at, t.id LIMIT 51`,
		"expired":       `SELECT * FROM plans.tasks t WHERE t.expires_at IS NOT NULL AND t.expires_at <= 5 ORDER BY t.expires_at, t.id LIMIT 50`,
		"expired lease": `SELECT * FROM plans.tasks t WHERE t.lease_holder IS NOT NULL AND t.lease_until <= 5 ORDER BY t.lease_until, t.id LIMIT 50`,
		"due":           `SELECT * FROM plans.tasks t WHERE t.wake_at IS NOT NULL AND t.status IN ('working', 'input_required') AND t.wake_at <= 5 ORDER BY t.wake_at, t.id LIMIT 50`,
		"active":        `SELECT * FROM plans.tasks t WHERE t.status IN ('working', 'input_required') ORDER BY t.created_at, t.id`,
		"query status":  `SELECT * FROM plans.tasks t WHERE t.status = 'failed' AND (t.created_at, t.id) < (5, ''::bytea) ORDER BY t.created_at DESC, t.id DESC LIMIT 51`,
		"query name":    `SELECT * FROM plans.tasks t WHERE t.name = 'n'::bytea ORDER BY t.created_at DESC, t.id DESC LIMIT 51`,
		"query all":     `SELECT * FROM plans.tasks t ORDER BY t.created_at DESC, t.id DESC LIMIT 51`,
		"query oldest":  `SELECT * FROM plans.tasks t WHERE t.status = 'failed' AND (t.created_at, t.id) > (5, ''::bytea) ORDER BY t.created_at ASC, t.id ASC LIMIT 2`,
		"variables":     `SELECT * FROM plans.task_vars v WHERE v.task_id = '\x01'::bytea ORDER BY v.name`,
		"renew":         `SELECT * FROM plans.tasks WHERE id = ANY(ARRAY['\x01'::bytea]) AND lease_holder = 'h'::bytea`,
		"event tail":    `SELECT * FROM plans.task_events e WHERE e.task_id = '\x01'::bytea ORDER BY e.seq DESC LIMIT 1`,
		"events page":   `SELECT * FROM plans.task_events e WHERE e.task_id = '\x01'::bytea AND e.seq > 5 ORDER BY e.seq LIMIT 50`,
		"drop events":   `DELETE FROM plans.task_events WHERE task_id = '\x01'::bytea AND seq < 5`,
	} {
		rows, err := conn.Query(ctx, "EXPLAIN "+sql)
		require.NoError(t, err, name)
		var plan []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
		text := strings.Join(plan, "\n")
		require.NotContains(t, text, "Seq Scan", "%s:\n%s", name, text)
		require.Contains(t, text, "Index", "%s:\n%s", name, text)
		if name != "renew" {
			require.NotContains(t, text, "Filter", "%s: the index holds exactly the rows wanted:\n%s", name, text)
		}
		if strings.Contains(sql, "LIMIT") {
			require.NotContains(t, text, "Sort", "%s reads in index order:\n%s", name, text)
		}
	}
}

func openBench(b *testing.B) *postgres.Store {
	return openSchema(b, pgtest.DSN(b), &postgres.Options{MaxConns: 32})
}

func BenchmarkCreateComplete(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			storetest.BenchCreateComplete(b, openBench(b), writers)
		})
	}
}

func BenchmarkGet(b *testing.B) { storetest.BenchGet(b, openBench(b)) }

func BenchmarkListPage(b *testing.B) { storetest.BenchListPage(b, openBench(b)) }

// BenchmarkUpdates measures a state write, the same with one event, and
// a pure append (storetest.BenchUpdates).
func BenchmarkUpdates(b *testing.B) { storetest.BenchUpdates(b, openBench(b)) }

// BenchmarkQueryPage measures operator queries over 100,000 tasks (10,000
// with -short).
func BenchmarkQueryPage(b *testing.B) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	s := openBench(b)
	storetest.PreloadQuery(b, s, n)
	for _, c := range storetest.QueryBenchCases() {
		b.Run(c.Name, func(b *testing.B) { storetest.BenchQueryPage(b, s, c.Query) })
	}
}

// TestOptions: the settings every backend shares (store.Options: limits
// and clock, embedded in Options).
func TestOptions(t *testing.T) {
	now := time.Date(2031, 5, 6, 7, 8, 9, 10, time.UTC)
	clock := func() time.Time { return now }
	limits := store.Limits{MaxResultBytes: 4}
	s := openSchema(t, pgtest.DSN(t), &postgres.Options{Options: store.Options{Now: clock, Limits: limits}})
	ctx := t.Context()
	_, err := s.Create(ctx, &store.Task{ID: "a", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now.Add(-time.Minute)})
	require.NoError(t, err)
	_, err = s.Update(ctx, "a", store.Update{Result: []byte(`12345`)})
	require.ErrorIs(t, err, store.ErrTooLarge)
	got, err := s.Update(ctx, "a", store.Update{Result: []byte(`1234`)})
	require.NoError(t, err)
	require.True(t, got.UpdatedAt.Equal(now))
}

// TestStats: every committed write is one transaction, counted with its
// commit time; refused writes count as failed.
func TestStats(t *testing.T) {
	s := openSchema(t, pgtest.DSN(t), nil)
	var reporter store.StatsReporter = s
	require.Equal(t, store.Stats{}, reporter.Stats())
	ctx := t.Context()
	now := time.Now()
	_, err := s.Create(ctx, &store.Task{ID: "a", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now})
	require.NoError(t, err)
	_, err = s.Update(ctx, "a", store.Update{StatusMessage: strPtr("m")})
	require.NoError(t, err)
	_, err = s.Claim(ctx, "a", "h", now, now.Add(time.Minute))
	require.NoError(t, err)
	_, err = s.Renew(ctx, "h", now.Add(time.Hour), []string{"a"})
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, "a"))
	_, err = s.Update(ctx, "a", store.Update{StatusMessage: strPtr("gone")})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.Create(ctx, &store.Task{ID: "", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now})
	require.ErrorIs(t, err, store.ErrInvalid, "refused before the store took it on: not counted")
	st := s.Stats()
	require.Equal(t, uint64(5), st.Commits)
	require.Equal(t, uint64(5), st.OpsCommitted)
	require.Equal(t, uint64(1), st.MaxOpsPerCommit)
	require.Equal(t, uint64(1), st.OpsFailed)
	require.Zero(t, st.CommitErrors)
	require.Positive(t, st.CommitTime)
	require.InDelta(t, 1.0, st.OpsPerCommit(), 0)
}

// TestQueueAcrossReplicas races two Store values (two replicas) on one
// schema for places on a queue (storetest.QueueRace): the limits hold
// across them.
func TestQueueAcrossReplicas(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := openSchema(t, dsn, &postgres.Options{Schema: "queue_replicas"})
	b, err := postgres.Open(t.Context(), dsn, &postgres.Options{Schema: "queue_replicas"})
	require.NoError(t, err)
	defer b.Close()
	storetest.QueueRace(t, a, b)
}

// TestStatsCountStatementsAndRoundTrips: the store counts what it sends
// PostgreSQL. A read is one statement in one round trip (once its
// statement is prepared on the connection); a write's statements travel
// in fewer round trips than there are statements (BEGIN pipelined with
// the write).
func TestStatsCountStatementsAndRoundTrips(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := openSchema(t, dsn, &postgres.Options{MaxConns: 1})
	ctx := context.Background()
	before := s.Stats()
	_, err := s.Create(ctx, &store.Task{ID: "t", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Unix(1700000000, 0)})
	require.NoError(t, err)
	created := s.Stats()
	require.Greater(t, created.Statements, before.Statements)
	require.Greater(t, created.Statements-before.Statements, created.RoundTrips-before.RoundTrips, "BEGIN shares the write's round trip")
	// A store that never writes sends no notifications, so its counts
	// move only with its reads.
	r, err := postgres.Open(ctx, dsn, &postgres.Options{Schema: s.Schema(), MaxConns: 1})
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Get(ctx, "t") // prepares the read on the connection
	require.NoError(t, err)
	a := r.Stats()
	_, err = r.Get(ctx, "t")
	require.NoError(t, err)
	b := r.Stats()
	require.Equal(t, uint64(1), b.Statements-a.Statements)
	require.Equal(t, uint64(1), b.RoundTrips-a.RoundTrips)
}

// TestQueueLookWhileLocked: while another transaction holds a queue's
// row, a look of an entry already stored (the engine's periodic
// Enqueue) returns the entry as stored without waiting
// (store.QueueWaitBusy), and a new entry waits for the lock, then is
// decided with everything committed before it.
func TestQueueLookWhileLocked(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := openSchema(t, dsn, nil)
	ctx := t.Context()
	now := time.Unix(1700000000, 0)
	for _, id := range []string{"a", "b", "c"} {
		_, err := s.Create(ctx, &store.Task{ID: id, Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now})
		require.NoError(t, err)
	}
	lim := store.QueueLimits{Concurrency: 1}
	res, err := s.Enqueue(ctx, store.QueueEntry{Queue: "q", ID: "a", TaskID: "a"}, lim, now)
	require.NoError(t, err)
	require.True(t, res.Entry.Granted())
	res, err = s.Enqueue(ctx, store.QueueEntry{Queue: "q", ID: "b", TaskID: "b"}, lim, now)
	require.NoError(t, err)
	require.False(t, res.Entry.Granted())

	holder, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer holder.Close(context.WithoutCancel(ctx))
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT state FROM `+pgx.Identifier{s.Schema()}.Sanitize()+`.queues WHERE name = 'q' FOR UPDATE`)
	require.NoError(t, err)

	look, err := s.Enqueue(ctx, store.QueueEntry{Queue: "q", ID: "b", TaskID: "b"}, lim, now)
	require.NoError(t, err)
	require.Equal(t, store.QueueWaitBusy, look.Reason)
	require.False(t, look.Entry.Granted())
	require.Equal(t, "b", look.Entry.TaskID)

	type outcome struct {
		res store.QueueResult
		err error
	}
	added := make(chan outcome, 1)
	go func() {
		res, err := s.Enqueue(ctx, store.QueueEntry{Queue: "q", ID: "c", TaskID: "c"}, lim, now)
		added <- outcome{res, err}
	}()
	// The new entry waits for the lock (once its Enqueue gets there); "a"
	// ends meanwhile, committed before the lock is released.
	_, err = s.Update(ctx, "a", store.Update{Status: mcptask.StatusCompleted})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	select {
	case o := <-added:
		require.NoError(t, o.err)
		require.False(t, o.res.Entry.Granted(), "b came first: it takes a's place")
		require.Equal(t, []string{"b"}, func() []string {
			var ids []string
			for _, g := range o.res.Granted {
				ids = append(ids, g.ID)
			}
			return ids
		}())
	case <-time.After(30 * time.Second):
		t.Fatal("the new entry never got the lock")
	}
}
