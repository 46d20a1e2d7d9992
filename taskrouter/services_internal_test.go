package taskrouter

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/taskbridge/taskbridge/mcptask"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
)

// sharedMemory is a memory store that says several processes share it.
type sharedMemory struct{ *memory.Store }

func (sharedMemory) Shared() bool { return true }

// memoryStore is a fresh memory store, shared (sharedMemory) or not.
func memoryStore(shared bool) store.Store {
	if shared {
		return sharedMemory{memory.New(nil)}
	}
	return memory.New(nil)
}

// TestServicesRunUnderOneSupervisor: Start starts the background services
// in order (the takeover only on a shared store), Close stops them all.
func TestServicesRunUnderOneSupervisor(t *testing.T) {
	for _, shared := range []bool{false, true} {
		r, err := NewRouter(memoryStore(shared), nil)
		require.NoError(t, err)
		require.NoError(t, r.Start(t.Context()))
		want := []string{"replicas' registry", "change feed", "push deliveries", "scheduler", "ttl sweeper", "lease renewer", "schedules"}
		if shared {
			want = append(want, "lease takeover")
		}
		require.Equal(t, want, r.services.Running())
		require.NoError(t, r.Close())
		require.Empty(t, r.services.Running())
	}
}

// TestServiceConfigsNameTheField: each service refuses a configuration
// that cannot work, naming the field.
func TestServiceConfigsNameTheField(t *testing.T) {
	r := &Router{}
	_, err := newScheduler(r, &r.leases, &registry{}, &r.kinds, schedulerConfig{Poll: 0, MaxWakers: -1})
	require.ErrorContains(t, err, "scheduler: Poll must be positive")
	require.ErrorContains(t, err, "scheduler: MaxWakers is negative")
	_, err = newSweeper(r, &r.fan, &r.kinds, sweeperConfig{Interval: time.Second, Grace: -time.Second})
	require.ErrorContains(t, err, "sweeper: Grace is negative")
	_, err = newLeaseRenewer(r, &r.leases, leaseWorkConfig{Interval: time.Second, LeaseDuration: time.Second})
	require.ErrorContains(t, err, "lease renewer: ReplicaID is empty")
	_, err = newLeaseTakeover(r, &recovery{}, &registry{}, leaseWorkConfig{LeaseDuration: time.Second, ReplicaID: "x"})
	require.ErrorContains(t, err, "lease takeover: Interval must be positive")
}

// TestSweeperSignalsWhatItSwept: the sweeper's periodic round deletes an
// ended task past its expiry and fails an active one, and says how many.
func TestSweeperSignalsWhatItSwept(t *testing.T) {
	var now atomic.Pointer[time.Time]
	start := time.Now()
	now.Store(&start)
	clock := func() time.Time { return *now.Load() }
	st := memory.New(&store.Options{Now: clock})
	r, err := NewRouter(st, &Options{Now: clock, SweepInterval: 10 * time.Millisecond, DefaultTTL: time.Minute})
	require.NoError(t, err)
	r.sweeper.signals.Swept.Init()
	ctx := t.Context()
	require.NoError(t, r.Start(ctx)) // before the tasks exist: recovery would fail the active one
	t.Cleanup(func() { _ = r.Close() })
	ended, err := r.CreateTask(ctx, nil, store.Request{Method: "tools/call", Name: "x"}, nil)
	require.NoError(t, err)
	_, err = r.Complete(ctx, ended.ID, map[string]any{"content": []any{}}, nil, 0)
	require.NoError(t, err)
	active, err := r.CreateTask(ctx, nil, store.Request{Method: "tools/call", Name: "x"}, nil)
	require.NoError(t, err)
	later := start.Add(2 * time.Minute)
	now.Store(&later)
	swept := 0
	for swept < 2 {
		n, ok := r.sweeper.signals.Swept.Wait(30 * time.Second)
		require.True(t, ok, "the sweeper swept")
		swept += n
	}
	_, err = st.Get(ctx, ended.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "the ended task is deleted")
	got, err := st.Get(ctx, active.ID)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusFailed, got.Status, "the active task is failed, kept for the grace")
	require.Contains(t, got.StatusMessage, "expired")
}

// wakeKind is a KindHandler whose Wake fails the first time.
type wakeKind struct {
	r     *Router
	calls atomic.Int32
}

func (k *wakeKind) Recover(context.Context, *store.Task, string) error { return nil }
func (k *wakeKind) ExpiryMessage(*store.Task) string                   { return "" }
func (k *wakeKind) Touched(context.Context, *store.Task)               {}
func (k *wakeKind) Wake(ctx context.Context, t *store.Task) error {
	if k.calls.Add(1) == 1 {
		return errors.New("not yet")
	}
	zero := time.Time{}
	_, err := k.r.Update(ctx, t.ID, store.Update{WakeAt: &zero})
	return err
}

// TestSchedulerSignalsWakeups: a due wake-up runs its kind's Wake hook; a
// failed one is tried again after a backoff.
func TestSchedulerSignalsWakeups(t *testing.T) {
	r, err := NewRouter(memory.New(nil), &Options{SweepInterval: time.Hour})
	require.NoError(t, err)
	k := &wakeKind{r: r}
	r.HandleKind("nap", k)
	r.sched.signals.Woken.Init()
	r.sched.signals.Retry.Init()
	require.NoError(t, r.Start(t.Context()))
	t.Cleanup(func() { _ = r.Close() })
	task, err := r.CreateTask(t.Context(), nil, store.Request{Method: "tools/call", Name: "nap"},
		&CreateOptions{Kind: "nap", WakeAt: time.Now().Add(10 * time.Millisecond)})
	require.NoError(t, err)
	id, ok := r.sched.signals.Retry.Wait(30 * time.Second)
	require.True(t, ok, "the failed wake-up is to be retried")
	require.Equal(t, task.ID, id)
	id, ok = r.sched.signals.Woken.Wait(30 * time.Second)
	require.True(t, ok, "the retry ran")
	require.Equal(t, task.ID, id)
	require.Equal(t, int32(2), k.calls.Load())
}

// TestRenewerSignalsALostLease: a lease whose task was deleted elsewhere
// is not renewed; its work is stopped as ended.
func TestRenewerSignalsALostLease(t *testing.T) {
	st := sharedMemory{memory.New(nil)}
	r, err := NewRouter(st, &Options{ReplicaID: "here", LeaseDuration: 60 * time.Millisecond})
	require.NoError(t, err)
	r.renewer.signals.Lost.Init()
	ctx := t.Context()
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { _ = r.Close() })
	task, err := r.CreateTask(ctx, nil, store.Request{Method: "prompts/get", Name: "wf"}, nil)
	require.NoError(t, err)
	l, err := r.TryLease(ctx, task.ID)
	require.NoError(t, err)
	require.True(t, l.Held())
	work, done := r.Track(ctx, task.ID)
	t.Cleanup(done)
	require.NoError(t, st.Delete(ctx, task.ID))
	id, ok := r.renewer.signals.Lost.Wait(30 * time.Second)
	require.True(t, ok, "the lease was found lost")
	require.Equal(t, task.ID, id)
	<-work.Done()
	require.Equal(t, StopEnded, Stopped(work))
}

// TestKindRegistry: one handler per kind, the last registered; the engine
// asks it for one hook at a time, none when the kind has no handler.
func TestKindRegistry(t *testing.T) {
	var k kinds
	task := &store.Task{Labels: map[string]string{LabelKind: "wf"}}
	require.Nil(t, k.of(task))
	require.Nil(t, k.wakeHook(task))
	require.Nil(t, k.recoverHook(task))
	require.Empty(t, k.expiryMessage(task))
	require.Nil(t, k.inputKind(task))

	k.set("wf", &recordingKind{})
	base := &recordingKind{}
	k.set("wf", base)
	require.NoError(t, k.wakeHook(task)(t.Context(), task))
	require.NoError(t, k.recoverHook(task)(t.Context(), task, ReasonRestart))
	require.Equal(t, "base", k.expiryMessage(task))
	require.Equal(t, []string{"wake", "recover"}, base.calls, "the handler registered last has the kind")
	require.NotNil(t, k.inputKind(task), "and is its InputKind")

	other := &store.Task{Labels: map[string]string{LabelKind: "other"}}
	require.Nil(t, k.recoverHook(other), "another kind has no handler")
}

// recordingKind records its hooks' calls; it is an InputKind.
type recordingKind struct{ calls []string }

func (k *recordingKind) Recover(context.Context, *store.Task, string) error {
	k.calls = append(k.calls, "recover")
	return nil
}
func (k *recordingKind) Wake(context.Context, *store.Task) error {
	k.calls = append(k.calls, "wake")
	return nil
}
func (k *recordingKind) ExpiryMessage(*store.Task) string     { return "base" }
func (k *recordingKind) Touched(context.Context, *store.Task) {}
func (k *recordingKind) InputRequests(*store.Task) map[string]json.RawMessage {
	return nil
}
func (k *recordingKind) Answer(context.Context, *store.Task, map[string]json.RawMessage) error {
	return nil
}

// clearKind is a KindHandler whose Wake records the task and clears its
// wake-up.
type clearKind struct {
	r     *Router
	woken chan string
}

func (k *clearKind) Recover(context.Context, *store.Task, string) error { return nil }
func (k *clearKind) ExpiryMessage(*store.Task) string                   { return "" }
func (k *clearKind) Touched(context.Context, *store.Task)               {}
func (k *clearKind) Wake(ctx context.Context, t *store.Task) error {
	zero := time.Time{}
	_, err := k.r.Update(ctx, t.ID, store.Update{WakeAt: &zero})
	k.woken <- t.ID
	return err
}

// TestSchedulerWakesWhatNoNoteAnnounced: a wake-up time the scheduler was
// not told of (written before a restart the last round forgot, or by
// another writer) runs at its time even while a later one is noted; the
// simulation found it (seed 16: a retry due in 1 s waited for a child's
// look a minute later).
func TestSchedulerWakesWhatNoNoteAnnounced(t *testing.T) {
	var now atomic.Pointer[time.Time]
	start := time.Date(2030, 1, 7, 9, 0, 0, 0, time.UTC)
	now.Store(&start)
	clock := func() time.Time { return *now.Load() }
	st := memory.New(&store.Options{Now: clock})
	r, err := NewRouter(st, &Options{Now: clock, SweepInterval: 5 * time.Millisecond})
	require.NoError(t, err)
	k := &clearKind{r: r, woken: make(chan string, 4)}
	r.HandleKind("nap", k)
	ctx := t.Context()
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { _ = r.Close() })
	// Not noted: written to the store directly, as another writer would.
	soon, err := st.Create(ctx, &store.Task{ID: NewTaskID(), Owner: LocalOwner, Status: mcptask.StatusWorking, CreatedAt: start,
		TTL: time.Hour, Labels: map[string]string{LabelKind: "nap"}, WakeAt: start.Add(10 * time.Second)})
	require.NoError(t, err)
	// Noted: a later wake-up written through the router.
	_, err = r.CreateTask(ctx, nil, store.Request{Method: "tools/call", Name: "nap"}, &CreateOptions{Kind: "nap", WakeAt: start.Add(time.Minute)})
	require.NoError(t, err)
	at := start.Add(10 * time.Second)
	now.Store(&at)
	select {
	case id := <-k.woken:
		require.Equal(t, soon.ID, id)
	case <-time.After(5 * time.Second):
		t.Fatal("the wake-up no note announced did not run at its time")
	}
}
