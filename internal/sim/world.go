package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
