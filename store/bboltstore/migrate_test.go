package bboltstore

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// encodeHeaderV1 is the header encoding of schema 1 (format byte 1, no
// lease), as that version wrote it.
func encodeHeaderV1(t *store.Task) []byte {
	e := encoder{}
	e.byte(headerFormatV1)
	e.headerFields(t)
	return e.b
}

func TestReadFormat1Header(t *testing.T) {
	v1 := &store.Task{
		ID: "old", Owner: "o\x00", Status: mcptask.StatusInputRequired, StatusMessage: "m",
		CreatedAt: time.Unix(1, 2).UTC(), UpdatedAt: time.Unix(3, 4).UTC(), TTL: time.Hour, ExpiresAt: time.Unix(3601, 2).UTC(),
		PollInterval: time.Second, Request: store.Request{Method: "tools/call", Name: "n", Arguments: json.RawMessage(`{"a":1}`)},
		Labels: map[string]string{"k": "v"}, Version: 9,
	}
	b := encodeHeaderV1(v1)
	got, err := decodeHeader(b)
	require.NoError(t, err)
	require.Equal(t, v1, got, "a format 1 header reads as a task without a lease")
	for i := range b {
		_, err := decodeHeader(b[:i])
		require.Error(t, err, "truncated at %d", i)
	}
	// A format 1 header is not read as a later format and vice versa.
	for _, f := range []byte{headerFormatV2, headerFormat} {
		_, err = decodeHeader(append([]byte{f}, b[1:]...))
		require.Error(t, err)
	}
	v3 := encodeHeader(v1)
	_, err = decodeHeader(append([]byte{headerFormatV1}, v3[1:]...))
	require.Error(t, err)
	_, err = decodeHeader(append([]byte{headerFormatV2}, v3[1:]...))
	require.Error(t, err)
}

// encodeHeaderV2 is the header encoding of schema 2 (format byte 2: the
// lease, no wake-up time), as that version wrote it.
func encodeHeaderV2(t *store.Task) []byte {
	e := encoder{}
	e.byte(headerFormatV2)
	e.headerFields(t)
	e.leaseFields(t)
	return e.b
}

func TestReadFormat2Header(t *testing.T) {
	v2 := &store.Task{
		ID: "old", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Unix(1, 2).UTC(), UpdatedAt: time.Unix(3, 4).UTC(),
		Request: store.Request{Method: "tools/call"}, Version: 3,
		LeaseHolder: "h", LeaseEpoch: 2, LeaseUntil: time.Unix(5, 6).UTC(),
	}
	b := encodeHeaderV2(v2)
	got, err := decodeHeader(b)
	require.NoError(t, err)
	require.Equal(t, v2, got, "a format 2 header reads as a task without a wake-up time")
	for i := range b {
		_, err := decodeHeader(b[:i])
		require.Error(t, err, "truncated at %d", i)
	}
	v2.WakeAt = time.Unix(7, 8).UTC()
	b = encodeHeader(v2)
	require.Equal(t, headerFormat, b[0])
	got, err = decodeHeader(b)
	require.NoError(t, err)
	require.Equal(t, v2, got)
}

// writeSchema1 writes a schema 1 file at path holding tasks: the layout
// before schema 2 (no by_status, by_name, leases or history buckets, no
// counters, format 1 headers).
func writeSchema1(t *testing.T, path string, tasks []*store.Task) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketTasks, bucketVars, bucketResults, bucketByOwner, bucketExpiry, bucketActive, bucketMeta} {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		require.NoError(t, meta.Put(metaSchema, []byte{1}))
		require.NoError(t, meta.Put(metaCursorKey, make([]byte, cursorKeyLen)))
		for _, task := range tasks {
			id := []byte(task.ID)
			require.NoError(t, tx.Bucket(bucketTasks).Put(id, encodeHeaderV1(task)))
			require.NoError(t, tx.Bucket(bucketByOwner).Put(ownerKey(task.Owner, task.CreatedAt.UnixNano(), task.ID), empty))
			if !task.ExpiresAt.IsZero() {
				require.NoError(t, tx.Bucket(bucketExpiry).Put(expiryKey(task.ExpiresAt.UnixNano(), task.ID), empty))
			}
			if !task.Status.Terminal() {
				require.NoError(t, tx.Bucket(bucketActive).Put(id, empty))
			}
			if task.Result != nil {
				require.NoError(t, tx.Bucket(bucketResults).Put(id, encodeResult(task)))
			}
			if len(task.Variables) > 0 {
				vb, err := tx.Bucket(bucketVars).CreateBucket(id)
				require.NoError(t, err)
				for k, v := range task.Variables {
					require.NoError(t, vb.Put([]byte(k), v))
				}
			}
		}
		return nil
	}))
}

func schema1Tasks(n int) ([]*store.Task, map[mcptask.Status]int) {
	statuses := store.AllStatuses()
	counts := store.NewCounts()
	var tasks []*store.Task
	for i := range n {
		at := time.Unix(1700000000, int64(i)).UTC()
		task := &store.Task{
			ID: fmt.Sprintf("v1-%04d", i), Owner: fmt.Sprintf("owner-%d", i%3), Status: statuses[i%5],
			CreatedAt: at, UpdatedAt: at, Request: store.Request{Method: "tools/call", Name: fmt.Sprintf("tool-%d", i%2)},
			Version: 2,
		}
		if i%4 == 0 {
			task.TTL = time.Hour
			task.ExpiresAt = at.Add(time.Hour)
			task.Variables = map[string]json.RawMessage{"v": json.RawMessage(`1`)}
		}
		if task.Status == mcptask.StatusCompleted {
			task.Result = json.RawMessage(`{"ok":true}`)
		}
		counts[task.Status]++
		tasks = append(tasks, task)
	}
	return tasks, counts
}

func TestMigrateSchema1(t *testing.T) {
	defer func(n int) { migrateChunk = n }(migrateChunk)
	migrateChunk = 7 // several transactions
	path := filepath.Join(t.TempDir(), "v1.db")
	tasks, counts := schema1Tasks(50)
	writeSchema1(t, path, tasks)
	require.NoError(t, Check(path), "Check accepts a schema 1 file")

	s, err := Open(path, nil)
	require.NoError(t, err)
	ctx := t.Context()
	got, err := s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, counts, got)
	old, err := s.Get(ctx, "v1-0004")
	require.NoError(t, err)
	require.Equal(t, tasks[4].Variables, old.Variables)
	require.Nil(t, old.History, "tasks from before schema 2 have no history")
	require.Empty(t, old.LeaseHolder)
	page, err := s.Query(ctx, store.Query{Name: "tool-1", Statuses: []mcptask.Status{mcptask.StatusWorking, mcptask.StatusFailed}, Limit: 100})
	require.NoError(t, err)
	want := 0
	for _, task := range tasks {
		if task.Request.Name == "tool-1" && (task.Status == mcptask.StatusWorking || task.Status == mcptask.StatusFailed) {
			want++
		}
	}
	require.Len(t, page.Tasks, want)
	// Old tasks take part in every new write path.
	claimed, err := s.Claim(ctx, "v1-0000", "h", time.Now(), time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, uint64(1), claimed.LeaseEpoch)
	done, err := s.Update(ctx, "v1-0000", store.Update{Status: mcptask.StatusCompleted})
	require.NoError(t, err)
	require.Len(t, done.History, 1, "the history starts with the first change after the upgrade")
	require.NoError(t, s.Delete(ctx, "v1-0001"))
	require.NoError(t, s.Close())
	require.NoError(t, Check(path))

	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		require.Equal(t, []byte{SchemaVersion}, tx.Bucket(bucketMeta).Get(metaSchema))
		require.Nil(t, tx.Bucket(bucketMeta).Get(metaMigrated))
		return nil
	}))
	require.NoError(t, db.Close())
}

// writeOlder writes a file of an older schema at path: a file of the
// current layout holding tasks, then rewritten by downgrade, in one
// transaction, to what that schema wrote.
func writeOlder(t *testing.T, path string, tasks []*store.Task, downgrade func(tx *bolt.Tx)) {
	t.Helper()
	s, err := Open(path, nil)
	require.NoError(t, err)
	for _, task := range tasks {
		_, err := s.Create(t.Context(), task)
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *bolt.Tx) error { downgrade(tx); return nil }))
}

// writeSchema2 writes a schema 2 file at path holding tasks (format 2
// headers, no wake or events bucket, schema version 2). tasks must have
// no WakeAt.
func writeSchema2(t *testing.T, path string, tasks []*store.Task) {
	t.Helper()
	for _, task := range tasks {
		require.True(t, task.WakeAt.IsZero())
	}
	writeOlder(t, path, tasks, func(tx *bolt.Tx) {
		b := tx.Bucket(bucketTasks)
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			task, err := decodeHeader(v)
			require.NoError(t, err)
			require.NoError(t, b.Put(k, encodeHeaderV2(task)))
		}
		require.NoError(t, tx.DeleteBucket(bucketWake))
		require.NoError(t, tx.DeleteBucket(bucketEvents))
		require.NoError(t, tx.Bucket(bucketMeta).Put(metaSchema, []byte{2}))
	})
}

// TestMigrateSchema2 opens a file written before wake-ups existed: its
// tasks have no WakeAt, Due finds nothing, and then every wake path works
// on the old tasks and new ones alike.
func TestMigrateSchema2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v2.db")
	now := time.Unix(1700000000, 0).UTC()
	var tasks []*store.Task
	for i := range 6 {
		task := &store.Task{ID: fmt.Sprintf("v2-%d", i), Owner: "o", Status: mcptask.StatusWorking,
			CreatedAt: now.Add(time.Duration(i)), Request: store.Request{Method: "tools/call", Name: "tool"}}
		if i%2 == 0 {
			task.LeaseHolder, task.LeaseUntil = "h", now.Add(time.Minute)
		}
		if i == 5 {
			task.Status, task.Result = mcptask.StatusCompleted, json.RawMessage(`{}`)
			task.LeaseHolder, task.LeaseUntil = "", time.Time{}
		}
		tasks = append(tasks, task)
	}
	writeSchema2(t, path, tasks)
	require.NoError(t, Check(path), "Check accepts a schema 2 file")

	s, err := Open(path, nil)
	require.NoError(t, err)
	ctx := t.Context()
	for _, task := range tasks {
		got, err := s.Get(ctx, task.ID)
		require.NoError(t, err)
		require.True(t, got.WakeAt.IsZero(), "an old task has no wake-up time")
		require.Equal(t, task.LeaseHolder, got.LeaseHolder, "and keeps its lease")
	}
	due, err := s.Due(ctx, now.Add(1000*time.Hour), store.MaxPageSize)
	require.NoError(t, err)
	require.Empty(t, due)

	// Old tasks take part in the wake index from their next write.
	at := func(d time.Duration) *time.Time { x := now.Add(d); return &x }
	_, err = s.Update(ctx, "v2-1", store.Update{WakeAt: at(2 * time.Second)})
	require.NoError(t, err)
	_, err = s.Update(ctx, "v2-0", store.Update{WakeAt: at(time.Second), Fence: &store.Fence{Holder: "h", Epoch: 1}})
	require.NoError(t, err)
	_, err = s.Update(ctx, "v2-5", store.Update{WakeAt: at(time.Second)})
	require.ErrorIs(t, err, store.ErrTerminal)
	fresh := &store.Task{ID: "new", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now, WakeAt: now.Add(3 * time.Second)}
	_, err = s.Create(ctx, fresh)
	require.NoError(t, err)
	due, err = s.Due(ctx, now.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"v2-0", "v2-1", "new"}, taskIDs(due))
	_, err = s.Update(ctx, "v2-1", store.Update{Status: mcptask.StatusCancelled})
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, "new"))
	due, err = s.Due(ctx, now.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"v2-0"}, taskIDs(due))
	require.NoError(t, s.Close())
	require.NoError(t, Check(path))

	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		require.Equal(t, []byte{SchemaVersion}, tx.Bucket(bucketMeta).Get(metaSchema))
		require.Equal(t, headerFormatV2, tx.Bucket(bucketTasks).Get([]byte("v2-2"))[0], "an untouched header keeps its format")
		return nil
	}))
	require.NoError(t, db.Close())

	s, err = Open(path, nil)
	require.NoError(t, err, "an upgraded file opens again")
	got, err := s.Get(ctx, "v2-0")
	require.NoError(t, err)
	require.Equal(t, now.Add(time.Second), got.WakeAt)
	require.NoError(t, s.Close())
}

func taskIDs(tasks []*store.Task) []string {
	out := make([]string, len(tasks))
	for i, t := range tasks {
		out[i] = t.ID
	}
	return out
}

// TestMigrateResumes interrupts a migration after its first transaction:
// the next Open finishes it without counting any task twice.
func TestMigrateResumes(t *testing.T) {
	defer func(n int) { migrateChunk = n }(migrateChunk)
	migrateChunk = 10
	path := filepath.Join(t.TempDir(), "v1.db")
	tasks, counts := schema1Tasks(35)
	writeSchema1(t, path, tasks)
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	}))
	done, n, err := migrateStep(db)
	require.NoError(t, err)
	require.False(t, done)
	require.Equal(t, 10, n)
	require.NoError(t, db.Close())

	s, err := Open(path, nil)
	require.NoError(t, err)
	got, err := s.Counts(t.Context())
	require.NoError(t, err)
	require.Equal(t, counts, got)
	require.NoError(t, s.Close())
	require.NoError(t, Check(path))
}

// writeSchema3 writes a schema 3 file at path holding tasks (no events
// bucket, schema version 3).
func writeSchema3(t *testing.T, path string, tasks []*store.Task) {
	t.Helper()
	writeOlder(t, path, tasks, func(tx *bolt.Tx) {
		require.NoError(t, tx.DeleteBucket(bucketEvents))
		require.NoError(t, tx.Bucket(bucketMeta).Put(metaSchema, []byte{3}))
	})
}

// TestMigrateSchema3 opens a file written before event logs existed: its
// tasks read as empty logs, their first event is numbered 1, and Check
// accepts the file before and after.
func TestMigrateSchema3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v3.db")
	now := time.Unix(1700000000, 0).UTC()
	tasks := []*store.Task{
		{ID: "w", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now, Variables: map[string]json.RawMessage{"v": json.RawMessage(`1`)}},
		{ID: "d", Owner: "o", Status: mcptask.StatusCompleted, CreatedAt: now, Result: json.RawMessage(`{}`)},
	}
	writeSchema3(t, path, tasks)
	require.NoError(t, Check(path), "Check accepts a schema 3 file")

	s, err := Open(path, nil)
	require.NoError(t, err)
	ctx := t.Context()
	for _, id := range []string{"w", "d"} {
		page, err := s.Events(ctx, id, 0, 0)
		require.NoError(t, err)
		require.Equal(t, store.EventPage{}, page, "an old task has an empty log")
	}
	got, err := s.Update(ctx, "w", store.Update{Events: []store.Event{{Type: mcptask.EventLog, Data: json.RawMessage(`{"message":"hi"}`)}}})
	require.NoError(t, err)
	require.Equal(t, uint64(1), got.Version)
	_, err = s.Update(ctx, "w", store.Update{Status: mcptask.StatusInputRequired})
	require.NoError(t, err)
	page, err := s.Events(ctx, "w", 0, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(1), page.First)
	require.Equal(t, uint64(2), page.Last)
	require.Equal(t, mcptask.EventStatus, page.Events[1].Type)
	_, err = s.Update(ctx, "d", store.Update{Events: []store.Event{{Type: mcptask.EventLog}}})
	require.ErrorIs(t, err, store.ErrTerminal)
	_, err = s.Create(ctx, &store.Task{ID: "new", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, Check(path))
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		require.Equal(t, []byte{SchemaVersion}, tx.Bucket(bucketMeta).Get(metaSchema), "upgraded")
		return nil
	}))
}
