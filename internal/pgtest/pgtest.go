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
// binary: initdb into a temporary directory, then the postgres server
// listening only on a Unix socket in that directory (no TCP port, so
// parallel test binaries never collide). It runs with fsync, synchronous
// commit and full-page writes off: fast, and unsafe for anything but
// throwaway data. Main stops the server and removes the directory when the
// tests end; should the test binary die first, the server gets SIGQUIT from
// the kernel (a parent-death signal) and shuts down too.
//
// The binaries (initdb, postgres) are looked up under
// /usr/lib/postgresql/<version>/bin (the newest version first), then on
// PATH. PostgreSQL refuses to run as root: when the tests run as root, the
// cluster runs as the "postgres" user, which owns the temporary directory.
//
// When PostgreSQL cannot be started (not installed, no postgres user), DSN
// skips the test with the reason, or fails it when the environment
// variable TASKBRIDGE_REQUIRE_POSTGRES is "1" (as scripts/test sets it, so
// that CI never silently skips the PostgreSQL tests).
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// RequireEnv is the environment variable that turns "PostgreSQL is
// unavailable" from a skip into a failure when it is "1".
const RequireEnv = "TASKBRIDGE_REQUIRE_POSTGRES"

// startTimeout bounds how long the server may take to accept connections.
const startTimeout = 60 * time.Second

// Server is a running throwaway PostgreSQL cluster.
type Server struct {
	dir     string // temporary directory: data/, the socket, the log
	bin     string // directory of initdb and postgres
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the server process exits
	waitErr error         // the process's exit status, once exited is closed
	admin   *pgxpool.Pool // to the "postgres" database, for CREATE/DROP DATABASE
	seq     atomic.Int64
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
	return s.dsn(name)
}

// AdminDSN returns a connection string to the server's "postgres"
// database, for tests that inspect the server (pg_stat_activity, say).
func (s *Server) AdminDSN() string { return s.dsn("postgres") }

func (s *Server) dsn(db string) string {
	q := url.Values{"host": {s.dir}, "port": {"5432"}, "sslmode": {"disable"}}
	return (&url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/" + db, RawQuery: q.Encode()}).String()
}

// findBin returns the directory holding initdb and postgres.
func findBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest version first (numeric order: 9 < 15).
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("initdb and postgres not found under /usr/lib/postgresql/*/bin or on PATH (install PostgreSQL, e.g. apt-get install postgresql)")
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// tempDir makes the cluster's directory. The socket path inside it must
// stay under the Unix limit (107 bytes), so a long TMPDIR falls back to
// /tmp.
func tempDir() (string, error) {
	dir, err := os.MkdirTemp("", "pgtest-")
	if err == nil && len(dir) > 80 {
		_ = os.RemoveAll(dir)
		dir, err = os.MkdirTemp("/tmp", "pgtest-")
	}
	return dir, err
}

// connect waits until the server accepts connections and opens the admin
// pool.
func (s *Server) connect() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(s.AdminDSN())
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	for {
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err == nil {
			if err = pool.Ping(ctx); err == nil {
				s.admin = pool
				return nil
			}
			pool.Close()
		}
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited (%v) before accepting connections:\n%s", s.waitErr, s.log())
		case <-ctx.Done():
			return fmt.Errorf("postgres did not accept connections within %v (%v):\n%s", startTimeout, err, s.log())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	return strings.TrimSpace(string(b))
}

// stop shuts the server down (fast shutdown: SIGINT, then SIGQUIT after 10
// seconds) and removes its directory.
func (s *Server) stop() error {
	if s.admin != nil {
		s.admin.Close()
	}
	var err error
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-s.exited:
			case <-time.After(5 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.exited
				err = errors.New("postgres did not shut down; killed")
			}
		}
	}
	if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}
