package storetest

// Leases: Create with a holder, Claim, Renew, fenced updates, release, and
// the lease index behind ExpiredLeases.

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// leasedTask returns a task created with a lease held by holder until
// until.
func leasedTask(id, holder string, until time.Time) *store.Task {
	task := newTask(id, "alice", t0)
	task.LeaseHolder = holder
	task.LeaseUntil = until
	return task
}

func testLeaseCreate(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	until := t0.Add(time.Minute)
	held := mustCreate(t, s, leasedTask("held", "replica-a", until))
	require.Equal(t, "replica-a", held.LeaseHolder)
	require.Equal(t, uint64(1), held.LeaseEpoch, "a task created with a holder starts at epoch 1")
	require.True(t, held.LeaseUntil.Equal(until))
	require.Equal(t, time.UTC, held.LeaseUntil.Location())
	require.Equal(t, held, mustGet(t, s, "held"))

	free := newTask("free", "alice", t0)
	free.LeaseEpoch = 9     // ignored
	free.LeaseUntil = until // ignored without a holder
	got := mustCreate(t, s, free)
	require.Empty(t, got.LeaseHolder)
	require.Zero(t, got.LeaseEpoch)
	require.True(t, got.LeaseUntil.IsZero())
	require.Equal(t, got, mustGet(t, s, "free"))

	for name, task := range map[string]*store.Task{
		"holder without until": leasedTask("bad1", "h", time.Time{}),
		"holder too long":      leasedTask("bad2", strings.Repeat("h", store.MaxHolderBytes+1), until),
		"until out of range":   leasedTask("bad3", "h", time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)),
	} {
		_, err := s.Create(ctx, task)
		require.ErrorIs(t, err, store.ErrInvalid, name)
		_, err = s.Get(ctx, task.ID)
		require.ErrorIs(t, err, store.ErrNotFound, name)
	}
	expired, err := s.ExpiredLeases(ctx, t0.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"held"}, ids(expired))
}

func testClaim(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	created := mustCreate(t, s, newTask("c", "alice", t0))
	now := t0.Add(time.Hour)

	// A free lease.
	got, err := s.Claim(ctx, "c", "replica-a", now, now.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, "replica-a", got.LeaseHolder)
	require.Equal(t, uint64(1), got.LeaseEpoch)
	require.True(t, got.LeaseUntil.Equal(now.Add(time.Minute)))
	require.Equal(t, created.Version+1, got.Version, "a claim bumps the version")
	require.True(t, got.UpdatedAt.Equal(created.UpdatedAt), "a claim leaves UpdatedAt")
	require.Equal(t, got, mustGet(t, s, "c"))

	// Held by another holder: refused until the lease ends.
	for _, at := range []time.Duration{0, 30 * time.Second, time.Minute - time.Nanosecond} {
		_, err = s.Claim(ctx, "c", "replica-b", now.Add(at), now.Add(time.Hour))
		require.ErrorIs(t, err, store.ErrLeased)
	}
	require.Equal(t, got, mustGet(t, s, "c"), "a refused claim writes nothing")

	// Expired (LeaseUntil at now): anyone may take it.
	taken, err := s.Claim(ctx, "c", "replica-b", now.Add(time.Minute), now.Add(2*time.Minute))
	require.NoError(t, err)
	require.Equal(t, "replica-b", taken.LeaseHolder)
	require.Equal(t, uint64(2), taken.LeaseEpoch)
	require.Equal(t, got.Version+1, taken.Version)

	// The holder may claim its valid lease again: a new epoch.
	again, err := s.Claim(ctx, "c", "replica-b", now.Add(time.Minute), now.Add(3*time.Minute))
	require.NoError(t, err)
	require.Equal(t, uint64(3), again.LeaseEpoch)
	require.True(t, again.LeaseUntil.Equal(now.Add(3*time.Minute)))

	// Missing, terminal, invalid.
	_, err = s.Claim(ctx, "missing", "replica-a", now, now.Add(time.Minute))
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.Claim(ctx, "", "replica-a", now, now.Add(time.Minute))
	require.ErrorIs(t, err, store.ErrNotFound)
	mustCreate(t, s, newTask("done", "alice", t0))
	mustUpdate(t, s, "done", store.Update{Status: mcptask.StatusCompleted})
	_, err = s.Claim(ctx, "done", "replica-a", now, now.Add(time.Minute))
	require.ErrorIs(t, err, store.ErrTerminal)
	for name, args := range map[string]struct {
		holder     string
		now, until time.Time
	}{
		"empty holder":    {"", now, now.Add(time.Minute)},
		"long holder":     {strings.Repeat("h", store.MaxHolderBytes+1), now, now.Add(time.Minute)},
		"until not after": {"replica-a", now, now},
		"until before":    {"replica-a", now, now.Add(-time.Second)},
		"until too far":   {"replica-a", now, time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		_, err = s.Claim(ctx, "c", args.holder, args.now, args.until)
		require.ErrorIs(t, err, store.ErrInvalid, name)
	}
	require.Equal(t, again, mustGet(t, s, "c"))
}

func testRenew(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	until := t0.Add(time.Minute)
	for _, id := range []string{"a", "b", "c", "ended"} {
		mustCreate(t, s, leasedTask(id, "h1", until))
	}
	mustCreate(t, s, leasedTask("other", "h2", until))
	mustCreate(t, s, newTask("free", "alice", t0))
	mustUpdate(t, s, "ended", store.Update{Status: mcptask.StatusCompleted})
	mustUpdate(t, s, "c", store.Update{ReleaseLease: true})
	before := map[string]*store.Task{}
	for _, id := range []string{"a", "b", "c", "other", "free"} {
		before[id] = mustGet(t, s, id)
	}

	later := t0.Add(time.Hour)
	renewed, err := s.Renew(ctx, "h1", later, []string{"b", "a", "c", "other", "free", "ended", "missing", "a", ""})
	require.NoError(t, err)
	require.Equal(t, []string{"b", "a"}, renewed, "only the holder's live leases, in the order given, once")
	for _, id := range []string{"a", "b"} {
		got := mustGet(t, s, id)
		require.True(t, got.LeaseUntil.Equal(later))
		require.Equal(t, before[id].Version, got.Version, "a renewal does not bump the version")
		require.True(t, got.UpdatedAt.Equal(before[id].UpdatedAt), "a renewal leaves UpdatedAt")
		require.Equal(t, before[id].LeaseEpoch, got.LeaseEpoch)
		// A compare-and-swap writer holding the pre-renewal version wins.
		mustUpdate(t, s, id, store.Update{IfVersion: before[id].Version, StatusMessage: strPtr("cas after renew")})
	}
	for _, id := range []string{"c", "other", "free"} {
		require.Equal(t, before[id], mustGet(t, s, id), "%s is not h1's: untouched", id)
	}

	// The lease index follows the renewal.
	expired, err := s.ExpiredLeases(ctx, until, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"other"}, ids(expired))
	expired, err = s.ExpiredLeases(ctx, later, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"other", "a", "b"}, ids(expired))

	// An expired lease nobody claimed can still be renewed.
	renewed, err = s.Renew(ctx, "h2", later, []string{"other"})
	require.NoError(t, err)
	require.Equal(t, []string{"other"}, renewed)
	renewed, err = s.Renew(ctx, "h1", later, nil)
	require.NoError(t, err)
	require.Empty(t, renewed)

	_, err = s.Renew(ctx, "", later, []string{"a"})
	require.ErrorIs(t, err, store.ErrInvalid)
	_, err = s.Renew(ctx, "h1", time.Time{}, []string{"a"})
	require.ErrorIs(t, err, store.ErrInvalid)
}

func testFence(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	until := t0.Add(time.Minute)
	first := mustCreate(t, s, leasedTask("f", "h1", until))
	oldFence := first.Fence()
	require.Equal(t, store.Fence{Holder: "h1", Epoch: 1}, oldFence)
	got := mustUpdate(t, s, "f", store.Update{Fence: &oldFence, StatusMessage: strPtr("step 1")})
	require.Equal(t, "step 1", got.StatusMessage)

	// h1 stalls, its lease expires and h2 takes over.
	taken, err := s.Claim(ctx, "f", "h2", until, until.Add(time.Minute))
	require.NoError(t, err)
	newFence := taken.Fence()
	require.Equal(t, store.Fence{Holder: "h2", Epoch: 2}, newFence)

	// h1's writes are refused and write nothing, whatever else they carry.
	for _, u := range []store.Update{
		{Fence: &oldFence, StatusMessage: strPtr("stale")},
		{Fence: &oldFence, Status: mcptask.StatusCompleted, Result: []byte(`1`)},
		{Fence: &store.Fence{Holder: "h1", Epoch: 2}},
		{Fence: &store.Fence{Holder: "h2", Epoch: 1}},
		{Fence: &oldFence, IfVersion: 1}, // the fence is checked before the version
		{Fence: &oldFence, ReleaseLease: true},
	} {
		_, err := s.Update(ctx, "f", u)
		require.ErrorIs(t, err, store.ErrFenced)
		require.NotErrorIs(t, err, store.ErrConflict)
	}
	require.Equal(t, taken, mustGet(t, s, "f"))

	// h2's are accepted; a matching fence still checks the version.
	_, err = s.Update(ctx, "f", store.Update{Fence: &newFence, IfVersion: taken.Version - 1})
	require.ErrorIs(t, err, store.ErrConflict)
	got = mustUpdate(t, s, "f", store.Update{Fence: &newFence, IfVersion: taken.Version, StatusMessage: strPtr("step 2")})
	require.Equal(t, "h2", got.LeaseHolder)

	// Releasing keeps the epoch; the released holder is fenced out too.
	released := mustUpdate(t, s, "f", store.Update{Fence: &newFence, ReleaseLease: true})
	require.Empty(t, released.LeaseHolder)
	require.True(t, released.LeaseUntil.IsZero())
	require.Equal(t, uint64(2), released.LeaseEpoch)
	require.Equal(t, released, mustGet(t, s, "f"))
	_, err = s.Update(ctx, "f", store.Update{Fence: &newFence})
	require.ErrorIs(t, err, store.ErrFenced)
	expired, err := s.ExpiredLeases(ctx, t0.Add(24*time.Hour), 10)
	require.NoError(t, err)
	require.Empty(t, expired, "a released lease leaves the lease index")

	// Reclaimed (free now), then finished with the fence: a stale fence
	// is still told it was fenced (the fence is checked before the
	// terminal status; see testFencedEnded).
	third, err := s.Claim(ctx, "f", "h3", until, until.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, uint64(3), third.LeaseEpoch)
	f3 := third.Fence()
	mustUpdate(t, s, "f", store.Update{Fence: &f3, Status: mcptask.StatusCompleted})
	_, err = s.Update(ctx, "f", store.Update{Fence: &oldFence})
	require.ErrorIs(t, err, store.ErrFenced)
	require.NotErrorIs(t, err, store.ErrTerminal)

	// A fence on a task that never had a lease.
	mustCreate(t, s, newTask("plain", "alice", t0))
	_, err = s.Update(ctx, "plain", store.Update{Fence: &oldFence})
	require.ErrorIs(t, err, store.ErrFenced)
	_, err = s.Update(ctx, "missing", store.Update{Fence: &oldFence})
	require.ErrorIs(t, err, store.ErrNotFound)
}

// testFencedEnded checks the order of an Update's checks on a task that
// has ended: the fence comes first. A paused holder whose task another
// holder completed, or another process cancelled, gets ErrFenced (and not
// ErrTerminal), so it can tell that it was fenced; the holder that ended
// the task is fenced out too, since the terminal move cleared the holder;
// a write without a fence gets ErrTerminal. Nothing is written.
func testFencedEnded(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	until := t0.Add(time.Minute)
	requireFenced := func(id string, u store.Update, why string) {
		t.Helper()
		before := mustGet(t, s, id)
		_, err := s.Update(ctx, id, u)
		require.ErrorIs(t, err, store.ErrFenced, why)
		require.NotErrorIs(t, err, store.ErrTerminal, why)
		require.NotErrorIs(t, err, store.ErrConflict, why)
		require.Equal(t, before, mustGet(t, s, id), "%s: nothing written", why)
	}
	requireTerminal := func(id string, u store.Update, why string) {
		t.Helper()
		before := mustGet(t, s, id)
		_, err := s.Update(ctx, id, u)
		require.ErrorIs(t, err, store.ErrTerminal, why)
		require.ErrorIs(t, err, store.ErrInvalidTransition, why)
		require.NotErrorIs(t, err, store.ErrFenced, why)
		require.Equal(t, before, mustGet(t, s, id), "%s: nothing written", why)
	}

	// Completed by its new lease holder.
	stale := mustCreate(t, s, leasedTask("taken", "h1", until)).Fence()
	taken, err := s.Claim(ctx, "taken", "h2", until, until.Add(time.Minute))
	require.NoError(t, err)
	fresh := taken.Fence()
	ended := mustUpdate(t, s, "taken", store.Update{Fence: &fresh, Status: mcptask.StatusCompleted, Result: []byte(`{}`)})
	require.Empty(t, ended.LeaseHolder)
	require.Equal(t, uint64(2), ended.LeaseEpoch)
	for _, u := range []store.Update{
		{Fence: &stale, Status: mcptask.StatusCompleted, Result: []byte(`1`)},
		{Fence: &stale, StatusMessage: strPtr("late")},
		{Fence: &stale, IfVersion: 1, Status: mcptask.StatusWorking}, // before the version and the transition
	} {
		requireFenced("taken", u, "the paused holder's write")
	}
	requireFenced("taken", store.Update{Fence: &fresh, StatusMessage: strPtr("again")},
		"the holder that ended it: the terminal move cleared the holder")
	requireTerminal("taken", store.Update{StatusMessage: strPtr("x")}, "an unfenced write")
	requireTerminal("taken", store.Update{Status: mcptask.StatusWorking, IfVersion: 1}, "an unfenced write, before the version")

	// Cancelled by another process without a fence, while h1 held it.
	held := mustCreate(t, s, leasedTask("cancelled", "h1", until)).Fence()
	gone := mustUpdate(t, s, "cancelled", store.Update{Status: mcptask.StatusCancelled})
	require.Empty(t, gone.LeaseHolder)
	requireFenced("cancelled", store.Update{Fence: &held, Status: mcptask.StatusCompleted, Result: []byte(`1`)}, "the holder of a cancelled task")
	requireTerminal("cancelled", store.Update{Status: mcptask.StatusCompleted}, "an unfenced write to a cancelled task")

	// Created ended: it never had a lease.
	for _, in := range endedTasks("alice", t0) {
		mustCreate(t, s, in)
		requireFenced(in.ID, store.Update{Fence: &store.Fence{Holder: "h1", Epoch: 1}}, "a fenced write to a task created ended")
		requireTerminal(in.ID, store.Update{StatusMessage: strPtr("x")}, "an unfenced write to a task created ended")
	}
	_, err = s.Update(ctx, "missing", store.Update{Fence: &held})
	require.ErrorIs(t, err, store.ErrNotFound, "not found comes first")
}

func testTerminalClearsLease(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	until := t0.Add(time.Minute)
	for i, st := range []mcptask.Status{mcptask.StatusCompleted, mcptask.StatusFailed, mcptask.StatusCancelled} {
		id := fmt.Sprintf("t-%s", st)
		task := leasedTask(id, "h", until)
		task.CreatedAt = t0.Add(time.Duration(i))
		epoch := mustCreate(t, s, task).LeaseEpoch
		if i == 1 {
			claimed, err := s.Claim(ctx, id, "h2", until, until.Add(time.Minute))
			require.NoError(t, err)
			epoch = claimed.LeaseEpoch
		}
		// Unfenced: another replica cancelling, say.
		got := mustUpdate(t, s, id, store.Update{Status: st})
		require.Empty(t, got.LeaseHolder, st)
		require.True(t, got.LeaseUntil.IsZero(), st)
		require.Equal(t, epoch, got.LeaseEpoch, "the epoch is kept")
		require.Equal(t, got, mustGet(t, s, id))
		_, err := s.Claim(ctx, id, "h3", until, until.Add(time.Minute))
		require.ErrorIs(t, err, store.ErrTerminal)
		renewed, err := s.Renew(ctx, "h", until.Add(time.Hour), []string{id})
		require.NoError(t, err)
		require.Empty(t, renewed)
	}
	// input_required keeps the lease: the task is still the holder's.
	mustCreate(t, s, leasedTask("input", "h", until))
	got := mustUpdate(t, s, "input", store.Update{Status: mcptask.StatusInputRequired})
	require.Equal(t, "h", got.LeaseHolder)
	expired, err := s.ExpiredLeases(ctx, t0.Add(24*time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"input"}, ids(expired))
}

func testExpiredLeases(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	// Lease ends in seconds after t0; "tie-a" and "tie-b" end together.
	ends := map[string]int{"l10": 10, "l5": 5, "l20": 20, "tie-b": 7, "tie-a": 7, "l1": 1}
	for id, sec := range ends {
		mustCreate(t, s, leasedTask(id, "h", t0.Add(time.Duration(sec)*time.Second)))
	}
	mustCreate(t, s, newTask("free", "alice", t0))
	check := func(now time.Time, limit int, want ...string) {
		t.Helper()
		got, err := s.ExpiredLeases(ctx, now, limit)
		require.NoError(t, err)
		require.Equal(t, append([]string{}, want...), ids(got), "ExpiredLeases(t0+%v, %d)", now.Sub(t0), limit)
		for _, task := range got {
			require.NotEmpty(t, task.LeaseHolder)
			require.False(t, task.LeaseUntil.After(now))
			require.Equal(t, task, mustGet(t, s, task.ID), "full tasks")
		}
	}
	check(t0, 10)
	check(t0.Add(time.Second), 10, "l1") // at LeaseUntil exactly
	check(t0.Add(7*time.Second), 10, "l1", "l5", "tie-a", "tie-b")
	check(t0.Add(time.Hour), 3, "l1", "l5", "tie-a")
	check(t0.Add(time.Hour), 0, "l1", "l5", "tie-a", "tie-b", "l10", "l20")

	// Every write path keeps the index: claim, renew, release, terminal,
	// delete.
	_, err := s.Claim(ctx, "l1", "h2", t0.Add(time.Hour), t0.Add(2*time.Hour))
	require.NoError(t, err)
	_, err = s.Renew(ctx, "h", t0.Add(3*time.Hour), []string{"l5"})
	require.NoError(t, err)
	mustUpdate(t, s, "tie-a", store.Update{ReleaseLease: true})
	mustUpdate(t, s, "tie-b", store.Update{Status: mcptask.StatusFailed})
	require.NoError(t, s.Delete(ctx, "l10"))
	check(t0.Add(time.Hour), 10, "l20")
	check(t0.Add(5*time.Hour), 10, "l20", "l1", "l5")
	_, err = s.Claim(ctx, "free", "h", t0, t0.Add(30*time.Second))
	require.NoError(t, err)
	check(t0.Add(5*time.Hour), 10, "l20", "free", "l1", "l5")
}

// testConcurrentClaims races claims of one expired task: exactly one
// claimant wins, and the task records it.
func testConcurrentClaims(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	until := t0.Add(time.Minute)
	mustCreate(t, s, leasedTask("race", "dead-replica", until))
	rounds, claimants := 5, 16
	if testing.Short() {
		rounds = 2
	}
	for round := range rounds {
		before := mustGet(t, s, "race")
		now := before.LeaseUntil // expired exactly now
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []*store.Task
		)
		errc := make(chan error, claimants)
		start := make(chan struct{})
		for c := range claimants {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got, err := s.Claim(ctx, "race", fmt.Sprintf("r%d-c%d", round, c), now, now.Add(time.Minute))
				switch {
				case err == nil:
					mu.Lock()
					winners = append(winners, got)
					mu.Unlock()
				case !errors.Is(err, store.ErrLeased):
					errc <- err
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errc)
		for err := range errc {
			require.NoError(t, err)
		}
		require.Len(t, winners, 1, "round %d: exactly one claim wins", round)
		after := mustGet(t, s, "race")
		require.Equal(t, winners[0], after)
		require.Equal(t, before.LeaseEpoch+1, after.LeaseEpoch)
		require.Equal(t, before.Version+1, after.Version)
	}
}
