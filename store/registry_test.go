package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/memory"
	_ "github.com/taskbridge/taskbridge/store/postgres"
)

var t0 = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

// TestRegistry: a registered scheme opens through its opener, which gets
// the whole DSN and the options; a scheme registered twice (in any case),
// a bad scheme and a nil opener panic; an unknown scheme fails naming the
// registered ones.
func TestRegistry(t *testing.T) {
	type call struct {
		dsn  string
		opts *store.Options
	}
	var calls []call
	boom := errors.New("boom")
	store.Register("Test-Reg", func(_ context.Context, dsn string, opts *store.Options) (store.Store, error) {
		calls = append(calls, call{dsn, opts})
		if dsn == "test-reg://fail" {
			return nil, boom
		}
		return memory.New(opts), nil
	})
	require.Contains(t, store.Schemes(), "test-reg")
	require.IsIncreasing(t, store.Schemes())

	st, err := store.Open(t.Context(), "TEST-REG://host/db?x=1", &store.Options{Limits: store.Limits{MaxResultBytes: 7},
		Backend: []any{"ignored", 42}})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	require.Len(t, calls, 1)
	require.Equal(t, "TEST-REG://host/db?x=1", calls[0].dsn, "the opener gets the whole DSN")
	require.Equal(t, 7, calls[0].opts.Limits.MaxResultBytes)
	n, ok := store.BackendOptions[int](calls[0].opts)
	require.True(t, ok)
	require.Equal(t, 42, n)

	_, err = store.Open(t.Context(), "test-reg://fail", nil)
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "opening test-reg store")
	require.NotContains(t, err.Error(), "fail", "the DSN (it may hold a password) is not in the error")

	_, err = store.Open(t.Context(), "nosuch://host/db", nil)
	require.ErrorContains(t, err, `no store is registered for scheme "nosuch"`)
	for _, s := range []string{"bbolt", "file", "memory", "postgres", "postgresql", "test-reg"} {
		require.ErrorContains(t, err, s, "the error names the registered schemes")
	}
	_, err = store.Open(t.Context(), "", nil)
	require.ErrorIs(t, err, store.ErrInvalid)

	open := func(context.Context, string, *store.Options) (store.Store, error) { return nil, nil }
	require.PanicsWithValue(t, `store: Register called twice for scheme "test-reg"`, func() { store.Register("TEST-reg", open) })
	require.Panics(t, func() { store.Register("memory", open) }, "a backend's scheme is taken")
	for _, bad := range []string{"", "1abc", "a b", "a/b", "a:"} {
		require.Panics(t, func() { store.Register(bad, open) }, "%q", bad)
	}
	require.Panics(t, func() { store.Register("nil-opener", nil) })
}

// TestOpenBackends: the module's backends registered themselves, and every
// DSN form opens the backend it names: a plain path, "bbolt://" and
// "file://" a bbolt file (its directory created), "memory://" a memory
// store. Backend options reach only their own backend.
func TestOpenBackends(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	for _, dsn := range []string{
		filepath.Join(dir, "sub", "a.db"),
		"bbolt://" + filepath.Join(dir, "b.db"),
		"BBOLT://" + filepath.Join(dir, "c.db"),
		"file://" + filepath.Join(dir, "d.db"),
		filepath.Join(dir, "e:f.db"),
		dir + "/x://y.db",
	} {
		st, err := store.Open(ctx, dsn, &store.Options{Backend: []any{&bboltstore.Options{NoSync: true}, "not a bbolt option"}})
		require.NoError(t, err, dsn)
		require.IsType(t, &bboltstore.Store{}, st, dsn)
		_, err = st.Create(ctx, &store.Task{ID: "a", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: t0})
		require.NoError(t, err)
		require.NoError(t, st.Close())
		require.FileExists(t, store.TrimScheme(dsn))
	}
	_, err := store.Open(ctx, "bbolt://", nil)
	require.ErrorIs(t, err, store.ErrInvalid)

	// A memory store per Open, with the shared options.
	a, err := store.Open(ctx, "memory://", &store.Options{Limits: store.Limits{MaxResultBytes: 2}})
	require.NoError(t, err)
	defer a.Close()
	b, err := store.Open(ctx, "memory://anything", nil)
	require.NoError(t, err)
	defer b.Close()
	require.IsType(t, &memory.Store{}, a)
	_, err = a.Create(ctx, &store.Task{ID: "x", Owner: "o", Status: mcptask.StatusCompleted, CreatedAt: t0, Result: []byte(`123`)})
	require.ErrorIs(t, err, store.ErrTooLarge, "the limits applied")
	_, err = a.Create(ctx, &store.Task{ID: "x", Owner: "o", Status: mcptask.StatusWorking, CreatedAt: t0})
	require.NoError(t, err)
	_, err = b.Get(ctx, "x")
	require.ErrorIs(t, err, store.ErrNotFound, "memory stores share nothing")

	// postgres: registered; a DSN that does not parse fails in its Open.
	_, err = store.Open(ctx, "postgres://%zz", nil)
	require.ErrorContains(t, err, "opening postgres store")
}

func TestSchemeOf(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://u@h/db":  "postgres",
		"PostgreSQL://h":     "postgresql",
		"memory://":          "memory",
		"/var/lib/tasks.db":  "",
		"tasks.db":           "",
		"C:\\tasks.db":       "",
		"a:b.db":             "",
		"dir/x://y.db":       "",
		"1x://y":             "",
		"svn+ssh://host/p":   "svn+ssh",
		"bbolt:///abs/x.db":  "bbolt",
		"file://relative.db": "file",
	} {
		require.Equal(t, want, store.SchemeOf(dsn), dsn)
	}
	require.Equal(t, "/abs/x.db", store.TrimScheme("bbolt:///abs/x.db"))
	require.Equal(t, "dir/x://y.db", store.TrimScheme("dir/x://y.db"))
}
