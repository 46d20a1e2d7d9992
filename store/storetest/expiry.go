package storetest

// The expiry and active indexes.

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

func testExpired(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	ttls := map[string]time.Duration{"t10": 10 * time.Second, "t5": 5 * time.Second, "t20": 20 * time.Second, "none": 0, "t1": time.Second, "t5b": 5 * time.Second}
	for id, ttl := range ttls {
		task := newTask(id, "alice", t0)
		task.TTL = ttl
		mustCreate(t, s, task)
	}
	// A created-later task with a shorter TTL expires in ExpiresAt order.
	late := newTask("late", "alice", t0.Add(time.Second))
	late.TTL = 500 * time.Millisecond
	mustCreate(t, s, late)
	mustUpdate(t, s, "t1", store.Update{Status: mcptask.StatusCompleted}) // terminal tasks still expire

	check := func(now time.Time, limit int, want ...string) {
		t.Helper()
		got, err := s.Expired(ctx, now, limit)
		require.NoError(t, err)
		if len(want) == 0 {
			require.Empty(t, got)
			return
		}
		require.Equal(t, want, ids(got), "Expired(t0+%v, %d)", now.Sub(t0), limit)
		for _, task := range got {
			require.False(t, task.ExpiresAt.After(now))
		}
	}
	check(t0, 10)
	check(t0.Add(999*time.Millisecond), 10)
	check(t0.Add(time.Second), 10, "t1")                   // at ExpiresAt exactly
	check(t0.Add(1500*time.Millisecond), 10, "t1", "late") // soonest first
	check(t0.Add(10*time.Second), 10, "t1", "late", "t5", "t5b", "t10")
	check(t0.Add(10*time.Second), 2, "t1", "late")                       // limit
	check(t0.Add(time.Hour), 0, "t1", "late", "t5", "t5b", "t10", "t20") // default limit
	check(t0.Add(100*365*24*time.Hour), 100, "t1", "late", "t5", "t5b", "t10", "t20")
	check(t0.Add(-time.Hour), 100)
}

func testMoveExpiry(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	expired := func(now time.Time) []string {
		t.Helper()
		got, err := s.Expired(ctx, now, 100)
		require.NoError(t, err)
		return ids(got)
	}
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	ttl := newTask("ttl", "alice", t0)
	ttl.TTL = time.Minute
	mustCreate(t, s, ttl)
	mustCreate(t, s, newTask("forever", "alice", t0))
	require.Equal(t, []string{"ttl"}, expired(t0.Add(time.Hour)))

	// Later: the old index entry goes, the new one counts.
	got := mustUpdate(t, s, "ttl", store.Update{ExpiresAt: at(2 * time.Hour)})
	require.True(t, got.ExpiresAt.Equal(t0.Add(2*time.Hour)))
	require.Equal(t, time.Minute, got.TTL, "TTL is left as it was")
	require.Equal(t, got, mustGet(t, s, "ttl"))
	require.Empty(t, expired(t0.Add(time.Hour)))
	require.Equal(t, []string{"ttl"}, expired(t0.Add(2*time.Hour)))

	// A task without a TTL can be given an expiry, together with a
	// terminal status (an expired task kept readable for a grace period).
	got = mustUpdate(t, s, "forever", store.Update{Status: mcptask.StatusFailed, ExpiresAt: at(30 * time.Minute)})
	require.Zero(t, got.TTL)
	require.Equal(t, []string{"forever", "ttl"}, expired(t0.Add(3*time.Hour)), "soonest first")

	// The zero time removes the expiry.
	got = mustUpdate(t, s, "ttl", store.Update{ExpiresAt: &time.Time{}})
	require.True(t, got.ExpiresAt.IsZero())
	require.Equal(t, []string{"forever"}, expired(t0.Add(1000*time.Hour)))

	// A rejected update does not move the expiry.
	_, err := s.Update(ctx, "forever", store.Update{ExpiresAt: at(time.Hour * 50)})
	require.ErrorIs(t, err, store.ErrTerminal)
	_, err = s.Update(ctx, "ttl", store.Update{IfVersion: 1, ExpiresAt: at(time.Second)})
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = s.Update(ctx, "ttl", store.Update{ExpiresAt: &time.Time{}, Variables: map[string]json.RawMessage{"x": json.RawMessage(`{`)}})
	require.ErrorIs(t, err, store.ErrInvalid)
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err = s.Update(ctx, "ttl", store.Update{ExpiresAt: &far})
	require.ErrorIs(t, err, store.ErrInvalid)
	require.Equal(t, []string{"forever"}, expired(t0.Add(1000*time.Hour)))

	// Delete removes the moved entry.
	require.NoError(t, s.Delete(ctx, "forever"))
	require.Empty(t, expired(t0.Add(1000*time.Hour)))
	mustUpdate(t, s, "ttl", store.Update{ExpiresAt: at(time.Second)})
	require.NoError(t, s.Delete(ctx, "ttl"))
	require.Empty(t, expired(t0.Add(1000*time.Hour)))
}

func testActive(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	check := func(want ...string) {
		t.Helper()
		got, err := s.Active(ctx)
		require.NoError(t, err)
		if len(want) == 0 {
			require.Empty(t, got)
			return
		}
		require.ElementsMatch(t, want, ids(got))
		for _, task := range got {
			require.False(t, task.Status.Terminal())
			require.Equal(t, task, mustGet(t, s, task.ID))
		}
	}
	check()
	for i := range 6 {
		task := newTask(fmt.Sprintf("a%d", i), fmt.Sprintf("owner%d", i%2), t0.Add(time.Duration(i)))
		if i%3 == 0 {
			task.Status = mcptask.StatusInputRequired
		}
		mustCreate(t, s, task)
	}
	check("a0", "a1", "a2", "a3", "a4", "a5")
	mustUpdate(t, s, "a0", store.Update{Status: mcptask.StatusCompleted})
	mustUpdate(t, s, "a1", store.Update{Status: mcptask.StatusFailed})
	check("a2", "a3", "a4", "a5")
	mustUpdate(t, s, "a2", store.Update{Status: mcptask.StatusInputRequired})
	mustUpdate(t, s, "a3", store.Update{Status: mcptask.StatusWorking})
	mustUpdate(t, s, "a4", store.Update{StatusMessage: strPtr("still going")})
	check("a2", "a3", "a4", "a5")
	mustUpdate(t, s, "a2", store.Update{Status: mcptask.StatusCancelled})
	_, err := s.Update(ctx, "a0", store.Update{Status: mcptask.StatusWorking})
	require.ErrorIs(t, err, store.ErrTerminal)
	check("a3", "a4", "a5")
	require.NoError(t, s.Delete(ctx, "a4"))
	check("a3", "a5")
	mustUpdate(t, s, "a3", store.Update{Status: mcptask.StatusCompleted})
	mustUpdate(t, s, "a5", store.Update{Status: mcptask.StatusCompleted})
	check()
}
