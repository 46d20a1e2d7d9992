package bboltstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

func openT(t *testing.T, opts *Options) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tasks.db")
	s, err := Open(path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

func newTask(id string) *store.Task {
	return &store.Task{ID: id, Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Unix(1700000000, 0)}
}

// TestStatusUpdateWritesOnlyHeader checks the layout promise: a status-only
// update writes neither variables nor the result record, and a variable
// merge writes only the merged names.
func TestStatusUpdateWritesOnlyHeader(t *testing.T) {
	s, _ := openT(t, nil)
	ctx := t.Context()
	task := newTask("a")
	task.Variables = map[string]json.RawMessage{"x": json.RawMessage(`1`), "y": json.RawMessage(`2`), "z": json.RawMessage(`3`)}
	task.Result = json.RawMessage(`{"r":1}`)
	_, err := s.Create(ctx, task)
	require.NoError(t, err)
	vars, results := s.stats.varWrites.Load(), s.stats.resultWrites.Load()
	require.Equal(t, uint64(3), vars)
	require.Equal(t, uint64(1), results)

	got, err := s.Update(ctx, "a", store.Update{Status: mcptask.StatusInputRequired, StatusMessage: new(string), Labels: map[string]string{"k": "v"}})
	require.NoError(t, err)
	require.Len(t, got.Variables, 3)
	require.Equal(t, vars, s.stats.varWrites.Load(), "status-only update wrote variables")
	require.Equal(t, results, s.stats.resultWrites.Load(), "status-only update wrote the result")

	_, err = s.Update(ctx, "a", store.Update{Variables: map[string]json.RawMessage{"y": json.RawMessage(`22`), "z": json.RawMessage(`null`)}})
	require.NoError(t, err)
	require.Equal(t, vars+1, s.stats.varWrites.Load(), "only the merged variable is written")
	require.Equal(t, results, s.stats.resultWrites.Load())

	_, err = s.Update(ctx, "a", store.Update{Status: mcptask.StatusCompleted})
	require.NoError(t, err)
	require.Equal(t, results, s.stats.resultWrites.Load(), "completing without a result keeps the record")

	// The nested bucket holds exactly the remaining variables.
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		vb := tx.Bucket(bucketVars).Bucket([]byte("a"))
		require.NotNil(t, vb)
		require.Equal(t, 2, vb.Stats().KeyN)
		require.Equal(t, []byte(`22`), vb.Get([]byte("y")))
		return nil
	}))

	// Deleting the last variables drops the nested bucket.
	_, err = s.Create(ctx, &store.Task{ID: "b", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Unix(1, 0),
		Variables: map[string]json.RawMessage{"only": json.RawMessage(`1`)}})
	require.NoError(t, err)
	_, err = s.Update(ctx, "b", store.Update{Variables: map[string]json.RawMessage{"only": json.RawMessage(`null`)}})
	require.NoError(t, err)
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		require.Nil(t, tx.Bucket(bucketVars).Bucket([]byte("b")))
		return nil
	}))
}

// TestPureAppendWritesOnlyEvents checks the layout promise of the event
// logs: a pure append writes its events and nothing else of the task (no
// header, no variable, no result), and returns the header only.
func TestPureAppendWritesOnlyEvents(t *testing.T) {
	s, _ := openT(t, nil)
	ctx := t.Context()
	task := newTask("a")
	task.Variables = map[string]json.RawMessage{"big": json.RawMessage(`"` + strings.Repeat("x", 100_000) + `"`)}
	_, err := s.Create(ctx, task)
	require.NoError(t, err)
	var header []byte
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		header = bytes.Clone(tx.Bucket(bucketTasks).Get([]byte("a")))
		return nil
	}))
	headers, vars, results := s.stats.headerWrites.Load(), s.stats.varWrites.Load(), s.stats.resultWrites.Load()

	for i := range 5 {
		got, err := s.Update(ctx, "a", store.Update{Events: []store.Event{{Type: mcptask.EventLog, Data: json.RawMessage(fmt.Sprintf(`{"message":"%d"}`, i))}}})
		require.NoError(t, err)
		require.Nil(t, got.Variables, "the header only")
	}
	require.Equal(t, headers, s.stats.headerWrites.Load(), "a pure append wrote the header")
	require.Equal(t, vars, s.stats.varWrites.Load())
	require.Equal(t, results, s.stats.resultWrites.Load())
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		require.Equal(t, header, tx.Bucket(bucketTasks).Get([]byte("a")))
		require.Equal(t, 6, tx.Bucket(bucketEvents).Stats().KeyN, "the first status and five lines")
		return nil
	}))

	// A status change writes the header and its status event.
	_, err = s.Update(ctx, "a", store.Update{Status: mcptask.StatusInputRequired})
	require.NoError(t, err)
	require.Equal(t, headers+1, s.stats.headerWrites.Load())
	require.Equal(t, vars, s.stats.varWrites.Load())
}

// TestBatchWriteFailureIsIsolated runs a batch in which one operation fails
// after it has written: the batch is retried without it, the other
// operations commit, and none of the failed operation's writes survive.
func TestBatchWriteFailureIsIsolated(t *testing.T) {
	s, _ := openT(t, nil)
	ctx := t.Context()
	mkop := func(fn func(tx *bolt.Tx) error) *op {
		return &op{ctx: ctx, fn: fn, done: make(chan error, 1)}
	}
	putOp := func(key string) *op {
		return mkop(func(tx *bolt.Tx) error { return put(tx.Bucket(bucketMeta), []byte(key), []byte("v")) })
	}
	boom := errors.New("boom")
	bad := mkop(func(tx *bolt.Tx) error {
		if err := put(tx.Bucket(bucketMeta), []byte("bad"), []byte("v")); err != nil {
			return err
		}
		return &writeError{boom}
	})
	panicky := mkop(func(tx *bolt.Tx) error {
		_ = tx.Bucket(bucketMeta).Put([]byte("panicky"), []byte("v"))
		panic("oops")
	})
	invalid := mkop(func(tx *bolt.Tx) error { return store.ErrInvalid })
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	cancelled := &op{ctx: cctx, fn: func(tx *bolt.Tx) error { return put(tx.Bucket(bucketMeta), []byte("cancelled"), []byte("v")) }, done: make(chan error, 1)}
	batch := []*op{putOp("first"), bad, putOp("middle"), invalid, panicky, cancelled, putOp("last")}

	before := s.Stats()
	s.runBatch(batch)
	results := make([]error, len(batch))
	for i, o := range batch {
		results[i] = <-o.done
	}
	require.NoError(t, results[0])
	require.ErrorIs(t, results[1], boom)
	require.NoError(t, results[2])
	require.ErrorIs(t, results[3], store.ErrInvalid)
	require.ErrorContains(t, results[4], "panic: oops")
	require.ErrorIs(t, results[5], context.Canceled)
	require.NoError(t, results[6])

	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		for _, k := range []string{"first", "middle", "last"} {
			require.NotNil(t, m.Get([]byte(k)), k)
		}
		for _, k := range []string{"bad", "panicky", "cancelled"} {
			require.Nil(t, m.Get([]byte(k)), k)
		}
		return nil
	}))
	after := s.Stats()
	require.Equal(t, before.Commits+1, after.Commits)
	require.Equal(t, before.OpsCommitted+3, after.OpsCommitted)
	require.Equal(t, before.Retries+2, after.Retries)
	require.Equal(t, before.OpsFailed+4, after.OpsFailed)
}

func TestNoSyncFlag(t *testing.T) {
	s, _ := openT(t, &Options{NoSync: true})
	require.True(t, s.db.NoSync)
	s2, _ := openT(t, nil)
	require.False(t, s2.db.NoSync)
}

func TestSchemaVersionMismatch(t *testing.T) {
	s, path := openT(t, nil)
	require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(metaSchema, []byte{SchemaVersion + 1})
	}))
	require.NoError(t, s.Close())
	_, err := Open(path, nil)
	require.ErrorContains(t, err, "unsupported schema version")
}

func TestCursorKeyPersists(t *testing.T) {
	s, path := openT(t, nil)
	var key []byte
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		key = append(key, tx.Bucket(bucketMeta).Get(metaCursorKey)...)
		return nil
	}))
	require.Len(t, key, cursorKeyLen)
	c := s.codec.Encode("o", time.Unix(5, 6), "id")
	require.NoError(t, s.Close())
	s2, err := Open(path, nil)
	require.NoError(t, err)
	defer s2.Close()
	at, id, err := s2.codec.Decode("o", c)
	require.NoError(t, err)
	require.Equal(t, "id", id)
	require.True(t, at.Equal(time.Unix(5, 6)))
}

// TestCorruptRecords feeds every truncation and many corruptions of valid
// records to the decoders: they must fail cleanly, never panic.
func TestCorruptRecords(t *testing.T) {
	full := &store.Task{
		ID: "id", Owner: "o\x00", Status: mcptask.StatusFailed, StatusMessage: "m", CreatedAt: time.Unix(1, 2).UTC(),
		UpdatedAt: time.Unix(3, 4).UTC(), TTL: time.Hour, ExpiresAt: time.Unix(3601, 2).UTC(), PollInterval: time.Second,
		Request: store.Request{Method: "tools/call", Name: "n", Arguments: json.RawMessage(`{"a":1}`)},
		Labels:  map[string]string{"a": "b", "c": "d"}, Result: json.RawMessage(`[1]`),
		Error: &mcptask.ErrorInfo{Code: -1, Message: "x", Data: json.RawMessage(`{}`)}, Version: 7,
	}
	h := encodeHeader(full)
	got, err := decodeHeader(h)
	require.NoError(t, err)
	r := encodeResult(full)
	require.NoError(t, decodeResult(r, got))
	require.Equal(t, full, got)

	for i := range h {
		_, err := decodeHeader(h[:i])
		require.Error(t, err, "truncated at %d", i)
	}
	for i := range r {
		require.Error(t, decodeResult(r[:i], &store.Task{}), "truncated at %d", i)
	}
	_, err = decodeHeader(append(append([]byte{}, h...), 0))
	require.Error(t, err, "trailing bytes")
	for i := range h {
		for _, b := range []byte{0x00, 0x7f, 0x80, 0xff} {
			c := append([]byte{}, h...)
			c[i] = b
			_, _ = decodeHeader(c) // must not panic
		}
	}
	for i := range r {
		for _, b := range []byte{0x00, 0x7f, 0x80, 0xff} {
			c := append([]byte{}, r...)
			c[i] = b
			_ = decodeResult(c, &store.Task{})
		}
	}
}

func TestKeysOrder(t *testing.T) {
	times := []int64{-1 << 62, -5, -1, 0, 1, 5, 1 << 62}
	for i := 1; i < len(times); i++ {
		require.Less(t, string(timeKey(times[i-1])), string(timeKey(times[i])))
		require.Equal(t, times[i], keyNanos(timeKey(times[i])))
	}
	// The length prefix keeps owners that are prefixes of each other apart.
	a := ownerKey("a", 0, "\x00b")
	ab := ownerPrefix("a\x00b")
	require.False(t, len(a) >= len(ab) && string(a[:len(ab)]) == string(ab))
}
