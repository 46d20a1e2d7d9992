package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// A World is a server's life on a simulated clock: one Disk that outlives
// its processes, and the process that runs on it now (a builder.Server:
// the real router and workflow bridge, with a go-sdk client connected in
// memory). A process stops gracefully (Stop: the server's Close) or
// crashes (Crash: its Conn refuses everything from that moment, as a
// killed process makes no more writes, and its memory is dropped); Start
// runs the next one on the same Disk, which recovers what the last one
// left, as a restarted server does.

// Tick is how often, in real time, a process's scheduler and sweeper look
// at the store. They read the simulated clock: a wake-up the simulation's
// clock reached is run within a Tick of real time.
const Tick = 2 * time.Millisecond

// WorldOptions configure a World.
type WorldOptions struct {
	// Setup registers a process's tools and workflows on its builder; it
	// runs for every process (a deploy changes what it registers).
	Setup func(b *builder.Builder, p *Process) error
	// Router and Workflow are the processes' options; the World sets the
	// clock, the store, the scheduler's tick and the replica id.
	Router   taskrouter.Options
	Workflow workflow.Options
	// Logger receives the engine's logs; nil discards them.
	Logger *slog.Logger
	// OnCrash is told when a process crashes (an armed crash fired, or
	// Crash), before the process is closed: the tools it was running
	// must return now.
	OnCrash func(p *Process)
}

// World is a server across its processes.
type World struct {
	Clock *Clock
	Disk  *Disk
	opts  WorldOptions

	mu    sync.Mutex
	proc  *Process
	procs int
}

// Process is one run of the server on the World's Disk.
type Process struct {
	// N numbers the World's processes from 1.
	N int
	// Conn is the process's connection to the Disk.
	Conn *Conn
	// Server is the process's server; Session a client connected to it.
	Server  *builder.Server
	Session *mcp.ClientSession
	// Data is the Setup's own value for the process (its tools' state).
	Data any

	once sync.Once
}

// NewWorld returns a World on disk with its clock; Start runs its first
// process.
func NewWorld(clock *Clock, disk *Disk, opts WorldOptions) *World {
	return &World{Clock: clock, Disk: disk, opts: opts}
}

// Process returns the process running now (nil between a stop and the
// next start).
func (w *World) Process() *Process {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.proc
}

// Start runs a new process on the Disk: the engine recovers the tasks
// the last one left.
func (w *World) Start(ctx context.Context) (*Process, error) {
	w.mu.Lock()
	if w.proc != nil {
		w.mu.Unlock()
		return nil, errors.New("sim: a process runs already")
	}
	w.procs++
	p := &Process{N: w.procs}
	w.mu.Unlock()
	p.Conn = w.Disk.Open(p.N)
	ro := w.opts.Router
	ro.Now = w.Clock.Now
	ro.SweepInterval = Tick
	ro.ReplicaID = fmt.Sprintf("sim-%d", p.N)
	if ro.Logger == nil {
		ro.Logger = w.opts.Logger
	}
	b := builder.New("sim", "1").WithStore(p.Conn).WithoutEnv().
		WithRouterOptions(ro).WithWorkflowOptions(w.opts.Workflow)
	if w.opts.Logger != nil {
		b.WithLogger(w.opts.Logger)
	}
	if w.opts.Setup != nil {
		if err := w.opts.Setup(b, p); err != nil {
			return nil, err
		}
	}
	srv, err := b.Build(ctx)
	if err != nil {
		p.Conn.Crash()
		return nil, fmt.Errorf("sim: starting process %d: %w", p.N, err)
	}
	p.Server = srv
	tr, err := srv.Connect(ctx)
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	caps := &mcp.ClientCapabilities{}
	caps.AddExtension(mcptask.ExtensionID, nil)
	c := mcp.NewClient(&mcp.Implementation{Name: "sim-client", Version: "1"}, &mcp.ClientOptions{Capabilities: caps})
	if p.Session, err = c.Connect(ctx, tr, nil); err != nil {
		_ = srv.Close()
		return nil, err
	}
	w.mu.Lock()
	w.proc = p
	w.mu.Unlock()
	return p, nil
}

// Stop stops the running process gracefully (the server's Close: the
// steps running are handed back), then cuts its Conn.
func (w *World) Stop() {
	p := w.take()
	if p == nil {
		return
	}
	p.close()
}

// Crash kills the running process: from now on its Conn makes no write
// and answers no read, the tools it runs are told (OnCrash), and it is
// closed (a crashed process's goroutines cannot reach the Disk any more).
func (w *World) Crash() {
	p := w.take()
	if p == nil {
		return
	}
	p.Conn.Crash()
	if w.opts.OnCrash != nil {
		w.opts.OnCrash(p)
	}
	p.close()
}

// Crashed reports whether the running process's Conn crashed (an armed
// crash fired); the World has not replaced it yet.
func (w *World) Crashed() bool {
	p := w.Process()
	return p != nil && p.Conn.Dead()
}

func (w *World) take() *Process {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.proc
	w.proc = nil
	return p
}

// close closes the process's client and server, then its Conn.
func (p *Process) close() {
	p.once.Do(func() {
		if p.Session != nil {
			_ = p.Session.Close()
		}
		if p.Server != nil {
			_ = p.Server.Close()
		}
		p.Conn.Crash()
	})
}

// Close ends the World: its process stops (gracefully) and the Disk is
// closed.
func (w *World) Close() error {
	w.Stop()
	return w.Disk.Close()
}

// Rest says what a World waits for when it waits until the engine rests
// (Settle), and how long it waits.
type Rest struct {
	// Busy reports calls in progress that the engine is not done with
	// (tool calls that are not held); nil: none are tracked.
	Busy func() bool
	// Restless says why tasks do not rest at now (empty when they all
	// do); nil: Restless reads the Disk's active tasks.
	Restless func(now time.Time) []string
	// Held reports a tool call of task id's record at path that the
	// caller holds on purpose (it does not keep the engine busy): used
	// by the default Restless.
	Held func(id, path string) bool
	// Bound bounds the wait (zero: 10 s); Quiet is how long the engine
	// may write nothing and run nothing while a task does not rest
	// before that task is found silent (zero: 1 s). Both count Settle's
	// looks (each about a millisecond, at most maxLook): on a loaded
	// machine they last longer in real time, never shorter.
	Bound, Quiet time.Duration
	// Restarted is told when Settle started the next process after a
	// crash (an armed crash fired).
	Restarted func(p *Process)
}

// ErrRestless is what Settle returns when a task did not rest: the
// error's message lists why, one task a line.
var ErrRestless = errors.New("sim: the engine did not rest")

// RestlessError is Settle's error: the tasks that did not rest, and
// why.
type RestlessError struct {
	// Why lists the tasks, each "id: why".
	Why []string
	// Quiet is set when the engine wrote nothing and ran nothing for
	// Rest.Quiet meanwhile (silence); otherwise it kept working past
	// Rest.Bound.
	Quiet bool
	// Busy is set when a call kept running to the end.
	Busy bool
}

func (e *RestlessError) Error() string {
	how := "kept working"
	if e.Quiet {
		how = "was silent"
	}
	return fmt.Sprintf("%v (it %s): %s", ErrRestless, how, strings.Join(e.Why, "; "))
}

// Unwrap makes a RestlessError match ErrRestless.
func (e *RestlessError) Unwrap() error { return ErrRestless }

// Settle waits until the engine rests: no store call and no tool call in
// progress (held calls aside), every task ended or waiting for something
// named (the client, an event, a child, a queue, a timer the scheduler
// will wake it for, a pause), and no write for a few looks in a row. A
// process that crashed meanwhile is closed and the next one started. A
// wake-up that failed (a refused write) waits out the scheduler's backoff
// on the simulated clock: the clock moves a second at a time while
// nothing else does. It returns a *RestlessError when a task did not
// rest.
func (w *World) Settle(ctx context.Context, r Rest) error {
	if r.Bound == 0 {
		r.Bound = 10 * time.Second
	}
	if r.Quiet == 0 {
		r.Quiet = time.Second
	}
	if r.Restless == nil {
		r.Restless = func(now time.Time) []string { return w.restless(ctx, now, r.Held) }
	}
	// The bounds count the looks' own time (looked): at most maxLook a
	// look, however late the look after it comes. On a loaded machine a
	// look may come long after the last; the engine's goroutines wait as
	// this one does, and that time is not the engine's to account for.
	// A task that does not rest is still found: every look counts.
	var looked, quietAt time.Duration // quietAt: looked at the last write, or the last look a call was in progress
	lastLook := time.Now()
	stable, last := 0, w.Disk.Seq()
	var stuckSince time.Time
	for ctx.Err() == nil {
		looked += min(time.Since(lastLook), maxLook)
		lastLook = time.Now()
		if w.Crashed() || w.Process() == nil {
			w.Crash()
			p, err := w.restart(ctx)
			if err != nil {
				return err
			}
			if r.Restarted != nil {
				r.Restarted(p)
			}
			stable, stuckSince, quietAt = 0, time.Time{}, looked
			continue
		}
		p := w.Process()
		now := w.Clock.Now()
		seq := w.Disk.Seq()
		busy := p.Conn.Busy() || r.Busy != nil && r.Busy()
		why := r.Restless(now)
		if !busy && len(why) == 0 && seq == last {
			if stable++; stable >= 4 {
				return nil
			}
		} else {
			stable = 0
		}
		if busy || seq != last {
			quietAt = looked
		}
		last = seq
		due := len(why) > 0 && allDue(why)
		switch {
		case len(why) > 0 && !due && looked-quietAt > r.Quiet:
			return &RestlessError{Why: why, Quiet: true, Busy: busy}
		case looked > r.Bound:
			return &RestlessError{Why: why, Busy: busy}
		case !busy && due:
			if stuckSince.IsZero() {
				stuckSince = time.Now()
			} else if time.Since(stuckSince) > 150*time.Millisecond {
				w.Clock.Advance(time.Second)
				stuckSince = time.Time{}
			}
		default:
			stuckSince = time.Time{}
		}
		time.Sleep(time.Millisecond)
	}
	return ctx.Err()
}

// maxLook is the most time one look of Settle counts against its
// bounds: a look takes a millisecond or a few on an idle machine.
const maxLook = 10 * time.Millisecond

// restart starts the next process, trying three times.
func (w *World) restart(ctx context.Context) (p *Process, err error) {
	for range 3 {
		if p, err = w.Start(ctx); err == nil {
			return p, nil
		}
	}
	return nil, err
}

// allDue reports reasons that are all wake-ups due.
func allDue(why []string) bool {
	for _, w := range why {
		if !strings.Contains(w, ": due: ") {
			return false
		}
	}
	return true
}

// restless reads the Disk's active tasks and says why each that does not
// rest does not (see Restless).
func (w *World) restless(ctx context.Context, now time.Time, held func(id, path string) bool) []string {
	active, err := w.Disk.Store().Active(ctx)
	if err != nil {
		return []string{"the store: " + err.Error()}
	}
	ended := func(id string) bool {
		t, err := w.Disk.Store().Get(ctx, id)
		return err != nil || t.Status.Terminal()
	}
	var out []string
	for _, t := range active {
		var p *workflow.Progress
		if t.Labels[taskrouter.LabelKind] == taskrouter.KindWorkflow {
			if p = progressOf(t); p == nil {
				out = append(out, t.ID+": no progress")
				continue
			}
		}
		if why := taskRestless(t, p, now, held, ended); why != "" {
			out = append(out, t.ID+": "+why)
		}
	}
	slices.Sort(out)
	return out
}

// Advance moves the clock d forward, stopping at every wake-up and
// expiry of an active task on the way (at most maxStops of them) and
// settling at each; at (nil: nobody) is told of each stop, with Settle's
// outcome there. It returns the number of stops and the first Settle
// error.
func (w *World) Advance(ctx context.Context, d time.Duration, maxStops int, r Rest, at func(now time.Time, err error)) (int, error) {
	target := w.Clock.Now().Add(d)
	stops := 0
	var first error
	for stops < maxStops && ctx.Err() == nil {
		next := w.nextTime(ctx, w.Clock.Now(), target)
		if next.IsZero() {
			break
		}
		w.Clock.Set(next)
		stops++
		err := w.Settle(ctx, r)
		if err != nil && first == nil {
			first = err
		}
		if at != nil {
			at(next, err)
		}
	}
	w.Clock.Set(target)
	return stops, first
}

// nextTime is the earliest wake-up or expiry of an active task after now
// and before to; zero for none.
func (w *World) nextTime(ctx context.Context, now, to time.Time) time.Time {
	active, err := w.Disk.Store().Active(ctx)
	if err != nil {
		return time.Time{}
	}
	var next time.Time
	for _, t := range active {
		for _, at := range []time.Time{t.WakeAt, t.ExpiresAt} {
			if !at.IsZero() && at.After(now) && at.Before(to) && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
	}
	return next
}
