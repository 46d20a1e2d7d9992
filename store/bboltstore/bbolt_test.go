package bboltstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/storetest"
)

func openTemp(t testing.TB, opts *bboltstore.Options) (*bboltstore.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tasks.db")
	s, err := bboltstore.Open(path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, _ := openTemp(t, nil)
		return s
	})
}

// TestDurable runs the persistence suite; every file it reopens must also
// pass Check, whose invariants (index entries, counts, no lease on an
// ended task) the suite's writes exercise.
func TestDurable(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T, path string) store.Store {
		if _, err := os.Stat(path); err == nil {
			require.NoError(t, bboltstore.Check(path), "the file the suite wrote checks clean")
		}
		s, err := bboltstore.Open(path, nil)
		require.NoError(t, err)
		return s
	})
}

func task(id string, at time.Time) *store.Task {
	return &store.Task{ID: id, Owner: "owner", Status: mcptask.StatusWorking, CreatedAt: at}
}

func TestOpenLockedFileFailsFast(t *testing.T) {
	s, path := openTemp(t, nil)
	_, err := s.Create(t.Context(), task("a", time.Now()))
	require.NoError(t, err)

	// Open gives up (rather than waiting for the lock forever): within a
	// minute, however slow the machine, for timeouts of a second or less.
	openWithin := func(opts *bboltstore.Options) error {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			s, err := bboltstore.Open(path, opts)
			if err == nil {
				_ = s.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			t.Fatal("Open waited for the lock")
			return nil
		}
	}
	err = openWithin(&bboltstore.Options{OpenTimeout: 100 * time.Millisecond})
	require.Error(t, err)
	require.Contains(t, err.Error(), "locked")
	require.Contains(t, err.Error(), path)

	if !testing.Short() {
		require.ErrorContains(t, openWithin(nil), "locked") // the default timeout
	}

	require.NoError(t, s.Close())
	s2, err := bboltstore.Open(path, &bboltstore.Options{OpenTimeout: 100 * time.Millisecond})
	require.NoError(t, err, "the lock is released by Close")
	got, err := s2.Get(t.Context(), "a")
	require.NoError(t, err)
	require.Equal(t, "a", got.ID)
	require.NoError(t, s2.Close())
}

func TestOpenErrors(t *testing.T) {
	_, err := bboltstore.Open(filepath.Join(t.TempDir(), "missing-dir", "tasks.db"), nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "bboltstore: open")
}

func TestGroupCommitBatches(t *testing.T) {
	s, _ := openTemp(t, nil)
	ctx := t.Context()
	start := time.Now()
	const writers, each = 64, 10
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				if _, err := s.Create(ctx, task(id, time.Unix(int64(w), int64(i)))); err != nil {
					errc <- err
					return
				}
				if _, err := s.Update(ctx, id, store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`1`)}); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	st := s.Stats()
	t.Logf("stats: %+v (%.1f ops/commit)", st, st.OpsPerCommit())
	require.Equal(t, uint64(2*writers*each), st.OpsCommitted)
	require.Greater(t, st.MaxOpsPerCommit, uint64(1), "concurrent writers share commits")
	require.Less(t, st.Commits, st.OpsCommitted)
	require.Zero(t, st.OpsFailed)
	require.Zero(t, st.CommitErrors)
	require.Positive(t, st.CommitTime, "commits take time (two fsyncs each)")
	require.LessOrEqual(t, st.CommitTime, time.Since(start), "the commits' own time (one committer: they do not overlap), not a total of something else")
}

// TestSingleWriterNoDelay: a lone writer never waits for a batch to fill
// (as with bbolt's DB.Batch, whose 10ms timer every lone write would wait
// for). The commit window is an hour: a write that waited for it would not
// end within the test's generous bound, however fast or slow the machine.
func TestSingleWriterNoDelay(t *testing.T) {
	s, _ := openTemp(t, &bboltstore.Options{NoSync: true, CommitWindow: time.Hour})
	ctx := t.Context()
	const n = 200
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if _, err := s.Create(ctx, task(strconv.Itoa(i), time.Unix(0, int64(i)))); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("a lone writer waited for the commit window")
	}
	st := s.Stats()
	require.Equal(t, uint64(n), st.Commits)
	require.Equal(t, uint64(1), st.MaxOpsPerCommit)
}

func TestNoSync(t *testing.T) {
	s, path := openTemp(t, &bboltstore.Options{NoSync: true})
	ctx := t.Context()
	for i := range 50 {
		_, err := s.Create(ctx, task(strconv.Itoa(i), time.Unix(0, int64(i))))
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	// Closing the file (without a crash) keeps everything.
	s2, err := bboltstore.Open(path, &bboltstore.Options{NoSync: true})
	require.NoError(t, err)
	defer s2.Close()
	page, err := s2.List(ctx, store.ListOptions{Owner: "owner", Limit: 100})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 50)
}

func TestClockAndLimits(t *testing.T) {
	now := time.Date(2031, 5, 6, 7, 8, 9, 10, time.UTC)
	s, _ := openTemp(t, &bboltstore.Options{Options: store.Options{Now: func() time.Time { return now }, Limits: store.Limits{MaxResultBytes: 4}}})
	ctx := t.Context()
	_, err := s.Create(ctx, task("a", now.Add(-time.Minute)))
	require.NoError(t, err)
	_, err = s.Update(ctx, "a", store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`12345`)})
	require.ErrorIs(t, err, store.ErrTooLarge)
	require.ErrorContains(t, err, "limit 4")
	got, err := s.Update(ctx, "a", store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`1234`)})
	require.NoError(t, err)
	require.True(t, got.UpdatedAt.Equal(now))
	require.Zero(t, s.Stats().OpsFailed, "requests rejected before queueing are not ops")
	_, err = s.Update(ctx, "missing", store.Update{})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Equal(t, uint64(1), s.Stats().OpsFailed)
}

// TestCloseFinishesQueuedWrites closes the store while writers are busy:
// every write either fails with ErrClosed or was acknowledged, and every
// acknowledged write is in the file.
func TestCloseFinishesQueuedWrites(t *testing.T) {
	s, path := openTemp(t, nil)
	ctx := t.Context()
	const writers = 32
	var (
		mu    sync.Mutex
		acked []string
		wg    sync.WaitGroup
	)
	errc := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				_, err := s.Create(ctx, task(id, time.Unix(int64(w), int64(i))))
				if errors.Is(err, store.ErrClosed) {
					errc <- nil
					return
				}
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
		}()
	}
	// Close while writes are in flight: after the first acknowledgement
	// (however slow the machine), and a little more.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) > 0
	}, 30*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, s.Close())
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	require.NotEmpty(t, acked)

	s2, err := bboltstore.Open(path, nil)
	require.NoError(t, err)
	defer s2.Close()
	for _, id := range acked {
		_, err := s2.Get(ctx, id)
		require.NoError(t, err, id)
	}
}

// TestCancelledWhileQueued checks that a context cancelled before the op
// reaches the committer is reported and the op does not run.
func TestCancelledContext(t *testing.T) {
	s, _ := openTemp(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Create(ctx, task("a", time.Now()))
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Get(t.Context(), "a")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.Get(ctx, "a")
	require.ErrorIs(t, err, context.Canceled)
}

func openBench(b *testing.B) *bboltstore.Store {
	s, _ := openTemp(b, nil)
	return s
}

func BenchmarkCreateComplete(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		b.Run("writers="+strconv.Itoa(writers), func(b *testing.B) {
			s := openBench(b)
			storetest.BenchCreateComplete(b, s, writers)
			st := s.Stats()
			b.ReportMetric(st.OpsPerCommit(), "ops/commit")
			b.ReportMetric(float64(st.MaxOpsPerCommit), "max-ops/commit")
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

// TestPrefault: a store opened with Options.Prefault passes the conformance suite,
// and keeps every write across the remaps of a file growing to tens of
// megabytes and a reopen.
func TestPrefault(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, _ := openTemp(t, &bboltstore.Options{Prefault: true})
		return s
	})
	t.Run("growth", func(t *testing.T) {
		s, path := openTemp(t, &bboltstore.Options{Prefault: true})
		ctx := t.Context()
		big := json.RawMessage(`"` + strings.Repeat("x", 60_000) + `"`)
		const n = 400 // ~24 MB of variables: several remaps
		for i := range n {
			id := fmt.Sprintf("p%04d", i)
			_, err := s.Create(ctx, task(id, time.Unix(int64(i), 0)))
			require.NoError(t, err)
			_, err = s.Update(ctx, id, store.Update{Variables: map[string]json.RawMessage{"v": big}})
			require.NoError(t, err)
		}
		require.NoError(t, s.Close())
		require.NoError(t, bboltstore.Check(path))
		s2, err := bboltstore.Open(path, &bboltstore.Options{Prefault: true})
		require.NoError(t, err)
		defer s2.Close()
		for i := range n {
			got, err := s2.Get(ctx, fmt.Sprintf("p%04d", i))
			require.NoError(t, err)
			require.JSONEq(t, string(big), string(got.Variables["v"]))
		}
	})
}
