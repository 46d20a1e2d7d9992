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
	"github.com/taskbridge/taskbridge/store"
)

func TestPack(t *testing.T) {
	require.Empty(t, pack(nil))
	require.Equal(t, []string{"a"}, pack([]string{"a"}))
	require.Equal(t, []string{"a\nb\nc"}, pack([]string{"a", "b", "c"}))

	// Records of the longest id: every payload within the limit, the
	// records in order, none split.
	long := func(i int) string {
		return record(&store.Task{ID: fmt.Sprintf("%0*d", store.MaxIDBytes, i), Status: store.StatusInputRequired, Version: 1<<63 + uint64(i)})
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

func TestKeyLocks(t *testing.T) {
	var k keyLocks
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		inside  = map[string]int{}
		overlap bool
	)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				id := fmt.Sprint((g + i) % 3)
				unlock := k.lock(id)
				mu.Lock()
				inside[id]++
				overlap = overlap || inside[id] > 1
				mu.Unlock()
				mu.Lock()
				inside[id]--
				mu.Unlock()
				unlock()
			}
		}()
	}
	wg.Wait()
	require.False(t, overlap, "one holder per key at a time")
	require.Empty(t, k.m, "unused keys are forgotten")
}

// TestPublisherLargeBatch hands the notifier more records at once than one
// payload holds: they go in one round trip (one transaction, several
// NOTIFYs) and arrive in order.
func TestPublisherLargeBatch(t *testing.T) {
	dsn := pgtest.DSN(t)
	s, err := Open(t.Context(), dsn, WithSchema("large"))
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
	s.pub.mu.Lock()
	for i := range n {
		task := &store.Task{ID: fmt.Sprintf("%0200d", i), Status: store.StatusWorking, Version: uint64(i + 1)}
		s.pub.queue = append(s.pub.queue, record(task))
		want = append(want, store.Change{ID: task.ID, Status: task.Status, Version: task.Version})
	}
	require.Greater(t, len(pack(s.pub.queue)), 5)
	s.pub.mu.Unlock()
	s.pub.signal()

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
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
	require.Eventually(t, func() bool { return s.pub.records.Load() == n }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(1), s.pub.roundTrips.Load(), "one round trip")
}
