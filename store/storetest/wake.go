package storetest

// Wake-ups: Task.WakeAt, Update.WakeAt and the wake index behind Due.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// wakeTask returns a task created at t0 that wakes at wake (none when
// zero).
func wakeTask(id string, wake time.Time) *store.Task {
	task := newTask(id, "alice", t0)
	task.WakeAt = wake
	return task
}

// at returns a pointer to t0+d, in t0's (non-UTC) zone.
func at(d time.Duration) *time.Time { x := t0.Add(d); return &x }

// requireDue checks Due(now, limit): the ids, in order, each a full task
// equal to Get's, none terminal and none waking after now.
func requireDue(t *testing.T, s store.Store, now time.Time, limit int, want ...string) []*store.Task {
	t.Helper()
	got, err := s.Due(t.Context(), now, limit)
	require.NoError(t, err)
	require.Equal(t, append([]string{}, want...), ids(got), "Due(t0+%v, %d)", now.Sub(t0), limit)
	for _, task := range got {
		require.False(t, task.Status.Terminal(), "Due returned %s, which is %s", task.ID, task.Status)
		require.False(t, task.WakeAt.IsZero())
		require.False(t, task.WakeAt.After(now))
		require.Equal(t, task, mustGet(t, s, task.ID), "full tasks")
	}
	return got
}

func testWakeCreate(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	wake := t0.Add(time.Minute) // in a non-UTC zone, with nanoseconds
	got := mustCreate(t, s, wakeTask("sleeper", wake))
	require.True(t, got.WakeAt.Equal(wake), "WakeAt %v", got.WakeAt)
	require.Equal(t, time.UTC, got.WakeAt.Location())
	require.Equal(t, got, mustGet(t, s, "sleeper"))
	plain := mustCreate(t, s, newTask("plain", "alice", t0.Add(time.Second)))
	require.True(t, plain.WakeAt.IsZero())
	require.Equal(t, plain, mustGet(t, s, "plain"))
	input := wakeTask("input", t0.Add(time.Hour))
	input.Status, input.CreatedAt = mcptask.StatusInputRequired, t0.Add(2*time.Second)
	mustCreate(t, s, input)

	// A header field: every read carries it.
	page, err := s.List(ctx, store.ListOptions{Owner: "alice", HeadersOnly: true})
	require.NoError(t, err)
	require.Equal(t, []string{"sleeper", "plain", "input"}, ids(page.Tasks))
	require.True(t, page.Tasks[0].WakeAt.Equal(wake))
	require.True(t, page.Tasks[1].WakeAt.IsZero())
	q, err := s.Query(ctx, store.Query{Oldest: true})
	require.NoError(t, err)
	require.Equal(t, []string{"sleeper", "plain", "input"}, ids(q.Tasks))
	require.True(t, q.Tasks[0].WakeAt.Equal(wake))
	require.True(t, q.Tasks[2].WakeAt.Equal(t0.Add(time.Hour)))
	active, err := s.Active(ctx)
	require.NoError(t, err)
	require.Equal(t, mustGet(t, s, "sleeper"), active[0])

	requireDue(t, s, t0, 10)
	requireDue(t, s, wake.Add(-time.Nanosecond), 10)
	requireDue(t, s, wake, 10, "sleeper") // at WakeAt exactly
	requireDue(t, s, t0.Add(time.Hour), 10, "sleeper", "input")

	// Refused: out of range, or on a task that has ended. Nothing is
	// stored.
	far := wakeTask("far", time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))
	_, err = s.Create(ctx, far)
	require.ErrorIs(t, err, store.ErrInvalid)
	for _, ended := range endedTasks("alice", t0) {
		ended.WakeAt = wake
		_, err = s.Create(ctx, ended)
		require.ErrorIs(t, err, store.ErrInvalid, ended.ID)
	}
	for _, id := range []string{"far", "ended-completed", "ended-failed", "ended-cancelled"} {
		_, err = s.Get(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound, id)
	}
	requireDue(t, s, t0.Add(1000*time.Hour), 10, "sleeper", "input")
}

func testWakeUpdate(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	mustCreate(t, s, wakeTask("a", t0.Add(10*time.Second)))
	mustCreate(t, s, wakeTask("b", time.Time{}))
	mustCreate(t, s, leasedTask("c", "h", t0.Add(time.Minute)))

	// Set on a task that had none.
	got := mustUpdate(t, s, "b", store.Update{WakeAt: at(5 * time.Second)})
	require.True(t, got.WakeAt.Equal(t0.Add(5*time.Second)))
	require.Equal(t, time.UTC, got.WakeAt.Location())
	require.Equal(t, got, mustGet(t, s, "b"))
	requireDue(t, s, t0.Add(time.Minute), 10, "b", "a")

	// Moved later, then earlier: the old entry goes.
	mustUpdate(t, s, "b", store.Update{WakeAt: at(20 * time.Second)})
	requireDue(t, s, t0.Add(10*time.Second), 10, "a")
	requireDue(t, s, t0.Add(time.Minute), 10, "a", "b")
	mustUpdate(t, s, "a", store.Update{WakeAt: at(30 * time.Second), Status: mcptask.StatusInputRequired})
	requireDue(t, s, t0.Add(time.Minute), 10, "b", "a")
	mustUpdate(t, s, "a", store.Update{WakeAt: at(time.Second)})
	requireDue(t, s, t0.Add(time.Minute), 10, "a", "b")

	// Updates without WakeAt, a claim and a renewal keep it.
	mustUpdate(t, s, "a", store.Update{Status: mcptask.StatusWorking, Variables: map[string]json.RawMessage{"x": json.RawMessage(`1`)}})
	mustUpdate(t, s, "c", store.Update{WakeAt: at(3 * time.Second)})
	claimed, err := s.Claim(ctx, "c", "h2", t0.Add(time.Minute), t0.Add(2*time.Minute))
	require.NoError(t, err)
	require.True(t, claimed.WakeAt.Equal(t0.Add(3*time.Second)))
	_, err = s.Renew(ctx, "h2", t0.Add(time.Hour), []string{"c"})
	require.NoError(t, err)
	fence := claimed.Fence()
	mustUpdate(t, s, "c", store.Update{Fence: &fence, StatusMessage: strPtr("step")})
	requireDue(t, s, t0.Add(time.Minute), 10, "a", "c", "b")

	// Refused updates move nothing.
	before := mustGet(t, s, "c")
	for name, u := range map[string]store.Update{
		"conflict":     {IfVersion: 1, WakeAt: at(time.Hour)},
		"fenced":       {Fence: &store.Fence{Holder: "h", Epoch: 1}, WakeAt: at(time.Hour)},
		"invalid json": {WakeAt: &time.Time{}, Variables: map[string]json.RawMessage{"x": json.RawMessage(`{`)}},
		"out of range": {WakeAt: func() *time.Time { x := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC); return &x }()},
	} {
		_, err := s.Update(ctx, "c", u)
		require.Error(t, err, name)
		require.Equal(t, before, mustGet(t, s, "c"), name)
	}
	requireDue(t, s, t0.Add(time.Minute), 10, "a", "c", "b")

	// The zero time clears it.
	got = mustUpdate(t, s, "a", store.Update{WakeAt: &time.Time{}})
	require.True(t, got.WakeAt.IsZero())
	require.Equal(t, got, mustGet(t, s, "a"))
	requireDue(t, s, t0.Add(1000*time.Hour), 10, "c", "b")
	mustUpdate(t, s, "a", store.Update{WakeAt: &time.Time{}}) // clearing twice is fine
	requireDue(t, s, t0.Add(1000*time.Hour), 10, "c", "b")
}

func testDue(t *testing.T, o opener) {
	s := o.open(t)
	// Wake-ups in seconds after t0; "tie-a" and "tie-b" wake together,
	// created in the other order.
	wakes := map[string]int{"w10": 10, "w5": 5, "w20": 20, "tie-b": 7, "tie-a": 7, "w1": 1}
	i := 0
	for _, id := range []string{"tie-b", "w10", "w5", "w20", "tie-a", "w1"} {
		task := wakeTask(id, t0.Add(time.Duration(wakes[id])*time.Second))
		task.CreatedAt = t0.Add(time.Duration(i) * time.Millisecond)
		if i%2 == 1 {
			task.Status = mcptask.StatusInputRequired
		}
		mustCreate(t, s, task)
		i++
	}
	mustCreate(t, s, newTask("none", "alice", t0))
	requireDue(t, s, t0, 10)
	requireDue(t, s, t0.Add(-time.Hour), 10)
	requireDue(t, s, t0.Add(time.Second), 10, "w1")
	requireDue(t, s, t0.Add(7*time.Second), 10, "w1", "w5", "tie-a", "tie-b")
	requireDue(t, s, t0.Add(time.Hour), 3, "w1", "w5", "tie-a")
	requireDue(t, s, t0.Add(time.Hour), -1, "w1", "w5", "tie-a", "tie-b", "w10", "w20")

	// A limit of zero or less means DefaultPageSize, and a larger one is
	// capped at MaxPageSize.
	n := store.DefaultPageSize + 5
	if !testing.Short() {
		n = store.MaxPageSize + 5
	}
	var many []*store.Task
	for i := range n {
		many = append(many, wakeTask(fmt.Sprintf("m%05d", i), t0.Add(time.Hour+time.Duration(i))))
	}
	createMany(t, t.Context(), s, many, 8)
	later := t0.Add(2 * time.Hour)
	got, err := s.Due(t.Context(), later, 0)
	require.NoError(t, err)
	require.Len(t, got, store.DefaultPageSize)
	require.Equal(t, "w1", got[0].ID)
	require.Equal(t, fmt.Sprintf("m%05d", store.DefaultPageSize-7), got[len(got)-1].ID)
	if n > store.MaxPageSize {
		got, err = s.Due(t.Context(), later, store.MaxPageSize+3)
		require.NoError(t, err)
		require.Len(t, got, store.MaxPageSize)
	}
}

func testWakeTerminal(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	for i, st := range []mcptask.Status{mcptask.StatusCompleted, mcptask.StatusFailed, mcptask.StatusCancelled} {
		task := wakeTask(string(st), t0.Add(time.Duration(i+1)*time.Second))
		task.TTL = time.Hour
		mustCreate(t, s, task)
	}
	mustCreate(t, s, wakeTask("stays", t0.Add(time.Minute)))
	requireDue(t, s, t0.Add(time.Hour), 10, "completed", "failed", "cancelled", "stays")

	ended := mustUpdate(t, s, "completed", store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`1`)})
	require.True(t, ended.WakeAt.IsZero(), "a terminal move clears it")
	require.Equal(t, ended, mustGet(t, s, "completed"))
	// Even when the same update asks for one.
	ended = mustUpdate(t, s, "failed", store.Update{Status: mcptask.StatusFailed, WakeAt: at(time.Minute)})
	require.True(t, ended.WakeAt.IsZero())
	requireDue(t, s, t0.Add(time.Hour), 10, "cancelled", "stays")
	ended = mustUpdate(t, s, "cancelled", store.Update{Status: mcptask.StatusCancelled, ExpiresAt: at(2 * time.Hour)})
	require.True(t, ended.WakeAt.IsZero())
	requireDue(t, s, t0.Add(time.Hour), 10, "stays")
	requireDue(t, s, t0.Add(1000*time.Hour), 10, "stays")

	// An ended task takes no new wake-up.
	_, err := s.Update(ctx, "completed", store.Update{WakeAt: at(time.Second)})
	require.ErrorIs(t, err, store.ErrTerminal)
	require.True(t, mustGet(t, s, "completed").WakeAt.IsZero())
	// Its other indexes are as before.
	expired, err := s.Expired(ctx, t0.Add(3*time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"completed", "failed", "cancelled"}, ids(expired))
}

func testWakeDelete(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	mustCreate(t, s, wakeTask("a", t0.Add(time.Second)))
	mustCreate(t, s, wakeTask("b", t0.Add(2*time.Second)))
	mustUpdate(t, s, "b", store.Update{WakeAt: at(3 * time.Second)}) // a moved entry
	mustCreate(t, s, wakeTask("c", t0.Add(4*time.Second)))
	require.NoError(t, s.Delete(ctx, "a"))
	require.NoError(t, s.Delete(ctx, "b"))
	requireDue(t, s, t0.Add(time.Hour), 10, "c")
	// A new task under a deleted id starts without the old wake-up.
	mustCreate(t, s, newTask("a", "alice", t0))
	requireDue(t, s, t0.Add(time.Hour), 10, "c")
	mustUpdate(t, s, "a", store.Update{WakeAt: at(5 * time.Second)})
	requireDue(t, s, t0.Add(time.Hour), 10, "c", "a")
}

// testWakeConcurrent has writers move, clear and end the wake-ups of a
// shared set of tasks while readers call Due: Due never returns a task
// that is terminal or wakes after its now, and at the end it agrees with
// the tasks as stored.
func testWakeConcurrent(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	tasks, writers, ops := 40, 8, 40
	if testing.Short() {
		tasks, writers, ops = 16, 4, 15
	}
	var all []*store.Task
	for i := range tasks {
		all = append(all, wakeTask(fmt.Sprintf("c%02d", i), t0.Add(time.Duration(i)*time.Second)))
	}
	createMany(t, ctx, s, all, 8)

	now := t0.Add(time.Duration(tasks/2) * time.Second)
	stop := make(chan struct{})
	errc := make(chan error, writers+2)
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				got, err := s.Due(ctx, now, store.MaxPageSize)
				if err != nil {
					errc <- err
					return
				}
				for i, task := range got {
					switch {
					case task.Status.Terminal():
						errc <- fmt.Errorf("Due returned %s, which is %s", task.ID, task.Status)
						return
					case task.WakeAt.IsZero() || task.WakeAt.After(now):
						errc <- fmt.Errorf("Due(%v) returned %s, which wakes at %v", now, task.ID, task.WakeAt)
						return
					case i > 0 && (task.WakeAt.Before(got[i-1].WakeAt) || task.WakeAt.Equal(got[i-1].WakeAt) && task.ID < got[i-1].ID):
						errc <- fmt.Errorf("Due out of order: %s after %s", task.ID, got[i-1].ID)
						return
					}
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for range ops {
				id := all[rnd.IntN(tasks)].ID
				var u store.Update
				switch k := rnd.IntN(10); {
				case k == 0:
					u = store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`1`)}
				case k == 1:
					u = store.Update{WakeAt: &time.Time{}}
				case k < 4:
					u = store.Update{Status: mcptask.StatusInputRequired, WakeAt: at(time.Duration(rnd.IntN(tasks)) * time.Second)}
				default:
					u = store.Update{WakeAt: at(time.Duration(rnd.IntN(2*tasks)) * time.Second)}
				}
				if _, err := s.Update(ctx, id, u); err != nil && !errors.Is(err, store.ErrTerminal) {
					errc <- fmt.Errorf("update %s: %w", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}

	// The index agrees with the tasks.
	var want []*store.Task
	for _, in := range all {
		task := mustGet(t, s, in.ID)
		if task.Status.Terminal() {
			require.True(t, task.WakeAt.IsZero(), "%s ended with a wake-up", task.ID)
			continue
		}
		if !task.WakeAt.IsZero() {
			want = append(want, task)
		}
	}
	later := t0.Add(time.Duration(3*tasks) * time.Second)
	got, err := s.Due(ctx, later, store.MaxPageSize)
	require.NoError(t, err)
	require.ElementsMatch(t, ids(want), ids(got))
	for i := 1; i < len(got); i++ {
		require.False(t, got[i].WakeAt.Before(got[i-1].WakeAt), "soonest first")
	}
}
