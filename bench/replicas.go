package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/internal/rrproxy"
)

// takeoverLease is the lease of the replicas in the takeover measurement:
// short, so that a dead replica's task is taken over within seconds.
const takeoverLease = 2 * time.Second

// 10. Replicas on PostgreSQL: one replica on PostgreSQL vs one on bbolt;
// three replicas behind the round-robin proxy vs one; a task finished on
// one replica waking tasks/result on another; a replica killed while it
// runs a task, and another taking the task over. One durable PostgreSQL
// cluster (fsync on) serves every database; every process and the cluster
// are stopped on return, error or not.
func replicaScale(o options, tmp string, rep *report) (err error) {
	// A database per setup: the single replica and the three share no
	// change feed (NOTIFY is per database), and the takeover starts empty.
	pg, stop, err := startPostgres("one", "three", "takeover")
	if err != nil {
		return err
	}
	defer stop()
	var procs procSet
	defer procs.stopAll()

	// Row 1: one replica on PostgreSQL vs one on bbolt, each addressed
	// directly.
	one, err := procs.start("postgres", pg.URL("one"), "-replica", "one")
	if err != nil {
		return err
	}
	bolt, err := procs.start("bbolt", filepath.Join(tmp, "replicas-bbolt.db"))
	if err != nil {
		return err
	}
	one.dbCPU = postmasterCPU(pg.DataDir())
	sd, err := interleaved(o, 64, "task", one, bolt)
	if err != nil {
		return fmt.Errorf("PostgreSQL vs bbolt: %w", err)
	}
	r := []float64{sd[0].rate(), sd[1].rate()}
	bolt.stop()
	rep.add(row{"10", "task round trips, 64 clients: 1 replica on PostgreSQL vs 1 on bbolt (CPU: the replica's, then PostgreSQL's)",
		withCPU(fmt.Sprintf("%.0f tasks/s (PostgreSQL)", r[0]), sd[0].cpu()) + fmt.Sprintf(" + %.0f µs in PostgreSQL", sd[0].dbCPU()), withCPU(fmt.Sprintf("%.0f tasks/s (bbolt)", r[1]), sd[1].cpu()), fmt.Sprintf("%.2f", r[0]/r[1]), "≥ 0.7", met(r[0]/r[1] >= 0.7)})

	// Row 2: three replicas on one database behind the proxy vs one
	// replica (on a database of its own) behind a proxy of its own.
	var three []*proc
	for i := 1; i <= 3; i++ {
		p, err := procs.start("postgres", pg.URL("three"), "-replica", fmt.Sprintf("three-%d", i))
		if err != nil {
			return err
		}
		three = append(three, p)
	}
	proxy1, err := rrproxy.Listen("", baseURL(one.url))
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	defer proxy1.Close()
	proxy3, err := rrproxy.Listen("", baseURL(three[0].url), baseURL(three[1].url), baseURL(three[2].url))
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	defer proxy3.Close()
	proxy2, err := rrproxy.Listen("", baseURL(three[0].url), baseURL(three[1].url))
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	defer proxy2.Close()
	g3 := group("3 replicas behind the proxy", proxy3.URL+"/mcp", three...)
	g2 := group("2 replicas behind the proxy", proxy2.URL+"/mcp", three[0], three[1])
	g1 := group("1 replica behind the proxy", proxy1.URL+"/mcp", one)
	g3.dbCPU, g2.dbCPU, g1.dbCPU = one.dbCPU, one.dbCPU, one.dbCPU
	sd, err = interleaved(o, 64, "task", g3, g1, g2)
	if err != nil {
		return fmt.Errorf("3 replicas vs 1: %w", err)
	}
	r = []float64{sd[0].rate(), sd[1].rate()}
	busy := []float64{sd[0].busy, sd[1].busy}
	fmt.Fprintf(os.Stderr, "  requests per replica behind the proxy of three: %v\n", proxy3.Served())
	ratio := r[0] / r[1]
	rep.add(row{"10", fmt.Sprintf("task round trips, 64 clients: 3 replicas vs 1 on PostgreSQL (round-robin proxy); this machine has %d cores, shared with the load generator, the proxy and PostgreSQL: CPUs %.0f%% busy with 1 replica, %.0f%% with 3",
		runtime.NumCPU(), 100*busy[1], 100*busy[0]),
		withCPU(fmt.Sprintf("%.0f tasks/s (3 replicas)", r[0]), sd[0].cpu()), withCPU(fmt.Sprintf("%.0f tasks/s (1 replica)", r[1]), sd[1].cpu()), fmt.Sprintf("%.2f", ratio),
		"≥ 1.5 where the machine allows", met(ratio >= 1.5)})
	scaleOutRows(rep, []int{1, 2, 3}, []side{sd[1], sd[2], sd[0]})

	// Row 3: finished on A, waited for on B (and, to compare, on A).
	if err := crossWake(three[0], three[1], rep); err != nil {
		return fmt.Errorf("cross-replica wake-up: %w", err)
	}
	procs.stopAll() // the proxies close on return (a second Close would block)

	// Row 4: takeover.
	if err := takeover(pg.URL("takeover"), &procs, rep); err != nil {
		return fmt.Errorf("takeover: %w", err)
	}
	return nil
}

// procSet is the bench servers row 10 started, for stopping them all on
// return.
type procSet struct{ procs []*proc }

// start starts a bench server (see startOurs) and keeps it in the set.
func (s *procSet) start(store, db string, extra ...string) (*proc, error) {
	p, err := startOurs(store, db, extra...)
	if err != nil {
		return nil, fmt.Errorf("starting %s %s: %w", store, strings.Join(extra, " "), err)
	}
	s.procs = append(s.procs, p)
	return p, nil
}

// stopAll stops every server of the set not stopped yet (stopping one
// twice is harmless: the second Wait finds it gone).
func (s *procSet) stopAll() {
	for _, p := range s.procs {
		p.stop()
	}
	s.procs = nil
}

// baseURL is a bench server's URL without its /mcp path, as rrproxy wants
// its backends.
func baseURL(mcpURL string) string { return strings.TrimSuffix(mcpURL, "/mcp") }

// side is what interleaved measured on one server: ops/s, median latency
// and the server's (and its database's) CPU µs per operation per round,
// and how busy the machine's CPUs were (0 to 1, all processes) while that
// server was loaded.
type side struct {
	rates []float64
	p50s  []time.Duration
	cpus  []float64
	dbs   []float64
	// stmts and trips are the PostgreSQL statements and round trips per
	// operation (the servers' store counters), when they count them.
	stmts, trips []float64
	// loads is the bench process's CPU per operation: the load generator
	// and, for a group, the proxy in front of it.
	loads []float64
	busy  float64
}

// rate is the median ops/s over the rounds.
func (s side) rate() float64 { return median(s.rates) }

// cpu is the median server CPU µs per operation over the rounds.
func (s side) cpu() float64 { return median(s.cpus) }

// dbCPU is the median database CPU µs per operation over the rounds.
func (s side) dbCPU() float64 { return median(s.dbs) }

// interleaved runs op at conc clients against each server in turn,
// o.rounds times, starting each round with the next server so that none
// always goes first, and returns what it measured per server.
func interleaved(o options, conc int, op string, servers ...*proc) ([]side, error) {
	sides := make([]side, len(servers))
	busy, total := make([]time.Duration, len(servers)), make([]time.Duration, len(servers))
	for round := range o.rounds {
		for k := range servers {
			i := (round + k) % len(servers)
			r, err := load{op: op, conc: conc, d: o.duration}.on(servers[i])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", servers[i].name, err)
			}
			if r.errs > 0 {
				return nil, fmt.Errorf("%s: %d errors at %d clients, first: %v", servers[i].name, r.errs, conc, r.firstEr)
			}
			busy[i], total[i] = busy[i]+r.use.busy, total[i]+r.use.total
			sides[i].rates = append(sides[i].rates, r.perSec())
			sides[i].p50s = append(sides[i].p50s, r.pct(0.5))
			sides[i].cpus = append(sides[i].cpus, r.cpuPerOp())
			sides[i].dbs = append(sides[i].dbs, perOp(r.use.db, r.ops))
			sides[i].loads = append(sides[i].loads, perOp(r.use.load, r.ops))
			if r.store != nil && r.ops > 0 {
				sides[i].stmts = append(sides[i].stmts, float64(r.store.Statements)/float64(r.ops))
				sides[i].trips = append(sides[i].trips, float64(r.store.RoundTrips)/float64(r.ops))
			}
		}
	}
	for i := range sides {
		if total[i] > 0 {
			sides[i].busy = float64(busy[i]) / float64(total[i])
		}
	}
	return sides, nil
}

// cpuTicks reads the machine's busy and total CPU time (clock ticks, all
// CPUs) from /proc/stat; zeros where it cannot.
func cpuTicks() (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0
	}
	var idle uint64
	for i, f := range fields[1:] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0
		}
		if i >= 8 {
			break // guest time is counted in user time already
		}
		total += n
		if i == 3 || i == 4 { // idle, iowait
			idle += n
		}
	}
	return total - idle, total
}

// createTask starts a task-augmented call of tool (work or hold) with ms
// on s and returns the task id.
func createTask(ctx context.Context, s *session, tool string, ms int) (string, error) {
	raw, err := s.call(ctx, "tools/call", map[string]any{"name": tool, "arguments": map[string]any{"ms": ms}, "task": map[string]any{"ttl": 600000}})
	if err != nil {
		return "", err
	}
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if err := json.Unmarshal(raw, &created); err != nil || created.Task.TaskID == "" {
		return "", fmt.Errorf("no task in create reply %s", raw)
	}
	return created.Task.TaskID, nil
}

// finishedAt reads the Unix milliseconds the work tool put in its result.
func finishedAt(raw json.RawMessage) (float64, error) {
	var res struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || len(res.Content) == 0 || res.IsError {
		return 0, fmt.Errorf("unexpected result %s", raw)
	}
	var fin struct {
		FinishedAt float64 `json:"finishedAt"`
	}
	if err := json.Unmarshal([]byte(res.Content[0].Text), &fin); err != nil || fin.FinishedAt == 0 {
		return 0, fmt.Errorf("no finishedAt in result %s", raw)
	}
	return fin.FinishedAt, nil
}

// crossWake measures how soon a task that finishes on replica a wakes a
// blocking tasks/result on replica b (a's write, its notification through
// PostgreSQL, b's read), against the same wait on a itself: tasks of 20 ms
// created on a, waited for on b and on a in turn, one session each, 200
// samples each after 20 warm-up pairs.
func crossWake(a, b *proc, rep *report) error {
	const samples, warm, workMs = 200, 20, 20
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := newHTTPClient(3)
	defer client.CloseIdleConnections()
	creator, err := dial(ctx, client, a.url)
	if err != nil {
		return err
	}
	onA, err := dial(ctx, client, a.url)
	if err != nil {
		return err
	}
	onB, err := dial(ctx, client, b.url)
	if err != nil {
		return err
	}
	sample := func(waiter *session) (time.Duration, error) {
		id, err := createTask(ctx, creator, "work", workMs)
		if err != nil {
			return 0, err
		}
		raw, err := waiter.call(ctx, "tasks/result", map[string]any{"taskId": id})
		now := float64(time.Now().UnixNano()) / 1e6
		if err != nil {
			return 0, err
		}
		fin, err := finishedAt(raw)
		if err != nil {
			return 0, err
		}
		return time.Duration((now - fin) * float64(time.Millisecond)), nil
	}
	var cross, local []time.Duration
	for i := 0; i < samples+warm; i++ {
		c, err := sample(onB)
		if err != nil {
			return fmt.Errorf("waiting on B: %w", err)
		}
		l, err := sample(onA)
		if err != nil {
			return fmt.Errorf("waiting on A: %w", err)
		}
		if i >= warm {
			cross, local = append(cross, c), append(local, l)
		}
	}
	for _, xs := range [][]time.Duration{cross, local} {
		sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	}
	p := func(xs []time.Duration, q float64) time.Duration { return xs[int(float64(len(xs)-1)*q)] }
	rep.add(row{"10", "cross-replica wake-up: task finished on A → tasks/result returns on B, p50 / p99 (vs waiting on A itself)",
		ms(p(cross, 0.5)) + " / " + ms(p(cross, 0.99)), ms(p(local, 0.5)) + " / " + ms(p(local, 0.99)) + " (on A)",
		fmt.Sprintf("%.2f (p50)", float64(p(cross, 0.5))/float64(p(local, 0.5))), "p50 < 5 ms", met(p(cross, 0.5) < 5*time.Millisecond)})
	return nil
}

// takeover kills (SIGKILL) a replica while it runs a Retryable task and
// measures how soon the other replica takes the task over: from the kill
// to the moment tasks/get on the survivor shows the task re-running there
// (the engine's status message says so), three times, each with a new
// replica to kill; each re-run must then complete. Both replicas hold
// leases of takeoverLease.
func takeover(dbURL string, procs *procSet, rep *report) error {
	const kills, holdMs = 3, 2000
	lease := "-lease=" + takeoverLease.String()
	b, err := procs.start("postgres", dbURL, "-replica", "survivor", lease)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := newHTTPClient(2)
	defer client.CloseIdleConnections()
	onB, err := dial(ctx, client, b.url)
	if err != nil {
		return err
	}
	var took []time.Duration
	for k := 1; k <= kills; k++ {
		a, err := procs.start("postgres", dbURL, "-replica", fmt.Sprintf("victim-%d", k), lease)
		if err != nil {
			return err
		}
		onA, err := dial(ctx, client, a.url)
		if err != nil {
			return err
		}
		id, err := createTask(ctx, onA, "hold", holdMs)
		if err != nil {
			return err
		}
		// Kill at a random point of the lease's renewal cycle (every
		// lease/3), well before the task would end.
		time.Sleep(takeoverLease/6 + rand.N(takeoverLease/3))
		st, msg, err := taskStatus(ctx, onB, id)
		if err != nil {
			return err
		}
		if st != "working" {
			return fmt.Errorf("task %s is %s (%q) before the kill; want working", id, st, msg)
		}
		if err := a.cmd.Process.Kill(); err != nil {
			return fmt.Errorf("killing %s: %w", a.name, err)
		}
		killed := time.Now()
		for {
			st, msg, err = taskStatus(ctx, onB, id)
			if err != nil {
				return err
			}
			if strings.HasPrefix(msg, "re-running") || st != "working" {
				break
			}
			if time.Since(killed) > 30*time.Second {
				return fmt.Errorf("task %s not taken over 30s after the kill", id)
			}
			time.Sleep(5 * time.Millisecond)
		}
		d := time.Since(killed)
		if !strings.Contains(msg, "survivor") {
			return fmt.Errorf("task %s after the kill: %s, %q; want it re-running on the survivor", id, st, msg)
		}
		raw, err := onB.call(ctx, "tasks/result", map[string]any{"taskId": id})
		if err != nil {
			return fmt.Errorf("the re-run of task %s: %w", id, err)
		}
		if _, err := finishedAt(raw); err != nil {
			return fmt.Errorf("the re-run of task %s: %w", id, err)
		}
		a.stop() // reaps the killed process
		took = append(took, d)
		fmt.Fprintf(os.Stderr, "  kill %d: taken over after %s\n", k, d.Round(time.Millisecond))
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	worst := took[len(took)-1]
	rep.add(row{"10", fmt.Sprintf("takeover after a replica dies (SIGKILL) holding a running task: kill → re-running on the other replica, median / max of %d (lease %s)", kills, takeoverLease),
		fmt.Sprintf("%.2f s / %.2f s", medianDur(took).Seconds(), worst.Seconds()), fmt.Sprintf("lease %s", takeoverLease), "-",
		"within lease + 1 s", met(worst <= takeoverLease+time.Second)})
	return nil
}

// taskStatus returns a task's status and status message from tasks/get.
func taskStatus(ctx context.Context, s *session, id string) (string, string, error) {
	raw, err := s.call(ctx, "tasks/get", map[string]any{"taskId": id})
	if err != nil {
		return "", "", err
	}
	var t struct {
		Status        string `json:"status"`
		StatusMessage string `json:"statusMessage"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", "", fmt.Errorf("tasks/get reply %s: %w", raw, err)
	}
	return t.Status, t.StatusMessage, nil
}

// scaleOutRows is row 10's cost of scaling out: for 1, 2 and 3 replicas
// on one database, what a task round trip costs the replicas (their CPU,
// summed, and per replica: each serves 1/n of the requests), PostgreSQL
// (its processes' CPU) and the wire (statements and round trips, the
// replicas' store counters); docs/PERFORMANCE.md's saturation model reads
// them.
func scaleOutRows(rep *report, ns []int, sides []side) {
	for i, n := range ns {
		s := sides[i]
		// The saturation model (docs/PERFORMANCE.md) takes the replicas'
		// and PostgreSQL's CPU per request to be the same whatever the
		// number of replicas: the last column checks it.
		rep.add(row{"10", fmt.Sprintf("the cost of scaling out: %d replica(s) on one PostgreSQL, task round trips at 64 clients: replica CPU per request (each replica serves 1/%d of them; its cores busy) + PostgreSQL's + the load generator's and proxy's; statements / round trips per request", n, n),
			fmt.Sprintf("%.0f/s: %.0f µs (%.2f cores each) + %.0f µs PostgreSQL + %.0f µs load", s.rate(), s.cpu(), s.cpu()*s.rate()/1e6/float64(n), s.dbCPU(), median(s.loads)),
			fmt.Sprintf("%.1f / %.1f", median(s.stmts), median(s.trips)),
			fmt.Sprintf("%.2f× 1 replica's CPU per request (replicas + PostgreSQL)", (s.cpu()+s.dbCPU())/(sides[0].cpu()+sides[0].dbCPU())), "-", "-"})
	}
}
