package taskrouter

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
)

// overlapRun is the probe of issue 38: a schedule of every second whose
// task runs 2.5 s (ended by the test at 10:00:03.5 on the router's
// clock), looked at once a second from 10:00:01 to 10:00:04.
type overlapRun struct {
	mu      sync.Mutex
	created []store.Fire // tasks started, in order (guarded by mu)
	peak    int          // most tasks running at once
	r       *Router
}

func runOverlap(t *testing.T, policy OverlapPolicy, replicas int) *overlapRun {
	t.Helper()
	base := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: base}
	st := store.Store(memory.New(nil))
	if replicas > 1 {
		st = sharedMemory{memory.New(nil)}
	}
	run := &overlapRun{}
	mu := &run.mu
	var routers []*Router
	for range replicas {
		r := cronRouter(t, st, clock)
		require.NoError(t, r.Schedules().Add(Schedule{Name: "every-second", Cron: "@every 1s", Overlap: policy, Start: startTasks(r, &run.created, mu)}))
		routers = append(routers, r)
	}
	run.r = routers[0]
	ctx := t.Context()
	rounds := func() {
		var wg sync.WaitGroup
		for _, r := range routers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 2 { // a round that lost a race looks again
					r.crons.round(ctx)
				}
			}()
		}
		wg.Wait()
		running := 0
		mu.Lock()
		for _, f := range run.created {
			if tk, err := st.Get(ctx, f.TaskID); err == nil && !tk.Status.Terminal() {
				running++
			}
		}
		mu.Unlock()
		run.peak = max(run.peak, running)
	}
	rounds() // registered at 10:00:00
	for _, at := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3500 * time.Millisecond, 4 * time.Second} {
		clock.set(base.Add(at))
		if at == 3500*time.Millisecond { // the first task ends after 2.5 s
			_, _ = run.r.Complete(ctx, run.created[0].TaskID, map[string]any{"content": []any{}}, nil, 0)
		}
		rounds()
	}
	return run
}

func times(fires []store.Fire) []string {
	var out []string
	for _, f := range fires {
		out = append(out, f.At.Format("05"))
	}
	return out
}

// TestScheduleOverlapPolicies: "@every 1s" with a 2.5 s run. Skip (the
// default) starts the next time after the run ended; buffer one starts
// one firing right after it ended and skips the rest; allow all starts
// three at once (what every schedule did before); cancel other cancels
// the running task at each time and starts the new one. Each decision is
// in the schedule's history and its fires.
func TestScheduleOverlapPolicies(t *testing.T) {
	ctx := t.Context()
	t.Run("skip", func(t *testing.T) {
		run := runOverlap(t, "", 1)
		require.Equal(t, []string{"01", "04"}, times(run.created))
		require.Equal(t, 1, run.peak)
		info := scheduleInfo(t, run.r)
		require.Equal(t, OverlapSkip, info.Overlap)
		require.Equal(t, []string{
			"skipped: 1 firing(s) up to 2026-03-02T10:00:02Z not run: task " + run.created[0].TaskID + " of the schedule still runs (overlap skip)",
			"skipped: 1 firing(s) up to 2026-03-02T10:00:03Z not run: task " + run.created[0].TaskID + " of the schedule still runs (overlap skip)",
		}, skips(info))
	})
	t.Run("buffer_one", func(t *testing.T) {
		run := runOverlap(t, OverlapBufferOne, 1)
		require.Equal(t, []string{"01", "02"}, times(run.created), "02 waited for 01's task, then started; 03 was skipped")
		require.Equal(t, 1, run.peak)
		fires, err := run.r.st.Fires(ctx, "every-second", 0)
		require.NoError(t, err)
		require.Equal(t, []string{"04", "02", "01"}, times(fires))
		require.False(t, fires[0].Started, "04 waits for 02's task")
		require.Contains(t, fires[0].Reason, "waits for task "+run.created[1].TaskID+" (overlap buffer_one)")
		require.Contains(t, skips(scheduleInfo(t, run.r))[0], "1 firing(s) up to 2026-03-02T10:00:03Z not run: the firing at 2026-03-02T10:00:02Z waits already, for task "+run.created[0].TaskID+" to end (overlap buffer_one)")
		require.LessOrEqual(t, run.r.crons.round(ctx), holdPoll, "a waiting firing looks again within a second")
		_, err = run.r.Complete(ctx, run.created[1].TaskID, map[string]any{"content": []any{}}, nil, 0)
		require.NoError(t, err)
		run.r.crons.round(ctx)
		mu := &run.mu
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, run.created, 3, "04 started once 02's task ended")
		require.Equal(t, "04", run.created[2].At.Format("05"))
	})
	t.Run("allow_all", func(t *testing.T) {
		run := runOverlap(t, OverlapAllowAll, 1)
		require.Equal(t, []string{"01", "02", "03", "04"}, times(run.created))
		require.Equal(t, 3, run.peak, "three at once")
		require.Empty(t, skips(scheduleInfo(t, run.r)))
	})
	t.Run("cancel_other", func(t *testing.T) {
		run := runOverlap(t, OverlapCancelOther, 1)
		require.Equal(t, []string{"01", "02", "03", "04"}, times(run.created))
		require.Equal(t, 1, run.peak)
		for i, f := range run.created[:3] {
			tk, err := run.r.st.Get(ctx, f.TaskID)
			require.NoError(t, err)
			require.Equal(t, mcptask.StatusCancelled, tk.Status)
			require.Equal(t, `cancelled by schedule "every-second": its firing at `+run.created[i+1].At.Format(time.RFC3339)+` replaces this task (overlap cancel_other)`, tk.StatusMessage)
		}
		require.Contains(t, run.created[3].Reason, "it cancels the running task "+run.created[2].TaskID)
	})
}

// TestScheduleOverlapOnceAcrossReplicas: two replicas run their rounds at
// the same moments: each policy decides each time once (the same fires
// and tasks as one replica, none twice).
func TestScheduleOverlapOnceAcrossReplicas(t *testing.T) {
	for policy, want := range map[OverlapPolicy][]string{
		OverlapSkip:        {"01", "04"},
		OverlapBufferOne:   {"01", "02"},
		OverlapAllowAll:    {"01", "02", "03", "04"},
		OverlapCancelOther: {"01", "02", "03", "04"},
	} {
		t.Run(string(policy), func(t *testing.T) {
			run := runOverlap(t, policy, 2)
			require.Equal(t, want, times(run.created))
			info := scheduleInfo(t, run.r)
			seen := map[string]bool{}
			for _, s := range skips(info) {
				require.False(t, seen[s], "decided twice: %s", s)
				seen[s] = true
			}
		})
	}
}

func scheduleInfo(t *testing.T, r *Router) ScheduleInfo {
	t.Helper()
	infos, err := r.Schedules().List(t.Context())
	require.NoError(t, err)
	require.Len(t, infos, 1)
	return infos[0]
}

// skips are the overlap entries of a schedule's history.
func skips(in ScheduleInfo) []string {
	var out []string
	for _, a := range in.Actions {
		if a.Action == "skipped" && strings.Contains(a.Detail, "(overlap ") {
			out = append(out, a.Action+": "+a.Detail)
		}
	}
	return out
}
