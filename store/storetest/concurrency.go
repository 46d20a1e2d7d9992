package storetest

// Contexts, concurrent writers and Close.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

func testContext(t *testing.T, o opener) {
	s := o.open(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Create(ctx, newTask("ctx", "alice", t0))
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Get(t.Context(), "ctx")
	require.ErrorIs(t, err, store.ErrNotFound, "a cancelled create writes nothing")
	mustCreate(t, s, newTask("ctx", "alice", t0))
	_, err = s.Update(ctx, "ctx", store.Update{Status: mcptask.StatusCompleted})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, mcptask.StatusWorking, mustGet(t, s, "ctx").Status)
	require.ErrorIs(t, s.Delete(ctx, "ctx"), context.Canceled)
	mustGet(t, s, "ctx")
}

func testConcurrent(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	writers, ops := 32, 50
	if testing.Short() {
		writers, ops = 8, 20
	}
	mustCreate(t, s, newTask("shared", "alice", t0))

	var wg sync.WaitGroup
	errc := make(chan error, writers)
	var incs, merges [64]int // per writer, written only by that writer
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- func() error {
				own := fmt.Sprintf("own-%02d", w)
				if _, err := s.Create(ctx, newTask(own, fmt.Sprintf("w%d", w%4), t0.Add(time.Duration(w)))); err != nil {
					return err
				}
				for i := 1; i < ops; i++ {
					if i%2 == 0 {
						// Compare-and-swap increment of a shared counter.
						for {
							cur, err := s.Get(ctx, "shared")
							if err != nil {
								return err
							}
							n := 0
							if v, ok := cur.Variables["n"]; ok {
								if err := json.Unmarshal(v, &n); err != nil {
									return err
								}
							}
							_, err = s.Update(ctx, "shared", store.Update{
								IfVersion: cur.Version,
								Variables: map[string]json.RawMessage{"n": json.RawMessage(strconv.Itoa(n + 1))},
							})
							if errors.Is(err, store.ErrConflict) {
								continue
							}
							if err != nil {
								return err
							}
							incs[w]++
							break
						}
						continue
					}
					// Unconditional merges into the shared task and into
					// the writer's own task.
					v := json.RawMessage(strconv.Itoa(i))
					if _, err := s.Update(ctx, "shared", store.Update{Variables: map[string]json.RawMessage{fmt.Sprintf("w%02d", w): v}}); err != nil {
						return err
					}
					merges[w]++
					status := mcptask.StatusWorking
					if i%3 == 0 {
						status = mcptask.StatusInputRequired
					}
					if _, err := s.Update(ctx, own, store.Update{Status: status, Variables: map[string]json.RawMessage{"i": v}}); err != nil {
						return err
					}
				}
				_, err := s.Update(ctx, own, store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`{"w":` + strconv.Itoa(w) + `}`)})
				return err
			}()
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}

	totalIncs, totalMerges := 0, 0
	for w := range writers {
		totalIncs += incs[w]
		totalMerges += merges[w]
	}
	shared := mustGet(t, s, "shared")
	require.Equal(t, strconv.Itoa(totalIncs), string(shared.Variables["n"]), "no lost increments")
	require.Equal(t, uint64(1+totalIncs+totalMerges), shared.Version, "every write bumped the version once")
	lastOdd := ops - 1
	if lastOdd%2 == 0 {
		lastOdd--
	}
	for w := range writers {
		require.Equal(t, strconv.Itoa(lastOdd), string(shared.Variables[fmt.Sprintf("w%02d", w)]), "no lost merges")
		own := mustGet(t, s, fmt.Sprintf("own-%02d", w))
		require.Equal(t, mcptask.StatusCompleted, own.Status)
		require.Equal(t, strconv.Itoa(lastOdd), string(own.Variables["i"]))
		require.Equal(t, uint64(1+ops/2+1), own.Version, "create, one update per odd step, completion")
	}
	active, err := s.Active(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"shared"}, ids(active))
	total := 0
	for w := range 4 {
		all, _ := listAll(t, s, fmt.Sprintf("w%d", w), 3)
		total += len(all)
	}
	require.Equal(t, writers, total)
}

func testClosed(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	mustCreate(t, s, newTask("x", "alice", t0))
	require.NoError(t, s.Close())
	_, err := s.Create(ctx, newTask("y", "alice", t0))
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = s.Get(ctx, "x")
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = s.Update(ctx, "x", store.Update{Status: mcptask.StatusCompleted})
	require.ErrorIs(t, err, store.ErrClosed)
	require.ErrorIs(t, s.Delete(ctx, "x"), store.ErrClosed)
	_, err = s.List(ctx, store.ListOptions{Owner: "alice"})
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = s.Expired(ctx, t0, 10)
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = s.Due(ctx, t0, 10)
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = s.Active(ctx)
	require.ErrorIs(t, err, store.ErrClosed)
	require.ErrorIs(t, s.Close(), store.ErrClosed)
}
