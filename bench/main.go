// Command bench measures taskbridge and prints one table of ratios measured
// side by side in one run, on 127.0.0.1:
//
//	go run ./bench            # full run (a few minutes on 2 cores)
//	go run ./bench -quick     # shorter rounds, 100k tasks for the scale test
//
// It starts the servers under test as separate processes (taskbridge's bench
// server from this binary; the official TypeScript SDK's task server with
// Node), drives them with the same Go load generator, and reports medians
// over repeated rounds. Timing is never a pass/fail test; this command is
// where speed is reported.
package main

import (
	"github.com/taskbridge/taskbridge/internal/gcpolicy"

	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

type options struct {
	rounds   int
	duration time.Duration
	scale    int
	skipPeer bool
	only     string
	// cpuDuration is the length of one window of rows 15 and 16 and of
	// -where: long enough for CPU time read in clock ticks (10 ms) and a
	// profile's samples (100 a second) to settle.
	cpuDuration time.Duration
	// memScale is the larger number of live tasks and waiting workflows
	// in row 17.
	memScale int
	// where prints where the server's CPU time goes (profiles of plain
	// calls and task round trips) instead of the rows.
	where bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		gcpolicy.Apply() // as the example servers do; the bench sets GOGC to compare
		if err := serve(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench serve:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "floor" {
		if err := floorServe(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench floor:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "load" {
		if err := loadCmd(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench load:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	quick := flag.Bool("quick", false, "short rounds and a 100k-task scale test")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds per measurement (the median is reported)")
	flag.DurationVar(&o.duration, "duration", 2*time.Second, "length of one throughput round")
	flag.IntVar(&o.scale, "scale", 1_000_000, "tasks stored for the scale test")
	flag.BoolVar(&o.skipPeer, "skip-peer", false, "skip the TypeScript SDK peer")
	flag.StringVar(&o.only, "only", "", "comma-separated measurement numbers to run (1-25)")
	flag.DurationVar(&o.cpuDuration, "cpu-duration", 8*time.Second, "length of one window of rows 15-16 and -where (server CPU per request)")
	flag.IntVar(&o.memScale, "mem-scale", 100_000, "live tasks and waiting workflows in row 17's larger measurement")
	flag.StringVar(&profiling.dir, "cpuprofile", "", "write a CPU profile of the server of every measured window on a bench server into this directory")
	flag.BoolVar(&o.where, "where", false, "print where the server's CPU time goes on plain calls and task round trips (profiles), then exit")
	flag.Parse()
	if *quick {
		o.rounds, o.duration, o.scale, o.cpuDuration, o.memScale = 3, time.Second, 100_000, 2*time.Second, 10_000
	}
	if profiling.dir != "" {
		if err := os.MkdirAll(profiling.dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if o.where {
		if err := where(o); err != nil {
			fmt.Fprintln(os.Stderr, "bench -where:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// row is one line of the report.
type row struct {
	n, what, ours, other, ratio, goal, met string
}

type report struct {
	rows   []row
	notes  []string // printed after the table
	failed int      // measurements that returned an error
}

// try runs measurement n (what names it) and, if it fails, reports the
// failure as a row and goes on: one measurement that a busy machine
// upsets does not discard the others of a long run.
func (r *report) try(n, what string, f func() error) {
	if err := f(); err != nil {
		r.failed++
		r.add(row{n, what + " failed", err.Error(), "-", "-", "-", "**failed**"})
	}
}

// note adds a paragraph (or table) to print after the main table.
func (r *report) note(s string) { r.notes = append(r.notes, s) }

func (r *report) add(x row) {
	r.rows = append(r.rows, x)
	fmt.Fprintf(os.Stderr, "  %s %s: %s | %s | %s\n", x.n, x.what, x.ours, x.other, x.ratio)
}

func run(o options) error {
	want := func(n string) bool { return o.only == "" || strings.Contains(","+o.only+",", ","+n+",") }
	tmp, err := os.MkdirTemp("", "taskbridge-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	rep := &report{}
	started := time.Now()
	if want("1") || want("2") || want("3") || want("4") || want("6") || want("12") || want("22") {
		ours, err := startOurs("bbolt", filepath.Join(tmp, "ours.db"))
		if err != nil {
			return err
		}
		defer ours.stop()
		if want("1") {
			profiling.row = "1"
			rep.try("1", "task overhead", func() error { return taskOverhead(o, ours, rep) })
		}
		if want("2") {
			profiling.row = "2"
			rep.try("2", "durability", func() error {
				mem, err := startOurs("memory", "")
				if err != nil {
					return err
				}
				defer mem.stop()
				return durability(o, ours, mem, rep)
			})
		}
		var peer *proc
		if !o.skipPeer && (want("3") || want("4")) {
			if peer, err = startPeer(); err != nil {
				return fmt.Errorf("starting the TypeScript peer: %w (use -skip-peer to skip it)", err)
			}
			defer peer.stop()
		}
		if want("3") && peer != nil {
			profiling.row = "3"
			rep.try("3", "peer", func() error { return againstPeer(o, ours, peer, rep) })
		}
		if want("4") {
			rep.try("4", "result latency", func() error { return resultLatency(ours, peer, rep) })
		}
		if want("6") {
			rep.try("6", "workflow", func() error { return workflowCost(o, ours, rep) })
		}
		if want("12") {
			profiling.row = "12"
			rep.try("12", "floor", func() error { return floorRows(o, ours, rep) })
		}
		if want("22") {
			rep.try("22", "for-each", func() error { return forEachCost(o, ours, rep) })
		}
	}
	if want("5") {
		rep.try("5", "scale", func() error { return scale(o, tmp, rep) })
	}
	if want("7") {
		profiling.row = "7"
		rep.try("7", "observe", func() error { return observeOverhead(o, tmp, rep) })
	}
	if want("8") {
		rep.try("8", "allocations", func() error { return allocations(rep) })
	}
	if want("9") {
		profiling.row = "9"
		rep.try("9", "gc", func() error { return gcEffect(o, tmp, rep) })
	}
	if want("10") {
		profiling.row = "10"
		rep.try("10", "replicas", func() error { return replicaScale(o, tmp, rep) })
	}
	if want("11") {
		profiling.row = "11"
		rep.try("11", "instant", func() error { return instantFold(o, tmp, rep) })
	}
	if want("13") {
		rep.try("13", "parallel group", func() error { return parallelGroup(o, tmp, rep) })
	}
	if want("14") {
		rep.try("14", "sleep lateness", func() error { return sleepLateness(o, tmp, rep) })
	}
	if want("15") || want("16") || want("18") || want("23") {
		profiling.row = "15"
		rep.try("15", "server cost", func() error { return serverCost(o, tmp, rep) })
	}
	if want("17") {
		profiling.row = "17"
		rep.try("17", "memory per task", func() error { return memoryPerTask(o, tmp, rep) })
	}
	if want("19") {
		rep.try("19", "event cost", func() error { return eventCost(o, tmp, rep) })
	}
	if want("20") {
		rep.try("20", "readers", func() error { return readerFanOut(o, tmp, rep) })
	}
	if want("21") {
		rep.try("21", "queues", func() error { return queueOverhead(o, tmp, rep) })
	}
	if want("24") {
		rep.try("24", "database cost", func() error { return dbCostRows(o, tmp, rep) })
	}
	if want("25") {
		profiling.row = "25"
		rep.try("25", "a task's deletion", func() error { return lifetimeCost(o, tmp, rep) })
	}
	printReport(o, rep, time.Since(started))
	if rep.failed > 0 {
		return fmt.Errorf("%d measurement(s) failed (see the table)", rep.failed)
	}
	return nil
}

func printReport(o options, rep *report, took time.Duration) {
	node := "-"
	if out, err := exec.Command("node", "--version").Output(); err == nil {
		node = strings.TrimSpace(string(out))
	}
	fmt.Printf("taskbridge bench, %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Printf("machine: %s, %d cores, %s/%s, %s, node %s\n", cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), node)
	fmt.Printf("method: servers in separate processes on 127.0.0.1, one Go load generator, Streamable HTTP, core dialect;\n")
	fmt.Printf("        throughput = median of %d rounds of %s (rows 15-16: of %s); latencies pooled over rounds;\n", o.rounds, o.duration, o.cpuDuration)
	fmt.Printf("        CPU = user+sys time of the server's process per operation, read before and after each window; took %s\n\n", took.Round(time.Second))
	fmt.Println("| # | measurement | taskbridge | compared with | ratio | goal | met |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range rep.rows {
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", r.n, r.what, r.ours, r.other, r.ratio, r.goal, r.met)
	}
	for _, n := range rep.notes {
		fmt.Printf("\n%s", n)
	}
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "model name") {
			if i := strings.Index(line, ":"); i >= 0 {
				return strings.TrimSpace(line[i+1:])
			}
		}
	}
	return runtime.GOARCH
}

// ---- processes ----

type proc struct {
	name string
	cmd  *exec.Cmd // nil for a group (see group) or a server started elsewhere
	url  string
	// members are the processes that serve url when it is a proxy in
	// front of several servers (row 10): their CPU is the group's.
	members []*proc
	// dbCPU reads the CPU time of the database the server uses
	// (PostgreSQL's processes); nil when there is none to count.
	dbCPU func() time.Duration
	// debug is set for the bench's own servers, which serve /debug/bench
	// and /debug/pprof/ beside /mcp.
	debug bool
	// tools are the tools a load calls on this server (nil: benchTools).
	tools *toolSet
	// perf is set for Go servers profiled with perf record rather than
	// their /debug/pprof: the examples as shipped (which serve none), and
	// every server of -where when perf is there (oneProfiler).
	perf bool
	// metrics is the URL of a server's Prometheus page, where a server
	// without /debug/bench reports its store's counters ("": none).
	metrics string
	// waited receives cmd.Wait's error when something already waits for
	// the process (startExample); nil otherwise.
	waited chan error
}

// group is a URL served by several bench servers (a proxy in front).
func group(name, url string, members ...*proc) *proc {
	return &proc{name: name, url: url, members: members}
}

// pid is the server's process id, or 0 for a group.
func (p *proc) pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// cpu is the CPU time the server's processes have used.
func (p *proc) cpu() time.Duration {
	var d time.Duration
	if pid := p.pid(); pid != 0 {
		d = procCPU(pid)
	}
	for _, m := range p.members {
		d += m.cpu()
	}
	return d
}

func startProc(name string, cmd *exec.Cmd) (*proc, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case line, ok := <-lines:
		var ready struct {
			Port int `json:"port"`
		}
		if !ok || json.Unmarshal([]byte(line), &ready) != nil || ready.Port == 0 {
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("%s did not report its port (got %q)", name, line)
		}
		return &proc{name: name, cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d/mcp", ready.Port)}, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s did not start within 30s", name)
	}
}

func startOurs(store, db string, extra ...string) (*proc, error) {
	return startOursEnv(nil, store, db, extra...)
}

// startOursEnv starts the bench server with env added to this process's
// environment.
func startOursEnv(env []string, store, db string, extra ...string) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "-store", store}
	if db != "" {
		args = append(args, "-db", db)
	}
	name := "taskbridge/" + store
	if len(extra) > 0 {
		name += " " + strings.Join(extra, " ")
	}
	cmd := exec.Command(self, append(args, extra...)...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
		name += " " + strings.Join(env, " ")
	}
	p, err := startProc(name, cmd)
	if err != nil {
		return nil, err
	}
	p.debug = true
	return p, nil
}

// nodeDir finds integration/node from the working directory upward and
// installs its packages if needed.
func nodeDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		cand := filepath.Join(dir, "integration", "node")
		if _, err := os.Stat(filepath.Join(cand, "package.json")); err == nil {
			if _, err := os.Stat(filepath.Join(cand, "node_modules")); err != nil {
				fmt.Fprintln(os.Stderr, "installing Node packages in", cand)
				cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
				cmd.Dir, cmd.Stdout, cmd.Stderr = cand, os.Stderr, os.Stderr
				if err := cmd.Run(); err != nil {
					return "", fmt.Errorf("npm ci: %w", err)
				}
			}
			return cand, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("integration/node not found: run from the repository")
		}
		dir = parent
	}
}

func startPeer() (*proc, error) {
	dir, err := nodeDir()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("node", "bench-peer.mjs")
	cmd.Dir = dir
	return startProc("typescript-sdk", cmd)
}

func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		if p.waited != nil {
			<-p.waited
		} else {
			_ = p.cmd.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// memMiB reads a process's resident memory from /proc: field is "VmRSS"
// (everything), "RssAnon" (heap, stacks) or "RssFile" (mapped file pages,
// which the kernel can drop at any time).
func memMiB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, field+":")), "%f", &kb)
			return kb / 1024
		}
	}
	return 0
}

// ---- helpers ----

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func medianDur(xs []time.Duration) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func ctxTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// loadCmd drives one server for profiling: `bench load -url URL -c 64 -d 10s -op task`.
func loadCmd(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	url := fs.String("url", "", "server URL (http://127.0.0.1:PORT/mcp)")
	conc := fs.Int("c", 64, "concurrent sessions")
	d := fs.Duration("d", 10*time.Second, "duration")
	op := fs.String("op", "task", "task, plain or ext (extension-dialect task round trips)")
	tools := fs.String("tools", "bench", "the tools called: bench (echo, work), conformance (greet, slow_compute) or 62 (promote_release, generate_report)")
	_ = fs.Parse(args)
	ts, ok := toolSets[*tools]
	if !ok {
		return fmt.Errorf("-tools %q: want bench, conformance or 62", *tools)
	}
	r, err := load{op: *op, conc: *conc, d: *d}.on(&proc{name: *url, url: *url, tools: ts})
	if err != nil {
		return err
	}
	fmt.Printf("%.0f ops/s, %d errors (first: %v), p50 %s p99 %s, %d ops\n", r.perSec(), r.errs, r.firstEr, ms(r.pct(0.5)), ms(r.pct(0.99)), r.ops)
	return nil
}
