package storetest

// The replicas' registry: heartbeats merged per replica (the keys served
// now, the time each key was last listed, a stop), forgetting, the
// validation of a heartbeat, and concurrent heartbeats of many replicas.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/store"
)

// replicaOf returns the record of replica id among recs (nil: none).
func replicaOf(recs []store.ReplicaRecord, id string) *store.ReplicaRecord {
	for i := range recs {
		if recs[i].ID == id {
			return &recs[i]
		}
	}
	return nil
}

func testReplicaHeartbeat(t *testing.T, o opener) {
	s, ctx := o.open(t), context.Background()
	recs, err := s.Replicas(ctx)
	require.NoError(t, err)
	require.Empty(t, recs, "a new store registers nobody")

	t1 := t0.Add(time.Second)
	require.NoError(t, s.Heartbeat(ctx, store.Heartbeat{Replica: "old", Serves: []string{"nap@v1", "abc@v1"}, At: t0}))
	require.NoError(t, s.Heartbeat(ctx, store.Heartbeat{Replica: "new", Serves: []string{"nap@v2"}, At: t0}))
	recs, err = s.Replicas(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, "new", recs[0].ID, "by ID")
	old := replicaOf(recs, "old")
	require.True(t, old.SeenAt.Equal(t0))
	require.True(t, old.ServesNow("nap@v1"))
	require.True(t, old.ServesNow("abc@v1"))
	require.False(t, old.ServesNow("nap@v2"))
	require.False(t, old.Stopped)

	// The same replica comes back with other keys: the keys it listed
	// before keep their last time.
	require.NoError(t, s.Heartbeat(ctx, store.Heartbeat{Replica: "old", Serves: []string{"nap@v2"}, At: t1}))
	recs, err = s.Replicas(ctx)
	require.NoError(t, err)
	old = replicaOf(recs, "old")
	require.True(t, old.SeenAt.Equal(t1))
	require.True(t, old.ServesNow("nap@v2"))
	require.False(t, old.ServesNow("nap@v1"))
	require.True(t, old.Serves["nap@v1"].Equal(t0), "nap@v1 was last served at t0")
	require.Len(t, old.Serves, 3)

	// A heartbeat from the past moves nothing back.
	require.NoError(t, s.Heartbeat(ctx, store.Heartbeat{Replica: "old", Serves: []string{"nap@v2"}, At: t0}))
	recs, err = s.Replicas(ctx)
	require.NoError(t, err)
	require.True(t, replicaOf(recs, "old").SeenAt.Equal(t1))

	// A stop.
	require.NoError(t, s.Heartbeat(ctx, store.Heartbeat{Replica: "new", Serves: []string{"nap@v2"}, At: t1, Stopped: true}))
	recs, err = s.Replicas(ctx)
	require.NoError(t, err)
	require.True(t, replicaOf(recs, "new").Stopped)
	require.NoError(t, s.Heartbeat(ctx, store.Heartbeat{Replica: "new", Serves: []string{"nap@v2"}, At: t1.Add(time.Second)}))
	recs, err = s.Replicas(ctx)
	require.NoError(t, err)
	require.False(t, replicaOf(recs, "new").Stopped, "started again")

	// Forgetting drops the replicas and keys not seen since.
	t2 := t1.Add(time.Hour)
	require.NoError(t, s.Heartbeat(ctx, store.Heartbeat{Replica: "old", Serves: []string{"nap@v2"}, At: t2, Forget: t1}))
	recs, err = s.Replicas(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 2, "new was seen at t1+1s")
	old = replicaOf(recs, "old")
	require.Equal(t, []string{"nap@v2"}, keysOf(old))
	require.NoError(t, s.Heartbeat(ctx, store.Heartbeat{Replica: "old", Serves: []string{"nap@v2"}, At: t2, Forget: t2}))
	recs, err = s.Replicas(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "old", recs[0].ID)

	// Copies: changing a record read changes nothing stored.
	recs[0].Serves["mine"] = t2
	again, err := s.Replicas(ctx)
	require.NoError(t, err)
	require.NotContains(t, again[0].Serves, "mine")
}

func keysOf(rec *store.ReplicaRecord) []string {
	var out []string
	for k := range rec.Serves {
		out = append(out, k)
	}
	return out
}

func testReplicaInvalid(t *testing.T, o opener) {
	s, ctx := o.open(t), context.Background()
	many := make([]string, store.MaxServes+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for name, c := range map[string]struct {
		hb   store.Heartbeat
		want error
	}{
		"no replica":      {store.Heartbeat{At: t0}, store.ErrInvalid},
		"long replica":    {store.Heartbeat{Replica: strings.Repeat("r", store.MaxHolderBytes+1), At: t0}, store.ErrTooLarge},
		"no time":         {store.Heartbeat{Replica: "r"}, store.ErrInvalid},
		"empty key":       {store.Heartbeat{Replica: "r", At: t0, Serves: []string{""}}, store.ErrInvalid},
		"long key":        {store.Heartbeat{Replica: "r", At: t0, Serves: []string{strings.Repeat("k", store.MaxNameBytes+1)}}, store.ErrTooLarge},
		"too many keys":   {store.Heartbeat{Replica: "r", At: t0, Serves: many}, store.ErrTooLarge},
		"bad forget time": {store.Heartbeat{Replica: "r", At: t0, Forget: time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC)}, store.ErrInvalid},
	} {
		require.ErrorIs(t, s.Heartbeat(ctx, c.hb), c.want, name)
	}
	recs, err := s.Replicas(ctx)
	require.NoError(t, err)
	require.Empty(t, recs, "a refused heartbeat writes nothing")
}

func testReplicaConcurrent(t *testing.T, o opener) {
	s, ctx := o.open(t), context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 8 {
				errs <- s.Heartbeat(ctx, store.Heartbeat{Replica: fmt.Sprint("r", i), Serves: []string{fmt.Sprint("k", j)}, At: t0.Add(time.Duration(j) * time.Second)})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	recs, err := s.Replicas(ctx)
	require.NoError(t, err)
	require.Len(t, recs, 8)
	for _, rec := range recs {
		require.Len(t, rec.Serves, 8, "no heartbeat lost another's key")
		require.True(t, rec.ServesNow("k7"))
	}
}

// testReopenReplicas checks that the registry survives a close and reopen.
func testReopenReplicas(t *testing.T, open func(t *testing.T, path string) store.Store) {
	path := filepath.Join(t.TempDir(), "tasks.db")
	s := openAt(t, open, path)
	ctx := context.Background()
	require.NoError(t, s.Heartbeat(ctx, store.Heartbeat{Replica: "r1", Serves: []string{"nap@v1"}, At: t0, Stopped: true}))
	before, err := s.Replicas(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s = openAt(t, open, path)
	after, err := s.Replicas(ctx)
	require.NoError(t, err)
	require.Len(t, after, 1)
	require.True(t, after[0].SeenAt.Equal(before[0].SeenAt))
	require.True(t, after[0].Stopped)
	require.True(t, after[0].ServesNow("nap@v1"))
}
