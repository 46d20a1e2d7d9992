// Package pgtest runs a throwaway PostgreSQL server for tests.
//
// A test binary that needs PostgreSQL calls Main from its TestMain; tests
// then call DSN for a connection string to a fresh, empty database of their
// own, dropped when the test ends:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		dsn := pgtest.DSN(t)
//		...
//	}
//
// The first DSN call starts one PostgreSQL cluster for the whole test
// binary with package pgserver: initdb into a temporary directory, then
// the postgres server listening only on a Unix socket in that directory
// (no TCP port, so parallel test binaries never collide). It runs with
// fsync, synchronous commit and full-page writes off: fast, and unsafe for
// anything but throwaway data. Main stops the server and removes the
// directory when the tests end; should the test binary die first, the
// server gets SIGQUIT from the kernel (a parent-death signal) and shuts
// down too. pgserver documents where the binaries are looked up and which
// user the cluster runs as.
//
// When PostgreSQL cannot be started (not installed, no postgres user), DSN
// skips the test with the reason, or fails it when the environment
// variable TASKBRIDGE_REQUIRE_POSTGRES is "1" (as scripts/test sets it, so
// that CI never silently skips the PostgreSQL tests).
package pgtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskbridge/taskbridge/internal/pgserver"
)

// RequireEnv is the environment variable that turns "PostgreSQL is
// unavailable" from a skip into a failure when it is "1".
const RequireEnv = "TASKBRIDGE_REQUIRE_POSTGRES"

// startTimeout bounds how long the server may take to accept connections.
const startTimeout = 60 * time.Second

// Server is the test binary's PostgreSQL cluster (a pgserver.Server, whose
// DSN, URL and Dir it offers).
type Server struct {
	*pgserver.Server
	admin *pgxpool.Pool // to the "postgres" database, for CREATE/DROP DATABASE
	seq   atomic.Int64
}

var (
	mainCalled atomic.Bool
	startOnce  sync.Once
	server     *Server
	startErr   error
)

// Main runs the tests of m and then stops the server, if a test started
// it, and exits with the tests' status. Call it from TestMain.
func Main(m *testing.M) {
	mainCalled.Store(true)
	code := m.Run()
	if server != nil {
		if err := server.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping PostgreSQL: %v\n", err)
		}
	}
	os.Exit(code)
}

// skipper is the part of testing.TB that unavailable uses.
type skipper interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// unavailable skips tb, or fails it when RequireEnv is "1".
func unavailable(tb skipper, err error) {
	tb.Helper()
	if os.Getenv(RequireEnv) == "1" {
		tb.Fatalf("pgtest: PostgreSQL is required (%s=1) but unavailable: %v", RequireEnv, err)
		return
	}
	tb.Skipf("pgtest: PostgreSQL unavailable (set %s=1 to fail instead): %v", RequireEnv, err)
}

// Binaries checks that PostgreSQL's binaries are installed, for tests that
// start PostgreSQL some other way (a program under test that runs its own
// cluster): it skips tb when they are not, or fails it when RequireEnv is
// "1".
func Binaries(tb testing.TB) {
	tb.Helper()
	if _, err := pgserver.FindBin(); err != nil {
		unavailable(tb, err)
	}
}

// Get returns the binary's server, starting it on first use. Tests usually
// call DSN instead.
func Get(tb testing.TB) *Server {
	tb.Helper()
	if !mainCalled.Load() {
		tb.Fatalf("pgtest: call pgtest.Main(m) from the package's TestMain, so that the server is stopped after the tests")
	}
	startOnce.Do(func() { server, startErr = start() })
	if startErr != nil {
		unavailable(tb, startErr)
	}
	return server
}

// DSN returns a connection URL (postgres://…, the form builder.WithDB and
// the example's -db flag recognise) to a new, empty
// database on the binary's server, owned by the superuser "postgres". The
// database is dropped, with any connections still open to it, when tb
// ends.
func DSN(tb testing.TB) string {
	tb.Helper()
	s := Get(tb)
	name := fmt.Sprintf("t_%d_%d", os.Getpid(), s.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return s.URL(name)
}

// AdminDSN returns a connection string to the server's "postgres"
// database, for tests that inspect the server (pg_stat_activity, say).
func (s *Server) AdminDSN() string { return s.DSN("postgres") }

// start starts the binary's cluster and opens the admin pool.
func start() (*Server, error) {
	ps, err := pgserver.Start(pgserver.Options{Unsafe: true, MaxConnections: 300, StartTimeout: startTimeout})
	if err != nil {
		return nil, err
	}
	s := &Server{Server: ps}
	cfg, err := pgxpool.ParseConfig(s.AdminDSN())
	if err == nil {
		cfg.MaxConns = 4
		s.admin, err = pgxpool.NewWithConfig(context.Background(), cfg)
	}
	if err != nil {
		_ = ps.Stop()
		return nil, err
	}
	return s, nil
}

// stop closes the admin pool, stops the server and removes its directory.
func (s *Server) stop() error {
	s.admin.Close()
	return s.Server.Stop()
}
