package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// Config configures a simulation run.
type Config struct {
	// Seed draws the plan and every tool's behaviour.
	Seed int64
	// Ops is the number of operations to draw (when Plan is nil).
	Ops int
	// Plan, when set, is run instead of a drawn one (a replay, a shrink).
	Plan []Op
	// Store is "memory" (the default) or "bbolt"; Dir is where a bbolt
	// file goes (required for bbolt).
	Store string
	Dir   string
	// Trace, when set, receives a line per operation and per violation.
	Trace io.Writer
	// Logger receives the engine's logs; nil discards them.
	Logger *slog.Logger
	// StopAt, when set, stops the run at the first violation of an
	// invariant it accepts.
	StopAt func(Violation) bool
	// Dump, when set with Trace, writes every task's last state at the
	// end.
	Dump bool
	// SettleBound bounds how long (real time, as Rest.Bound counts it:
	// longer on a loaded machine) the engine may take to rest after an
	// operation before the task that does not rest is a violation
	// (settles); zero means 5 seconds.
	SettleBound time.Duration
}

// Result is what a run did and found.
type Result struct {
	// Seed and Plan are the run's; Ran counts the operations applied.
	Seed int64
	Plan []Op
	Ran  int
	// Violations are the invariants broken, in the order found.
	Violations []Violation
	// Processes, Calls and Writes count the processes started, the tool
	// calls made and the store writes committed; Tasks the tasks seen.
	Processes, Calls, Tasks int
	Writes                  uint64
	// Trace is one line per operation: what it did.
	Trace []string
}

// Unknown returns the violations that are not in the Known table.
func (r *Result) Unknown() []Violation {
	var out []Violation
	for _, v := range r.Violations {
		if v.Known == "" {
			out = append(out, v)
		}
	}
	return out
}

// Sim is one simulation run.
type Sim struct {
	cfg    Config
	world  *World
	ledger *ledger
	holds  holds
	check  *checker
	busy   atomic.Int64 // tool calls running that are not held

	mu       sync.Mutex
	op, at   int               // the running operation's index in the plan, and its At
	handles  map[string]string // task id -> handle
	roots    int               // roots named in the current op
	deploy   deploy
	excluded map[string]bool // catalogue workflows the engine refuses
	last     *continuation   // the client's last continuation
	trace    []string
}

// continuation is a client call the simulation made.
type continuation struct {
	id, tool string
	args     map[string]any
}

// Run runs a simulation: the plan (drawn from the seed unless given), one
// operation at a time, each followed by a wait until the engine rests
// and the invariants' checks. When ctx ends, the run stops at the
// operation under way (Result.Ran says how many ran), reporting nothing
// of it.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	plan := cfg.Plan
	if plan == nil {
		plan = Generate(cfg.Seed, cfg.Ops)
	}
	if cfg.SettleBound == 0 {
		cfg.SettleBound = 5 * time.Second
	}
	s := &Sim{cfg: cfg, ledger: newLedger(), handles: map[string]string{}, excluded: map[string]bool{}, deploy: deployV1}
	s.holds.calls = map[int]*held{}
	s.check = newChecker(s)
	clock := NewClock(Epoch)
	var st store.Store
	switch cfg.Store {
	case "", "memory":
		st = memory.New(&store.Options{Now: clock.Now})
	case "bbolt":
		b, err := bboltstore.Open(filepath.Join(cfg.Dir, "sim.db"), &bboltstore.Options{Options: store.Options{Now: clock.Now}, NoSync: true})
		if err != nil {
			return nil, err
		}
		st = b
	default:
		return nil, fmt.Errorf("sim: unknown store %q", cfg.Store)
	}
	disk := NewDisk(st)
	disk.Watch(s.check.watch)
	s.world = NewWorld(clock, disk, WorldOptions{
		Setup:    s.setup,
		Logger:   cfg.Logger,
		Workflow: workflow.Options{PromptWait: time.Millisecond},
		Router:   taskrouter.Options{DefaultTTL: 7 * 24 * time.Hour, MaxTTL: 30 * 24 * time.Hour},
	})
	defer s.world.Close()
	if err := s.startFirst(ctx); err != nil {
		return nil, err
	}
	res := &Result{Seed: cfg.Seed, Plan: plan}
	for i, o := range plan {
		if ctx.Err() != nil {
			break
		}
		s.setOp(i, o.At)
		began := time.Now()
		what := s.apply(ctx, o)
		applied := time.Since(began)
		s.settle(ctx)
		if ctx.Err() != nil {
			s.check.forget(i) // cut short: what it saw is not a finding
			break
		}
		s.check.atRest()
		line := fmt.Sprintf("%4d %-20s %s", i, o, what)
		if cfg.Trace != nil {
			line += fmt.Sprintf("  [%s + %s]", applied.Round(time.Millisecond), (time.Since(began) - applied).Round(time.Millisecond))
		}
		s.trace = append(s.trace, line)
		if cfg.Trace != nil {
			fmt.Fprintln(cfg.Trace, line)
		}
		res.Ran = i + 1
		if cfg.StopAt != nil && slices.ContainsFunc(s.check.violations(), cfg.StopAt) {
			break
		}
	}
	res.Violations = s.check.violations()
	if cfg.Trace != nil && cfg.Dump {
		s.dump(cfg.Trace)
	}
	if cfg.Trace != nil {
		for _, v := range res.Violations {
			fmt.Fprintln(cfg.Trace, "VIOLATION", v)
		}
	}
	res.Processes = s.world.procs
	res.Calls = len(s.ledger.all())
	res.Writes = disk.Seq()
	res.Trace = s.trace
	s.check.mu.Lock()
	res.Tasks = len(s.check.tasks)
	s.check.mu.Unlock()
	return res, nil
}

// setup registers the tools and the deploy's workflows on a process.
func (s *Sim) setup(b *builder.Builder, p *Process) error {
	s.addTools(b, p)
	s.mu.Lock()
	d, excluded := s.deploy, s.excluded
	s.mu.Unlock()
	for _, w := range workflowsOf(d) {
		if !excluded[w.Name] {
			b.TaskWorkflow(w)
		}
	}
	b.Schedule(schedule)
	return nil
}

// startFirst starts the first process; a catalogue workflow the engine
// refuses to register (a kind it no longer accepts there) is left out,
// named in the trace.
func (s *Sim) startFirst(ctx context.Context) error {
	_, err := s.world.Start(ctx)
	if err == nil {
		return nil
	}
	for _, w := range workflowsOf(deployBoth) {
		if strings.Contains(err.Error(), fmt.Sprintf("workflow %q", w.Name)) {
			s.excluded[w.Name] = true
			s.trace = append(s.trace, fmt.Sprintf("the engine refuses workflow %q: left out", w.Name))
		}
	}
	if len(s.excluded) == 0 {
		return err
	}
	_, err = s.world.Start(ctx)
	return err
}

// setOp says the i-th operation of the plan, drawn at place at, runs.
func (s *Sim) setOp(i, at int) {
	s.mu.Lock()
	s.op, s.at, s.roots = i, at, 0
	s.mu.Unlock()
}

// opAt is the running operation's place in the plan it was drawn in.
func (s *Sim) opAt() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at
}

func (s *Sim) opIndex() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.op
}

// handleOf names task id for the simulation, stably across replays and
// shrinks: a task the simulation started is "t<At>" (the place of the
// operation that started it in the plan it was drawn in), a child
// "<parent>/<step>", the task that undoes a cancelled one "<task>~undo",
// a fork "<task>~fork<At>", a leg "<task>~leg<At>", a scheduled one
// "s:<time>".
func (s *Sim) handleOf(id string) string {
	s.mu.Lock()
	if h, ok := s.handles[id]; ok {
		s.mu.Unlock()
		return h
	}
	s.mu.Unlock()
	t, err := s.world.Disk.Store().Get(context.Background(), id)
	var h string
	switch {
	case err != nil:
		h = "?" + shortID(id)
	case t.Labels[workflow.LabelParent] != "":
		h = s.handleOf(t.Labels[workflow.LabelParent]) + "/" + t.Labels[workflow.LabelParentStep]
	case t.Labels[workflow.LabelUndoOf] != "":
		h = s.handleOf(t.Labels[workflow.LabelUndoOf]) + "~undo"
	case t.Labels[workflow.LabelForkedFrom] != "":
		h = s.handleOf(t.Labels[workflow.LabelForkedFrom]) + "~fork" + fmt.Sprint(s.opAt())
	case t.Labels[workflow.LabelSchedule] != "":
		h = "s:" + t.Labels[workflow.LabelScheduledAt]
	case t.Labels[workflow.LabelLegOf] != "":
		h = s.handleOf(t.Labels[workflow.LabelLegOf]) + "~leg" + fmt.Sprint(s.opAt())
	default:
		s.mu.Lock()
		h = fmt.Sprintf("t%d", s.at)
		if s.roots > 0 {
			h += fmt.Sprintf(".%d", s.roots)
		}
		s.roots++
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.handles[id]; ok {
		return old
	}
	s.handles[id] = h
	return h
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}

// settle waits until the engine rests (World.Settle, on the checker's
// view of the tasks) and records the tasks that did not as violations.
func (s *Sim) settle(ctx context.Context) { s.settled(s.world.Settle(ctx, s.rest())) }

// rest is what the simulation waits for.
func (s *Sim) rest() Rest {
	return Rest{Busy: func() bool { return s.busy.Load() > 0 }, Restless: s.check.unrested, Bound: s.cfg.SettleBound}
}

// settled takes Settle's outcome: the moment the engine rested, or the
// tasks that did not.
func (s *Sim) settled(err error) {
	var re *RestlessError
	switch {
	case err == nil:
		s.check.settledAt(s.world.Clock.Now())
	case errors.As(err, &re):
		how := "kept working past " + s.cfg.SettleBound.String()
		if re.Quiet {
			how = "silent"
		}
		s.noteStuck(re.Why, re.Busy, how)
	default:
		s.check.mu.Lock()
		s.check.fail(InvNoPanic, "", "settle", "the next process did not start: %v", err)
		s.check.mu.Unlock()
	}
}

// noteStuck records the tasks that did not rest in time.
func (s *Sim) noteStuck(why []string, busy bool, how string) {
	s.check.mu.Lock()
	defer s.check.mu.Unlock()
	if len(why) == 0 {
		s.check.fail(InvSettles, "", "busy", "the engine did not rest (%s; a tool or store call kept running: %v)", how, busy)
		return
	}
	for _, w := range why {
		id, w, _ := strings.Cut(w, " ")
		inv := InvSettles
		f := s.check.tasks[id]
		if f != nil {
			f.stuck = f.seq
			if f.t != nil && f.t.Labels[workflow.LabelWorkflow] == "naps" {
				inv = InvLoopBody // a loop over a sleep
			}
			if f.p != nil && f.p.Paused != nil && f.p.Undo != nil {
				inv = InvPausedUndo // its compensation met the pause
			}
			if s.world.Disk.Refused(id) {
				inv = InvRefusal // a write of it was refused, and not made again
			}
		}
		s.check.fail(inv, id, w, "did not rest (%s): %s", how, w)
	}
}

// restart starts the next process (after a stop or a crash).
func (s *Sim) restart(ctx context.Context, why string) {
	if _, err := s.world.restart(ctx); err != nil {
		s.check.mu.Lock()
		s.check.fail(InvNoPanic, "", "restart", "the next process did not start (%s): %v", why, err)
		s.check.mu.Unlock()
	}
}

// errNothing is an operation that found nothing to act on.
var errNothing = errors.New("nothing to act on")

// dump writes every task's last state, then the ledger's calls.
func (s *Sim) dump(w io.Writer) {
	s.check.mu.Lock()
	ids := make([]string, 0, len(s.check.tasks))
	for id := range s.check.tasks {
		ids = append(ids, id)
	}
	s.check.mu.Unlock()
	slices.SortFunc(ids, func(a, b string) int { return strings.Compare(s.handleOf(a), s.handleOf(b)) })
	for _, id := range ids {
		s.check.mu.Lock()
		f := s.check.tasks[id]
		line := fmt.Sprintf("TASK %s %s %s %q wake=%v labels=%v", s.handleOf(id), id, f.t.Status, f.t.StatusMessage, f.t.WakeAt, f.t.Labels)
		if f.p != nil {
			line += " | " + summary(f.p)
		}
		s.check.mu.Unlock()
		fmt.Fprintln(w, line)
	}
	for _, c := range s.ledger.all() {
		fmt.Fprintf(w, "CALL %s (op %d, process %d, writes %d-%d)\n", c.String(), c.Op, c.Proc, c.StartWrite, c.EndWrite)
	}
}
