package bboltstore

import (
	"context"
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

// TestGatherWindow checks the commit window's rule: a batch of fewer than
// CommitWindowFrom waiting writes is committed at once; a larger one stays
// open for the window and takes the writes that arrive meanwhile; it ends
// early when it is full or the queue closes; a window of zero never waits.
func TestGatherWindow(t *testing.T) {
	t.Run("few writers never wait", func(t *testing.T) {
		s := gatherer(10 * time.Second)
		queue(s, CommitWindowFrom-1)
		n, took := gatherTimed(s)
		require.Equal(t, CommitWindowFrom-1, n)
		require.Less(t, took, 5*time.Second)
	})
	t.Run("many writers: late ones join", func(t *testing.T) {
		s := gatherer(300 * time.Millisecond)
		queue(s, CommitWindowFrom)
		go func() {
			time.Sleep(20 * time.Millisecond)
			queue(s, 5)
		}()
		n, took := gatherTimed(s)
		require.Equal(t, CommitWindowFrom+5, n)
		require.GreaterOrEqual(t, took, 300*time.Millisecond)
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
		s := gatherer(10 * time.Second)
		queue(s, CommitWindowFrom)
		go queue(s, maxBatch-CommitWindowFrom+3) // 3 more than fit: they stay queued
		n, took := gatherTimed(s)
		require.Equal(t, maxBatch, n)
		require.Less(t, took, 5*time.Second)
	})
	t.Run("closing ends the window", func(t *testing.T) {
		s := gatherer(10 * time.Second)
		queue(s, CommitWindowFrom)
		go func() {
			time.Sleep(20 * time.Millisecond)
			close(s.ops)
		}()
		n, took := gatherTimed(s)
		require.Equal(t, CommitWindowFrom, n)
		require.Less(t, took, 5*time.Second)
	})
}

// TestCommitWindowOption checks the option's default and its floor.
func TestCommitWindowOption(t *testing.T) {
	s, _ := openT(t)
	require.Equal(t, time.Duration(DefaultCommitWindow), s.window)
	s1, _ := openT(t, WithCommitWindow(2*time.Millisecond))
	require.Equal(t, 2*time.Millisecond, s1.window)
	s2, _ := openT(t, WithCommitWindow(-time.Second))
	require.Equal(t, time.Duration(0), s2.window)
}
