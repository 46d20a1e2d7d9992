package taskrouter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
)

// owingKind is a kind whose cancelled tasks may owe an effect of their
// cancel, as a workflow owes its undo task: a task marked "owed" is
// owed the task "undo-<id>", which Owed creates (once: by its id) and
// then clears the mark, as the workflow bridge does (undoCancelled).
type owingKind struct {
	placedKind
	st    store.Store
	now   func() time.Time
	calls atomic.Int32 // Owed calls for a marked task
	made  atomic.Int32 // effects created
}

func (k *owingKind) Owed(ctx context.Context, t *store.Task) {
	if t.Labels["owed"] == "" {
		return
	}
	k.calls.Add(1)
	_, err := k.st.Create(ctx, &store.Task{ID: "undo-" + t.ID, Owner: t.Owner, Status: mcptask.StatusWorking, CreatedAt: k.now()})
	if err == nil {
		k.made.Add(1)
	} else if !errors.Is(err, store.ErrExists) {
		return
	}
	_, _ = k.st.Update(ctx, t.ID, store.Update{Annotate: true, Labels: map[string]string{"owed": ""}})
}

// cancelScans counts the store's listings of cancelled tasks (the owed
// pass's reads).
type cancelScans struct {
	sharedMemory
	n atomic.Int32
}

func (s *cancelScans) Query(ctx context.Context, q store.Query) (store.Page, error) {
	if len(q.Statuses) == 1 && q.Statuses[0] == mcptask.StatusCancelled {
		s.n.Add(1)
	}
	return s.sharedMemory.Query(ctx, q)
}

// owingRouter is a router named id on the shared store st, on clock,
// whose "owing" kind owes effects of cancels; not started: the test
// runs the services' rounds itself.
func owingRouter(t *testing.T, st store.Store, clock *fakeClock, id string) (*Router, *owingKind) {
	t.Helper()
	r, err := NewRouter(st, &Options{Now: clock.Now, ReplicaID: id, LeaseDuration: time.Second})
	require.NoError(t, err)
	k := &owingKind{st: st, now: clock.Now}
	r.HandleKind("owing", k)
	r.registry.beat(t.Context(), false)
	return r, k
}

// cancelOwing writes what the cancel of an "owing" task id writes: the
// task cancelled and marked as owing its effect.
func cancelOwing(t *testing.T, st store.Store, now time.Time, id string) {
	t.Helper()
	_, err := st.Create(t.Context(), &store.Task{ID: id, Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now,
		Labels: map[string]string{LabelKind: "owing"}})
	require.NoError(t, err)
	_, err = st.Update(t.Context(), id, store.Update{Status: mcptask.StatusCancelled, Labels: map[string]string{"owed": "1"}})
	require.NoError(t, err)
}

// TestOwedOfDepartedReplica: a replica stops between a cancel's write
// (which marks the task as owing an effect, as a workflow's cancel marks
// it owing its undo task) and the effect's creation, and never starts
// again. No lease expires for the task (it is terminal) and no start
// comes; the takeover of the replicas still running finds it once they
// see the replica gone, and the effect is made once though both look at
// the same time. While no replica leaves, the takeover reads no
// cancelled task.
func TestOwedOfDepartedReplica(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)}
	st := &cancelScans{sharedMemory: sharedMemory{memory.New(nil)}}
	ctx := t.Context()
	gone, _ := owingRouter(t, st, clock, "gone")
	b, kb := owingRouter(t, st, clock, "b")
	c, kc := owingRouter(t, st, clock, "c")
	_ = gone
	b.registry.beat(ctx, false) // b and c read the registry again: all three are in it
	c.registry.beat(ctx, false)

	// The cancel's write, by the replica that then stops: the task is
	// cancelled and marked, its effect never made.
	cancelOwing(t, st, clock.Now(), "x")

	// The replica is still live: the rounds read no cancelled task.
	for _, r := range []*Router{b, c} {
		_, err := Takeover(ctx, r)
		require.NoError(t, err)
		r.takeover.owedOfDeparted(ctx)
	}
	require.Zero(t, st.n.Load(), "no listing of cancelled tasks while no replica left")
	require.Zero(t, kb.calls.Load()+kc.calls.Load())

	// Its heartbeats age past a lease (it was killed: no stopping
	// heartbeat); b and c see it gone at their next beat, and their
	// next rounds, at once, make the effect once.
	for range 2 {
		clock.set(clock.Now().Add(600 * time.Millisecond))
		b.registry.beat(ctx, false)
		c.registry.beat(ctx, false)
	}
	require.Equal(t, uint64(1), b.registry.departures())
	require.Equal(t, uint64(1), c.registry.departures())
	var wg sync.WaitGroup
	for _, r := range []*Router{b, c} {
		wg.Go(func() { r.takeover.owedOfDeparted(ctx) })
	}
	wg.Wait()
	require.Equal(t, int32(1), kb.made.Load()+kc.made.Load(), "the effect is made once")
	require.GreaterOrEqual(t, kb.calls.Load()+kc.calls.Load(), int32(1))
	_, err := st.Get(ctx, "undo-x")
	require.NoError(t, err)
	x, err := st.Get(ctx, "x")
	require.NoError(t, err)
	require.Empty(t, x.Labels["owed"], "the mark is cleared once the effect is made")
	scans := st.n.Load()
	require.Equal(t, int32(2), scans, "one listing per replica (one page: a single cancelled task)")

	// Later rounds, with no new departure, read nothing and make nothing.
	calls := kb.calls.Load() + kc.calls.Load()
	for range 3 {
		b.registry.beat(ctx, false)
		c.registry.beat(ctx, false)
		b.takeover.owedOfDeparted(ctx)
		c.takeover.owedOfDeparted(ctx)
	}
	require.Equal(t, scans, st.n.Load())
	require.Equal(t, calls, kb.calls.Load()+kc.calls.Load())
	require.Equal(t, int32(1), kb.made.Load()+kc.made.Load())
}

// TestOwedOfDepartedRetriesAFailedPass: an owed pass the store refuses
// is tried again at the next round, though no other replica left.
func TestOwedOfDepartedRetriesAFailedPass(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)}
	st := &refusingQuery{cancelScans: cancelScans{sharedMemory: sharedMemory{memory.New(nil)}}}
	ctx := t.Context()
	gone, _ := owingRouter(t, st, clock, "gone")
	b, kb := owingRouter(t, st, clock, "b") // its first read sees gone live
	cancelOwing(t, st, clock.Now(), "x")
	gone.registry.Stop() // a graceful stop, between the cancel's write and its effect: gone at b's next read
	b.registry.beat(ctx, false)
	require.Equal(t, uint64(1), b.registry.departures())

	st.refuse.Store(true)
	b.takeover.owedOfDeparted(ctx)
	require.Zero(t, kb.made.Load())
	st.refuse.Store(false)
	b.takeover.owedOfDeparted(ctx)
	require.Equal(t, int32(1), kb.made.Load(), "the failed pass is run again")
}

// refusingQuery refuses listings while refuse is set.
type refusingQuery struct {
	cancelScans
	refuse atomic.Bool
}

func (s *refusingQuery) Query(ctx context.Context, q store.Query) (store.Page, error) {
	if s.refuse.Load() {
		return store.Page{}, errors.New("test: the store is down")
	}
	return s.cancelScans.Query(ctx, q)
}
