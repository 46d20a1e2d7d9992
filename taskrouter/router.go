package taskrouter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/service"
)

// Labels the engine keeps on task records.
const (
	// LabelKind says what created the task: KindTool or KindWorkflow (or a
	// kind registered with Router.HandleKind).
	LabelKind = "kind"
	// LabelDialect records the dialect the task was created in
	// (mcptask.Dialect.Label: "core" or "ext").
	LabelDialect = "dialect"
	// labelAccess is set to accessByID on tasks created without an
	// authorization context while Options.SessionBound is off: any
	// unauthenticated requestor that knows the task id may read, wait on,
	// cancel and continue the task.
	labelAccess = "access"
	// accessByID is the value of labelAccess for id-capability tasks.
	accessByID = "id"

	// KindTool marks tasks created by task-augmented tools/call requests.
	KindTool = "tool"
	// KindWorkflow marks workflow tasks (package workflow).
	KindWorkflow = "workflow"
)

var (
	errShutdown = errors.New("taskrouter: server shutting down")
	errCanceled = errors.New("taskrouter: task cancelled")
	errExpired  = errors.New("taskrouter: task ttl elapsed")
	errTimeout  = errors.New("taskrouter: task timed out")
	errEnded    = errors.New("taskrouter: the task ended in another process")
)

// Router is the task engine: it creates durable tasks, runs task handlers
// in the background with bounded concurrency, wakes waiters, sweeps expired
// tasks and resolves work a dead process left behind. Install puts its MCP
// face (both wire dialects) onto an *mcp.Server.
//
// A Router is safe for concurrent use. Its zero value is not usable: call
// New.
type Router struct {
	opts Options // the effective options (defaults filled in)
	st   store.Store
	log  *slog.Logger
	obs  observer // Options.Observer
	// inputs are where the input requests of a task are (input.go).
	inputs pendingInputs

	server *mcp.Server
	// inner is the server's method handler below the router's middleware
	// (the SDK's own dispatch and anything installed before the router),
	// captured by Install. In-process tool calls go through it directly.
	inner mcp.MethodHandler
	loop  loopback

	// The router's state, in parts: each guards its fields with its own
	// lock. No part's lock is held while another's is taken (see doc.go,
	// "State").
	tools   toolRegistry // tools and their task behaviour (tools.go)
	runs    runTable     // handler runs and tracked work; closed (runs.go)
	quotas  quotas       // pending and running slots, waiters (admit.go)
	door    door         // admission: the quotas, shut by the runs' closing (admit.go)
	fan     fanout       // a task's change taken to the parts waiting on it (watch.go)
	watches watches      // waiters blocked until a task changes
	pushers pushConns    // shimmed connections to push task status to (push.go)
	peers   peers        // connections the server sends requests to (peer.go)

	shared  bool          // the store is shared by several processes (store.IsShared)
	poll    time.Duration // a waiter's re-read on a shared store (pollTick); 0 on an exclusive one
	leases  leases        // leases this process holds
	kinds   kinds         // hooks of the task kinds components drive
	fast    fastPath
	recent  recentEnded // tasks this process ended moments ago (recent.go)
	workers workers     // goroutines that run task handlers (workers.go)
	// listeners are the subscriptions/listen streams waiting for task
	// changes (feed.go).
	listeners listeners
	sinks     eventSinks // events tasks reported, waiting to be written (events.go)
	streams   streams    // readers of task events (stream.go)
	// streaming serves the readers of task events and the followers of
	// task status (Router.Streams).
	streaming *streaming
	pauses    *pauses        // pausing tasks (Router.Pauses; pause.go)
	taskTools *taskTools     // the built-in task tools (tasktools.go)
	recovery  *recovery      // the work of a process that is gone (recover.go)
	runsDone  sync.WaitGroup // handler runs (run.go)

	// The background work, each a service (package internal/service)
	// that services starts in Start and stops in Close.
	services service.Supervisor
	registry *registry      // the replicas' registry (replicas.go)
	feed     *changeFeed    // the store's change feed (feed.go)
	sched    *scheduler     // due wake-ups (schedule.go)
	sweeper  *sweeper       // expired tasks (sweep.go)
	renewer  *leaseRenewer  // this process's leases (lease.go)
	takeover *leaseTakeover // expired leases, on a shared store (lease.go)
	hooks    *webhooks      // push: webhooks and their deliveries (push_*.go)
	crons    *crons         // schedules' firings (schedules.go)

	startOnce sync.Once
}

// NewRouter returns a Router over st, the store of its task records. A
// nil opts means the defaults; NewRouter fills in every zero field and
// reports each invalid one by name. Call Install to serve it over MCP and
// Start to begin its background work and recover what a previous process
// left behind.
func NewRouter(st store.Store, opts *Options) (*Router, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o = o.withDefaults()
	err := o.validate()
	if st == nil {
		err = errors.Join(errors.New("taskrouter: NewRouter: the store is required"), err)
	}
	if err != nil {
		return nil, err
	}
	r := &Router{
		opts:   o,
		st:     st,
		log:    o.Logger,
		quotas: newQuotas(o),
		shared: store.IsShared(st),
	}
	if r.shared {
		r.poll = o.ChangePollInterval
		r.recent.margin = recentMargin
	}
	r.obs = observer{o.Observer}
	r.door = door{runs: &r.runs, quotas: &r.quotas}
	r.leases.st, r.leases.replica, r.leases.dur, r.leases.now = st, o.ReplicaID, o.LeaseDuration, o.Now
	r.pushers.log = o.Logger
	r.sinks.st, r.sinks.log, r.sinks.now, r.sinks.readers = st, o.Logger, o.Now, &r.streams
	r.fast.r = r
	r.inputs = pendingInputs{kinds: &r.kinds, runs: &r.runs, shared: r.shared}
	r.streaming = &streaming{e: r, feeds: &r.streams, listeners: &r.listeners, poll: r.poll, inputs: r.inputs}
	r.pauses = &pauses{st: st, kinds: &r.kinds}
	r.taskTools = &taskTools{e: r, kinds: &r.kinds, tools: &r.tools, pauses: r.pauses, hostDeadline: o.HostDeadline}

	// The background services, each on the narrow view of the engine it
	// needs (an interface *Router has, and the parts it reads).
	notifier, _ := st.(store.Notifier)
	r.feed = newChangeFeed(&r.fan, notifier)
	poll := o.SweepInterval
	beat := exclusiveBeat
	if r.shared {
		poll = o.ChangePollInterval
		beat = max(o.LeaseDuration/3, 10*time.Millisecond)
	}
	var errs [6]error
	r.registry, errs[0] = newRegistry(r, &r.kinds, registryConfig{Interval: beat, Live: o.LeaseDuration, ReplicaID: o.ReplicaID, Shared: r.shared, Now: o.Now})
	r.sched, errs[1] = newScheduler(r, &r.leases, r.registry, &r.kinds, schedulerConfig{Poll: poll, Shared: r.shared, ReplicaID: o.ReplicaID, Now: o.Now})
	r.recovery = &recovery{e: r, st: st, log: o.Logger, shared: r.shared, replica: o.ReplicaID, door: r.door, quotas: &r.quotas,
		kinds: &r.kinds, tools: &r.tools, leases: &r.leases, sched: r.sched}
	r.sweeper, errs[2] = newSweeper(r, &r.fan, &r.kinds, sweeperConfig{Interval: o.SweepInterval, Grace: o.ExpiredGrace, Now: o.Now})
	lease := leaseWorkConfig{LeaseDuration: o.LeaseDuration, ReplicaID: o.ReplicaID, Now: o.Now}
	lease.Interval = max(o.LeaseDuration/3, 10*time.Millisecond)
	r.renewer, errs[3] = newLeaseRenewer(r, &r.leases, lease)
	lease.Interval = max(o.LeaseDuration/4, 10*time.Millisecond)
	r.takeover, errs[4] = newLeaseTakeover(r, r.recovery, r.registry, lease)
	r.crons, errs[5] = newCrons(r, &r.tools, cronConfig{Poll: poll, Now: o.Now})
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	r.hooks = newWebhooks(r, r.sched, o.Push, o.SessionBound)
	// The feed and the sweeper hold &r.fan: it is filled once the parts
	// it reaches (the webhooks last) exist, before any change is made.
	r.fan = fanout{shared: r.shared, st: st, now: o.Now, obs: r.obs, sched: r.sched,
		watches: &r.watches, pushers: &r.pushers, listeners: &r.listeners, hooks: r.hooks,
		streams: &r.streams, recent: &r.recent, runs: &r.runs, quotas: &r.quotas}
	r.HandleKind(KindPush, r.hooks)
	return r, nil
}

// engineBase is what every background service needs of the engine: the
// store and the logger. *Router has it.
type engineBase interface {
	Store() store.Store
	Logger() *slog.Logger
}

// Options returns the effective options (defaults filled in).
func (r *Router) Options() Options { return r.opts }

// Store returns the router's store.
func (r *Router) Store() store.Store { return r.st }

// Logger returns the router's logger.
func (r *Router) Logger() *slog.Logger { return r.log }

// Now reads the router's clock (Options.Now).
func (r *Router) Now() time.Time { return r.opts.Now() }

// Server returns the server Install put the router on, or nil.
func (r *Router) Server() *mcp.Server { return r.server }

// HTTPHandler serves the installed server over Streamable HTTP in both
// dialects: requests at protocol 2026-07-28 and later go to a stateless
// SDK handler, older ones to a stateful one with sessions. Before the SDK
// sees a request, the handler checks and shims it, and it answers the
// task methods, tasks/stream and subscriptions/listen for tasks itself
// (http.go says what, and how).
func (r *Router) HTTPHandler(opts *HTTPOptions) http.Handler { return newHTTPShim(r, opts) }

// Transport wraps an MCP transport (stdio, in-memory, or any other
// persistent one) so core-dialect task-augmented calls reach the router and
// task status notifications can be pushed to the client. The wrapped
// connection answers the task methods itself (see fastpath.go).
func (r *Router) Transport(t mcp.Transport) mcp.Transport {
	return &taskTransport{inner: t, r: r}
}

// ServedBy reads the replicas' registry from the store and says who
// serves key: this process, the other live replicas, and when a replica
// last served it. A component asks it before it decides, in a durable
// write, about a task that needs key and that this process does not
// serve (the workflow bridge, for a version no longer served here).
func (r *Router) ServedBy(ctx context.Context, key string) (Served, error) {
	return r.registry.servedBy(ctx, key)
}

// Stats returns the engine's current load.
//
// The counts are read part by part (quotas, then runs), not under one
// lock, so they are a moment's view, not a snapshot: Tracked may be a
// moment newer than the rest. They were never exact anyway (Running is
// the semaphore's length, which changes outside any lock), and nothing
// relies on them adding up: they are for operators and observers.
func (r *Router) Stats() Stats {
	s := r.quotas.load()
	s.Tracked = r.runs.trackedCount()
	s.Queued = max(0, s.Pending-s.Running)
	return s
}

// The features, each a type of its own on a narrow view of the engine,
// reached through its handle (River's Client.PeriodicJobs is the model).

// Webhooks returns the router's webhooks (push; README "Push").
func (r *Router) Webhooks() *Webhooks { return &Webhooks{w: r.hooks} }

// Schedules returns the router's schedules (README "Schedules").
func (r *Router) Schedules() *Schedules { return &Schedules{c: r.crons} }

// Streams returns the router's readers of task events.
func (r *Router) Streams() *Streams { return &Streams{s: r.streaming} }

// Peers returns the router's peers (see the package's "Peers").
func (r *Router) Peers() *Peers { return &Peers{ps: &r.peers} }

// Pauses returns the router's pauses.
func (r *Router) Pauses() *Pauses { return &Pauses{p: r.pauses} }

// Queues returns the store's queues on the router's clock.
func (r *Router) Queues() *Queues { return &Queues{e: r} }

// Start resolves tasks left active by a previous process, hands the
// cancelled tasks to the kinds that may still owe an effect of a cancel
// (a workflow's undo task: recovery.owed), and starts the
// engine's background services: the replicas' registry (its first
// heartbeat, so that recovery knows which replicas serve what), the
// change feed and the push deliveries (first, so that no change is
// missed while recovering), then
// the scheduler, the ttl sweeper, the lease renewer, the schedules and,
// on a shared store, the takeover of expired leases. Call it once, after
// every tool and kind hook is registered and
// Install has run. Later calls do nothing.
func (r *Router) Start(ctx context.Context) error {
	var err error
	r.startOnce.Do(func() {
		if err = r.services.Start(ctx, r.registry, r.feed, r.hooks); err != nil {
			return
		}
		if r.shared {
			_, err = r.takeover.takeOver(ctx) // tasks whose process died, by their expired leases
		} else {
			err = r.recovery.restart(ctx)
		}
		err = errors.Join(err, r.recovery.owed(ctx))
		background := []service.Service{r.sched, r.sweeper, r.renewer, r.crons}
		if r.shared {
			background = append(background, r.takeover)
		}
		if serr := r.services.Start(ctx, background...); serr != nil {
			err = errors.Join(err, serr)
		}
	})
	return err
}

// Close stops the background services, cancels running handlers without
// recording an outcome (so a later Start resolves them by policy, as
// after a crash), and waits for them to return. It does not close the
// store.
func (r *Router) Close() error {
	ids, ok := r.runs.close()
	if !ok {
		return nil
	}
	for _, id := range ids {
		r.runs.stop(id, errShutdown)
	}
	r.services.Stop()
	r.listeners.closeAll()
	r.streams.closeAll()
	r.runsDone.Wait()
	r.workers.close()
	r.loop.close()
	r.fast.standIns.Close()
	return nil
}

// NewTaskID returns a new task id: 32 hex digits, the creation time in
// milliseconds (48 bits, big-endian) followed by 80 random bits.
//
// The random part keeps ids unguessable (a task id may act as a bearer
// token); the time prefix makes ids created close together sort close
// together, so a store's per-id records (the task, its result, history and
// events) are written at the end of their B+trees instead of on a random
// page each: a commit of many new tasks dirties a few pages, not one per
// task and bucket.
func NewTaskID() string {
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:])
	return hex.EncodeToString(b[:])
}
