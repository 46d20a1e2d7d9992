package builder_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/memory"
)

// testMem is a backend registered for the scheme "test-mem-builder"
// (store.Register, once per process): it records the specs it opens and
// fails a spec whose host is "boom".
var testMem = struct {
	sync.Mutex
	specs  []string
	opened *memory.Store
}{}

var errBoom = errors.New("boom")

func init() {
	store.Register("Test-Mem-Builder", func(_ context.Context, spec string, _ *store.Options) (store.Store, error) {
		testMem.Lock()
		defer testMem.Unlock()
		testMem.specs = append(testMem.specs, spec)
		if strings.HasPrefix(spec, "test-mem-builder://boom") {
			return nil, errBoom
		}
		testMem.opened = memory.New(nil)
		return testMem.opened, nil
	})
}

// TestWithDBOpensRegisteredBackends: a spec names any backend registered
// with store.Register, in any case, and the server owns the store it
// opened.
func TestWithDBOpensRegisteredBackends(t *testing.T) {
	require.Contains(t, builder.StoreSchemes(), "test-mem-builder")
	require.Contains(t, builder.StoreSchemes(), "postgres", "registered by default")
	require.Contains(t, builder.StoreSchemes(), "postgresql", "registered by default")

	srv, err := builder.New("t", "1").WithoutEnv().WithDB("TEST-MEM-BUILDER://somewhere?x=1").Build(t.Context())
	require.NoError(t, err)
	testMem.Lock()
	require.Equal(t, "TEST-MEM-BUILDER://somewhere?x=1", testMem.specs[len(testMem.specs)-1], "the opener gets the whole spec")
	opened := testMem.opened
	testMem.Unlock()
	require.Same(t, opened, srv.Store)
	require.Empty(t, srv.DBPath)
	require.NoError(t, srv.Close())
	_, err = opened.Get(t.Context(), "x")
	require.ErrorIs(t, err, store.ErrClosed, "the server closed the store it opened")

	t.Setenv(builder.EnvDB, "test-mem-builder://from-env")
	srv, err = builder.New("t", "1").Build(t.Context())
	require.NoError(t, err)
	testMem.Lock()
	require.Equal(t, "test-mem-builder://from-env", testMem.specs[len(testMem.specs)-1])
	testMem.Unlock()
	require.NoError(t, srv.Close())

	_, err = builder.OpenStore(t.Context(), "test-mem-builder://boom", nil)
	require.ErrorIs(t, err, errBoom, "the backend's error is wrapped")
}

func TestOpenStoreSchemes(t *testing.T) {
	ctx := t.Context()
	_, err := builder.OpenStore(ctx, "nosuch://host/db", nil)
	require.ErrorContains(t, err, `no store is registered for scheme "nosuch"`)
	require.ErrorContains(t, err, "postgres")

	// Anything without a scheme is a bbolt file path, its directory
	// created: a colon alone is no scheme, nor is a "://" after a
	// directory (what precedes it is no URL scheme).
	dir := t.TempDir()
	for _, path := range []string{filepath.Join(dir, "sub", "tasks.db"), filepath.Join(dir, "a:b.db"), dir + "/x://y.db"} {
		st, err := builder.OpenStore(ctx, path, nil)
		require.NoError(t, err, path)
		require.IsType(t, &bboltstore.Store{}, st)
		require.NoError(t, st.Close())
	}
}
