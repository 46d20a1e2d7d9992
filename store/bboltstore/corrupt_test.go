package bboltstore

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// goodFile writes a store file with enough tasks for a multi-level tree and
// returns its bytes, page size and the ids of its tasks.
func goodFile(t *testing.T) (data []byte, pageSize int, ids []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "good.db")
	s, err := Open(path, &Options{NoSync: true})
	require.NoError(t, err)
	ctx := t.Context()
	for i := range 600 {
		task := &store.Task{
			ID: fmt.Sprintf("task-%04d", i), Owner: fmt.Sprintf("owner-%d", i%4), Status: mcptask.StatusWorking,
			CreatedAt: time.Unix(1700000000, int64(i)), TTL: time.Hour,
			Request:   store.Request{Method: "tools/call", Name: "tool", Arguments: json.RawMessage(`{"text":"some arguments to fill pages"}`)},
			Variables: map[string]json.RawMessage{"progress": json.RawMessage(`{"step":1,"note":"a variable to fill pages"}`)},
		}
		if i%3 == 0 {
			task.LeaseHolder, task.LeaseUntil = "h", time.Unix(1700000100, 0)
		}
		if i%5 == 1 {
			task.WakeAt = time.Unix(1700000200, int64(i))
		}
		_, err := s.Create(ctx, task)
		require.NoError(t, err)
		if i%2 == 0 {
			_, err = s.Update(ctx, task.ID, store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`{"ok":true}`)})
			require.NoError(t, err)
		}
		ids = append(ids, task.ID)
	}
	require.NoError(t, s.Close())
	require.NoError(t, Check(path), "the good file checks clean")
	data, err = os.ReadFile(path)
	require.NoError(t, err)
	pageSize = int(binary.LittleEndian.Uint32(data[16+8:]))
	require.Positive(t, pageSize)
	return data, pageSize, ids
}

// metaOf returns the page ids of the freelist and the root bucket, and the
// high water mark, named in the current (highest txid) meta page.
func metaOf(data []byte, pageSize int) (freelist, root, pgid uint64) {
	var best uint64
	for i := range 2 {
		m := data[i*pageSize+16:]
		if txid := binary.LittleEndian.Uint64(m[48:]); txid >= best {
			best = txid
			root = binary.LittleEndian.Uint64(m[16:])
			freelist = binary.LittleEndian.Uint64(m[32:])
			pgid = binary.LittleEndian.Uint64(m[40:])
		}
	}
	return freelist, root, pgid
}

// usedPages returns the ids of the branch and leaf pages of the file.
func usedPages(t *testing.T, path string) []int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	var out []int
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		for id := 2; ; id++ {
			info, err := tx.Page(id)
			if err != nil || info == nil {
				return nil
			}
			if info.Type == "branch" || info.Type == "leaf" {
				out = append(out, id)
			}
		}
	}))
	return out
}

func garbage(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// exercise opens path and, if that works, reads everything and writes
// once. It fails the test on a panic; errors are expected. It returns
// Open's error.
func exercise(t *testing.T, path string, ids []string) (openErr error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic: %v", r)
		}
	}()
	s, err := Open(path, &Options{OpenTimeout: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	defer s.Close()
	ctx := t.Context()
	for _, id := range ids {
		_, _ = s.Get(ctx, id)
	}
	for i := range 4 {
		_, _ = s.List(ctx, store.ListOptions{Owner: fmt.Sprintf("owner-%d", i), Limit: store.MaxPageSize})
	}
	_, _ = s.Query(ctx, store.Query{Limit: store.MaxPageSize})
	_, _ = s.Query(ctx, store.Query{Owner: "owner-1", Name: "tool"})
	_, _ = s.Counts(ctx)
	_, _ = s.Active(ctx)
	_, _ = s.Expired(ctx, time.Unix(1800000000, 0), store.MaxPageSize)
	_, _ = s.ExpiredLeases(ctx, time.Unix(1800000000, 0), store.MaxPageSize)
	_, _ = s.Due(ctx, time.Unix(1800000000, 0), store.MaxPageSize)
	_, _ = s.Update(ctx, ids[1], store.Update{StatusMessage: new(string)})
	_, _ = s.Create(ctx, &store.Task{ID: "new", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Now()})
	_ = s.Delete(ctx, ids[3])
	return nil
}

func requireCorrupt(t *testing.T, err error, path string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, ErrCorrupt)
	var ce *CorruptError
	require.True(t, errors.As(err, &ce), "%T: %v", err, err)
	require.Equal(t, path, ce.Path)
	require.Contains(t, err.Error(), "store file "+path+" is corrupt: ")
	require.Contains(t, err.Error(), "; restore it from a backup or move it away")
}

func writeVariant(t *testing.T, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bad.db")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

func TestCorruptFileTruncated(t *testing.T) {
	data, ps, ids := goodFile(t)
	_, _, pgid := metaOf(data, ps)
	need := int(pgid) * ps
	require.LessOrEqual(t, need, len(data))
	// (A file may be longer than its pages: bbolt grows it in steps. Only
	// cutting into the pages is damage.)
	for _, size := range []int{100, ps, 2*ps + 100, 3 * ps, need / 2, need - ps, need - 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			path := writeVariant(t, data[:size])
			openErr := exercise(t, path, ids)
			checkErr := Check(path)
			if openErr != nil {
				requireCorrupt(t, openErr, path)
			}
			requireCorrupt(t, checkErr, path)
		})
	}
}

func TestCorruptFileGarbagePages(t *testing.T) {
	data, ps, ids := goodFile(t)
	freelist, root, _ := metaOf(data, ps)
	used := usedPages(t, writeVariant(t, data))
	require.Greater(t, len(used), 10, "a multi-page file")

	type variant struct {
		name  string
		pages []uint64
		// openFails: Open itself must fail (else it may succeed and the
		// damage must show in Check).
		openFails bool
	}
	variants := []variant{
		{name: "both meta pages", pages: []uint64{0, 1}, openFails: true},
		{name: "freelist", pages: []uint64{freelist}, openFails: true},
		{name: "root bucket page", pages: []uint64{root}},
	}
	for _, i := range []int{0, len(used) / 4, len(used) / 2, 3 * len(used) / 4, len(used) - 1} {
		variants = append(variants, variant{name: fmt.Sprintf("data page %d", used[i]), pages: []uint64{uint64(used[i])}})
	}
	for i, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			bad := append([]byte(nil), data...)
			for _, p := range v.pages {
				off := int(p) * ps
				require.Less(t, off+ps, len(bad)+1)
				copy(bad[off:off+ps], garbage(ps, byte(i+1)))
			}
			path := writeVariant(t, bad)
			openErr := exercise(t, path, ids)
			if v.openFails {
				requireCorrupt(t, openErr, path)
			} else if openErr != nil {
				requireCorrupt(t, openErr, path)
			}
			requireCorrupt(t, Check(path), path)
		})
	}

	t.Run("one meta page", func(t *testing.T) {
		// bbolt falls back to the other meta page: the file opens (at the
		// previous transaction) and stays usable.
		bad := append([]byte(nil), data...)
		copy(bad[0:ps], garbage(ps, 99))
		path := writeVariant(t, bad)
		require.NoError(t, exercise(t, path, ids))
	})
}

// TestCorruptFreelist writes a freelist page that looks valid (right page
// type) but lists impossible page ids: bbolt panics reading it on Open.
func TestCorruptFreelist(t *testing.T) {
	data, ps, ids := goodFile(t)
	freelist, _, _ := metaOf(data, ps)
	for name, fill := range map[string]func(page []byte){
		"huge count": func(page []byte) {
			binary.LittleEndian.PutUint16(page[10:], 0xffff)                // count: look at the first element
			binary.LittleEndian.PutUint64(page[16:], 1<<40)                 // the real count
			binary.LittleEndian.PutUint64(page[24:], binary.MaxVarintLen64) // ids follow
		},
		"ids beyond the file": func(page []byte) {
			binary.LittleEndian.PutUint16(page[10:], 3)
			binary.LittleEndian.PutUint64(page[16:], 1<<50)
			binary.LittleEndian.PutUint64(page[24:], 1<<51)
			binary.LittleEndian.PutUint64(page[32:], 1)
		},
		"meta pages listed free": func(page []byte) {
			binary.LittleEndian.PutUint16(page[10:], 2)
			binary.LittleEndian.PutUint64(page[16:], 0)
			binary.LittleEndian.PutUint64(page[24:], 1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			bad := append([]byte(nil), data...)
			page := bad[int(freelist)*ps : int(freelist+1)*ps]
			fill(page)
			path := writeVariant(t, bad)
			openErr := exercise(t, path, ids)
			if openErr != nil {
				requireCorrupt(t, openErr, path)
			}
			requireCorrupt(t, Check(path), path)
		})
	}
}

// TestCorruptOpenReleasesLock checks that a failed Open of a damaged file
// leaves it unlocked: once repaired (here: replaced), it opens at once.
func TestCorruptOpenReleasesLock(t *testing.T) {
	data, ps, _ := goodFile(t)
	freelist, _, _ := metaOf(data, ps)
	bad := append([]byte(nil), data...)
	copy(bad[int(freelist)*ps:int(freelist+1)*ps], garbage(ps, 7))
	path := writeVariant(t, bad)
	_, err := Open(path, nil)
	requireCorrupt(t, err, path)
	require.NoError(t, os.WriteFile(path+".tmp", data, 0o600))
	require.NoError(t, os.Rename(path+".tmp", path))
	s, err := Open(path, &Options{OpenTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

// TestCheckFindsInconsistencies breaks the store's own invariants in a
// sound bbolt file, one at a time.
func TestCheckFindsInconsistencies(t *testing.T) {
	for name, tc := range map[string]struct {
		breakIt func(tx *bolt.Tx) error
		want    string
	}{
		"stray index entry": {func(tx *bolt.Tx) error {
			return tx.Bucket(bucketByStatus).Put(ownerKey("working", 5, "ghost"), empty)
		}, "by_status holds"},
		"missing index entry": {func(tx *bolt.Tx) error {
			return tx.Bucket(bucketByName).Delete(ownerKey("tool", time.Unix(1700000000, 1).UnixNano(), "t1"))
		}, `task "t1" has no by_name entry`},
		"missing lease entry": {func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketLeases).Cursor()
			k, _ := c.First()
			return tx.Bucket(bucketLeases).Delete(k)
		}, "has no leases entry"},
		"wrong counter": {func(tx *bolt.Tx) error {
			return addCount(tx, mcptask.StatusFailed, 3)
		}, "status counters"},
		"orphan variables": {func(tx *bolt.Tx) error {
			_, err := tx.Bucket(bucketVars).CreateBucket([]byte("ghost"))
			return err
		}, `vars entry "ghost" has no task`},
		"bad header": {func(tx *bolt.Tx) error {
			return tx.Bucket(bucketTasks).Put([]byte("t2"), []byte{headerFormat, 0xff})
		}, `task "t2": header`},
		"bad history": {func(tx *bolt.Tx) error {
			return tx.Bucket(bucketHistory).Put([]byte("t2"), []byte{9})
		}, `task "t2": history`},
		"active terminal task": {func(tx *bolt.Tx) error {
			return tx.Bucket(bucketActive).Put([]byte("t0"), empty)
		}, "active holds"},
		"missing wake entry": {func(tx *bolt.Tx) error {
			return tx.Bucket(bucketWake).Delete(wakeKey(time.Unix(1700000200, 2), "t2"))
		}, `task "t2" has no wake entry`},
		"stray wake entry": {func(tx *bolt.Tx) error {
			return tx.Bucket(bucketWake).Put(wakeKey(time.Unix(1700000200, 0), "ghost"), empty)
		}, "wake holds 3 entries, the tasks need 2"},
		"orphan events": {func(tx *bolt.Tx) error {
			return tx.Bucket(bucketEvents).Put(eventKey(eventPrefix("ghost"), 1), encodeEvent(store.LoggedEvent{Event: store.Event{Seq: 1, Type: "log"}}))
		}, `events of task "ghost", which does not exist`},
		"bad event": {func(tx *bolt.Tx) error {
			return tx.Bucket(bucketEvents).Put(eventKey(eventPrefix("t1"), 2), []byte{9})
		}, `task "t1": event 2`},
		"gap in events": {func(tx *bolt.Tx) error {
			return tx.Bucket(bucketEvents).Put(eventKey(eventPrefix("t0"), 4), encodeEvent(store.LoggedEvent{Event: store.Event{Seq: 4, Type: "log"}, Pos: 1000}))
		}, `task "t0": event 4 (at 1000) follows event 2`},
		"bad queue entry": {func(tx *bolt.Tx) error {
			qb, err := tx.Bucket(bucketQueues).CreateBucket([]byte("deploys"))
			if err != nil {
				return err
			}
			eb, err := qb.CreateBucket(queueEntriesKey)
			if err != nil {
				return err
			}
			return eb.Put([]byte("t1"), []byte("{"))
		}, `queue "deploys": entry "t1" is undecodable`},
		"misfiled fire": {func(tx *bolt.Tx) error {
			sb, err := tx.Bucket(bucketSchedules).CreateBucket([]byte("nightly"))
			if err != nil {
				return err
			}
			fb, err := sb.CreateBucket(scheduleFiresKey)
			if err != nil {
				return err
			}
			return fb.Put(timeKey(5), []byte(`{"Schedule":"nightly","At":"2026-01-01T00:00:00Z","TaskID":"x"}`))
		}, `schedule "nightly": fire`},
		"terminal task with a wake-up": {func(tx *bolt.Tx) error {
			task, err := loadHeader(tx, []byte("t0"))
			if err != nil {
				return err
			}
			task.WakeAt = time.Unix(1700000300, 0)
			if err := tx.Bucket(bucketTasks).Put([]byte("t0"), encodeHeader(task)); err != nil {
				return err
			}
			return tx.Bucket(bucketWake).Put(wakeKey(task.WakeAt, "t0"), empty)
		}, `task "t0" is completed but has a wake-up`},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tasks.db")
			s, err := Open(path, nil)
			require.NoError(t, err)
			for i := range 3 {
				task := &store.Task{ID: fmt.Sprintf("t%d", i), Owner: "o", Status: mcptask.StatusWorking,
					CreatedAt: time.Unix(1700000000, int64(i)), Request: store.Request{Name: "tool"},
					LeaseHolder: "h", LeaseUntil: time.Unix(1700000100, 0), WakeAt: time.Unix(1700000200, int64(i))}
				_, err := s.Create(t.Context(), task)
				require.NoError(t, err)
			}
			_, err = s.Update(t.Context(), "t0", store.Update{Status: mcptask.StatusCompleted})
			require.NoError(t, err)
			require.NoError(t, s.db.Update(tc.breakIt))
			require.NoError(t, s.Close())
			err = Check(path)
			requireCorrupt(t, err, path)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestCheckErrors(t *testing.T) {
	err := Check(filepath.Join(t.TempDir(), "missing.db"))
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrCorrupt)

	s, path := openT(t, nil)
	err = Check(path)
	require.ErrorContains(t, err, "open in a store", "the lock is held")
	require.NotErrorIs(t, err, ErrCorrupt)
	require.NoError(t, s.Close())
	require.NoError(t, Check(path), "an empty store is sound")
}

// TestOpenRecoversBoltPanic skips the preflight so that bbolt itself meets
// a damaged freelist page while opening: the panic becomes ErrCorrupt and
// the file lock is released.
func TestOpenRecoversBoltPanic(t *testing.T) {
	defer func(f func(string) error) { preflightHook = f }(preflightHook)
	preflightHook = func(string) error { return nil }
	data, ps, _ := goodFile(t)
	freelist, _, _ := metaOf(data, ps)
	bad := append([]byte(nil), data...)
	copy(bad[int(freelist)*ps:int(freelist+1)*ps], garbage(ps, 3))
	path := writeVariant(t, bad)
	_, err := Open(path, nil)
	requireCorrupt(t, err, path)
	require.Contains(t, err.Error(), "bbolt failed while opening it")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	s, err := Open(path, &Options{OpenTimeout: 100 * time.Millisecond})
	require.NoError(t, err, "the lock was released")
	require.NoError(t, s.Close())
}
