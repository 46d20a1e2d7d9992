package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/pgserver"
	"github.com/taskbridge/taskbridge/internal/rrproxy"
)

// EnvReplicaID is the environment variable that names a replica (the
// holder of its task leases); replicas mode sets it for each replica.
const EnvReplicaID = "TASKBRIDGE_REPLICA_ID"

// replicaStartTimeout bounds how long the replicas may take to listen.
const replicaStartTimeout = 60 * time.Second

// servingLine is what serve prints once it listens.
var servingLine = regexp.MustCompile(`serving (http://\S+)/mcp`)

// replicas runs a throwaway PostgreSQL, n replicas of this binary in serve
// mode on it, and a round-robin proxy in front of them, until SIGINT or
// SIGTERM (or until a replica dies); then it stops everything and removes
// the data unless -keep-db.
func replicas(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replicas", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	addr := fs.String("http", "127.0.0.1:8080", "the proxy's listen address (a loopback address)")
	n := fs.Int("n", 3, "number of replicas")
	keep := fs.Bool("keep-db", false, "leave the PostgreSQL data directory when stopping")
	dashToken := fs.String("dashboard-token", os.Getenv(EnvDashboardToken), "dashboard admin token (served behind the proxy)")
	verbose := fs.Bool("v", false, "the replicas log engine activity (to stderr, prefixed with their names)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("replicas: unknown argument %q", fs.Arg(0))
	}
	if *n < 1 || *n > 32 {
		return fmt.Errorf("replicas: -n %d: want 1 to 32 replicas", *n)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("replicas: finding this binary: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Fprintln(stderr, "starting PostgreSQL...")
	pg, err := pgserver.Start(pgserver.Options{KeepDir: *keep, MaxConnections: 50 + 20*(*n)})
	if err != nil {
		return fmt.Errorf("replicas: starting PostgreSQL: %w", err)
	}
	defer func() {
		if err := pg.Stop(); err != nil {
			fmt.Fprintln(stderr, "replicas: stopping PostgreSQL:", err)
		}
		if *keep {
			fmt.Fprintf(stderr, "PostgreSQL data kept in %s (start it again with: %s/pg_ctl -D %s -o \"-k %s -c listen_addresses=\" start%s)\n",
				pg.Dir(), pg.Bin(), pg.DataDir(), pg.Dir(), asPostgresHint())
		}
	}()
	if err := pg.CreateDatabase(ctx, "taskbridge"); err != nil {
		return fmt.Errorf("replicas: creating the database: %w", err)
	}
	dsn := pg.URL("taskbridge")
	// The replicas' working directory: they keep the example's
	// publication ledger there (one file, shared by every replica, and
	// as throwaway as the database).
	work, err := os.MkdirTemp("", "taskbridge-62-replicas-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(work)
	}

	set := &replicaSet{stderr: stderr, exited: make(chan string, *n)}
	defer set.stop()
	for i := 1; i <= *n; i++ {
		name := fmt.Sprintf("replica-%d", i)
		args := []string{"serve", "-http", "127.0.0.1:0", "-db", dsn, "-ledger", filepath.Join(work, "taskbridge-62.published")}
		if *dashToken != "" {
			args = append(args, "-dashboard-token", *dashToken)
		}
		if *verbose {
			args = append(args, "-v")
		}
		if err := set.start(name, exe, work, args); err != nil {
			return err
		}
	}
	urls, err := set.waitListening(ctx, replicaStartTimeout)
	if err != nil {
		return err
	}
	proxy, err := rrproxy.Listen(*addr, urls...)
	if err != nil {
		return fmt.Errorf("replicas: proxy: %w", err)
	}
	defer func() {
		_ = proxy.Close()
		served := proxy.Served()
		parts := make([]string, len(served))
		for i, c := range served {
			parts[i] = fmt.Sprintf("%s %d", set.procs[i].name, c)
		}
		fmt.Fprintf(stdout, "requests per replica: %s\n", strings.Join(parts, ", "))
	}()

	fmt.Fprintf(stdout, "proxy      %s/mcp   (round robin; a session stays on its replica)\n", proxy.URL)
	for i, u := range urls {
		fmt.Fprintf(stdout, "%-10s %s/mcp\n", set.procs[i].name, u)
	}
	fmt.Fprintf(stdout, "database   %s\n", builder.RedactDSN(dsn))
	if *dashToken != "" {
		fmt.Fprintf(stdout, "dashboard  %s/dashboard/   (sign in with the -dashboard-token)\n", proxy.URL)
	}
	fmt.Fprintln(stdout, "press Ctrl-C to stop everything")

	select {
	case <-ctx.Done():
		fmt.Fprintln(stderr, "stopping...")
		return nil
	case name := <-set.exited:
		return fmt.Errorf("replicas: %s exited; stopping the others", name)
	}
}

// asPostgresHint tells how to run pg_ctl when this process is root (the
// cluster belongs to the postgres user).
func asPostgresHint() string {
	if os.Geteuid() == 0 {
		return ", as the postgres user"
	}
	return ""
}

// replicaSet is the replica processes.
type replicaSet struct {
	stderr io.Writer
	outMu  sync.Mutex // one line at a time on stderr
	procs  []*replicaProc
	exited chan string // names of replicas that exited on their own
}

type replicaProc struct {
	name      string
	cmd       *exec.Cmd
	listening chan string   // the replica's base URL, once it serves
	done      chan struct{} // closed when the process has exited
	stopping  bool
}

// start starts one replica. Its stderr is copied to ours, each line
// prefixed with its name; the line that says where it serves gives its
// URL. The process gets SIGTERM if this process dies (a parent-death
// signal, tied to a thread that lives as long as the child).
func (rs *replicaSet) start(name, exe, dir string, args []string) error {
	p := &replicaProc{name: name, listening: make(chan string, 1), done: make(chan struct{})}
	p.cmd = exec.Command(exe, args...)
	p.cmd.Dir = dir
	// The replicas' store is the -db of args (this command's own
	// PostgreSQL): a TASKBRIDGE_DB of the caller's would contradict it.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, builder.EnvDB+"=") })
	p.cmd.Env = append(env, EnvReplicaID+"="+name)
	// A process group of its own: a Ctrl-C in the terminal reaches only
	// this process, which stops the replicas in order (procattr_*.go).
	p.cmd.SysProcAttr = replicaProcAttr()
	out, err := p.cmd.StderrPipe()
	if err != nil {
		return err
	}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := p.cmd.Start(); err != nil {
			started <- err
			close(p.done)
			return
		}
		started <- nil
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if m := servingLine.FindStringSubmatch(line); m != nil {
				select {
				case p.listening <- m[1]:
				default:
				}
			}
			rs.outMu.Lock()
			fmt.Fprintf(rs.stderr, "[%s] %s\n", name, line)
			rs.outMu.Unlock()
		}
		err := p.cmd.Wait()
		close(p.done)
		rs.outMu.Lock()
		stopping := p.stopping
		rs.outMu.Unlock()
		if !stopping {
			fmt.Fprintf(rs.stderr, "[%s] exited: %v\n", name, err)
			rs.exited <- name
		}
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("replicas: starting %s: %w", name, err)
	}
	rs.procs = append(rs.procs, p)
	return nil
}

// waitListening waits until every replica serves and returns their base
// URLs, in start order.
func (rs *replicaSet) waitListening(ctx context.Context, timeout time.Duration) ([]string, error) {
	deadline := time.After(timeout)
	urls := make([]string, len(rs.procs))
	for i, p := range rs.procs {
		select {
		case urls[i] = <-p.listening:
		case <-p.done:
			return nil, fmt.Errorf("replicas: %s exited before it served", p.name)
		case <-ctx.Done():
			return nil, errors.New("replicas: interrupted while the replicas started")
		case <-deadline:
			return nil, fmt.Errorf("replicas: %s did not serve within %v", p.name, timeout)
		}
	}
	return urls, nil
}

// stop sends every replica SIGTERM and waits for it (10 seconds, then
// SIGKILL).
func (rs *replicaSet) stop() {
	rs.outMu.Lock()
	for _, p := range rs.procs {
		p.stopping = true
	}
	rs.outMu.Unlock()
	for _, p := range rs.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range rs.procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}
