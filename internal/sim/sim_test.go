package sim

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The simulation's test: TestSimulation runs the CI budget of seeds (each
// a plan of operations drawn from it, on the memory store or bbolt) and
// fails on any violation of an invariant that the Known table does not
// list; the known ones are logged with their reasons. A failure names the
// seed, the shortest plan it found that shows it, and how to replay it.
//
//	go test ./internal/sim -run TestSimulation                       # the CI budget
//	go test ./internal/sim -run TestSimulation -sim.seeds=500 -timeout 60m  # more seeds
//	go test ./internal/sim -run TestSimulation -sim.seed=42 -sim.trace -v  # replay one, every operation printed
//	go test ./internal/sim -run TestSimulation -sim.plan='start 1; crash; release 0 !' -sim.trace -v
//	... -sim.log                                                     # and the engine's logs
//
// A seed takes seconds to a minute (more on a loaded machine, and a
// failure's shrink takes minutes): pass go test's -timeout for more than
// the CI budget (its default, 10 minutes, holds about 100 seeds). The
// test starts no seed within startMargin of its deadline, and cuts the
// runs and shrinks under way endMargin before it: it says how many seeds
// ran, and fails when some did not.

var (
	flagSeeds  = flag.Int("sim.seeds", 0, "number of seeds to run (0: the CI budget); pass -timeout for more than about 100")
	flagFirst  = flag.Int64("sim.first", 1, "the first seed of a run of several")
	flagSeed   = flag.Int64("sim.seed", 0, "run this seed only (a replay)")
	flagPlan   = flag.String("sim.plan", "", "run this plan (operations separated by ;) with -sim.seed's tool behaviour")
	flagOps    = flag.Int("sim.ops", 0, "operations per seed (0: the default)")
	flagStore  = flag.String("sim.store", "", "memory or bbolt (default: every third seed on bbolt)")
	flagTrace  = flag.Bool("sim.trace", false, "print every operation, and the tasks at the end")
	flagShrink = flag.Int("sim.shrink", 40, "runs a failure's shrink may make (0: none)")
	flagLog    = flag.Bool("sim.log", false, "print the engine's logs (with -sim.trace: a replay's)")
)

// The CI budget: ciSeeds seeds of ciOps operations each, simRuns at once:
// about 60 s of go test -race on the 2 shared cores it was measured on
// (noisy), most of it waiting for the engine to rest.
const (
	ciSeeds = 24
	ciOps   = 120
	simRuns = 6 // seeds run at once
)

// The margins TestSimulation keeps before go test's deadline: it starts
// no seed within startMargin of it, and cuts the runs (and shrinks)
// under way endMargin before it (each at most a third of the time the
// test has).
const (
	startMargin = 2 * time.Minute
	endMargin   = 20 * time.Second
)

func TestSimulation(t *testing.T) {
	ops := *flagOps
	if ops == 0 {
		ops = ciOps
	}
	seeds := []int64{}
	switch {
	case *flagSeed != 0 || *flagPlan != "":
		seeds = append(seeds, *flagSeed)
	default:
		n := *flagSeeds
		if n == 0 {
			n = ciSeeds
		}
		for i := range n {
			seeds = append(seeds, *flagFirst+int64(i))
		}
	}
	var plan []Op
	if *flagPlan != "" {
		var err error
		plan, err = ParsePlan(*flagPlan)
		if err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu    sync.Mutex
		total runTotals
	)
	start := time.Now()
	ctx := context.Background()
	deadline, bounded := t.Deadline()
	noStart := startMargin
	if bounded {
		noStart = min(startMargin, time.Until(deadline)/3)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-min(endMargin, time.Until(deadline)/3)))
		defer cancel()
	}
	// Seeds run side by side (simRuns at once): a run mostly waits for
	// the engine to rest.
	sem := make(chan struct{}, simRuns)
	var wg sync.WaitGroup
	started, cut := 0, 0
	for _, seed := range seeds {
		sem <- struct{}{}
		if bounded && time.Until(deadline) < noStart {
			<-sem
			break // the rest would meet go test's deadline
		}
		started++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cfg := Config{Seed: seed, Ops: ops, Plan: plan, Store: storeFor(seed), Dir: t.TempDir()}
			if *flagTrace {
				cfg.Trace, cfg.Dump = os.Stdout, true
			}
			if *flagLog {
				cfg.Logger = slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelDebug}))
			}
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Errorf("seed %d: %v", seed, err)
				return
			}
			mu.Lock()
			total.add(res)
			if res.Ran < len(res.Plan) {
				cut++
			}
			mu.Unlock()
			for _, v := range res.Violations {
				if v.Known != "" && *flagTrace {
					t.Logf("seed %d, known: %s", seed, v)
				}
			}
			if bad := res.Unknown(); len(bad) > 0 {
				for _, v := range bad {
					t.Errorf("seed %d (%s store): %s", seed, cfg.Store, v)
				}
				reportShrunk(ctx, t, cfg, bad[0])
			}
		}()
	}
	wg.Wait()
	if started < len(seeds) || cut > 0 {
		t.Errorf("go test's deadline came first: %d of %d seeds started, %d of them cut short; pass -timeout (e.g. -timeout 60m for 300 seeds)", started, len(seeds), cut)
	}
	t.Logf("%d seeds, %d operations (%d tool calls, %d store writes, %d tasks, %d processes) in %s",
		started, total.ops, total.calls, total.writes, total.tasks, total.procs, time.Since(start).Round(time.Millisecond))
	t.Log(total.knownSummary())
}

// storeFor picks a seed's store: every third seed runs on bbolt.
func storeFor(seed int64) string {
	switch {
	case *flagStore != "":
		return *flagStore
	case seed%3 == 0:
		return "bbolt"
	}
	return "memory"
}

// reportShrunk shrinks the plan of a failed run to the shortest that
// still shows v's invariant, and says how to replay it.
func reportShrunk(ctx context.Context, t *testing.T, cfg Config, v Violation) {
	t.Helper()
	if *flagShrink <= 0 {
		t.Logf("replay: go test ./internal/sim -run TestSimulation -sim.seed=%d -sim.ops=%d -sim.store=%s -sim.trace -v", cfg.Seed, cfg.Ops, cfg.Store)
		return
	}
	cfg.SettleBound = 3 * time.Second
	plan, err := Shrink(ctx, cfg, func(w Violation) bool { return w.Invariant == v.Invariant }, *flagShrink)
	if err != nil {
		t.Logf("shrinking: %v", err)
		return
	}
	t.Logf("shortest plan found for [%s] (%d operations): %s", v.Invariant, len(plan), FormatPlan(plan))
	t.Logf("replay: go test ./internal/sim -run TestSimulation -sim.seed=%d -sim.store=%s -sim.plan='%s' -sim.trace -v", cfg.Seed, cfg.Store, FormatPlan(plan))
}

// runTotals add up runs.
type runTotals struct {
	ops, calls, tasks, procs int
	writes                   uint64
	known                    map[string]int
	seeds                    map[string][]int64
}

func (r *runTotals) add(res *Result) {
	r.ops += res.Ran
	r.calls += res.Calls
	r.tasks += res.Tasks
	r.procs += res.Processes
	r.writes += res.Writes
	if r.known == nil {
		r.known, r.seeds = map[string]int{}, map[string][]int64{}
	}
	for _, v := range res.Violations {
		if v.Known == "" {
			continue
		}
		r.known[v.Invariant]++
		if !slices.Contains(r.seeds[v.Invariant], res.Seed) {
			r.seeds[v.Invariant] = append(r.seeds[v.Invariant], res.Seed)
		}
	}
}

// knownSummary says which known invariants failed, how often and in
// which seeds: the gate, visible.
func (r *runTotals) knownSummary() string {
	if len(r.known) == 0 {
		return "no known invariant failed"
	}
	var b strings.Builder
	b.WriteString("known invariants that failed (the Known table; they do not fail the test):")
	names := make([]string, 0, len(r.known))
	for k := range r.known {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		seeds := r.seeds[k]
		slices.Sort(seeds)
		fmt.Fprintf(&b, "\n  %-22s %3d times, seeds %v: %s", k, r.known[k], seeds, Known[k])
	}
	return b.String()
}

// TestFoundPlans replays the shortest plan found for each bug the
// simulation found (testdata/found-plans.tsv), each a few times (the
// engine's own concurrency may make a plan pass on a given run): none may
// break its invariant again. Each line is a regression test.
func TestFoundPlans(t *testing.T) {
	raw, err := os.ReadFile("testdata/found-plans.tsv")
	if err != nil {
		t.Fatal(err)
	}
	const runs = 3
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 4 || strings.HasPrefix(line, "#") {
			continue
		}
		inv, store, planText := f[0], f[2], f[3]
		var seed int64
		fmt.Sscan(f[1], &seed)
		plan, err := ParsePlan(planText)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("%s/seed%d", inv, seed), func(t *testing.T) {
			t.Parallel()
			for range runs {
				res, err := Run(context.Background(), Config{Seed: seed, Plan: plan, Store: store, Dir: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range res.Violations {
					t.Errorf("seed %d (%s store): %s", seed, store, v)
				}
			}
		})
	}
}
