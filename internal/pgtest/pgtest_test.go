package pgtest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m) }

func TestDSNIsolatedAndDropped(t *testing.T) {
	ctx := t.Context()
	var first string
	t.Run("use", func(t *testing.T) {
		first = DSN(t)
		second := DSN(t)
		require.NotEqual(t, first, second)
		a, err := pgx.Connect(ctx, first)
		require.NoError(t, err)
		defer a.Close(ctx)
		b, err := pgx.Connect(ctx, second)
		require.NoError(t, err)
		defer b.Close(ctx)
		_, err = a.Exec(ctx, "CREATE TABLE only_in_a (x int)")
		require.NoError(t, err)
		var n int
		require.NoError(t, b.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n))
		require.Zero(t, n, "every DSN is its own database")
		var version string
		require.NoError(t, a.QueryRow(ctx, "SHOW server_version_num").Scan(&version))
		require.GreaterOrEqual(t, version, "130000", "DROP DATABASE ... WITH (FORCE) needs 13+")
		var fsync string
		require.NoError(t, a.QueryRow(ctx, "SHOW fsync").Scan(&fsync))
		require.Equal(t, "off", fsync)
		// b stays connected: the cleanup drops its database anyway.
	})
	admin, err := pgx.Connect(ctx, Get(t).AdminDSN())
	require.NoError(t, err)
	defer admin.Close(ctx)
	cfg, err := pgx.ParseConfig(first)
	require.NoError(t, err)
	var n int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", cfg.Database).Scan(&n))
	require.Zero(t, n, "the database is dropped when the test ends")
	require.DirExists(t, cfg.Host, "the socket lives in the cluster's directory")
}

func TestDSNParallel(t *testing.T) {
	for i := range 6 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			conn, err := pgx.Connect(t.Context(), DSN(t))
			require.NoError(t, err)
			defer conn.Close(t.Context())
			var one int
			require.NoError(t, conn.QueryRow(t.Context(), "SELECT 1").Scan(&one))
			require.Equal(t, 1, one)
		})
	}
}

// recorder captures what unavailable does to a test.
type recorder struct{ fatal, skip string }

func (r *recorder) Helper()                           {}
func (r *recorder) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }
func (r *recorder) Skipf(format string, args ...any)  { r.skip = fmt.Sprintf(format, args...) }

func TestUnavailable(t *testing.T) {
	reason := errors.New("initdb not found")
	t.Setenv(RequireEnv, "1")
	r := &recorder{}
	unavailable(r, reason)
	require.Contains(t, r.fatal, "initdb not found")
	require.Contains(t, r.fatal, RequireEnv+"=1")
	require.Empty(t, r.skip)

	for _, v := range []string{"", "0", "yes"} {
		t.Setenv(RequireEnv, v)
		r := &recorder{}
		unavailable(r, reason)
		require.Empty(t, r.fatal)
		require.Contains(t, r.skip, "initdb not found")
		require.Contains(t, r.skip, RequireEnv)
	}
}
