package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/internal/pgserver"
)

// Rows 15, 16 and 18: what a request costs the server, in CPU time read
// from its process, side by side with the bare floor and the TypeScript
// peer in one run; syncs per task round trip on bbolt; issue 33's goals.
// Throughput on a shared machine swings with everything else that runs;
// CPU time per request does not, so the ratios hold.

// cell is one server, operation and client count of row 15, and what its
// rounds measured.
type cell struct {
	srv  *proc
	op   string
	conc int

	rates, cpus, dbs, loads []float64
	p50s, p99s              []time.Duration
	busy, total, others     time.Duration
	elapsed                 time.Duration // the windows' length, summed
	commits, storeOps       uint64
	commitTime              time.Duration // the store's own counter, summed
	syncs                   int64         // -1: not counted
	ops                     int
}

func (c *cell) add(r result) {
	c.rates = append(c.rates, r.perSec())
	c.cpus = append(c.cpus, r.cpuPerOp())
	c.dbs = append(c.dbs, perOp(r.use.db, r.ops))
	c.loads = append(c.loads, perOp(r.use.load, r.ops))
	c.p50s = append(c.p50s, r.pct(0.5))
	c.p99s = append(c.p99s, r.pct(0.99))
	c.busy += r.use.busy
	c.total += r.use.total
	c.others += r.use.others()
	c.elapsed += r.elapsed
	c.ops += r.ops
	if r.store != nil {
		c.commits += r.store.Commits
		c.storeOps += r.store.OpsCommitted
		c.commitTime += r.store.CommitTime
	}
	if r.syncs >= 0 {
		c.syncs = max(c.syncs, 0) + r.syncs
	}
}

// commitMean is the mean time of one of the store's commits over the
// cell's windows, by the store's own counters; 0 when it reported none.
func (c *cell) commitMean() time.Duration {
	if c.commits == 0 {
		return 0
	}
	return c.commitTime / time.Duration(c.commits)
}

func (c *cell) rate() float64 { return median(c.rates) }
func (c *cell) cpu() float64  { return median(c.cpus) }

// spread is how far the rounds' CPU per operation lay from their median,
// the largest deviation as a fraction of it.
func (c *cell) spread() float64 {
	m := c.cpu()
	if m == 0 {
		return 0
	}
	var d float64
	for _, x := range c.cpus {
		d = max(d, abs(x-m)/m)
	}
	return d
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// costServers are the servers row 15 loads; peer and pg are nil when
// not available.
type costServers struct {
	bolt, mem, pg, peer, floor *proc
	// noHost and sdk are taskbridge (bbolt) with host mode off (a plain
	// call runs in the request, as before host mode) and with the fast
	// path off (every request through go-sdk's dispatch): references for
	// plain calls.
	noHost, sdk *proc
	// window is taskbridge (bbolt) with a 2 ms commit window
	// (bboltstore.Options.CommitWindow, opt-in): task round trips at 64
	// clients.
	window *proc
	// conf and ex62 are the servers a user starts, as shipped
	// (startExample): examples/conformance and example 62.
	conf, ex62 *proc
}

// costCells lists row 15's cells: every server at 1 and 64 clients, plain
// calls and task round trips; extension-dialect round trips on taskbridge
// (bbolt) and the floor. Syncs are counted on bbolt.
func costCells(s costServers) []*cell {
	var cells []*cell
	add := func(p *proc, op string, conc int) {
		if p != nil {
			cells = append(cells, &cell{srv: p, op: op, conc: conc, syncs: -1})
		}
	}
	for _, conc := range []int{1, 64} {
		for _, op := range []string{"plain", "task"} {
			add(s.bolt, op, conc)
			add(s.conf, op, conc)
			add(s.ex62, op, conc)
			if conc == 64 {
				add(s.mem, op, conc)
				add(s.pg, op, conc)
			}
			add(s.peer, op, conc)
			add(s.floor, op, conc)
		}
	}
	add(s.window, "task", 64)
	add(s.bolt, "ext", 64)
	add(s.floor, "ext", 64)
	for _, conc := range []int{1, 64} {
		add(s.noHost, "plain", conc)
		add(s.sdk, "plain", conc)
	}
	return cells
}

// find returns the cell of p, op and conc, or nil.
func find(cells []*cell, p *proc, op string, conc int) *cell {
	for _, c := range cells {
		if p != nil && c.srv == p && c.op == op && c.conc == conc {
			return c
		}
	}
	return nil
}

// serverCost is rows 15, 16 and 18: it starts every server, runs each
// cell for o.cpuDuration per round, o.rounds rounds, rotating the order
// each round, and reports.
func serverCost(o options, tmp string, rep *report) error {
	var s costServers
	var err error
	var started []*proc
	var pg *pgserver.Server
	defer func() { // the servers first, then the database they use
		for _, p := range started {
			p.stop()
		}
		if pg != nil {
			_ = pg.Stop()
		}
	}()
	start := func(p *proc, err error) (*proc, error) {
		if p != nil {
			started = append(started, p)
		}
		return p, err
	}
	if s.bolt, err = start(startOurs("bbolt", filepath.Join(tmp, "cost.db"))); err != nil {
		return err
	}
	s.bolt.name = "taskbridge (bbolt)"
	if s.mem, err = start(startOurs("memory", "")); err != nil {
		return err
	}
	s.mem.name = "taskbridge (memory)"
	if s.noHost, err = start(startOurs("bbolt", filepath.Join(tmp, "cost-nohost.db"), "-host-deadline=-1s")); err != nil {
		return err
	}
	s.noHost.name = "taskbridge (bbolt, host mode off)"
	if s.sdk, err = start(startOurs("bbolt", filepath.Join(tmp, "cost-sdk.db"), "-no-fast-path")); err != nil {
		return err
	}
	s.sdk.name = "taskbridge (bbolt, fast path off)"
	if s.window, err = start(startOurs("bbolt", filepath.Join(tmp, "cost-window.db"), "-commit-window=2ms")); err != nil {
		return err
	}
	s.window.name = "taskbridge (bbolt, commit window 2 ms)"
	if s.conf, err = start(startExample(tmp, conformanceExample)); err != nil {
		return err
	}
	if s.ex62, err = start(startExample(tmp, example62)); err != nil {
		return err
	}
	if pg, err = pgserver.Start(pgserver.Options{}); err != nil {
		pg = nil
		fmt.Fprintln(os.Stderr, "  no PostgreSQL for row 15:", err)
	} else {
		ctx, cancel := ctxTimeout()
		err := pg.CreateDatabase(ctx, "cost")
		cancel()
		if err != nil {
			return fmt.Errorf("creating database: %w", err)
		}
		if s.pg, err = start(startOurs("postgres", pg.URL("cost"))); err != nil {
			return err
		}
		s.pg.name = "taskbridge (PostgreSQL)"
		s.pg.dbCPU = postmasterCPU(pg.DataDir())
	}
	if !o.skipPeer {
		if s.peer, err = start(startPeer()); err != nil {
			return fmt.Errorf("starting the TypeScript peer: %w (use -skip-peer to skip it)", err)
		}
		s.peer.name = "TypeScript SDK"
	}
	if s.floor, err = start(startFloor()); err != nil {
		return err
	}
	s.floor.name = "floor"
	cells := costCells(s)
	// Warm every server up on every operation first (Node compiles its
	// hot paths as it goes; Go's pools and the bbolt file grow).
	warm := map[string]bool{}
	profiling.row = "15-warmup"
	for _, c := range cells {
		if key := c.srv.name + " " + c.op; !warm[key] {
			warm[key] = true
			if _, err := (load{op: c.op, conc: 64, d: min(2*time.Second, o.cpuDuration)}).on(c.srv); err != nil {
				return fmt.Errorf("warming %s up: %w", key, err)
			}
		}
	}
	profiling.row = "15"
	for round := range o.rounds {
		for k := range cells {
			c := cells[(k+round*len(cells)/o.rounds)%len(cells)]
			r, err := load{op: c.op, conc: c.conc, d: o.cpuDuration, syncs: c.srv == s.bolt}.on(c.srv)
			if err != nil {
				return fmt.Errorf("%s %s at %d clients: %w", c.srv.name, c.op, c.conc, err)
			}
			if r.errs > 0 {
				return fmt.Errorf("%s %s at %d clients: %d errors, first: %v", c.srv.name, c.op, c.conc, r.errs, r.firstEr)
			}
			c.add(r)
			fmt.Fprintf(os.Stderr, "    %s %s c%d: %.0f/s, %.0f µs server CPU per op, machine %.0f%% busy\n",
				c.srv.name, c.op, c.conc, r.perSec(), r.cpuPerOp(), 100*float64(r.use.busy)/float64(max(r.use.total, 1)))
		}
	}
	costRows(s, cells, rep)
	exampleRows(s, cells, rep)
	syncRows(s, cells, rep)
	goalRows(s, cells, rep)
	shippedGoalRows(s, cells, rep)
	rep.note(costTable(o, cells))
	return nil
}

// opName names an operation in a row.
func opName(op string) string {
	switch op {
	case "plain":
		return "plain tools/call"
	case "task":
		return "task round trip (tools/call + tasks/result)"
	}
	return "extension round trip (tools/call + tasks/get)"
}

// opPlural names many of an operation.
func opPlural(op string) string {
	switch op {
	case "plain":
		return "plain calls"
	case "task":
		return "task round trips"
	}
	return "extension round trips"
}

// costRows is row 15: taskbridge's CPU per operation against the floor's
// and the peer's, and the other stores' against bbolt's.
func costRows(s costServers, cells []*cell, rep *report) {
	for _, conc := range []int{1, 64} {
		for _, op := range []string{"plain", "task", "ext"} {
			ours := find(cells, s.bolt, op, conc)
			if ours == nil {
				continue
			}
			for _, other := range []*proc{s.floor, s.peer} {
				if c := find(cells, other, op, conc); c != nil {
					rep.add(row{"15", fmt.Sprintf("server CPU per %s, %d client(s): taskbridge (bbolt) vs %s", opName(op), conc, other.name),
						fmt.Sprintf("%.0f µs", ours.cpu()), fmt.Sprintf("%.0f µs", c.cpu()), fmt.Sprintf("%.2f×", ours.cpu()/c.cpu()), "-", "-"})
				}
			}
		}
	}
	for _, conc := range []int{1, 64} {
		ours := find(cells, s.bolt, "plain", conc)
		for _, p := range []*proc{s.noHost, s.sdk} {
			if c := find(cells, p, "plain", conc); c != nil && ours != nil {
				rep.add(row{"15", fmt.Sprintf("server CPU per plain tools/call, %d client(s): taskbridge (bbolt) vs %s", conc, p.name),
					fmt.Sprintf("%.0f µs", ours.cpu()), fmt.Sprintf("%.0f µs", c.cpu()), fmt.Sprintf("%.2f×", ours.cpu()/c.cpu()), "-", "-"})
			}
		}
	}
	bolt := find(cells, s.bolt, "task", 64)
	for _, p := range []*proc{s.mem, s.pg, s.window} {
		if c := find(cells, p, "task", 64); c != nil && bolt != nil {
			ours := fmt.Sprintf("%.0f µs", c.cpu())
			if db := median(c.dbs); db > 0 {
				ours += fmt.Sprintf(" + %.0f µs PostgreSQL", db)
			}
			rep.add(row{"15", fmt.Sprintf("server CPU per task round trip, 64 clients: %s vs taskbridge (bbolt)", p.name),
				ours, fmt.Sprintf("%.0f µs", bolt.cpu()), fmt.Sprintf("%.2f×", c.cpu()/bolt.cpu()), "-", "-"})
		}
	}
}

// syncRows is row 16: fdatasync/fsync calls and bbolt commits per
// operation at 1 and 64 clients, from the same windows.
func syncRows(s costServers, cells []*cell, rep *report) {
	for _, conc := range []int{1, 64} {
		for _, op := range []string{"task", "plain"} {
			c := find(cells, s.bolt, op, conc)
			if c == nil || c.ops == 0 {
				continue
			}
			commits := float64(c.commits) / float64(c.ops)
			perCommit := "-"
			if c.commits > 0 {
				perCommit = fmt.Sprintf("%.1f writes per commit", float64(c.storeOps)/float64(c.commits))
			}
			syncs := "not counted (no perf)"
			if c.syncs >= 0 {
				syncs = fmt.Sprintf("%.3f fsyncs", float64(c.syncs)/float64(c.ops))
			}
			rep.add(row{"16", fmt.Sprintf("syncs per %s, %d client(s), bbolt: fdatasync+fsync calls (perf, syscall tracepoints) / store commits (the store's counters)", opName(op), conc),
				fmt.Sprintf("%s / %.3f commits", syncs, commits), perCommit, "-", "-", "-"})
		}
	}
}

// syncsPerOp is the cell's fsyncs per operation: counted by perf, or two
// per commit (bbolt's fdatasync pair) when perf was not there.
func (c *cell) syncsPerOp() (float64, string) {
	if c.syncs >= 0 {
		return float64(c.syncs) / float64(c.ops), "counted"
	}
	return 2 * float64(c.commits) / float64(c.ops), "2 per commit"
}

// goalRows is row 18: issue 33's goals, from row 15's cells.
func goalRows(s costServers, cells []*cell, rep *report) {
	goal := func(what, ours, other string, ratio float64, g string, ok bool) {
		rep.add(row{"18", what, ours, other, fmt.Sprintf("%.2f", ratio), g, met(ok)})
	}
	for _, op := range []string{"task", "plain"} {
		if a, b := find(cells, s.bolt, op, 64), find(cells, s.floor, op, 64); a != nil && b != nil {
			r := a.cpu() / b.cpu()
			goal(fmt.Sprintf("issue 33: server CPU per %s, 64 clients, taskbridge (bbolt) vs the floor", opName(op)),
				fmt.Sprintf("%.0f µs", a.cpu()), fmt.Sprintf("%.0f µs", b.cpu()), r, "≤ 3", r <= 3)
		}
	}
	for _, op := range []string{"task", "plain"} {
		if a, b := find(cells, s.bolt, op, 64), find(cells, s.peer, op, 64); a != nil && b != nil {
			r := a.rate() / b.rate()
			goal(fmt.Sprintf("issue 33: %s per second, 64 clients, taskbridge (bbolt) vs the TypeScript SDK (server CPU per op: %.2f× the peer's)", opPlural(op), a.cpu()/b.cpu()),
				fmt.Sprintf("%.0f/s", a.rate()), fmt.Sprintf("%.0f/s", b.rate()), r, "≥ 3", r >= 3)
		}
	}
	if t, p := find(cells, s.bolt, "task", 1), find(cells, s.bolt, "plain", 1); t != nil && p != nil {
		a, b := medianDur(t.p50s), medianDur(p.p50s)
		r := float64(a) / float64(b)
		goal("issue 33: 1 client, bbolt: task round trip p50 vs plain call p50", fmtMs(a), fmtMs(b), r, "≤ 2", r <= 2)
	}
	if c := find(cells, s.bolt, "task", 64); c != nil && c.ops > 0 {
		v, how := c.syncsPerOp()
		rep.add(row{"18", fmt.Sprintf("issue 33: fsyncs per task round trip, 64 clients, bbolt (%s)", how),
			fmt.Sprintf("%.3f", v), "-", "-", "≤ 0.25", met(v <= 0.25)})
	}
}

// costTable is row 15's detail: every cell with throughput, latency, the
// CPU time per operation of the server, its database and the load
// generator, and how busy the machine was (others: processes not
// measured: other users of the machine, idle servers).
func costTable(o options, cells []*cell) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Row 15 in detail: %d rounds of %s per cell, rotating; CPU time read from /proc/<pid>/stat (server, PostgreSQL's processes) and getrusage (the load generator, this process) before and after each window; medians over rounds, the CPU's spread is the largest deviation of a round from the median.\n\n", o.rounds, o.cpuDuration)
	b.WriteString("| server | operation | clients | ops/s | p50 | p99 | server CPU µs/op (spread) | server cores | DB µs/op | load generator µs/op | store commit (its counter) | machine busy | others (cores) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	sorted := append([]*cell(nil), cells...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].conc != sorted[j].conc {
			return sorted[i].conc < sorted[j].conc
		}
		return sorted[i].op < sorted[j].op
	})
	var spreads []float64
	for _, c := range sorted {
		cores := c.cpu() * c.rate() / 1e6
		db := "-"
		if x := median(c.dbs); x > 0 {
			db = fmt.Sprintf("%.0f", x)
		}
		busy := float64(c.busy) / float64(max(c.total, 1))
		commit := "-"
		if m := c.commitMean(); m > 0 {
			commit = fmt.Sprintf("%s × %.3f/op", fmtMs(m), float64(c.commits)/float64(max(c.ops, 1)))
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.0f | %s | %s | %.0f (±%.0f%%) | %.2f | %s | %.0f | %s | %.0f%% | %.2f |\n",
			c.srv.name, c.op, c.conc, c.rate(), fmtMs(medianDur(c.p50s)), fmtMs(medianDur(c.p99s)), c.cpu(), 100*c.spread(), cores,
			db, median(c.loads), commit, 100*busy, c.others.Seconds()/max(c.elapsed.Seconds(), 1e-9))
		spreads = append(spreads, c.spread())
	}
	sort.Float64s(spreads)
	if len(spreads) > 0 {
		fmt.Fprintf(&b, "\nNoise: the server CPU per operation of a round lay within ±%.0f%% of its cell's median (median cell ±%.0f%%).\n",
			100*spreads[len(spreads)-1], 100*spreads[len(spreads)/2])
	}
	return b.String()
}

// exampleRows is row 15 for the servers a user starts: each example as
// shipped against the bench's tuned server and the floor, per operation
// and client count, with the store's commit time beside each 1-client
// task row.
func exampleRows(s costServers, cells []*cell, rep *report) {
	for _, ex := range []*proc{s.conf, s.ex62} {
		for _, conc := range []int{1, 64} {
			for _, op := range []string{"plain", "task"} {
				c, tuned, fl := find(cells, ex, op, conc), find(cells, s.bolt, op, conc), find(cells, s.floor, op, conc)
				if c == nil || fl == nil {
					continue
				}
				ours := fmt.Sprintf("%.0f µs, p50 %s", c.cpu(), fmtMs(medianDur(c.p50s)))
				other := fmt.Sprintf("floor %.0f µs, p50 %s", fl.cpu(), fmtMs(medianDur(fl.p50s)))
				if tuned != nil {
					other += fmt.Sprintf("; bench server %.0f µs (%.2f×)", tuned.cpu(), c.cpu()/tuned.cpu())
				}
				if op == "task" && conc == 1 {
					if m := commitOf(c, find(cells, s.bolt, "task", 1)); m > 0 {
						ours += fmt.Sprintf(", commit %s", fmtMs(m))
					}
				}
				rep.add(row{"15", fmt.Sprintf("server CPU per %s, %d client(s): %s vs the floor (and the bench server)", opName(op), conc, ex.name),
					ours, other, fmt.Sprintf("%.2f×", c.cpu()/fl.cpu()), "-", "-"})
			}
		}
	}
}

// commitOf is the mean commit time a 1-client cell's server reported, or
// (a server that reports none: examples/conformance) the bench server's
// on the same disk in its own 1-client cell.
func commitOf(c, tuned *cell) time.Duration {
	if m := c.commitMean(); m > 0 {
		return m
	}
	if tuned != nil {
		return tuned.commitMean()
	}
	return 0
}

// latencySlack is what issue 43 allows a 1-client task round trip above
// the floor's and one commit.
const latencySlack = 250 * time.Microsecond

// shippedGoalRows is row 23: issue 43's goals, on the servers a user
// starts (examples/conformance as shipped; example 62 beside it).
func shippedGoalRows(s costServers, cells []*cell, rep *report) {
	goal := func(what, ours, other string, ratio float64, g string, ok bool) {
		rep.add(row{"23", what, ours, other, fmt.Sprintf("%.2f", ratio), g, met(ok)})
	}
	for _, ex := range []*proc{s.conf, s.ex62} {
		for _, op := range []string{"task", "plain"} {
			limit := map[string]float64{"task": 2.5, "plain": 2}[op]
			if a, b := find(cells, ex, op, 64), find(cells, s.floor, op, 64); a != nil && b != nil {
				r := a.cpu() / b.cpu()
				goal(fmt.Sprintf("issue 43: server CPU per %s, 64 clients, %s vs the floor", opName(op), ex.name),
					fmt.Sprintf("%.0f µs", a.cpu()), fmt.Sprintf("%.0f µs", b.cpu()), r, fmt.Sprintf("≤ %g", limit), r <= limit)
			}
		}
		for _, op := range []string{"task", "plain"} {
			if a, b := find(cells, ex, op, 64), find(cells, s.peer, op, 64); a != nil && b != nil {
				r := a.rate() / b.rate()
				goal(fmt.Sprintf("issue 43: %s per second, 64 clients, %s vs the TypeScript SDK (server CPU per op: %.2f× the peer's)", opPlural(op), ex.name, a.cpu()/b.cpu()),
					fmt.Sprintf("%.0f/s", a.rate()), fmt.Sprintf("%.0f/s", b.rate()), r, "≥ 3", r >= 3)
			}
		}
		if a, fl := find(cells, ex, "task", 1), find(cells, s.floor, "task", 1); a != nil && fl != nil {
			commit := commitOf(a, find(cells, s.bolt, "task", 1))
			p50, floor := medianDur(a.p50s), medianDur(fl.p50s)
			limit := floor + commit + latencySlack
			goal(fmt.Sprintf("issue 43: 1 client, %s: task round trip p50 vs the floor's p50 + one commit (the store's counter: %s) + 0.25 ms; above floor + commit: %s", ex.name, fmtMs(commit), fmtMs(p50-floor-commit)),
				fmtMs(p50), fmtMs(limit), float64(p50)/float64(limit), "≤ 1", p50 <= limit)
		}
	}
}
