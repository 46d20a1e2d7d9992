package taskrouter

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
)

// placedKind is a kind whose tasks need the key in their "needs" label;
// it serves the keys it is given and counts the tasks it woke and
// recovered.
type placedKind struct {
	serves []string
	mu     sync.Mutex
	woke   []string
}

func (k *placedKind) Serves() []string                     { return k.serves }
func (k *placedKind) Needs(t *store.Task) string           { return t.Labels["needs"] }
func (k *placedKind) ExpiryMessage(*store.Task) string     { return "" }
func (k *placedKind) Touched(context.Context, *store.Task) {}
func (k *placedKind) Recover(_ context.Context, t *store.Task, _ string) error {
	return k.Wake(context.Background(), t)
}
func (k *placedKind) Wake(_ context.Context, t *store.Task) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.woke = append(k.woke, t.ID)
	return nil
}
func (k *placedKind) woken() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.woke...)
}

// placedRouter is a router named id on the shared store st, on clock,
// whose "placed" kind serves keys; not started: the test runs the
// services' rounds itself.
func placedRouter(t *testing.T, st store.Store, clock *fakeClock, id string, keys ...string) (*Router, *placedKind) {
	t.Helper()
	r, err := NewRouter(st, &Options{Now: clock.Now, ReplicaID: id})
	require.NoError(t, err)
	k := &placedKind{serves: keys}
	r.HandleKind("placed", k)
	r.registry.beat(t.Context(), false)
	return r, k
}

// TestRegistryServedBy: each replica's heartbeat says what it serves; a
// replica is live until its heartbeats age past a lease duration or it
// stops, and what it served is remembered with the time.
func TestRegistryServedBy(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)}
	st := sharedMemory{memory.New(nil)}
	ctx := t.Context()
	old, _ := placedRouter(t, st, clock, "old", "v1")
	fresh, _ := placedRouter(t, st, clock, "new", "v2")

	s, err := fresh.ServedBy(ctx, "v1")
	require.NoError(t, err)
	require.Equal(t, Served{Live: []string{"old"}, Last: clock.Now()}, s)
	s, err = fresh.ServedBy(ctx, "v2")
	require.NoError(t, err)
	require.True(t, s.Here)
	require.Empty(t, s.Live, "itself is not among the others")

	// Heartbeats that age: no longer live, last served then.
	began := clock.Now()
	clock.set(began.Add(fresh.opts.LeaseDuration))
	s, err = fresh.ServedBy(ctx, "v1")
	require.NoError(t, err)
	require.Equal(t, Served{Last: began}, s)
	old.registry.beat(ctx, false)
	s, err = fresh.ServedBy(ctx, "v1")
	require.NoError(t, err)
	require.Equal(t, []string{"old"}, s.Live, "beating again")

	// A graceful stop: not live at once.
	old.registry.Stop() // what Close does to a started router
	require.NoError(t, old.Close())
	s, err = fresh.ServedBy(ctx, "v1")
	require.NoError(t, err)
	require.Empty(t, s.Live)
	require.Equal(t, clock.Now(), s.Last)
	s, err = fresh.ServedBy(ctx, "nobody")
	require.NoError(t, err)
	require.Equal(t, Served{}, s)

	// On an exclusive store the records are of the processes before this
	// one (one SIGKILLed a moment ago looks fresh): none is live.
	excl := memory.New(nil)
	gone, _ := placedRouter(t, excl, clock, "gone", "v1")
	_ = gone // killed: no stopping heartbeat
	next, _ := placedRouter(t, excl, clock, "next", "v2")
	s, err = next.ServedBy(ctx, "v1")
	require.NoError(t, err)
	require.Equal(t, Served{Last: clock.Now()}, s)
}

// TestWorkLeftToReplicaThatServesIt: the scheduler does not wake, and the
// takeover does not claim, a task whose key this replica does not serve
// while a live replica serves it; that replica does. With no live replica
// serving it, any replica takes it up (its kind decides).
func TestWorkLeftToReplicaThatServesIt(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)}
	st := sharedMemory{memory.New(nil)}
	ctx := t.Context()
	old, oldKind := placedRouter(t, st, clock, "old", "v1")
	fresh, freshKind := placedRouter(t, st, clock, "new", "v2")
	old.registry.beat(ctx, false) // it reads the registry again: the new replica is in it
	now := clock.Now()
	for _, id := range []string{"wake-v1", "wake-v2"} {
		_, err := st.Create(ctx, &store.Task{ID: id, Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now, WakeAt: now.Add(-time.Second),
			Labels: map[string]string{LabelKind: "placed", "needs": id[len("wake-"):]}})
		require.NoError(t, err)
	}
	for _, id := range []string{"held-v1", "held-v2"} {
		_, err := st.Create(ctx, &store.Task{ID: id, Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now,
			LeaseHolder: "gone", LeaseUntil: now.Add(-time.Second), Labels: map[string]string{LabelKind: "placed", "needs": id[len("held-"):]}})
		require.NoError(t, err)
	}
	old.sched.wakeDue(ctx)
	fresh.sched.wakeDue(ctx)
	old.sched.wakers.Wait()
	fresh.sched.wakers.Wait()
	require.Equal(t, []string{"wake-v1"}, oldKind.woken())
	require.Equal(t, []string{"wake-v2"}, freshKind.woken())

	n, err := Takeover(ctx, fresh)
	require.NoError(t, err)
	require.Equal(t, 1, n, "held-v2 only")
	tk, err := st.Get(ctx, "held-v1")
	require.NoError(t, err)
	require.Equal(t, "gone", tk.LeaseHolder, "not claimed by a replica that does not serve it")
	n, err = Takeover(ctx, old)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// The old replica stops: nobody live serves v1, so the new one takes
	// its tasks up and its kind decides.
	old.registry.Stop()
	require.NoError(t, old.Close())
	freshKind.mu.Lock()
	freshKind.woke = nil
	freshKind.mu.Unlock()
	fresh.registry.beat(ctx, false)
	fresh.sched.wakeDue(ctx)
	fresh.sched.wakers.Wait()
	require.ElementsMatch(t, []string{"wake-v1", "wake-v2"}, freshKind.woken())
}
