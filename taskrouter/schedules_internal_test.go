package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
)

// fakeClock is a clock a test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// cronRouter is a router on st with clock, not started: the test runs the
// schedules service's rounds itself.
func cronRouter(t *testing.T, st store.Store, clock *fakeClock) *Router {
	t.Helper()
	r, err := NewRouter(st, &Options{Now: clock.Now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// startTasks is a Schedule.Start that creates the fire's task, and counts
// each creation.
func startTasks(r *Router, created *[]store.Fire, mu *sync.Mutex) func(ctx context.Context, f store.Fire) error {
	return func(ctx context.Context, f store.Fire) error {
		_, err := r.CreateTask(ctx, nil, store.Request{Method: "scheduled", Name: f.Schedule}, &CreateOptions{ID: f.TaskID, Kind: "test"})
		if errors.Is(err, store.ErrExists) {
			return nil
		}
		if err == nil {
			mu.Lock()
			*created = append(*created, f)
			mu.Unlock()
		}
		return err
	}
}

func firedAt(fires []store.Fire) []string {
	var out []string
	for _, f := range fires {
		out = append(out, fmt.Sprintf("%s %s", f.At.UTC().Format("15:04"), f.Reason))
	}
	return out
}

// TestScheduleMissedPolicies runs an hourly schedule on a fake clock: a
// firing seen on time fires; after four hours down, skip fires none of
// the missed times, run-once the latest, backfill the latest two; each
// decision is in the schedule's history.
func TestScheduleMissedPolicies(t *testing.T) {
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		policy   MissedPolicy
		backfill int
		want     []string
		skipped  string
	}{
		{MissedSkip, 0, nil, "4 missed firing(s) up to 2026-03-02T15:00:00Z not run (policy skip)"},
		{MissedRunOnce, 0, []string{"15:00 " + FireMissed}, "3 missed firing(s) up to 2026-03-02T14:00:00Z not run (policy run_once)"},
		{MissedBackfill, 2, []string{"14:00 " + FireBackfill, "15:00 " + FireBackfill}, "2 missed firing(s) up to 2026-03-02T13:00:00Z not run (policy backfill)"},
	} {
		t.Run(string(c.policy), func(t *testing.T) {
			clock := &fakeClock{now: day.Add(10*time.Hour + 30*time.Minute)}
			r := cronRouter(t, memory.New(nil), clock)
			var mu sync.Mutex
			var created []store.Fire
			require.NoError(t, r.Schedules().Add(Schedule{Name: "hourly", Cron: "0 * * * *", Missed: c.policy, Backfill: c.backfill, Overlap: OverlapAllowAll, Start: startTasks(r, &created, &mu)}))
			ctx := t.Context()

			r.crons.round(ctx) // registers: nothing before 10:30 is missed
			require.Empty(t, created)
			clock.set(day.Add(11*time.Hour + 10*time.Second))
			wait := r.crons.round(ctx)
			require.Equal(t, []string{"11:00 " + FireOnTime}, firedAt(created), "seen 10 s late: on time")
			require.LessOrEqual(t, wait, r.crons.cfg.Poll)

			created = nil
			clock.set(day.Add(15*time.Hour + 30*time.Minute)) // down from 11:00:10 to 15:30
			r.crons.round(ctx)
			require.Equal(t, c.want, firedAt(created))
			infos, err := r.Schedules().List(ctx)
			require.NoError(t, err)
			require.Len(t, infos, 1)
			last := infos[0].Actions[len(infos[0].Actions)-1]
			require.Equal(t, "skipped", last.Action)
			require.Equal(t, c.skipped, last.Detail)
			require.Equal(t, day.Add(16*time.Hour), infos[0].Next)
			require.Equal(t, day.Add(15*time.Hour), infos[0].Last)

			created = nil
			clock.set(day.Add(16*time.Hour + 5*time.Second))
			r.crons.round(ctx)
			r.crons.round(ctx) // a second look fires nothing again
			require.Equal(t, []string{"16:00 " + FireOnTime}, firedAt(created))
			fires, err := r.st.Fires(ctx, "hourly", 0)
			require.NoError(t, err)
			for _, f := range fires {
				require.True(t, f.Started, "every fire's task started: %v", f)
				_, err := r.st.Get(ctx, f.TaskID)
				require.NoError(t, err, "the fire's task exists under the id it named")
			}
		})
	}
}

// TestScheduleTimeZone: a daily 09:00 in New York is 14:00 UTC in winter
// and 13:00 UTC in summer.
func TestScheduleTimeZone(t *testing.T) {
	sc, err := parseSchedule(Schedule{Name: "ny", Cron: "0 9 * * *", TimeZone: "America/New_York", Start: func(context.Context, store.Fire) error { return nil }})
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 1, 15, 14, 0, 0, 0, time.UTC), sc.next(time.Date(2026, 1, 15, 0, 0, 0, 0, time.UTC)))
	require.Equal(t, time.Date(2026, 7, 15, 13, 0, 0, 0, time.UTC), sc.next(time.Date(2026, 7, 15, 0, 0, 0, 0, time.UTC)))
}

// TestScheduleRefusesWhatCannotWork: registration names every field that
// cannot work.
func TestScheduleRefusesWhatCannotWork(t *testing.T) {
	r := cronRouter(t, memory.New(nil), &fakeClock{now: time.Now()})
	start := func(context.Context, store.Fire) error { return nil }
	for _, c := range []struct {
		s    Schedule
		want string
	}{
		{Schedule{Name: "a", Cron: "61 * * * *", Start: start}, `Cron "61 * * * *"`},
		{Schedule{Name: "a", Cron: "CRON_TZ=UTC 0 * * * *", Start: start}, "put it in TimeZone"},
		{Schedule{Name: "a", Cron: "@daily", TimeZone: "Mars/Olympus", Start: start}, `TimeZone "Mars/Olympus"`},
		{Schedule{Name: "a", Cron: "@daily", Missed: MissedBackfill, Start: start}, "MissedBackfill needs Backfill"},
		{Schedule{Name: "a", Cron: "@daily", Missed: "sometimes", Start: start}, `unknown Missed policy "sometimes"`},
		{Schedule{Name: "a", Cron: "@daily"}, "Start is nil"},
		{Schedule{Name: "", Cron: "@daily", Start: start}, "Name must be"},
		{Schedule{Name: "a", Cron: "@every 1h", MissedAfter: -time.Second, Start: start}, "MissedAfter is negative"},
	} {
		require.ErrorContains(t, r.Schedules().Add(c.s), c.want)
	}
	require.NoError(t, r.Schedules().Add(Schedule{Name: "ok", Cron: "@every 90m", Start: start}))
}

// TestScheduleOnceAcrossReplicas: two routers on one store (two replicas)
// run their rounds at the same moment, many times over: each time is
// fired once, and its task created once.
func TestScheduleOnceAcrossReplicas(t *testing.T) {
	st := sharedMemory{memory.New(nil)}
	clock := &fakeClock{now: time.Date(2026, 3, 2, 10, 0, 30, 0, time.UTC)}
	var mu sync.Mutex
	var created []store.Fire
	var routers []*Router
	for range 2 {
		r := cronRouter(t, st, clock)
		require.NoError(t, r.Schedules().Add(Schedule{Name: "every-minute", Cron: "* * * * *", Overlap: OverlapAllowAll, Start: startTasks(r, &created, &mu)}))
		routers = append(routers, r)
	}
	ctx := t.Context()
	routers[0].crons.round(ctx)
	for minute := 1; minute <= 20; minute++ {
		clock.set(time.Date(2026, 3, 2, 10, minute, 1, 0, time.UTC))
		var wg sync.WaitGroup
		for _, r := range routers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 3 { // a round that lost a race looks again
					r.crons.round(ctx)
				}
			}()
		}
		wg.Wait()
	}
	require.Len(t, created, 20, "one task per minute")
	seen := map[time.Time]bool{}
	for _, f := range created {
		require.False(t, seen[f.At], "fired twice at %v", f.At)
		seen[f.At] = true
	}
}

// TestSchedulePauseResumeTrigger: a paused schedule fires nothing, its
// resume skips the times that passed (and says so), a trigger fires at
// once, also while paused; every action names who did it.
func TestSchedulePauseResumeTrigger(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 2, 10, 30, 0, 0, time.UTC)}
	r := cronRouter(t, memory.New(nil), clock)
	var mu sync.Mutex
	var created []store.Fire
	require.NoError(t, r.Schedules().Add(Schedule{Name: "hourly", Cron: "@hourly", Start: startTasks(r, &created, &mu)}))
	ctx := t.Context()
	r.crons.round(ctx)

	info, err := r.Schedules().Pause(ctx, "hourly", "alice", "release freeze")
	require.NoError(t, err)
	require.True(t, info.Paused)
	require.True(t, info.Next.IsZero())
	clock.set(time.Date(2026, 3, 2, 13, 0, 5, 0, time.UTC))
	r.crons.round(ctx)
	require.Empty(t, created, "paused: nothing fires")

	f, err := r.Schedules().Trigger(ctx, "hourly", "bob")
	require.NoError(t, err)
	require.True(t, f.Started)
	require.Equal(t, FireTrigger, f.Reason)
	require.Equal(t, "bob", f.By)
	require.Len(t, created, 1)
	require.Equal(t, f.TaskID, created[0].TaskID)

	info, err = r.Schedules().Resume(ctx, "hourly", "alice")
	require.NoError(t, err)
	require.False(t, info.Paused)
	require.Equal(t, time.Date(2026, 3, 2, 14, 0, 0, 0, time.UTC), info.Next)
	var actions []string
	for _, a := range info.Actions {
		actions = append(actions, fmt.Sprintf("%s by %s: %s", a.Action, a.By, a.Detail))
	}
	require.Equal(t, []string{
		"registered by engine: @hourly (UTC), missed firings: skip, overlap: skip",
		"paused by alice: release freeze",
		"triggered by bob: task " + f.TaskID,
		"resumed by alice: 3 firing(s) passed while paused, not run",
	}, actions)
	r.crons.round(ctx)
	require.Len(t, created, 1, "the times passed while paused do not fire")

	_, err = r.Schedules().Pause(ctx, "nope", "alice", "")
	require.ErrorIs(t, err, ErrNoSchedule)
}

// TestScheduleStartRetried: a start that fails leaves its fire recorded
// and not started; a later round starts it, once.
func TestScheduleStartRetried(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 2, 10, 59, 0, 0, time.UTC)}
	r := cronRouter(t, memory.New(nil), clock)
	var mu sync.Mutex
	var created []store.Fire
	fail := true
	ok := startTasks(r, &created, &mu)
	require.NoError(t, r.Schedules().Add(Schedule{Name: "hourly", Cron: "@hourly", Start: func(ctx context.Context, f store.Fire) error {
		if fail {
			return errors.New("the database is away")
		}
		return ok(ctx, f)
	}}))
	ctx := t.Context()
	r.crons.round(ctx)
	clock.set(time.Date(2026, 3, 2, 11, 0, 1, 0, time.UTC))
	wait := r.crons.round(ctx)
	require.LessOrEqual(t, wait, 5*time.Second, "a failed start is tried again soon")
	fires, err := r.st.Fires(ctx, "hourly", 0)
	require.NoError(t, err)
	require.Len(t, fires, 1)
	require.False(t, fires[0].Started)
	fail = false
	clock.set(time.Date(2026, 3, 2, 11, 0, 6, 0, time.UTC))
	r.crons.round(ctx)
	require.Len(t, created, 1)
	require.Equal(t, fires[0].TaskID, created[0].TaskID)
}

// TestScheduleEveryNextCountsFromLastFiring: an @every schedule's next
// firing is its last firing plus the interval (what the round fires at),
// not the time of the reading plus the interval.
func TestScheduleEveryNextCountsFromLastFiring(t *testing.T) {
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: day.Add(10*time.Hour + 30*time.Minute)}
	r := cronRouter(t, memory.New(nil), clock)
	var mu sync.Mutex
	var created []store.Fire
	require.NoError(t, r.Schedules().Add(Schedule{Name: "every", Cron: "@every 1h", Start: startTasks(r, &created, &mu)}))
	ctx := t.Context()
	r.crons.round(ctx) // registers at 10:30
	for _, at := range []time.Duration{10*time.Hour + 40*time.Minute, 11*time.Hour + 20*time.Minute} {
		clock.set(day.Add(at))
		infos, err := r.Schedules().List(ctx)
		require.NoError(t, err)
		require.Equal(t, day.Add(11*time.Hour+30*time.Minute), infos[0].Next, "read at %v", day.Add(at))
	}
	clock.set(day.Add(11*time.Hour + 30*time.Minute + time.Second))
	r.crons.round(ctx)
	require.Len(t, created, 1)
	infos, err := r.Schedules().List(ctx)
	require.NoError(t, err)
	require.Equal(t, day.Add(12*time.Hour+30*time.Minute), infos[0].Next)
}
