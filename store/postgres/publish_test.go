package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

func TestPack(t *testing.T) {
	require.Empty(t, pack(nil))
	require.Equal(t, []string{"a"}, pack([]string{"a"}))
	require.Equal(t, []string{"a\nb\nc"}, pack([]string{"a", "b", "c"}))

	// Records of the longest id: every payload within the limit, the
	// records in order, none split.
	long := func(i int) string {
		return record(&store.Task{ID: fmt.Sprintf("%0*d", store.MaxIDBytes, i), Status: mcptask.StatusInputRequired, Version: 1<<63 + uint64(i)})
	}
	var records []string
	for i := range 100 {
		records = append(records, long(i))
	}
	payloads := pack(records)
	require.Greater(t, len(payloads), 1)
	var back []string
	for _, p := range payloads {
		require.LessOrEqual(t, len(p), maxPayload)
		back = append(back, strings.Split(p, "\n")...)
	}
	require.Equal(t, records, back)
	for i, r := range back {
		c, err := parseRecord(r)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%0*d", store.MaxIDBytes, i), c.ID)
	}
	// Exactly full payloads stay whole.
	rec := strings.Repeat("r", (maxPayload-1)/2)
	require.Equal(t, []string{rec + "\n" + rec}, pack([]string{rec, rec}))
	require.Len(t, pack([]string{rec, rec, "x"}), 2)
}

// TestSendable: a ready change waits only behind a pending change of its
// own task; cancelled ones go.
func TestSendable(t *testing.T) {
	sl := func(key string, st slotState) *slot { return &slot{key: key, record: key, state: st} }
	a1, b1, a2, c1, d1, b2 := sl("a", slotPending), sl("b", slotReady), sl("a", slotReady),
		sl("c", slotReady), sl("d", slotCancelled), sl("b", slotReady)
	ready, rest := sendable([]*slot{a1, b1, a2, c1, d1, b2})
	require.Equal(t, []*slot{b1, c1, b2}, ready)
	require.Equal(t, []*slot{a1, a2}, rest)

	a1.state = slotReady
	a3 := sl("a", slotPending)
	ready, rest = sendable(append(rest, a3))
	require.Equal(t, []*slot{a1, a2}, ready)
	require.Equal(t, []*slot{a3}, rest)
	a3.state = slotCancelled
	ready, rest = sendable(rest)
	require.Empty(t, ready)
	require.Empty(t, rest)
}

// TestPublisherOrderPerTask resolves reserved slots out of order: each
// task's changes are still sent in reservation order, and a task's change
// is not held up by another task's pending one.
func TestPublisherOrderPerTask(t *testing.T) {
	dsn := pgtest.DSN(t)
	s, err := Open(t.Context(), dsn, &Options{Schema: "order"})
	require.NoError(t, err)
	defer s.Close()
	var (
		mu  sync.Mutex
		got []store.Change
	)
	stop, err := s.Subscribe(t.Context(), func(c store.Change) {
		mu.Lock()
		got = append(got, c)
		mu.Unlock()
	})
	require.NoError(t, err)
	defer stop()
	seen := func(n int) []store.Change {
		t.Helper()
		var out []store.Change
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			out = append([]store.Change(nil), got...)
			return len(out) >= n
		}, 30*time.Second, 5*time.Millisecond)
		return out
	}
	rec := func(id string, v uint64) string {
		return record(&store.Task{ID: id, Status: mcptask.StatusWorking, Version: v})
	}
	x1 := s.pub.reserve("x", rec("x", 1), false)
	y1 := s.pub.reserve("y", rec("y", 1), false)
	x2 := s.pub.reserve("x", rec("x", 2), false)
	s.pub.commit(x2) // waits for x1
	s.pub.commit(y1) // does not
	require.Equal(t, []store.Change{{ID: "y", Status: mcptask.StatusWorking, Version: 1}}, seen(1))
	s.pub.commit(x1)
	got2 := seen(3)
	require.Equal(t, []store.Change{
		{ID: "y", Status: mcptask.StatusWorking, Version: 1},
		{ID: "x", Status: mcptask.StatusWorking, Version: 1},
		{ID: "x", Status: mcptask.StatusWorking, Version: 2},
	}, got2)
	// A cancelled change is never sent and holds nothing up.
	x3 := s.pub.reserve("x", rec("x", 3), false)
	x4 := s.pub.reserve("x", rec("x", 4), false)
	s.pub.commit(x4)
	s.pub.cancel(x3)
	require.Equal(t, store.Change{ID: "x", Status: mcptask.StatusWorking, Version: 4}, seen(4)[3])
}

// TestPublisherLargeBatch hands the notifier more records at once than one
// payload holds: they go in one round trip (one transaction, several
// NOTIFYs) and arrive in order.
func TestPublisherLargeBatch(t *testing.T) {
	dsn := pgtest.DSN(t)
	s, err := Open(t.Context(), dsn, &Options{Schema: "large"})
	require.NoError(t, err)
	defer s.Close()
	var (
		mu  sync.Mutex
		got []store.Change
	)
	stop, err := s.Subscribe(t.Context(), func(c store.Change) {
		mu.Lock()
		got = append(got, c)
		mu.Unlock()
	})
	require.NoError(t, err)
	defer stop()

	const n = 300
	var want []store.Change
	var records []string
	s.pub.mu.Lock()
	for i := range n {
		task := &store.Task{ID: fmt.Sprintf("%0200d", i), Status: mcptask.StatusWorking, Version: uint64(i + 1)}
		s.pub.queue = append(s.pub.queue, &slot{key: task.ID, record: record(task), state: slotReady})
		records = append(records, record(task))
		want = append(want, store.Change{ID: task.ID, Status: task.Status, Version: task.Version})
	}
	s.pub.mu.Unlock()
	require.Greater(t, len(pack(records)), 5)
	s.pub.signal()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		mu.Lock()
		done := len(got) >= n
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d changes arrived", len(got), n)
		case <-time.After(10 * time.Millisecond):
		}
	}
	mu.Lock()
	require.Equal(t, want, got)
	mu.Unlock()
	// Counted once PostgreSQL took the batch, maybe after delivery.
	require.Eventually(t, func() bool { return s.pub.records.Load() == n }, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(1), s.pub.roundTrips.Load(), "one round trip")
}
