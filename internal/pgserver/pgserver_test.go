package pgserver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/internal/pgserver"
)

// start starts a cluster, or skips the test when PostgreSQL is not
// installed, unless TASKBRIDGE_REQUIRE_POSTGRES is "1" (as in CI).
func start(t *testing.T, opts pgserver.Options) *pgserver.Server {
	t.Helper()
	if _, err := pgserver.FindBin(); err != nil && os.Getenv("TASKBRIDGE_REQUIRE_POSTGRES") != "1" {
		t.Skipf("PostgreSQL unavailable (set TASKBRIDGE_REQUIRE_POSTGRES=1 to fail instead): %v", err)
	}
	s, err := pgserver.Start(opts)
	require.NoError(t, err)
	return s
}

func TestFindBin(t *testing.T) {
	dir, err := pgserver.FindBin()
	if err != nil && os.Getenv("TASKBRIDGE_REQUIRE_POSTGRES") != "1" {
		t.Skipf("PostgreSQL unavailable: %v", err)
	}
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, "initdb"))
	require.FileExists(t, filepath.Join(dir, "postgres"))
	require.Equal(t, 15, pgserver.MajorVersion("/usr/lib/postgresql/15/bin"))
	require.Zero(t, pgserver.MajorVersion("/usr/bin"))
}

// TestStartStop starts a durable cluster that keeps its directory: it
// serves its URL and DSN forms, keeps fsync on, and Stop leaves the data.
func TestStartStop(t *testing.T) {
	s := start(t, pgserver.Options{KeepDir: true})
	t.Cleanup(func() { _ = os.RemoveAll(s.Dir()) })
	ctx := t.Context()
	require.NoError(t, s.CreateDatabase(ctx, "demo"))
	require.True(t, strings.HasPrefix(s.URL("demo"), "postgres://postgres@/demo?"), s.URL("demo"))
	for _, dsn := range []string{s.URL("demo"), s.DSN("demo")} {
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err, dsn)
		var db, fsync string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_database(), current_setting('fsync')").Scan(&db, &fsync))
		require.Equal(t, "demo", db)
		require.Equal(t, "on", fsync, "safe unless Options.Unsafe")
		require.NoError(t, conn.Close(ctx))
	}
	select {
	case <-s.Exited():
		t.Fatal("the server exited")
	default:
	}
	require.NoError(t, s.Stop())
	<-s.Exited()
	require.FileExists(t, filepath.Join(s.DataDir(), "PG_VERSION"), "KeepDir keeps the data")
	require.Contains(t, filepath.Base(s.Dir()), "pgserver-")
}
