package storetest

// The status state machine and compare-and-swap.

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

func testTransitions(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	n := 0
	// setup creates a task and brings it to status from.
	setup := func(from mcptask.Status) *store.Task {
		n++
		id := fmt.Sprintf("tr-%d", n)
		cur := mustCreate(t, s, newTask(id, "alice", t0.Add(time.Duration(n))))
		if from != mcptask.StatusWorking {
			cur = mustUpdate(t, s, id, store.Update{Status: from})
		}
		require.Equal(t, from, cur.Status)
		return cur
	}
	for _, from := range allStatuses {
		for _, to := range allStatuses {
			t.Run(fmt.Sprintf("%s->%s", from, to), func(t *testing.T) {
				cur := setup(from)
				got, err := s.Update(ctx, cur.ID, store.Update{Status: to, StatusMessage: strPtr("moved")})
				if store.CanTransition(from, to) {
					require.NoError(t, err)
					require.Equal(t, to, got.Status)
					require.Equal(t, "moved", got.StatusMessage)
					require.Equal(t, cur.Version+1, got.Version)
					require.Equal(t, got, mustGet(t, s, cur.ID))
					return
				}
				require.Error(t, err)
				var te *store.TransitionError
				require.ErrorAs(t, err, &te)
				require.Equal(t, cur.ID, te.ID)
				require.Equal(t, from, te.From)
				require.Equal(t, to, te.To)
				require.ErrorIs(t, err, store.ErrInvalidTransition)
				require.Equal(t, from.Terminal(), errors.Is(err, store.ErrTerminal))
				require.Nil(t, got)
				require.Equal(t, cur, mustGet(t, s, cur.ID), "nothing written")
			})
		}
	}
	// Terminal tasks accept no update at all, even one without a status.
	for _, from := range allStatuses {
		if !from.Terminal() {
			continue
		}
		t.Run(fmt.Sprintf("%s->(no status)", from), func(t *testing.T) {
			cur := setup(from)
			updates := []store.Update{
				{},
				{StatusMessage: strPtr("late")},
				{Variables: map[string]json.RawMessage{"v": json.RawMessage(`1`)}},
				{Labels: map[string]string{"l": "v"}},
				{Result: json.RawMessage(`{}`)},
				{IfVersion: cur.Version, StatusMessage: strPtr("cas")},
			}
			for _, u := range updates {
				_, err := s.Update(ctx, cur.ID, u)
				var te *store.TransitionError
				require.ErrorAs(t, err, &te)
				require.Equal(t, from, te.From)
				require.Equal(t, from, te.To)
				require.ErrorIs(t, err, store.ErrInvalidTransition)
				require.ErrorIs(t, err, store.ErrTerminal)
			}
			require.Equal(t, cur, mustGet(t, s, cur.ID), "nothing written")
		})
	}
	// An Annotate update merges labels into an ended task, and nothing
	// else; it is refused with anything but labels.
	for _, from := range allStatuses {
		t.Run(fmt.Sprintf("%s annotated", from), func(t *testing.T) {
			cur := setup(from)
			got := mustUpdate(t, s, cur.ID, store.Update{Annotate: true, IfVersion: cur.Version, Labels: map[string]string{"forks": "x"}})
			require.Equal(t, "x", got.Labels["forks"])
			require.Equal(t, cur.Status, got.Status)
			require.Equal(t, cur.StatusMessage, got.StatusMessage)
			require.Equal(t, cur.ExpiresAt, got.ExpiresAt)
			require.Equal(t, cur.History, got.History)
			require.Equal(t, cur.Version+1, got.Version)
			require.Equal(t, got, mustGet(t, s, cur.ID))
			_, err := s.Update(ctx, cur.ID, store.Update{Annotate: true, IfVersion: cur.Version, Labels: map[string]string{"forks": "y"}})
			require.ErrorIs(t, err, store.ErrConflict, "compare-and-swap holds")
			for _, bad := range []store.Update{
				{Annotate: true},
				{Annotate: true, Labels: map[string]string{"a": "b"}, StatusMessage: strPtr("late")},
				{Annotate: true, Labels: map[string]string{"a": "b"}, Variables: map[string]json.RawMessage{"v": json.RawMessage(`1`)}},
				{Annotate: true, Labels: map[string]string{"a": "b"}, Status: mcptask.StatusCompleted},
				{Annotate: true, Labels: map[string]string{"a": "b"}, Result: json.RawMessage(`{}`)},
			} {
				_, err := s.Update(ctx, cur.ID, bad)
				require.ErrorIs(t, err, store.ErrInvalid, "%+v", bad)
			}
			require.Equal(t, got, mustGet(t, s, cur.ID), "nothing written")
		})
	}
	// Non-terminal tasks accept updates without a status.
	t.Run("working->(no status)", func(t *testing.T) {
		cur := setup(mcptask.StatusWorking)
		got := mustUpdate(t, s, cur.ID, store.Update{StatusMessage: strPtr("50%")})
		require.Equal(t, mcptask.StatusWorking, got.Status)
		require.Equal(t, "50%", got.StatusMessage)
		require.Equal(t, cur.Version+1, got.Version)
	})
	t.Run("unknown status", func(t *testing.T) {
		cur := setup(mcptask.StatusWorking)
		_, err := s.Update(ctx, cur.ID, store.Update{Status: "paused"})
		require.ErrorIs(t, err, store.ErrInvalidTransition)
		require.NotErrorIs(t, err, store.ErrTerminal)
		require.Equal(t, cur, mustGet(t, s, cur.ID))
	})
}

func testCAS(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	mustCreate(t, s, newTask("cas", "alice", t0))
	v2 := mustUpdate(t, s, "cas", store.Update{IfVersion: 1, Variables: map[string]json.RawMessage{"n": json.RawMessage(`1`)}})
	require.Equal(t, uint64(2), v2.Version)

	for _, stale := range []uint64{1, 3, 1 << 60} {
		_, err := s.Update(ctx, "cas", store.Update{
			IfVersion:     stale,
			Status:        mcptask.StatusCompleted,
			StatusMessage: strPtr("stale"),
			Variables:     map[string]json.RawMessage{"n": json.RawMessage(`99`), "m": json.RawMessage(`1`)},
			Labels:        map[string]string{"x": "y"},
			Result:        json.RawMessage(`{"stale":true}`),
		})
		require.ErrorIs(t, err, store.ErrConflict)
		require.Equal(t, v2, mustGet(t, s, "cas"), "a conflicting update writes nothing")
	}
	active, err := s.Active(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"cas"}, ids(active))

	v3 := mustUpdate(t, s, "cas", store.Update{IfVersion: 2, Status: mcptask.StatusCompleted})
	require.Equal(t, uint64(3), v3.Version)
	require.Equal(t, `1`, string(v3.Variables["n"]))
	// IfVersion 0 means unconditional (here rejected only because terminal).
	_, err = s.Update(ctx, "cas", store.Update{})
	require.ErrorIs(t, err, store.ErrTerminal)
}
