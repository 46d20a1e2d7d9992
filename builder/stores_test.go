package builder_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/memory"
)

func TestRegisterStore(t *testing.T) {
	var specs []string
	var opened *memory.Store
	builder.RegisterStore("Test-Mem", func(ctx context.Context, spec string) (store.Store, error) {
		specs = append(specs, spec)
		opened = memory.New()
		return opened, nil
	})
	require.Contains(t, builder.StoreSchemes(), "test-mem")
	require.Contains(t, builder.StoreSchemes(), "postgres", "registered by default")
	require.Contains(t, builder.StoreSchemes(), "postgresql", "registered by default")

	// A registered scheme, in any case, opens through its opener; the
	// server owns the store and has no DBPath.
	srv, err := builder.New("t", "1").WithoutEnv().WithDB("TEST-MEM://somewhere?x=1").Build(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"TEST-MEM://somewhere?x=1"}, specs, "the opener gets the whole spec")
	require.Same(t, opened, srv.Store)
	require.Empty(t, srv.DBPath)
	require.NoError(t, srv.Close())
	_, err = opened.Get(t.Context(), "x")
	require.ErrorIs(t, err, store.ErrClosed, "the server closed the store it opened")

	t.Setenv(builder.EnvDB, "test-mem://from-env")
	srv, err = builder.New("t", "1").Build(t.Context())
	require.NoError(t, err)
	require.Equal(t, "test-mem://from-env", specs[len(specs)-1])
	require.NoError(t, srv.Close())

	// Registering again replaces the opener; its error is wrapped.
	boom := errors.New("boom")
	builder.RegisterStore("test-mem", func(context.Context, string) (store.Store, error) { return nil, boom })
	_, err = builder.OpenStore(t.Context(), "test-mem://x")
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "opening test-mem store")

	for _, bad := range []string{"", "1abc", "a b", "a/b"} {
		require.Panics(t, func() {
			builder.RegisterStore(bad, func(context.Context, string) (store.Store, error) { return nil, nil })
		}, "%q", bad)
	}
	require.Panics(t, func() { builder.RegisterStore("nil-opener", nil) })
}

func TestOpenStoreSchemes(t *testing.T) {
	ctx := t.Context()
	_, err := builder.OpenStore(ctx, "nosuch://host/db")
	require.ErrorContains(t, err, `no store is registered for scheme "nosuch"`)
	require.ErrorContains(t, err, "postgres")

	// Anything without a scheme is a bbolt file path, its directory
	// created: a colon alone is no scheme, nor is a "://" after a
	// directory (what precedes it is no URL scheme).
	dir := t.TempDir()
	for _, path := range []string{filepath.Join(dir, "sub", "tasks.db"), filepath.Join(dir, "a:b.db"), dir + "/x://y.db"} {
		st, err := builder.OpenStore(ctx, path)
		require.NoError(t, err, path)
		require.IsType(t, &bboltstore.Store{}, st)
		require.NoError(t, st.Close())
	}
}
