package storetest

// Schedules: records written compare-and-swap, fires recorded in the same
// write (once per schedule and time), their start marks, the caps on
// actions and fires, and one winner among racing writers.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/store"
)

func fireAt(name string, at time.Time, task string) store.Fire {
	return store.Fire{Schedule: name, At: at, TaskID: task, Reason: "on time"}
}

func testScheduleRecord(t *testing.T, o opener) {
	s, ctx := o.open(t), context.Background()
	_, err := s.Schedule(ctx, "nightly")
	require.ErrorIs(t, err, store.ErrNotFound)

	rec, err := s.SaveSchedule(ctx, &store.ScheduleRecord{Name: "nightly", Last: t0,
		Actions: []store.ScheduleAction{{At: t0, By: "engine", Action: "registered"}}}, nil)
	require.NoError(t, err)
	require.Equal(t, uint64(1), rec.Version)
	require.Equal(t, t0.UTC(), rec.Last)
	require.False(t, rec.UpdatedAt.IsZero())
	got, err := s.Schedule(ctx, "nightly")
	require.NoError(t, err)
	require.Equal(t, rec, got)

	_, err = s.SaveSchedule(ctx, &store.ScheduleRecord{Name: "nightly"}, nil)
	require.ErrorIs(t, err, store.ErrExists, "version 0 creates")
	_, err = s.SaveSchedule(ctx, &store.ScheduleRecord{Name: "unknown", Version: 3}, nil)
	require.ErrorIs(t, err, store.ErrNotFound)

	got.Paused = true
	got.Actions = append(got.Actions, store.ScheduleAction{At: t0, By: "alice", Action: "pause", Detail: "freeze"})
	next, err := s.SaveSchedule(ctx, got, nil)
	require.NoError(t, err)
	require.Equal(t, uint64(2), next.Version)
	require.True(t, next.Paused)
	require.Len(t, next.Actions, 2)
	_, err = s.SaveSchedule(ctx, got, nil)
	require.ErrorIs(t, err, store.ErrConflict, "a stale version")

	got.Version = 2
	got.Actions = nil
	for i := range store.MaxScheduleActions + 5 {
		got.Actions = append(got.Actions, store.ScheduleAction{At: t0, Action: fmt.Sprint(i)})
	}
	capped, err := s.SaveSchedule(ctx, got, nil)
	require.NoError(t, err)
	require.Len(t, capped.Actions, store.MaxScheduleActions)
	require.Equal(t, "5", capped.Actions[0].Action, "the oldest actions go")

	// A copy: changing what was returned changes nothing stored.
	capped.Actions[0].Action = "changed"
	again, err := s.Schedule(ctx, "nightly")
	require.NoError(t, err)
	require.Equal(t, "5", again.Actions[0].Action)
}

func testScheduleFires(t *testing.T, o opener) {
	s, ctx := o.open(t), context.Background()
	rec, err := s.SaveSchedule(ctx, &store.ScheduleRecord{Name: "hourly"}, []store.Fire{fireAt("hourly", t0, "task-0")})
	require.NoError(t, err)
	rec.Last = t0.Add(2 * time.Hour)
	rec, err = s.SaveSchedule(ctx, rec, []store.Fire{fireAt("hourly", t0.Add(time.Hour), "task-1"), fireAt("hourly", t0.Add(2*time.Hour), "task-2")})
	require.NoError(t, err)

	fires, err := s.Fires(ctx, "hourly", 0)
	require.NoError(t, err)
	require.Len(t, fires, 3)
	require.Equal(t, "task-2", fires[0].TaskID, "newest first")
	require.Equal(t, t0.Add(2*time.Hour).UTC(), fires[0].At)
	require.Equal(t, "on time", fires[0].Reason)
	require.False(t, fires[0].Started)
	require.False(t, fires[0].RecordedAt.IsZero())
	two, err := s.Fires(ctx, "hourly", 2)
	require.NoError(t, err)
	require.Len(t, two, 2)

	// A time already fired: the whole write is refused.
	_, err = s.SaveSchedule(ctx, rec, []store.Fire{fireAt("hourly", t0.Add(3*time.Hour), "task-3"), fireAt("hourly", t0.Add(time.Hour), "dup")})
	require.ErrorIs(t, err, store.ErrExists)
	cur, err := s.Schedule(ctx, "hourly")
	require.NoError(t, err)
	require.Equal(t, rec.Version, cur.Version, "nothing written")
	fires, err = s.Fires(ctx, "hourly", 0)
	require.NoError(t, err)
	require.Len(t, fires, 3)

	require.NoError(t, s.StartFire(ctx, "hourly", t0.Add(time.Hour)))
	require.NoError(t, s.StartFire(ctx, "hourly", t0.Add(time.Hour)), "marking again")
	require.ErrorIs(t, s.StartFire(ctx, "hourly", t0.Add(time.Minute)), store.ErrNotFound)
	require.ErrorIs(t, s.StartFire(ctx, "nope", t0), store.ErrNotFound)
	fires, err = s.Fires(ctx, "hourly", 0)
	require.NoError(t, err)
	require.True(t, fires[1].Started)
	require.False(t, fires[0].Started)

	none, err := s.Fires(ctx, "nope", 0)
	require.NoError(t, err)
	require.Empty(t, none)

	for name, c := range map[string]struct {
		rec   *store.ScheduleRecord
		fires []store.Fire
	}{
		"nil":            {nil, nil},
		"no name":        {&store.ScheduleRecord{}, nil},
		"other schedule": {&store.ScheduleRecord{Name: "a"}, []store.Fire{fireAt("b", t0, "x")}},
		"no task":        {&store.ScheduleRecord{Name: "a"}, []store.Fire{fireAt("a", t0, "")}},
		"no time":        {&store.ScheduleRecord{Name: "a"}, []store.Fire{fireAt("a", time.Time{}, "x")}},
		"two at once":    {&store.ScheduleRecord{Name: "a"}, []store.Fire{fireAt("a", t0, "x"), fireAt("a", t0, "y")}},
	} {
		_, err := s.SaveSchedule(ctx, c.rec, c.fires)
		require.ErrorIs(t, err, store.ErrInvalid, name)
	}
}

func testScheduleFirePrune(t *testing.T, o opener) {
	s, ctx := o.open(t), context.Background()
	rec, err := s.SaveSchedule(ctx, &store.ScheduleRecord{Name: "often"}, nil)
	require.NoError(t, err)
	n := store.MaxFires + 3
	for i := range n {
		at := t0.Add(time.Duration(i) * time.Minute)
		rec, err = s.SaveSchedule(ctx, rec, []store.Fire{fireAt("often", at, fmt.Sprintf("t%d", i))})
		require.NoError(t, err)
		if i != 1 { // fire 1 is never started: it is kept
			require.NoError(t, s.StartFire(ctx, "often", at))
		}
	}
	_, err = s.SaveSchedule(ctx, rec, nil)
	require.NoError(t, err)
	fires, err := s.Fires(ctx, "often", store.MaxPageSize)
	require.NoError(t, err)
	require.Len(t, fires, store.MaxFires+1)
	require.Equal(t, "t1", fires[len(fires)-1].TaskID, "a fire not started stays")
	require.Equal(t, "t3", fires[len(fires)-2].TaskID, "the oldest started fires go")
}

// testScheduleRace has writers race to decide the same firing: exactly one
// write wins, and the fire is recorded once.
func testScheduleRace(t *testing.T, o opener) {
	s, ctx := o.open(t), context.Background()
	base, err := s.SaveSchedule(ctx, &store.ScheduleRecord{Name: "race"}, nil)
	require.NoError(t, err)
	for round := range 5 {
		at := t0.Add(time.Duration(round) * time.Hour)
		var wg sync.WaitGroup
		wins := make(chan string, 8)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec := store.CloneSchedule(base)
				rec.Last = at
				_, err := s.SaveSchedule(ctx, rec, []store.Fire{fireAt("race", at, fmt.Sprintf("w%d", w))})
				switch {
				case err == nil:
					wins <- fmt.Sprintf("w%d", w)
				case !isAny(err, store.ErrConflict, store.ErrExists):
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		close(wins)
		var won []string
		for w := range wins {
			won = append(won, w)
		}
		require.Len(t, won, 1, "round %d", round)
		base, err = s.Schedule(ctx, "race")
		require.NoError(t, err)
		fires, err := s.Fires(ctx, "race", 1)
		require.NoError(t, err)
		require.Equal(t, won[0], fires[0].TaskID)
	}
}

// testReopenSchedules checks that records and fires survive a close and
// reopen.
func testReopenSchedules(t *testing.T, open func(t *testing.T, path string) store.Store) {
	path := filepath.Join(t.TempDir(), "tasks.db")
	s := openAt(t, open, path)
	ctx := context.Background()
	rec, err := s.SaveSchedule(ctx, &store.ScheduleRecord{Name: "daily", Last: t0, Paused: true,
		Actions: []store.ScheduleAction{{At: t0, By: "bob", Action: "pause"}}}, []store.Fire{fireAt("daily", t0, "task-a")})
	require.NoError(t, err)
	require.NoError(t, s.StartFire(ctx, "daily", t0))
	require.NoError(t, s.Close())

	s = openAt(t, open, path)
	got, err := s.Schedule(ctx, "daily")
	require.NoError(t, err)
	require.Equal(t, rec, got)
	fires, err := s.Fires(ctx, "daily", 0)
	require.NoError(t, err)
	require.Len(t, fires, 1)
	require.True(t, fires[0].Started)
	require.Equal(t, "task-a", fires[0].TaskID)
	_, err = s.SaveSchedule(ctx, got, []store.Fire{fireAt("daily", t0, "again")})
	require.ErrorIs(t, err, store.ErrExists, "the fire's key survives")
}

// isAny reports whether err matches one of targets.
func isAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
