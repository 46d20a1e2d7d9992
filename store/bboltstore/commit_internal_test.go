package bboltstore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatherer is a store with only what gather reads: its queue and window.
func gatherer(window time.Duration) *Store {
	return &Store{ops: make(chan *op, maxBatch), window: window}
}

func queue(s *Store, n int) {
	for range n {
		s.ops <- &op{ctx: context.Background(), done: make(chan error, 1)}
	}
}

func gatherTimed(s *Store) (int, time.Duration) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	start := time.Now()
	first := <-s.ops
	batch := s.gather([]*op{first}, timer)
	return len(batch), time.Since(start)
}

// gatherAsync gathers a batch in the background: the size comes on the
// channel once the batch ends.
func gatherAsync(s *Store) <-chan int {
	done := make(chan int, 1)
	go func() {
		n, _ := gatherTimed(s)
		done <- n
	}()
	return done
}

// ended waits for the batch gatherAsync gathers to end, and returns its
// size. The windows of the tests that use it are an hour long: a batch
// that waited for its window never ends within the bound, however slow
// the machine, and one that did not wait ends well within it.
func ended(t *testing.T, done <-chan int) int {
	t.Helper()
	select {
	case n := <-done:
		return n
	case <-time.After(time.Minute):
		t.Fatal("the batch waited for its window")
		return 0
	}
}

// drained waits until the queue is empty (gather took every write).
func drained(t *testing.T, s *Store) {
	t.Helper()
	for range 60_000 {
		if len(s.ops) == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("gather did not take the queued writes")
}

// TestGatherWindow checks the commit window's rule: a batch of fewer than
// CommitWindowFrom waiting writes is committed at once; a larger one stays
// open for the window and takes the writes that arrive meanwhile; it ends
// early when it is full or the queue closes; a window of zero never waits.
// No assertion depends on how fast the machine is: the windows that must
// not be waited for are an hour long, and the one that must is checked
// from below.
func TestGatherWindow(t *testing.T) {
	t.Run("few writers never wait", func(t *testing.T) {
		s := gatherer(time.Hour)
		queue(s, CommitWindowFrom-1)
		require.Equal(t, CommitWindowFrom-1, ended(t, gatherAsync(s)))
	})
	t.Run("many writers: late ones join", func(t *testing.T) {
		s := gatherer(time.Hour)
		queue(s, CommitWindowFrom)
		done := gatherAsync(s)
		drained(t, s)
		queue(s, 5)
		drained(t, s)
		select {
		case n := <-done:
			t.Fatalf("the batch of %d ended before its window", n)
		default:
		}
		close(s.ops)
		require.Equal(t, CommitWindowFrom+5, ended(t, done))
	})
	t.Run("the window ends the batch", func(t *testing.T) {
		s := gatherer(50 * time.Millisecond)
		queue(s, CommitWindowFrom)
		n, took := gatherTimed(s)
		require.Equal(t, CommitWindowFrom, n)
		require.GreaterOrEqual(t, took, 50*time.Millisecond, "the batch stayed open for its window")
	})
	t.Run("window off", func(t *testing.T) {
		s := gatherer(0)
		queue(s, CommitWindowFrom)
		n, _ := gatherTimed(s)
		require.Equal(t, CommitWindowFrom, n)
		queue(s, 1) // a late one is the next batch's
		n, _ = gatherTimed(s)
		require.Equal(t, 1, n)
	})
	t.Run("a full batch ends the window", func(t *testing.T) {
		s := gatherer(time.Hour)
		queue(s, CommitWindowFrom)
		done := gatherAsync(s)
		go queue(s, maxBatch-CommitWindowFrom+3) // 3 more than fit: they stay queued
		require.Equal(t, maxBatch, ended(t, done))
	})
	t.Run("closing ends the window", func(t *testing.T) {
		s := gatherer(time.Hour)
		queue(s, CommitWindowFrom)
		done := gatherAsync(s)
		drained(t, s)
		close(s.ops)
		require.Equal(t, CommitWindowFrom, ended(t, done))
	})
}

// TestCommitWindowOption checks the option's default, and that a
// negative window is refused.
func TestCommitWindowOption(t *testing.T) {
	s, _ := openT(t, nil)
	require.Equal(t, time.Duration(DefaultCommitWindow), s.window)
	s1, _ := openT(t, &Options{CommitWindow: 2 * time.Millisecond})
	require.Equal(t, 2*time.Millisecond, s1.window)
	_, err := Open(filepath.Join(t.TempDir(), "tasks.db"), &Options{CommitWindow: -time.Second})
	require.ErrorContains(t, err, "CommitWindow is negative", "the field is named")
}
