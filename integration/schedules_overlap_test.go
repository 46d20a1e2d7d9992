package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/postgres"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// A schedule's overlap policy is decided once across replicas: two
// engines on one PostgreSQL database, their schedules services running
// on one clock the test moves ("@every 1s", the first task running 2.5 s
// of that clock), start the same tasks as one engine would, each once.
func TestScheduleOverlapAcrossReplicasOnPostgres(t *testing.T) {
	for policy, want := range map[taskrouter.OverlapPolicy][]string{
		taskrouter.OverlapSkip:        {"01", "04"},
		taskrouter.OverlapBufferOne:   {"01", "02"},
		taskrouter.OverlapAllowAll:    {"01", "02", "03", "04"},
		taskrouter.OverlapCancelOther: {"01", "02", "03", "04"},
	} {
		t.Run(string(policy), func(t *testing.T) {
			dsn := pgtest.DSN(t)
			ctx := context.Background()
			base := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
			clock := &relClock{now: base}
			var mu sync.Mutex
			started := map[string]int{} // task id -> creations
			var order []store.Fire
			var routers []*taskrouter.Router
			var st store.Store
			for i := range 2 {
				s, err := postgres.Open(ctx, dsn, nil)
				require.NoError(t, err)
				t.Cleanup(func() { _ = s.Close() })
				st = s
				r, err := taskrouter.NewRouter(s, &taskrouter.Options{Now: clock.Now, ReplicaID: fmt.Sprint("r", i), ChangePollInterval: 5 * time.Millisecond})
				require.NoError(t, err)
				require.NoError(t, r.Schedules().Add(taskrouter.Schedule{Name: "every-second", Cron: "@every 1s", Overlap: policy,
					Start: func(ctx context.Context, f store.Fire) error {
						// order is the order of first attempts: a replica
						// that finds a fire made by the other (ErrExists)
						// goes on to the next while the maker may not have
						// returned yet, so the order of creations is not
						// the order the schedule started them in.
						mu.Lock()
						if !slices.ContainsFunc(order, func(o store.Fire) bool { return o.TaskID == f.TaskID }) {
							order = append(order, f)
						}
						mu.Unlock()
						_, err := r.CreateTask(ctx, nil, store.Request{Method: "scheduled", Name: f.Schedule}, &taskrouter.CreateOptions{ID: f.TaskID, Kind: "report"})
						if errors.Is(err, store.ErrExists) {
							return nil
						}
						if err == nil {
							mu.Lock()
							started[f.TaskID]++
							mu.Unlock()
						}
						return err
					}}))
				require.NoError(t, r.Start(ctx))
				t.Cleanup(func() { _ = r.Close() })
				routers = append(routers, r)
			}
			// decided waits until the schedule's record has decided up to at.
			decided := func(at time.Time) {
				require.Eventually(t, func() bool {
					rec, err := st.Schedule(ctx, "every-second")
					return err == nil && !rec.Last.Before(at)
				}, 20*time.Second, 5*time.Millisecond, "the time %v is decided", at)
			}
			firstStarted := func() string {
				var id string
				require.Eventually(t, func() bool {
					mu.Lock()
					defer mu.Unlock()
					if len(order) > 0 && started[order[0].TaskID] > 0 {
						id = order[0].TaskID
					}
					return id != ""
				}, 20*time.Second, 5*time.Millisecond)
				return id
			}
			decided(base)
			clock.set(base.Add(time.Second))
			decided(clock.Now())
			first := firstStarted()
			for _, at := range []time.Duration{2 * time.Second, 3 * time.Second} {
				clock.set(base.Add(at))
				decided(clock.Now())
			}
			clock.set(base.Add(3500 * time.Millisecond))
			_, _ = routers[0].Complete(ctx, first, map[string]any{"content": []any{}}, nil, 0) // cancelled already under cancel_other
			clock.set(base.Add(4 * time.Second))
			decided(clock.Now())
			require.Eventually(t, func() bool {
				fires, err := st.Fires(ctx, "every-second", 0)
				if err != nil {
					return false
				}
				n := 0
				for _, f := range fires {
					if f.Started {
						n++
					}
				}
				return n == len(want)
			}, 20*time.Second, 5*time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			var got []string
			for _, f := range order {
				got = append(got, f.At.Format("05"))
				require.Equal(t, 1, started[f.TaskID], "task %s created once", f.TaskID)
			}
			require.Equal(t, want, got)
			if policy == taskrouter.OverlapCancelOther {
				for _, f := range order[:3] {
					tk, err := st.Get(ctx, f.TaskID)
					require.NoError(t, err)
					require.Equal(t, mcptask.StatusCancelled, tk.Status)
				}
			}
		})
	}
}
