package storetest

// The status history kept on every status change (Task.History).

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

func testHistory(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	task := newTask("h", "alice", t0)
	task.StatusMessage = "starting"
	task.History = []store.StatusChange{{Status: mcptask.StatusFailed}} // ignored
	created := mustCreate(t, s, task)
	require.Equal(t, []store.StatusChange{{Status: mcptask.StatusWorking, Message: "starting", At: created.UpdatedAt}}, created.History)
	require.Equal(t, time.UTC, created.History[0].At.Location())

	// Updates that keep the status add nothing, failed ones neither.
	mustUpdate(t, s, "h", store.Update{StatusMessage: strPtr("25%")})
	mustUpdate(t, s, "h", store.Update{Status: mcptask.StatusWorking, StatusMessage: strPtr("50%")})
	_, err := s.Update(ctx, "h", store.Update{IfVersion: 1, Status: mcptask.StatusInputRequired})
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = s.Claim(ctx, "h", "holder", t0, t0.Add(time.Minute))
	require.NoError(t, err)
	require.Len(t, mustGet(t, s, "h").History, 1)

	asked := mustUpdate(t, s, "h", store.Update{Status: mcptask.StatusInputRequired, StatusMessage: strPtr("which file?")})
	require.Len(t, asked.History, 2)
	require.Equal(t, store.StatusChange{Status: mcptask.StatusInputRequired, Message: "which file?", At: asked.UpdatedAt}, asked.History[1])
	require.Equal(t, asked, mustGet(t, s, "h"))

	// Bounce well past the cap: the first entry stays, the latest ones are
	// kept, in order.
	statuses := []mcptask.Status{mcptask.StatusWorking, mcptask.StatusInputRequired}
	bounces := 2 * store.MaxStatusHistory
	var last *store.Task
	for i := range bounces {
		last = mustUpdate(t, s, "h", store.Update{Status: statuses[i%2], StatusMessage: strPtr(fmt.Sprintf("bounce %d", i))})
	}
	last = mustUpdate(t, s, "h", store.Update{Status: mcptask.StatusCompleted, StatusMessage: strPtr("done")})
	h := last.History
	require.Len(t, h, store.MaxStatusHistory)
	require.Equal(t, created.History[0], h[0])
	require.Equal(t, store.StatusChange{Status: mcptask.StatusCompleted, Message: "done", At: last.UpdatedAt}, h[len(h)-1])
	for i := 1; i < len(h)-1; i++ {
		n := bounces - (len(h) - 1 - i)
		require.Equal(t, fmt.Sprintf("bounce %d", n), h[i].Message)
		require.Equal(t, statuses[n%2], h[i].Status)
		require.False(t, h[i].At.Before(h[i-1].At), "oldest first")
	}
	require.Equal(t, last, mustGet(t, s, "h"))

	// Which reads carry it.
	full, err := s.List(ctx, store.ListOptions{Owner: "alice"})
	require.NoError(t, err)
	require.Equal(t, h, full.Tasks[0].History)
	head, err := s.List(ctx, store.ListOptions{Owner: "alice", HeadersOnly: true})
	require.NoError(t, err)
	require.Nil(t, head.Tasks[0].History)
	q, err := s.Query(ctx, store.Query{})
	require.NoError(t, err)
	require.Nil(t, q.Tasks[0].History)
	expired, err := s.Expired(ctx, t0.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Empty(t, expired)

	// A rejected update on the ended task adds nothing; a new task with the
	// same id after a delete starts over.
	_, err = s.Update(ctx, "h", store.Update{Status: mcptask.StatusWorking})
	require.ErrorIs(t, err, store.ErrTerminal)
	require.Len(t, mustGet(t, s, "h").History, store.MaxStatusHistory)
	require.NoError(t, s.Delete(ctx, "h"))
	again := mustCreate(t, s, newTask("h", "bob", t0.Add(time.Hour)))
	require.Len(t, again.History, 1)
	require.Len(t, mustGet(t, s, "h").History, 1)
}
