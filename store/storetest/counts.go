package storetest

// Status counts kept by every write (Counts).

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

func testCounts(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	want := store.NewCounts()
	check := func() {
		t.Helper()
		got, err := s.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	check()
	for i := range 10 {
		task := newTask(fmt.Sprintf("n-%d", i), fmt.Sprintf("o%d", i%3), t0.Add(time.Duration(i)))
		if i%2 == 1 {
			task.Status = mcptask.StatusInputRequired
		}
		mustCreate(t, s, task)
		want[task.Status]++
	}
	check()
	move := func(id string, from, to mcptask.Status) {
		mustUpdate(t, s, id, store.Update{Status: to})
		want[from]--
		want[to]++
	}
	move("n-0", mcptask.StatusWorking, mcptask.StatusInputRequired)
	move("n-1", mcptask.StatusInputRequired, mcptask.StatusWorking)
	move("n-2", mcptask.StatusWorking, mcptask.StatusCompleted)
	move("n-3", mcptask.StatusInputRequired, mcptask.StatusFailed)
	move("n-4", mcptask.StatusWorking, mcptask.StatusCancelled)
	check()
	// Writes that do not change the status, and failed writes, count
	// nothing.
	mustUpdate(t, s, "n-5", store.Update{Status: mcptask.StatusInputRequired, StatusMessage: strPtr("same")})
	mustUpdate(t, s, "n-6", store.Update{Variables: map[string]json.RawMessage{"x": json.RawMessage(`1`)}})
	_, err := s.Update(ctx, "n-2", store.Update{Status: mcptask.StatusWorking})
	require.ErrorIs(t, err, store.ErrTerminal)
	_, err = s.Update(ctx, "n-6", store.Update{IfVersion: 1, Status: mcptask.StatusCompleted})
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = s.Claim(ctx, "n-7", "h", t0, t0.Add(time.Minute))
	require.NoError(t, err)
	_, err = s.Renew(ctx, "h", t0.Add(time.Hour), []string{"n-7"})
	require.NoError(t, err)
	_, err = s.Create(ctx, newTask("n-0", "o0", t0))
	require.ErrorIs(t, err, store.ErrExists)
	check()
	// Deletes, of finished and of live tasks.
	for _, id := range []string{"n-2", "n-1", "n-9"} {
		task := mustGet(t, s, id)
		require.NoError(t, s.Delete(ctx, id))
		want[task.Status]--
	}
	require.ErrorIs(t, s.Delete(ctx, "n-2"), store.ErrNotFound)
	check()
}
