package storetest

// The optional change feed (store.Notifier): its subtests run when the
// store under test implements it, and are skipped otherwise.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// feedWithin bounds how long the suite waits for a change to arrive: the
// contract says milliseconds, a loaded machine may take longer.
const feedWithin = 10 * time.Second

// notifierOf returns s as a store.Notifier, or skips the test.
func notifierOf(t *testing.T, s store.Store) store.Notifier {
	t.Helper()
	n, ok := s.(store.Notifier)
	if !ok {
		t.Skipf("%T does not implement store.Notifier", s)
	}
	return n
}

// feed records what a subscription delivers, and checks on delivery what
// the contract promises of every call: one at a time, and after the
// write committed (the task read in fn shows that write or a later one).
type feed struct {
	s       store.Store
	mu      sync.Mutex
	changes []store.Change
	errs    []string
	notify  chan struct{}
	inFn    atomic.Int32
	// hold, when set, is called first in fn (to block it).
	hold func(store.Change)
}

func newFeed(s store.Store) *feed { return &feed{s: s, notify: make(chan struct{}, 1)} }

func (f *feed) fn(c store.Change) {
	if f.inFn.Add(1) != 1 {
		f.fail("fn called while another call was running")
	}
	defer f.inFn.Add(-1)
	if f.hold != nil {
		f.hold(c)
	}
	if !c.Resync {
		f.checkCommitted(c)
	}
	f.mu.Lock()
	f.changes = append(f.changes, c)
	f.mu.Unlock()
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

// checkCommitted reads the task of c: it must show c's write or a later
// one (a deleted task is gone, or was created again).
func (f *feed) checkCommitted(c store.Change) {
	ctx, cancel := context.WithTimeout(context.Background(), feedWithin)
	defer cancel()
	if c.Events > 0 {
		page, err := f.s.Events(ctx, c.ID, c.Events-1, 1)
		switch {
		case errors.Is(err, store.ErrClosed), errors.Is(err, store.ErrNotFound): // deleted since
		case err != nil:
			f.fail(fmt.Sprintf("change %+v: reading the events: %v", c, err))
		case page.Last < c.Events:
			f.fail(fmt.Sprintf("change %+v delivered before its events were visible: the log ends at %d", c, page.Last))
		}
		return
	}
	t, err := f.s.Get(ctx, c.ID)
	switch {
	case errors.Is(err, store.ErrClosed):
	case c.Deleted && errors.Is(err, store.ErrNotFound):
	case err != nil:
		f.fail(fmt.Sprintf("change %+v: reading the task: %v", c, err))
	case !c.Deleted && t.Version < c.Version:
		f.fail(fmt.Sprintf("change %+v delivered before its write was visible: the task is at version %d", c, t.Version))
	}
}

func (f *feed) fail(msg string) {
	f.mu.Lock()
	f.errs = append(f.errs, msg)
	f.mu.Unlock()
}

// got returns the changes delivered so far, without Resyncs when
// noResync (a Resync is allowed at any time: a connection may be lost).
func (f *feed) got(noResync bool) []store.Change {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]store.Change, 0, len(f.changes))
	for _, c := range f.changes {
		if !noResync || !c.Resync {
			out = append(out, c)
		}
	}
	return out
}

// waitFor waits until pred holds for the changes delivered (Resyncs left
// out), and returns them.
func (f *feed) waitFor(t *testing.T, what string, pred func([]store.Change) bool) []store.Change {
	t.Helper()
	deadline := time.After(feedWithin)
	for {
		got := f.got(true)
		if pred(got) {
			return got
		}
		select {
		case <-f.notify:
		case <-deadline:
			t.Fatalf("%s: not delivered within %v; delivered: %+v", what, feedWithin, got)
		}
	}
}

// requireSound fails t with what fn found wrong.
func (f *feed) requireSound(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Empty(t, f.errs)
}

func atLeast(n int) func([]store.Change) bool {
	return func(cs []store.Change) bool { return len(cs) >= n }
}

// testNotifierChanges checks what a subscriber hears of one task's life:
// every write that bumps the version (create, update, claim) and the
// delete, each after it committed, in commit order, and no renewal. The
// subscription outlives the context given to Subscribe.
func testNotifierChanges(t *testing.T, o opener) {
	s := o.open(t)
	n := notifierOf(t, s)
	f := newFeed(s)
	ctx, cancel := context.WithCancel(t.Context())
	stop, err := n.Subscribe(ctx, f.fn)
	require.NoError(t, err)
	defer stop()
	cancel() // bounds only the setup

	id := "feed\x00\xff/é" // any bytes survive the feed
	mustCreate(t, s, newTask(id, "alice", t0))
	f.waitFor(t, "the create", atLeast(1))
	mustUpdate(t, s, id, store.Update{Status: mcptask.StatusInputRequired})
	claimed, err := s.Claim(t.Context(), id, "h", t0, t0.Add(time.Minute))
	require.NoError(t, err)
	_, err = s.Renew(t.Context(), "h", t0.Add(time.Hour), []string{id})
	require.NoError(t, err)
	fence := claimed.Fence()
	mustUpdate(t, s, id, store.Update{Fence: &fence, Status: mcptask.StatusCompleted, Result: []byte(`1`)})
	f.waitFor(t, "the completion", atLeast(4))
	require.NoError(t, s.Delete(t.Context(), id))
	want := []store.Change{
		{ID: id, Status: mcptask.StatusWorking, Version: 1},
		{ID: id, Status: mcptask.StatusInputRequired, Version: 2},
		{ID: id, Status: mcptask.StatusInputRequired, Version: 3},
		{ID: id, Status: mcptask.StatusCompleted, Version: 4},
		{ID: id, Status: mcptask.StatusCompleted, Deleted: true},
	}
	got := f.waitFor(t, "every change", atLeast(len(want)))
	require.Equal(t, want, got, "in commit order, no renewal; a delete has version 0 and the status before it")

	// Refused writes are not changes.
	_, err = s.Update(t.Context(), "missing", store.Update{Status: mcptask.StatusCompleted})
	require.ErrorIs(t, err, store.ErrNotFound)
	mustCreate(t, s, newTask("after", "alice", t0))
	got = f.waitFor(t, "a later write", atLeast(len(want)+1))
	require.Equal(t, store.Change{ID: "after", Status: mcptask.StatusWorking, Version: 1}, got[len(want)])
	f.requireSound(t)
}

// testNotifierOrder has writers work on tasks of their own and on one
// they share: each task's changes arrive in commit order (versions 1, 2,
// 3, ... as written), every one after its commit, and fn is never called
// concurrently.
func testNotifierOrder(t *testing.T, o opener) {
	s := o.open(t)
	n := notifierOf(t, s)
	f := newFeed(s)
	stop, err := n.Subscribe(t.Context(), f.fn)
	require.NoError(t, err)
	defer stop()
	ctx := t.Context()
	writers, perWriter := 8, 6
	if testing.Short() {
		writers, perWriter = 4, 3
	}
	mustCreate(t, s, newTask("shared", "alice", t0))
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- func() error {
				own := fmt.Sprintf("own-%d", w)
				if _, err := s.Create(ctx, newTask(own, "alice", t0)); err != nil {
					return err
				}
				for i := range perWriter {
					st := mcptask.StatusWorking
					if i%2 == 0 {
						st = mcptask.StatusInputRequired
					}
					if _, err := s.Update(ctx, own, store.Update{Status: st}); err != nil {
						return err
					}
					if _, err := s.Update(ctx, "shared", store.Update{StatusMessage: strPtr(own)}); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	shared := 1 + writers*perWriter
	total := shared + writers*(1+perWriter)
	got := f.waitFor(t, "every change", atLeast(total))
	versions := map[string][]uint64{}
	for _, c := range got {
		versions[c.ID] = append(versions[c.ID], c.Version)
	}
	require.Len(t, versions, writers+1)
	for id, vs := range versions {
		last := 1 + perWriter
		if id == "shared" {
			last = shared
		}
		// Delivery is best effort and may repeat a change; it may not
		// reorder one task's changes or lose one here.
		seen := map[uint64]bool{}
		for i, v := range vs {
			require.True(t, i == 0 || v >= vs[i-1], "task %s: versions %v out of commit order", id, vs)
			seen[v] = true
		}
		require.Len(t, seen, last, "task %s: versions %v", id, vs)
		require.Equal(t, uint64(1), vs[0])
		require.Equal(t, uint64(last), vs[len(vs)-1])
	}
	f.requireSound(t)
}

// testNotifierStop checks that stop waits for a running fn and ends the
// deliveries, and that Close ends a subscription too.
func testNotifierStop(t *testing.T, o opener) {
	s := o.open(t)
	n := notifierOf(t, s)
	f := newFeed(s)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.hold = func(c store.Change) {
		if c.Resync {
			return
		}
		once.Do(func() {
			close(entered)
			<-release
		})
	}
	stop, err := n.Subscribe(t.Context(), f.fn)
	require.NoError(t, err)
	mustCreate(t, s, newTask("a", "alice", t0))
	select {
	case <-entered:
	case <-time.After(feedWithin):
		t.Fatal("the change was not delivered")
	}
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("stop returned while fn was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-stopped:
	case <-time.After(feedWithin):
		t.Fatal("stop did not return after fn did")
	}
	delivered := len(f.got(false))
	mustCreate(t, s, newTask("b", "alice", t0))
	mustUpdate(t, s, "a", store.Update{Status: mcptask.StatusCompleted})
	time.Sleep(100 * time.Millisecond)
	require.Len(t, f.got(false), delivered, "nothing is delivered after stop")
	require.Zero(t, f.inFn.Load())

	// Close ends the subscriptions still running; afterwards Subscribe
	// fails with ErrClosed.
	g := newFeed(s)
	stop2, err := n.Subscribe(t.Context(), g.fn)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	done := make(chan struct{})
	go func() {
		stop2() // returns at once: Close ended it
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(feedWithin):
		t.Fatal("stop hangs after Close")
	}
	_, err = n.Subscribe(t.Context(), func(store.Change) {})
	require.ErrorIs(t, err, store.ErrClosed)
	f.requireSound(t)
}

// RunNotifierResync checks what a subscriber hears after the store loses
// its feed's connection: store.Change{Resync: true} once the subscription
// works again, then the changes written after it, as before. open returns
// a new, empty store that implements store.Notifier; disconnect breaks
// the connection of the subscription on s (a backend-specific fault,
// such as terminating a database session). The suite's Run cannot
// provoke a lost connection on its own, so a backend with a change feed
// calls this beside Run.
func RunNotifierResync(t *testing.T, open func(t *testing.T) store.Store, disconnect func(t *testing.T, s store.Store)) {
	s := opener(open).open(t)
	n := notifierOf(t, s)
	f := newFeed(s)
	stop, err := n.Subscribe(t.Context(), f.fn)
	require.NoError(t, err)
	defer stop()
	mustCreate(t, s, newTask("before", "alice", t0))
	f.waitFor(t, "the write before", atLeast(1))

	disconnect(t, s)
	deadline := time.After(feedWithin)
	for !hasResync(f.got(false)) {
		select {
		case <-f.notify:
		case <-deadline:
			t.Fatalf("no Resync within %v after the connection was lost; delivered: %+v", feedWithin, f.got(false))
		}
	}
	mustCreate(t, s, newTask("after", "alice", t0))
	f.waitFor(t, "the write after the resync", func(cs []store.Change) bool {
		return len(cs) >= 2 && cs[len(cs)-1].ID == "after"
	})
	all := f.got(false)
	for _, c := range all {
		if c.Resync {
			require.Equal(t, store.Change{Resync: true}, c, "a Resync carries nothing else")
		}
	}
	require.Equal(t, store.Change{ID: "after", Status: mcptask.StatusWorking, Version: 1}, all[len(all)-1])
	f.requireSound(t)
}

func hasResync(cs []store.Change) bool {
	for _, c := range cs {
		if c.Resync {
			return true
		}
	}
	return false
}

// testNotifierEvents: a store that carries event appends
// (store.EventNotifier) reports each write that appended events to
// SubscribeEvents, after it committed, in order per task, beside the
// version changes; Subscribe never hears of them.
func testNotifierEvents(t *testing.T, o opener) {
	s := o.open(t)
	en, ok := s.(store.EventNotifier)
	if !ok {
		t.Skipf("%T does not implement store.EventNotifier", s)
	}
	ctx := t.Context()
	all, plain := newFeed(s), newFeed(s)
	stopAll, err := en.SubscribeEvents(ctx, all.fn)
	require.NoError(t, err)
	defer stopAll()
	stopPlain, err := en.Subscribe(ctx, plain.fn)
	require.NoError(t, err)
	defer stopPlain()

	task := newTask("ev", "alice", t0)
	task.Events = []store.Event{logLine("created")}
	mustCreate(t, s, task)                                                                                 // events 1, 2
	mustUpdate(t, s, "ev", store.Update{Events: logLines("x", 2)})                                         // 3, 4: a pure append
	mustUpdate(t, s, "ev", store.Update{Variables: map[string]json.RawMessage{"v": json.RawMessage("1")}}) // no events
	mustUpdate(t, s, "ev", store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage("1")})    // 5

	got := all.waitFor(t, "the appends and changes", func(cs []store.Change) bool {
		var last, version uint64
		for _, c := range cs {
			last, version = max(last, c.Events), max(version, c.Version)
		}
		return last == 5 && version == 3
	})
	var appends []uint64
	for _, c := range got {
		require.Equal(t, "ev", c.ID)
		if c.Events > 0 {
			require.Zero(t, c.Version, "an append carries no version")
			require.Empty(t, c.Status)
			appends = append(appends, c.Events)
		}
	}
	require.Equal(t, []uint64{2, 4, 5}, appends, "one per write that appended, in commit order")
	plain.waitFor(t, "the changes", func(cs []store.Change) bool { return len(cs) > 0 && cs[len(cs)-1].Version == 3 })
	for _, c := range plain.got(true) {
		require.Zero(t, c.Events, "Subscribe never hears of appends: %+v", c)
	}
	all.requireSound(t)
	plain.requireSound(t)
}
