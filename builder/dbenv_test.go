package builder_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// logged returns a logger writing into a buffer.
func logged() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), &buf
}

// TestEnvDBOverridesWithDB: TASKBRIDGE_DB names the store even when the
// code names another with WithDB (the environment overrides the code, as
// every TASKBRIDGE_* variable does), and Build says so at Warn; WithoutEnv
// keeps the code's.
func TestEnvDBOverridesWithDB(t *testing.T) {
	dir := t.TempDir()
	code, env := filepath.Join(dir, "code.db"), filepath.Join(dir, "env.db")
	t.Setenv(builder.EnvDB, env)
	log, buf := logged()
	srv, err := builder.New("t", "1").WithDB(code).WithLogger(log).Build(t.Context())
	require.NoError(t, err)
	require.Equal(t, env, srv.DBPath)
	require.NoError(t, srv.Close())
	_, err = os.Stat(code)
	require.True(t, os.IsNotExist(err), "the code's file is never opened")
	require.Contains(t, buf.String(), "level=WARN")
	require.Contains(t, buf.String(), "the environment overrides the code")
	require.Contains(t, buf.String(), "overridden="+code)

	srv, err = builder.New("t", "1").WithDB(code).WithoutEnv().Build(t.Context())
	require.NoError(t, err)
	require.Equal(t, code, srv.DBPath, "WithoutEnv keeps the code's store")
	require.NoError(t, srv.Close())
}

// TestEnvDBWithStoreRefused: TASKBRIDGE_DB cannot take effect on a server
// whose code hands over its store: Build refuses, naming the variable.
func TestEnvDBWithStoreRefused(t *testing.T) {
	t.Setenv(builder.EnvDB, "postgres://u:secret@db.example/tasks")
	_, err := builder.New("t", "1").WithStore(memory.New(nil)).Build(t.Context())
	require.ErrorContains(t, err, "TASKBRIDGE_DB=postgres://u:xxxxx@db.example/tasks cannot take effect")
	require.NotContains(t, err.Error(), "secret", "the password is not in the error")
}

// TestEnvDBPostgresReplicas: README's replicas set-up on a server written
// as the Quick start is (WithDB with a bbolt file): TASKBRIDGE_DB names
// PostgreSQL and TASKBRIDGE_REPLICA_ID the replica, and the server runs
// on the shared store, not on a file of its own. A replica id with a
// store that is not shared is logged at Warn.
func TestEnvDBPostgresReplicas(t *testing.T) {
	dsn := pgtest.DSN(t)
	file := filepath.Join(t.TempDir(), "tasks.db")
	t.Setenv(builder.EnvDB, dsn)
	t.Setenv(taskrouter.EnvReplicaID, "replica-a")
	log, buf := logged()
	srv, err := builder.New("t", "1").WithDB(file).WithLogger(log).Build(t.Context())
	require.NoError(t, err)
	require.True(t, store.IsShared(srv.Store), "the replicas share PostgreSQL")
	require.Empty(t, srv.DBPath)
	require.NoError(t, srv.Close())
	_, err = os.Stat(file)
	require.True(t, os.IsNotExist(err), "no bbolt file of its own")
	require.NotContains(t, buf.String(), "is not shared")

	t.Setenv(builder.EnvDB, "")
	log, buf = logged()
	srv, err = builder.New("t", "1").WithDB(file).WithLogger(log).Build(t.Context())
	require.NoError(t, err)
	require.NoError(t, srv.Close())
	require.Contains(t, buf.String(), "TASKBRIDGE_REPLICA_ID is set, but the store is not shared")
}
