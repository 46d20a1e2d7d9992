package storetest

// Tasks created in a terminal status: ended before they were first stored.

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// endedTasks returns one task per terminal status, each carrying its
// outcome (cancelled both a result and an error), with a TTL (the
// cancelled one none), a variable and a label, created one second apart
// from at.
func endedTasks(owner string, at time.Time) []*store.Task {
	completed := newTask("ended-completed", owner, at)
	completed.Result = json.RawMessage(`{"content": [{"type": "text", "text": "done ✓"}]}`)
	completed.TTL = time.Hour
	failed := newTask("ended-failed", owner, at.Add(time.Second))
	failed.Error = &mcptask.ErrorInfo{Code: -32603, Message: "boom", Data: json.RawMessage(`{"why": "disk"}`)}
	failed.TTL = 30 * time.Minute
	cancelled := newTask("ended-cancelled", owner, at.Add(2*time.Second))
	cancelled.Result = json.RawMessage(`{"partial": true}`)
	cancelled.Error = &mcptask.ErrorInfo{Code: -32800, Message: "cancelled"}
	out := []*store.Task{completed, failed, cancelled}
	for i, st := range []mcptask.Status{mcptask.StatusCompleted, mcptask.StatusFailed, mcptask.StatusCancelled} {
		out[i].Status = st
		out[i].StatusMessage = "ended " + string(st)
		out[i].Variables = map[string]json.RawMessage{"step": json.RawMessage(strconv.Itoa(i))}
		out[i].Labels = map[string]string{"kind": "tool"}
	}
	return out
}

func testCreateTerminal(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	live := mustCreate(t, s, newTask("live", "alice", t0.Add(-time.Second)))
	ended := endedTasks("alice", t0)
	created := make(map[string]*store.Task)
	for _, in := range ended {
		before := in.Clone()
		got := mustCreate(t, s, in)
		require.Equal(t, before, in, "Create must not modify its argument")
		created[in.ID] = got

		require.Equal(t, in.Status, got.Status)
		require.Equal(t, uint64(1), got.Version)
		require.Equal(t, string(in.Result), string(got.Result))
		require.Equal(t, in.Error, got.Error)
		require.Equal(t, in.Variables, got.Variables)
		require.Equal(t, []store.StatusChange{{Status: in.Status, Message: in.StatusMessage, At: got.UpdatedAt}}, got.History,
			"one History entry, the terminal status")
		require.True(t, got.UpdatedAt.Equal(in.CreatedAt))
		require.Empty(t, got.LeaseHolder)
		require.Zero(t, got.LeaseEpoch)
		require.True(t, got.LeaseUntil.IsZero())
		if in.TTL > 0 {
			require.True(t, got.ExpiresAt.Equal(in.CreatedAt.Add(in.TTL)), "ExpiresAt %v", got.ExpiresAt)
		} else {
			require.True(t, got.ExpiresAt.IsZero())
		}
		require.Equal(t, got, mustGet(t, s, in.ID))
	}

	// List, full and headers only.
	page, err := s.List(ctx, store.ListOptions{Owner: "alice"})
	require.NoError(t, err)
	require.Equal(t, []string{"live", "ended-completed", "ended-failed", "ended-cancelled"}, ids(page.Tasks))
	for _, got := range page.Tasks[1:] {
		require.Equal(t, created[got.ID], got)
	}
	heads, err := s.List(ctx, store.ListOptions{Owner: "alice", HeadersOnly: true})
	require.NoError(t, err)
	for _, got := range heads.Tasks[1:] {
		require.Equal(t, created[got.ID].Status, got.Status)
		require.Nil(t, got.Result)
		require.Nil(t, got.Error)
	}

	// Query by each status, and all of them.
	for _, in := range ended {
		q, err := s.Query(ctx, store.Query{Statuses: []mcptask.Status{in.Status}})
		require.NoError(t, err)
		require.Equal(t, []string{in.ID}, ids(q.Tasks), "query %s", in.Status)
		require.Equal(t, in.Status, q.Tasks[0].Status)
	}
	q, err := s.Query(ctx, store.Query{Statuses: []mcptask.Status{mcptask.StatusWorking, mcptask.StatusInputRequired}})
	require.NoError(t, err)
	require.Equal(t, []string{"live"}, ids(q.Tasks))
	q, err = s.Query(ctx, store.Query{Owner: "alice", Name: "echo"})
	require.NoError(t, err)
	require.Equal(t, []string{"ended-cancelled", "ended-failed", "ended-completed", "live"}, ids(q.Tasks), "newest first")

	// Counts, Active, Expired.
	counts, err := s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[mcptask.Status]int{mcptask.StatusWorking: 1, mcptask.StatusInputRequired: 0,
		mcptask.StatusCompleted: 1, mcptask.StatusFailed: 1, mcptask.StatusCancelled: 1}, counts)
	active, err := s.Active(ctx)
	require.NoError(t, err)
	require.Equal(t, []*store.Task{live}, active, "an ended task is never active")
	expired, err := s.Expired(ctx, t0.Add(30*time.Minute), 10)
	require.NoError(t, err)
	require.Empty(t, expired, "ended-failed expires at t0+1s+30m")
	expired, err = s.Expired(ctx, t0.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"ended-failed", "ended-completed"}, ids(expired), "soonest first; no TTL, no expiry")
	require.Equal(t, created["ended-failed"], expired[0])

	// Nothing changes an ended task; no lease can be taken on it.
	for _, in := range ended {
		for _, u := range []store.Update{
			{Status: mcptask.StatusWorking},
			{Status: in.Status},
			{StatusMessage: strPtr("again")},
			{Result: json.RawMessage(`1`)},
			{Variables: map[string]json.RawMessage{"x": json.RawMessage(`1`)}},
		} {
			_, err := s.Update(ctx, in.ID, u)
			require.ErrorIs(t, err, store.ErrTerminal, "%s: %+v", in.ID, u)
		}
		_, err := s.Claim(ctx, in.ID, "replica-a", t0, t0.Add(time.Minute))
		require.ErrorIs(t, err, store.ErrTerminal)
		renewed, err := s.Renew(ctx, "replica-a", t0.Add(time.Hour), []string{in.ID})
		require.NoError(t, err)
		require.Empty(t, renewed)
		require.Equal(t, created[in.ID], mustGet(t, s, in.ID), "refused writes leave the task as it was")
	}
	leases, err := s.ExpiredLeases(ctx, t0.Add(24*time.Hour), 10)
	require.NoError(t, err)
	require.Empty(t, leases)

	// A second Create of an ended id fails like any other.
	_, err = s.Create(ctx, ended[0])
	require.ErrorIs(t, err, store.ErrExists)

	// Delete uncounts it under its status.
	require.NoError(t, s.Delete(ctx, "ended-failed"))
	counts, err = s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, counts[mcptask.StatusFailed])
	require.Equal(t, 1, counts[mcptask.StatusCompleted])

	// The outcome is held to the limits of an Update, and nothing is
	// written when it breaks them.
	big := newTask("ended-big", "alice", t0)
	big.Status, big.Result = mcptask.StatusCompleted, jsonString(store.DefaultMaxResultBytes+1)
	_, err = s.Create(ctx, big)
	require.ErrorIs(t, err, store.ErrTooLarge)
	bigErr := newTask("ended-big-error", "alice", t0)
	bigErr.Status = mcptask.StatusFailed
	bigErr.Error = &mcptask.ErrorInfo{Code: 1, Message: "m", Data: jsonString(store.DefaultMaxResultBytes + 1)}
	_, err = s.Create(ctx, bigErr)
	require.ErrorIs(t, err, store.ErrTooLarge)
	for _, id := range []string{"ended-big", "ended-big-error"} {
		_, err = s.Get(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	counts, err = s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, counts[mcptask.StatusCompleted])
	require.Equal(t, 0, counts[mcptask.StatusFailed])
}
