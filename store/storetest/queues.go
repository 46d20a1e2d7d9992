package storetest

// Queues: grants within the limits, in order, the per-key, global and
// rate limits, priorities, debounce, entries of ended tasks, and exact
// limits under concurrent callers.

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// queueTasks creates a working task per id.
func queueTasks(t *testing.T, s store.Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := s.Create(context.Background(), newTask(id, "o", t0))
		require.NoError(t, err)
	}
}

// enqueue enqueues entry id (of task id) with key and priority.
func enqueue(t *testing.T, s store.Store, queue, id, key string, prio int, lim store.QueueLimits, now time.Time) store.QueueResult {
	t.Helper()
	res, err := s.Enqueue(context.Background(), store.QueueEntry{Queue: queue, ID: id, TaskID: id, Key: key, Priority: prio}, lim, now)
	require.NoError(t, err)
	return res
}

func grantedIDs(es []store.QueueEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func testQueueBasics(t *testing.T, o opener) {
	s, ctx := o.open(t), context.Background()
	queueTasks(t, s, "a", "b")
	lim := store.QueueLimits{}
	res := enqueue(t, s, "q", "a", "", 0, lim, t0)
	require.True(t, res.Entry.Granted(), "no limits: granted at once")
	require.Equal(t, []string{"a"}, grantedIDs(res.Granted))
	require.Equal(t, "", res.Reason)
	require.Equal(t, t0.UTC(), res.Entry.GrantedAt)
	require.Equal(t, t0.UTC(), res.Entry.EnqueuedAt)
	require.Equal(t, "a", res.Entry.TaskID)
	seq := res.Entry.Seq
	require.NotZero(t, seq)

	again := enqueue(t, s, "q", "a", "other key", 9, lim, t0.Add(time.Second))
	require.Equal(t, res.Entry, again.Entry, "an entry of the same id only looks again")
	require.Empty(t, again.Granted)

	b := enqueue(t, s, "q", "b", "", 0, lim, t0)
	require.Greater(t, b.Entry.Seq, seq)

	es, err := s.QueueEntries(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, grantedIDs(es))
	none, err := s.QueueEntries(ctx, "nothing")
	require.NoError(t, err)
	require.Empty(t, none)

	_, err = s.Dequeue(ctx, "q", "a", lim, t0)
	require.NoError(t, err)
	_, err = s.Dequeue(ctx, "q", "a", lim, t0)
	require.NoError(t, err, "dequeuing a missing entry is no error")
	es, err = s.QueueEntries(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, grantedIDs(es))
}

func testQueuePerKey(t *testing.T, o opener) {
	s, ctx := o.open(t), context.Background()
	queueTasks(t, s, "a1", "a2", "a3", "b1")
	lim := store.QueueLimits{PerKey: 1}
	require.True(t, enqueue(t, s, "deploys", "a1", "repo-a", 0, lim, t0).Entry.Granted())
	a2 := enqueue(t, s, "deploys", "a2", "repo-a", 0, lim, t0)
	require.False(t, a2.Entry.Granted())
	require.Equal(t, store.QueueWaitKey, a2.Reason)
	require.Equal(t, 0, a2.Ahead)
	require.Equal(t, []string{"a1"}, grantedIDs(a2.Holders))
	a3 := enqueue(t, s, "deploys", "a3", "repo-a", 0, lim, t0)
	require.Equal(t, store.QueueWaitKey, a3.Reason)
	require.Equal(t, 1, a3.Ahead, "a2 goes first")
	b1 := enqueue(t, s, "deploys", "b1", "repo-b", 0, lim, t0)
	require.True(t, b1.Entry.Granted(), "another key runs at once")

	counts, err := s.QueueCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.QueueCount{{Queue: "deploys", Waiting: 2, Holding: 2}}, counts)

	res, err := s.Dequeue(ctx, "deploys", "a1", lim, t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, []string{"a2"}, grantedIDs(res.Granted), "the same key in order")
	require.Equal(t, t0.Add(time.Second).UTC(), res.Granted[0].GrantedAt)
	res, err = s.Dequeue(ctx, "deploys", "b1", lim, t0.Add(time.Second))
	require.NoError(t, err)
	require.Empty(t, res.Granted, "repo-b's place is not repo-a's")
	res, err = s.Dequeue(ctx, "deploys", "a2", lim, t0.Add(2*time.Second))
	require.NoError(t, err)
	require.Equal(t, []string{"a3"}, grantedIDs(res.Granted))
	look := enqueue(t, s, "deploys", "a3", "repo-a", 0, lim, t0.Add(3*time.Second))
	require.True(t, look.Entry.Granted())
	require.Equal(t, t0.Add(2*time.Second).UTC(), look.Entry.GrantedAt)
}

func testQueueConcurrencyAndPriority(t *testing.T, o opener) {
	s, ctx := o.open(t), context.Background()
	queueTasks(t, s, "h1", "h2", "low", "high", "mid")
	lim := store.QueueLimits{Concurrency: 2}
	enqueue(t, s, "q", "h1", "k1", 0, lim, t0)
	enqueue(t, s, "q", "h2", "k2", 0, lim, t0)
	low := enqueue(t, s, "q", "low", "k3", 0, lim, t0)
	require.Equal(t, store.QueueWaitConcurrency, low.Reason)
	require.Len(t, low.Holders, 2)
	high := enqueue(t, s, "q", "high", "k4", 5, lim, t0)
	require.Equal(t, 0, high.Ahead, "a higher priority goes before an earlier arrival")
	mid := enqueue(t, s, "q", "mid", "k5", 1, lim, t0)
	require.Equal(t, 1, mid.Ahead)

	es, err := s.QueueEntries(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, []string{"h1", "h2", "high", "mid", "low"}, grantedIDs(es))

	var order []string
	for _, h := range []string{"h1", "h2", "high", "mid"} {
		res, err := s.Dequeue(ctx, "q", h, lim, t0)
		require.NoError(t, err)
		order = append(order, grantedIDs(res.Granted)...)
	}
	require.Equal(t, []string{"high", "mid", "low"}, order)
}

func testQueueRate(t *testing.T, o opener) {
	s := o.open(t)
	queueTasks(t, s, "r1", "r2", "r3", "r4")
	lim := store.QueueLimits{Rate: 2, Period: time.Minute}
	require.True(t, enqueue(t, s, "api", "r1", "", 0, lim, t0).Entry.Granted())
	require.True(t, enqueue(t, s, "api", "r2", "", 0, lim, t0.Add(10*time.Second)).Entry.Granted())
	r3 := enqueue(t, s, "api", "r3", "", 0, lim, t0.Add(20*time.Second))
	require.False(t, r3.Entry.Granted())
	require.Equal(t, store.QueueWaitRate, r3.Reason)
	require.Equal(t, t0.Add(time.Minute).UTC(), r3.Next.UTC(), "the window frees when the first grant is a period old")
	r4 := enqueue(t, s, "api", "r4", "", 0, lim, t0.Add(30*time.Second))
	require.Equal(t, 1, r4.Ahead)

	before := enqueue(t, s, "api", "r3", "", 0, lim, t0.Add(time.Minute-time.Nanosecond))
	require.False(t, before.Entry.Granted())
	at := enqueue(t, s, "api", "r3", "", 0, lim, t0.Add(time.Minute))
	require.True(t, at.Entry.Granted(), "a period after the first grant")
	require.Equal(t, []string{"r3"}, grantedIDs(at.Granted), "one place opened, not two")
	r4 = enqueue(t, s, "api", "r4", "", 0, lim, t0.Add(time.Minute))
	require.False(t, r4.Entry.Granted())
	require.Equal(t, t0.Add(70*time.Second).UTC(), r4.Next.UTC())
}

func testQueueDebounce(t *testing.T, o opener) {
	s, ctx := o.open(t), context.Background()
	queueTasks(t, s, "d1", "d2", "other")
	lim := store.QueueLimits{Debounce: 10 * time.Second}
	d1 := enqueue(t, s, "notify", "d1", "user-1", 0, lim, t0)
	require.False(t, d1.Entry.Granted())
	require.Equal(t, store.QueueWaitDebounce, d1.Reason)
	require.Equal(t, t0.Add(10*time.Second).UTC(), d1.Next.UTC())
	other := enqueue(t, s, "notify", "other", "user-2", 0, lim, t0.Add(time.Second))
	require.Empty(t, other.Replaced, "another key replaces nothing")

	d2 := enqueue(t, s, "notify", "d2", "user-1", 0, lim, t0.Add(5*time.Second))
	require.Equal(t, []string{"d1"}, grantedIDs(d2.Replaced), "a start within the window replaces the pending one")
	require.Equal(t, t0.Add(15*time.Second).UTC(), d2.Entry.NotBefore)
	es, err := s.QueueEntries(ctx, "notify")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"d2", "other"}, grantedIDs(es))

	early := enqueue(t, s, "notify", "d2", "user-1", 0, lim, t0.Add(12*time.Second))
	require.False(t, early.Entry.Granted(), "its own window counts from its start")
	require.Equal(t, []string{"other"}, grantedIDs(early.Granted))
	late := enqueue(t, s, "notify", "d2", "user-1", 0, lim, t0.Add(15*time.Second))
	require.True(t, late.Entry.Granted())
}

func testQueueEndedTasks(t *testing.T, o opener) {
	s, ctx := o.open(t), context.Background()
	queueTasks(t, s, "t1", "t2", "t3")
	lim := store.QueueLimits{PerKey: 1}
	enqueue(t, s, "q", "t1", "k", 0, lim, t0)
	require.False(t, enqueue(t, s, "q", "t2", "k", 0, lim, t0).Entry.Granted())
	_, err := s.Update(ctx, "t1", store.Update{Status: mcptask.StatusCancelled})
	require.NoError(t, err)
	res := enqueue(t, s, "q", "t2", "k", 0, lim, t0.Add(time.Second))
	require.True(t, res.Entry.Granted(), "an ended task holds no place")
	es, err := s.QueueEntries(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, []string{"t2"}, grantedIDs(es))

	require.NoError(t, s.Delete(ctx, "t2"))
	res = enqueue(t, s, "q", "t3", "k", 0, lim, t0.Add(2*time.Second))
	require.True(t, res.Entry.Granted(), "a deleted task holds no place")

	_, err = s.Enqueue(ctx, store.QueueEntry{Queue: "q", ID: "x", TaskID: "missing"}, lim, t0)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.Enqueue(ctx, store.QueueEntry{Queue: "q", ID: "x", TaskID: "t1"}, lim, t0)
	require.ErrorIs(t, err, store.ErrTerminal)
	counts, err := s.QueueCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.QueueCount{{Queue: "q", Holding: 1}}, counts)
}

func testQueueInvalid(t *testing.T, o opener) {
	s, ctx := o.open(t), context.Background()
	queueTasks(t, s, "t")
	ok := store.QueueEntry{Queue: "q", ID: "t", TaskID: "t"}
	for name, c := range map[string]struct {
		e   store.QueueEntry
		lim store.QueueLimits
		now time.Time
	}{
		"no queue":        {store.QueueEntry{ID: "t", TaskID: "t"}, store.QueueLimits{}, t0},
		"no id":           {store.QueueEntry{Queue: "q", TaskID: "t"}, store.QueueLimits{}, t0},
		"no task":         {store.QueueEntry{Queue: "q", ID: "t"}, store.QueueLimits{}, t0},
		"negative":        {ok, store.QueueLimits{PerKey: -1}, t0},
		"rate, no period": {ok, store.QueueLimits{Rate: 3}, t0},
		"no time":         {ok, store.QueueLimits{}, time.Time{}},
	} {
		_, err := s.Enqueue(ctx, c.e, c.lim, c.now)
		require.ErrorIs(t, err, store.ErrInvalid, name)
	}
	_, err := s.Enqueue(ctx, store.QueueEntry{Queue: string(make([]byte, store.MaxNameBytes+1)), ID: "t", TaskID: "t"}, store.QueueLimits{}, t0)
	require.ErrorIs(t, err, store.ErrTooLarge)
	_, err = s.Dequeue(ctx, "q", "", store.QueueLimits{}, t0)
	require.ErrorIs(t, err, store.ErrInvalid)
	es, err := s.QueueEntries(ctx, "q")
	require.NoError(t, err)
	require.Empty(t, es, "refused calls write nothing")
}

// testQueueConcurrent races callers that take a place (polling until they
// get one), hold it, and give it back (QueueRace on one store).
func testQueueConcurrent(t *testing.T, o opener) {
	QueueRace(t, o.open(t))
}

// QueueRace races callers, each enqueuing an entry (of a task it creates)
// on one of replicas (stores sharing one database, or one store), polling
// until it holds a place, holding it a moment, and dequeuing it on
// another replica: never more holders than the limits allow (3 in all,
// 2 per key), every caller runs once, and the queue ends empty. A backend
// whose stores share state across processes calls it with two of them.
func QueueRace(t *testing.T, replicas ...store.Store) {
	ctx := context.Background()
	n := 24
	if testing.Short() {
		n = 12
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("race%02d", i)
	}
	queueTasks(t, replicas[0], ids...)
	lim := store.QueueLimits{Concurrency: 3, PerKey: 2}
	var mu sync.Mutex
	holding, perKey, ran := 0, map[string]int{}, 0
	var overflow atomic.Bool
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, other := replicas[i%len(replicas)], replicas[(i+1)%len(replicas)]
			key := fmt.Sprintf("k%d", i%3)
			for attempt := 0; attempt < 20000; attempt++ {
				res, err := s.Enqueue(ctx, store.QueueEntry{Queue: "race", ID: id, TaskID: id, Key: key}, lim, time.Now())
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Entry.Granted() {
					time.Sleep(time.Millisecond)
					continue
				}
				mu.Lock()
				holding++
				perKey[key]++
				if holding > lim.Concurrency || perKey[key] > lim.PerKey {
					overflow.Store(true)
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				holding--
				perKey[key]--
				ran++
				mu.Unlock()
				if _, err := other.Dequeue(ctx, "race", id, lim, time.Now()); err != nil {
					t.Error(err)
				}
				return
			}
			t.Errorf("%s never got a place", id)
		}()
	}
	wg.Wait()
	require.False(t, overflow.Load(), "more holders than the limits allow")
	require.Equal(t, n, ran)
	es, err := replicas[0].QueueEntries(ctx, "race")
	require.NoError(t, err)
	require.Empty(t, es)
}

// testReopenQueues checks that entries, grants and the rate window survive
// a close and reopen.
func testReopenQueues(t *testing.T, open func(t *testing.T, path string) store.Store) {
	path := filepath.Join(t.TempDir(), "tasks.db")
	s := openAt(t, open, path)
	queueTasks(t, s, "a", "b")
	lim := store.QueueLimits{PerKey: 1, Rate: 5, Period: time.Hour}
	enqueue(t, s, "q", "a", "k", 0, lim, t0)
	enqueue(t, s, "q", "b", "k", 3, lim, t0)
	require.NoError(t, s.Close())

	s = openAt(t, open, path)
	ctx := context.Background()
	es, err := s.QueueEntries(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, grantedIDs(es))
	require.True(t, es[0].Granted())
	require.Equal(t, 3, es[1].Priority)
	res, err := s.Dequeue(ctx, "q", "a", lim, t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, grantedIDs(res.Granted))
	require.Greater(t, res.Granted[0].Seq, es[0].Seq)
	queueTasks(t, s, "c")
	c := enqueue(t, s, "q", "c", "other", 0, lim, t0.Add(2*time.Second))
	require.Greater(t, c.Entry.Seq, res.Granted[0].Seq, "the arrival counter survives")
}
