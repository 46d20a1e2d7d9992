package taskrouter_test

import (
	"context"
	"github.com/taskbridge/taskbridge/mcptask"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// racyStore is a memory store that says it is shared and runs meanwhile
// once inside the next Renew that covers the task, before renewing: a
// write committed while the renewal was on its way.
type racyStore struct {
	*memory.Store
	mu        sync.Mutex
	meanwhile func()
	renewals  int
}

func (s *racyStore) Shared() bool { return true }

func (s *racyStore) Renew(ctx context.Context, holder string, until time.Time, ids []string) ([]string, error) {
	s.mu.Lock()
	f := s.meanwhile
	if len(ids) > 0 {
		s.meanwhile = nil
		s.renewals++
	}
	s.mu.Unlock()
	if f != nil && len(ids) > 0 {
		f()
	}
	return s.Store.Renew(ctx, holder, until, ids)
}

func (s *racyStore) renewCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewals
}

// leasedWork starts a router on a racyStore, creates a task, leases it as
// the workflow bridge does and tracks work for it.
func leasedWork(t *testing.T) (*racyStore, *taskrouter.Router, *taskrouter.Lease, context.Context) {
	t.Helper()
	st := &racyStore{Store: memory.New(nil)}
	r, err := taskrouter.NewRouter(st, &taskrouter.Options{ReplicaID: "here", LeaseDuration: 150 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { _ = r.Close() })
	now := time.Now()
	_, err = st.Create(ctx, &store.Task{ID: "w1", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now, UpdatedAt: now,
		Request: store.Request{Method: "prompts/get", Name: "wf"}})
	require.NoError(t, err)
	l, err := r.TryLease(ctx, "w1")
	require.NoError(t, err)
	require.True(t, l.Held())
	tctx, done := r.Track(ctx, "w1")
	t.Cleanup(done)
	return st, r, l, tctx
}

// stoppedWithin waits for the tracked work to stop and returns why.
func stoppedWithin(t *testing.T, tctx context.Context) string {
	t.Helper()
	select {
	case <-tctx.Done():
		return string(taskrouter.Stopped(tctx))
	case <-time.After(30 * time.Second):
		t.Fatal("the work was not stopped")
		return ""
	}
}

// TestLeaseReleasedDuringRenewal: the work's own releasing write commits
// while a renewal is on its way (the lease is still in the renewal set):
// the renewal finds no lease, and must not take that for a takeover.
func TestLeaseReleasedDuringRenewal(t *testing.T) {
	st, _, l, tctx := leasedWork(t)
	st.mu.Lock()
	st.meanwhile = func() {
		_, err := st.Update(context.Background(), "w1", store.Update{Fence: l.Fence(), ReleaseLease: true})
		if err != nil {
			t.Error(err) // on the renewal's goroutine: no FailNow
		}
	}
	st.mu.Unlock()
	// Past the racy renewal and two more periods: the lease left the
	// renewal set and the work runs on.
	require.Eventually(t, func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.meanwhile == nil
	}, 30*time.Second, 5*time.Millisecond)
	n := st.renewCount()
	time.Sleep(150 * time.Millisecond)
	require.NoError(t, tctx.Err(), "the work was stopped by its own release: %s", taskrouter.Stopped(tctx))
	require.Equal(t, n, st.renewCount(), "the released lease is no longer renewed")
}

// TestLeaseLostToAnotherHolder: the lease is claimed by another process
// meanwhile; the work stops with "lease lost".
func TestLeaseLostToAnotherHolder(t *testing.T) {
	st, _, l, tctx := leasedWork(t)
	st.mu.Lock()
	st.meanwhile = func() {
		ctx := context.Background()
		_, err := st.Update(ctx, "w1", store.Update{Fence: l.Fence(), ReleaseLease: true})
		if err == nil {
			_, err = st.Claim(ctx, "w1", "there", time.Now(), time.Now().Add(time.Minute))
		}
		if err != nil {
			t.Error(err) // on the renewal's goroutine: no FailNow
		}
	}
	st.mu.Unlock()
	require.Equal(t, "lease lost", stoppedWithin(t, tctx))
}

// TestLeaseOfTaskEndedElsewhere: the task is cancelled by another process
// meanwhile (its feed notification not yet here); the work stops as
// ended, not as taken over.
func TestLeaseOfTaskEndedElsewhere(t *testing.T) {
	st, _, _, tctx := leasedWork(t)
	st.mu.Lock()
	st.meanwhile = func() {
		_, err := st.Update(context.Background(), "w1", store.Update{Status: mcptask.StatusCancelled})
		if err != nil {
			t.Error(err) // on the renewal's goroutine: no FailNow
		}
	}
	st.mu.Unlock()
	require.Equal(t, "ended", stoppedWithin(t, tctx))
}
