package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/service"
)

// Leases: the process running work for a task (a tool handler, or a
// workflow's server steps) holds the task's lease in the store, renews it,
// and fences every write of that work with the lease's epoch. When the
// process dies, its leases expire; on a shared store (several replicas)
// another process claims the task, which bumps the epoch, and resolves it
// by the same policy as a restart: retryable tools run again, others fail
// with a reason, workflows resume their due steps. A process that was only
// presumed dead (paused, partitioned) then finds its fenced writes refused
// (store.ErrFenced) and its work stopped: it cannot overwrite the new
// holder's work.
//
// On an exclusive store (bbolt, memory: one process holds it) no leases are
// taken at all: no other process can run a task, Start resolves every
// active task, and the bridge's in-process locks keep its own work apart.
// The lease calls below then cost nothing and fence nothing.

var errLeaseLost = errors.New("taskrouter: the task's lease was lost to another process")

// leases is the set of leases this process holds, by task id.
type leases struct {
	// How this process claims a lease, set once by NewRouter: in st, as
	// replica, for dur, on the engine's clock.
	st      store.Store
	replica string
	dur     time.Duration
	now     func() time.Time

	mu   sync.Mutex
	held map[string]*heldLease
}

// heldLease is one lease this process holds.
type heldLease struct {
	fence store.Fence
	// stop ends the work the lease covers when it is lost.
	stop func(cause error)
}

func (l *leases) add(id string, h *heldLease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		l.held = map[string]*heldLease{}
	}
	l.held[id] = h
}

// remove forgets lease h of task id; it reports whether h was held.
func (l *leases) remove(id string, h *heldLease) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[id] != h {
		return false
	}
	delete(l.held, id)
	return true
}

// holds reports whether h is still the lease held for task id.
func (l *leases) holds(id string, h *heldLease) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[id] == h
}

// has reports whether this process holds a lease of task id.
func (l *leases) has(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[id] != nil
}

func (l *leases) snapshot() map[string]*heldLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]*heldLease, len(l.held))
	for id, h := range l.held {
		out[id] = h
	}
	return out
}

// leaseWorkConfig configures the lease renewer and the takeover service.
type leaseWorkConfig struct {
	// Interval is how often the service runs: a third of the lease
	// duration for renewals, a quarter for takeovers (at least 10ms).
	Interval time.Duration
	// LeaseDuration is how long a lease lasts unless renewed; a renewal
	// that takes longer is given up.
	LeaseDuration time.Duration
	// ReplicaID names this process as the holder.
	ReplicaID string
	// Batch is how many expired leases one read takes (takeover); zero
	// means 64.
	Batch int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c leaseWorkConfig) withDefaults() leaseWorkConfig {
	if c.Batch == 0 {
		c.Batch = 64
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c leaseWorkConfig) validate(name string) error {
	check := service.Check{Service: name}
	check.Positive("Interval", c.Interval)
	check.Positive("LeaseDuration", c.LeaseDuration)
	check.Set("ReplicaID", c.ReplicaID)
	check.Count("Batch", c.Batch)
	return check.Err()
}

// renewerSignals are the lease renewer's test signals.
type renewerSignals struct {
	// Renewed: a round renewed this many leases.
	Renewed service.Signal[int]
	// Lost: the work of a lease that was not renewed was stopped (the
	// task's id).
	Lost service.Signal[string]
}

// leaseRenewer is the engine's service that renews the leases this
// process holds, and stops the work of those it could not renew.
type leaseRenewer struct {
	e       engineBase
	book    leaseBook // this process's leases (*leases)
	cfg     leaseWorkConfig
	loop    service.Loop
	signals renewerSignals
}

// leaseBook is this process's leases, as the renewer sees them (*leases).
type leaseBook interface {
	snapshot() map[string]*heldLease
	holds(id string, h *heldLease) bool
	remove(id string, h *heldLease) bool
}

func newLeaseRenewer(e engineBase, book leaseBook, cfg leaseWorkConfig) (*leaseRenewer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate("lease renewer"); err != nil {
		return nil, err
	}
	return &leaseRenewer{e: e, book: book, cfg: cfg}, nil
}

// Name names the service.
func (l *leaseRenewer) Name() string { return "lease renewer" }

// Start renews every Interval.
func (l *leaseRenewer) Start(ctx context.Context) error {
	l.loop.Start(ctx, l.cfg.Interval, service.Every(l.cfg.Interval, l.renew))
	return nil
}

// Stop ends the renewals (one in progress finishes first).
func (l *leaseRenewer) Stop() { l.loop.Stop() }

func (l *leaseRenewer) renew(ctx context.Context) {
	held := l.book.snapshot()
	if len(held) == 0 {
		return
	}
	// A renewal that takes longer than a lease is useless: give up and let
	// the next round try again rather than hang the renewals on a stuck
	// store.
	ctx, cancel := context.WithTimeout(ctx, l.cfg.LeaseDuration)
	defer cancel()
	ids := make([]string, 0, len(held))
	for id := range held {
		ids = append(ids, id)
	}
	renewed, err := l.e.Store().Renew(ctx, l.cfg.ReplicaID, l.cfg.Now().Add(l.cfg.LeaseDuration), ids)
	if err != nil {
		l.e.Logger().Warn("renewing leases", "leases", len(ids), "error", err)
		return
	}
	ok := make(map[string]bool, len(renewed))
	for _, id := range renewed {
		ok[id] = true
	}
	for id, h := range held {
		if !ok[id] {
			l.lostLease(ctx, id, h)
		}
	}
	l.signals.Renewed.Send(len(renewed))
}

// lostLease stops the work of a lease Renew did not renew, after reading
// the task to tell why: a lease the work itself gave up (its releasing
// write committed while Renew ran: no holder, the same epoch) is not lost
// and stops nothing; a task that ended (cancelled from another process,
// say) stops its work as ended, so the work reports the end rather than a
// takeover; otherwise another process holds it now.
func (l *leaseRenewer) lostLease(ctx context.Context, id string, h *heldLease) {
	if !l.book.holds(id, h) {
		return
	}
	t, err := l.e.Store().Get(ctx, id)
	cause := errLeaseLost
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && t.Status.Terminal()):
		cause = errEnded
	case err == nil && t.LeaseHolder == "" && t.LeaseEpoch == h.fence.Epoch:
		l.book.remove(id, h) // released by this process's own write
		return
	}
	if !l.book.remove(id, h) {
		return // released while the task was read
	}
	why := "another process holds it"
	if cause == errEnded {
		why = "the task ended or was deleted"
	}
	l.e.Logger().Warn("lease lost; stopping the task's work here", "task", id, "why", why)
	h.stop(cause)
	l.signals.Lost.Send(id)
}

// takeoverSignals are the takeover service's test signals.
type takeoverSignals struct {
	// TookOver: a task whose lease had expired was claimed and resolved
	// (its id).
	TookOver service.Signal[string]
}

// leaseTakeover is the engine's service that, on a shared store, claims
// the active tasks whose lease expired (their process stopped renewing)
// and resolves them as after a restart; and, when a replica has left
// since its last look (the registry's departures), hands the cancelled
// tasks to the kinds that may owe an effect of their cancel, as a start
// does (owedOfDeparted).
type leaseTakeover struct {
	e       engineBase
	res     resolver      // recovery (recover.go)
	place   takeoverPlace // the replicas' registry (*registry)
	cfg     leaseWorkConfig
	loop    service.Loop
	signals takeoverSignals
	// owedAt is the count of departures that the latest owed pass that
	// succeeded followed (the takeover's loop alone reads and writes it).
	owedAt uint64
}

// resolver is what the takeover needs of recovery (recover.go).
type resolver interface {
	// resolveTask resolves a task taken over as after a restart.
	resolveTask(ctx context.Context, t *store.Task, reason string) error
	// owed hands the cancelled tasks to the kinds that may owe an effect
	// of their cancel.
	owed(ctx context.Context) error
}

// takeoverPlace is what the takeover needs of the replicas' registry
// (*registry): where a task is served, and how many replicas left.
type takeoverPlace interface {
	placement
	departures() uint64
}

func newLeaseTakeover(e engineBase, res resolver, place takeoverPlace, cfg leaseWorkConfig) (*leaseTakeover, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate("lease takeover"); err != nil {
		return nil, err
	}
	return &leaseTakeover{e: e, res: res, place: place, cfg: cfg}, nil
}

// Name names the service.
func (l *leaseTakeover) Name() string { return "lease takeover" }

// Start takes over expired leases every Interval, and looks for what a
// replica that left owes (owedOfDeparted).
func (l *leaseTakeover) Start(ctx context.Context) error {
	l.loop.Start(ctx, l.cfg.Interval, service.Every(l.cfg.Interval, func(ctx context.Context) {
		if _, err := l.takeOver(ctx); err != nil {
			l.e.Logger().Warn("taking over expired leases", "error", err)
		}
		l.owedOfDeparted(ctx)
	}))
	return nil
}

// owedOfDeparted runs recovery.owed when a replica has left since the
// latest pass that succeeded (a failed one is tried again next round).
// A replica stopped between a cancel's write and the effect the write
// promised (a workflow's undo task) leaves it marked on the cancelled
// task, no lease expires for it (the task is terminal), and no start may
// come to find it. A round costs one read of a counter, and no store
// read, while no replica leaves; a departure costs one pass over the
// cancelled tasks (the status index, a page at a time) on each replica
// that sees it. Replicas that run it at once create an owed effect once:
// the kind makes it idempotent (the undo task's id is derived from the
// cancelled task's).
func (l *leaseTakeover) owedOfDeparted(ctx context.Context) {
	gone := l.place.departures()
	if gone == l.owedAt {
		return
	}
	if err := l.res.owed(ctx); err != nil {
		l.e.Logger().Warn("looking for what a replica that left owes; trying again", "error", err)
		return
	}
	l.owedAt = gone
}

// Stop ends the takeovers (one in progress finishes first).
func (l *leaseTakeover) Stop() { l.loop.Stop() }

// takeOver claims the active tasks whose lease has expired and resolves
// each as after a restart (see Start). It returns how many it took over.
func (l *leaseTakeover) takeOver(ctx context.Context) (int, error) {
	st, log := l.e.Store(), l.e.Logger()
	n := 0
	for {
		expired, err := st.ExpiredLeases(ctx, l.cfg.Now(), l.cfg.Batch)
		if err != nil || len(expired) == 0 {
			return n, err
		}
		progressed := false
		for _, t := range expired {
			if l.place.elsewhere(t) {
				continue // a live replica that serves it takes it over (replicas.go)
			}
			now := l.cfg.Now()
			claimed, err := st.Claim(ctx, t.ID, l.cfg.ReplicaID, now, now.Add(l.cfg.LeaseDuration))
			if err != nil {
				if errors.Is(err, store.ErrLeased) || errors.Is(err, store.ErrTerminal) || errors.Is(err, store.ErrNotFound) {
					continue // another replica was faster, or it ended
				}
				return n, err
			}
			progressed = true
			n++
			log.Info("took over a task whose process stopped renewing its lease", "task", t.ID, "previous", t.LeaseHolder, "epoch", claimed.LeaseEpoch)
			if err := l.res.resolveTask(ctx, claimed, ReasonTakeover); err != nil {
				log.Error("resolving a task taken over", "task", t.ID, "error", err)
			}
			l.signals.TookOver.Send(t.ID)
		}
		if !progressed {
			return n, nil
		}
	}
}

// A Lease is this process's claim on a task while it runs work for it (see
// Router.TryLease): its writes carry Fence, and Release gives it up.
type Lease struct {
	book *leases // this process's leases, which Release leaves
	id   string
	held *heldLease
	// Task is the task as claimed.
	Task *store.Task
}

// Fence is what the lease's writes must carry (store.Update.Fence); nil on
// an exclusive store, where no lease is taken.
func (l *Lease) Fence() *store.Fence {
	if l.held == nil {
		return nil
	}
	f := l.held.fence
	return &f
}

// Held reports whether the lease exists in the store (shared stores only).
func (l *Lease) Held() bool { return l.held != nil }

// Release stops renewing the lease. The store's lease itself is released
// by a write with store.Update.ReleaseLease (or a terminal status); if
// neither happens it simply expires. Call Release before such a write, not
// after: a renewal that runs after the write committed would find the
// lease gone and stop the work as if another process had taken it over.
// The lease's Fence stays usable for that write.
func (l *Lease) Release() {
	if l.held != nil {
		l.book.remove(l.id, l.held)
	}
}

// TryLease claims task id for this process while it runs work for the
// task outside a tool handler (the workflow bridge's server steps), and
// keeps it renewed until Release. If the lease is lost, the task's
// tracked work (Track) is stopped with Stopped reporting StopLeaseLost.
// When another process holds a valid lease it fails at once with an
// error matching store.ErrLeased (the caller tries again later, or
// leaves the task to that process). A terminal or unknown task fails
// with the store's error.
func (r *Router) TryLease(ctx context.Context, id string) (*Lease, error) {
	if !r.shared {
		t, err := r.st.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if t.Status.Terminal() {
			return nil, fmt.Errorf("%w: task %s is %s", store.ErrTerminal, id, t.Status)
		}
		return &Lease{book: &r.leases, id: id, Task: t}, nil
	}
	t, err := r.leases.claim(ctx, id)
	if err != nil {
		return nil, err
	}
	return r.AdoptLease(t), nil
}

// AdoptLease keeps renewing the lease of t, which this process already
// holds (it created t with CreateOptions.Lease, or the engine claimed it
// for a takeover or a wake-up), until Release. On an exclusive store it
// returns a Lease that fences nothing (no lease is needed there). On a
// shared store it returns nil when this process does not hold t's lease.
func (r *Router) AdoptLease(t *store.Task) *Lease {
	id := t.ID
	if !r.shared {
		return &Lease{book: &r.leases, id: id, Task: t}
	}
	if t.LeaseHolder != r.opts.ReplicaID {
		return nil
	}
	h := &heldLease{fence: t.Fence(), stop: func(cause error) { r.runs.stop(id, cause) }}
	r.leases.add(id, h)
	return &Lease{book: &r.leases, id: id, held: h, Task: t}
}

// claim takes task id's lease for this process (shared stores): when it
// is free, expired, or already ours.
func (l *leases) claim(ctx context.Context, id string) (*store.Task, error) {
	now := l.now()
	return l.st.Claim(ctx, id, l.replica, now, now.Add(l.dur))
}
