// Package pgserver runs a throwaway PostgreSQL cluster: initdb into a
// temporary directory, then the postgres server listening only on a Unix
// socket in that directory (no TCP port, so that several clusters never
// collide), stopped and removed by Stop.
//
// The binaries (initdb, postgres) are looked up under
// /usr/lib/postgresql/<version>/bin (the newest version first), then on
// PATH. PostgreSQL refuses to run as root: when this process is root, the
// cluster runs as the "postgres" user, which owns the directory. Should
// this process die without calling Stop, the server gets SIGQUIT from the
// kernel (a parent-death signal) and shuts down at once; the directory is
// then left behind.
//
// Package pgtest builds on it for tests; the replicas mode of example 62
// uses it for a demonstration database.
package pgserver

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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Port is the port number in the socket's name (.s.PGSQL.5432); nothing
// listens on TCP.
const Port = 5432

// Options configure Start.
type Options struct {
	// Unsafe turns off fsync, synchronous commit and full-page writes:
	// much faster, and a machine crash can lose or corrupt the data. For
	// tests and throw-away data only.
	Unsafe bool
	// MaxConnections is the server's max_connections (default 100).
	MaxConnections int
	// KeepDir makes Stop leave the directory (the data, the socket
	// directory, the server log) in place.
	KeepDir bool
	// StartTimeout bounds how long the server may take to accept
	// connections (default 60 seconds).
	StartTimeout time.Duration
}

// Server is a running throwaway PostgreSQL cluster.
type Server struct {
	opts    Options
	dir     string // temporary directory: data/, the socket, the log
	bin     string // directory of initdb and postgres
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the server process exits
	waitErr error         // the process's exit status, once exited is closed
}

// Dir returns the cluster's directory: the data directory (data/), the
// Unix socket and the server log (postgres.log) are in it.
func (s *Server) Dir() string { return s.dir }

// DataDir returns the data directory, for pg_ctl -D.
func (s *Server) DataDir() string { return filepath.Join(s.dir, "data") }

// Bin returns the directory of the PostgreSQL binaries used.
func (s *Server) Bin() string { return s.bin }

// DSN returns a key=value connection string to database db as the
// superuser "postgres" (trust authentication on the socket).
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", s.dir, Port, db)
}

// URL returns a postgres:// connection URL to database db as the superuser
// "postgres", the socket directory in its host parameter.
func (s *Server) URL(db string) string {
	q := url.Values{"host": {s.dir}, "port": {strconv.Itoa(Port)}, "sslmode": {"disable"}}
	return (&url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/" + db, RawQuery: q.Encode()}).String()
}

// Exited is closed when the server process exits.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// Log returns the server log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	return strings.TrimSpace(string(b))
}

// CreateDatabase creates database name (a plain SQL identifier).
func (s *Server) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

// FindBin returns the directory holding initdb and postgres.
func FindBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest version first (numeric order: 9 < 15).
	sort.Slice(dirs, func(i, j int) bool { return MajorVersion(dirs[i]) > MajorVersion(dirs[j]) })
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

// MajorVersion returns the version in a /usr/lib/postgresql/<version>/bin
// path, or 0.
func MajorVersion(binDir string) int {
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
	dir, err := os.MkdirTemp("", "pgserver-")
	if err == nil && len(dir) > 80 {
		_ = os.RemoveAll(dir)
		dir, err = os.MkdirTemp("/tmp", "pgserver-")
	}
	return dir, err
}

// serverArgs are the postgres command line after the binary.
func (s *Server) serverArgs() []string {
	maxConns := s.opts.MaxConnections
	if maxConns <= 0 {
		maxConns = 100
	}
	args := []string{"-D", s.DataDir(), "-k", s.dir, "-p", strconv.Itoa(Port),
		"-c", "listen_addresses=",
		"-c", "max_connections=" + strconv.Itoa(maxConns),
		"-c", "log_min_messages=warning"}
	if s.opts.Unsafe {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
			"-c", "shared_buffers=64MB")
	}
	return args
}

// waitReady waits until the server accepts connections.
func (s *Server) waitReady() error {
	timeout := s.opts.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(context.Background())
			if err == nil {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited (%v) before accepting connections:\n%s", s.waitErr, s.Log())
		case <-ctx.Done():
			return fmt.Errorf("postgres did not accept connections within %v (%v):\n%s", timeout, err, s.Log())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop shuts the server down (fast shutdown: SIGINT, then SIGQUIT after 10
// seconds, then SIGKILL) and removes its directory unless Options.KeepDir
// was set.
func (s *Server) Stop() error {
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
	if s.opts.KeepDir {
		return err
	}
	if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}
