package memory_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memory.New(nil) })
}

func TestClock(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 6, time.FixedZone("Y", -3600))
	s := memory.New(&store.Options{Now: func() time.Time { return now }})
	defer s.Close()
	ctx := t.Context()
	created, err := s.Create(ctx, &store.Task{ID: "a", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: now.Add(-time.Hour)})
	require.NoError(t, err)
	require.True(t, created.UpdatedAt.Equal(now.Add(-time.Hour)))
	got, err := s.Update(ctx, "a", store.Update{StatusMessage: new(string)})
	require.NoError(t, err)
	require.True(t, got.UpdatedAt.Equal(now))
	require.Equal(t, time.UTC, got.UpdatedAt.Location())
}

func TestLimits(t *testing.T) {
	s := memory.New(&store.Options{Limits: store.Limits{MaxVariableBytes: 10, MaxVariablesBytes: 20, MaxResultBytes: 5, MaxArgumentsBytes: 8}})
	defer s.Close()
	ctx := t.Context()
	task := &store.Task{ID: "a", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Now(), Request: store.Request{Arguments: json.RawMessage(`"123456789"`)}}
	_, err := s.Create(ctx, task)
	require.ErrorIs(t, err, store.ErrTooLarge)
	require.Contains(t, err.Error(), "limit 8")
	task.Request.Arguments = json.RawMessage(`[1]`)
	_, err = s.Create(ctx, task)
	require.NoError(t, err)

	_, err = s.Update(ctx, "a", store.Update{Variables: map[string]json.RawMessage{"v": json.RawMessage(`"` + strings.Repeat("x", 9) + `"`)}})
	require.ErrorIs(t, err, store.ErrTooLarge)
	_, err = s.Update(ctx, "a", store.Update{Variables: map[string]json.RawMessage{"v1": json.RawMessage(`12345678`), "v2": json.RawMessage(`123456789`)}})
	require.ErrorIs(t, err, store.ErrTooLarge, "2+8+2+9 = 21 > 20")
	_, err = s.Update(ctx, "a", store.Update{Variables: map[string]json.RawMessage{"v1": json.RawMessage(`12345678`), "v2": json.RawMessage(`12345678`)}})
	require.NoError(t, err, "2+8+2+8 = 20 fits")
	_, err = s.Update(ctx, "a", store.Update{Variables: map[string]json.RawMessage{"v3": json.RawMessage(`1`)}})
	require.ErrorIs(t, err, store.ErrTooLarge)
	_, err = s.Update(ctx, "a", store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`123456`)})
	require.ErrorIs(t, err, store.ErrTooLarge)
	got, err := s.Update(ctx, "a", store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`12345`)})
	require.NoError(t, err)
	require.Equal(t, uint64(3), got.Version)
}

func openBench(b *testing.B) *memory.Store { return benchStore(b) }

func benchStore(b *testing.B) *memory.Store {
	s := memory.New(nil)
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func BenchmarkCreateComplete(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		b.Run("writers="+strconv.Itoa(writers), func(b *testing.B) {
			storetest.BenchCreateComplete(b, benchStore(b), writers)
		})
	}
}

func BenchmarkGet(b *testing.B) { storetest.BenchGet(b, benchStore(b)) }

func BenchmarkListPage(b *testing.B) { storetest.BenchListPage(b, benchStore(b)) }

// BenchmarkUpdates measures a state write, the same with one event, and
// a pure append (storetest.BenchUpdates).
func BenchmarkUpdates(b *testing.B) { storetest.BenchUpdates(b, openBench(b)) }

// BenchmarkQueryPage measures operator queries over 100,000 tasks (10,000
// with -short).
func BenchmarkQueryPage(b *testing.B) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	s := openBench(b)
	storetest.PreloadQuery(b, s, n)
	for _, c := range storetest.QueryBenchCases() {
		b.Run(c.Name, func(b *testing.B) { storetest.BenchQueryPage(b, s, c.Query) })
	}
}
