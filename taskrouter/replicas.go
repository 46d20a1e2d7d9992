package taskrouter

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/service"
)

// Replicas and what they serve. Not every process can run every task: a
// workflow task runs on the workflow version it started with, and during
// a rolling deploy the old and the new processes serve different
// versions. Each process says in the store, by heartbeat, which keys it
// serves (the union of its Placer kinds' Serves; store.ReplicaRegistry),
// and the engine reads that registry before it takes a task up: the
// scheduler does not wake, and the takeover does not claim, a task whose
// key this process does not serve while a live replica serves it (that
// replica's own scheduler and takeover take it up). A task whose key no
// live replica serves is taken up as before, and its kind decides (the
// workflow bridge waits for a replica to serve the version, then fails
// the task saying so: ServedBy tells it since when none has). Temporal's
// worker versioning and DBOS's application versions route work the same
// way: a worker polls only for the versions it has.
//
// A replica is live while its latest heartbeat is within one
// LeaseDuration (it beats every third of one) and did not say it stops;
// Close writes that last heartbeat, so the others know at once. On an
// exclusive store the registry keeps the heartbeats of the processes
// that held the store before (one a minute): what they served, and
// until when.

// A Placer is implemented by a KindHandler whose tasks only some
// processes can run: the workflow bridge, whose tasks run on the
// workflow version they started with.
type Placer interface {
	// Serves lists the keys this process serves now (each a non-empty
	// string of at most store.MaxNameBytes bytes).
	Serves() []string
	// Needs returns the key a process must serve to run t; "" when any
	// process can.
	Needs(t *store.Task) string
}

// Served is what the registry says of one key (Router.ServedBy).
type Served struct {
	// Here reports that this process serves the key.
	Here bool
	// Live are the other replicas that serve it now, by name (none on an
	// exclusive store: one process holds it).
	Live []string
	// Last is the latest heartbeat of a replica (this one included) that
	// listed the key, live or not; zero when the registry has none (no
	// replica ever served it, or it was forgotten: the registry forgets
	// what was not seen for a week).
	Last time.Time
}

// replicaForget is how long the registry keeps what it has not seen.
const replicaForget = 7 * 24 * time.Hour

// exclusiveBeat is the heartbeat interval on an exclusive store, where no
// other process reads liveness: only the last times served matter.
const exclusiveBeat = time.Minute

// registryConfig configures the registry service.
type registryConfig struct {
	// Interval is the time between heartbeats.
	Interval time.Duration
	// Live is how long after its latest heartbeat a replica counts as
	// live.
	Live time.Duration
	// ReplicaID names this process.
	ReplicaID string
	// Shared is set on a store other processes share: only there do
	// other replicas count as live (see live).
	Shared bool
	// Now is the clock.
	Now func() time.Time
}

func (c registryConfig) validate() error {
	check := service.Check{Service: "replicas' registry"}
	check.Positive("Interval", c.Interval)
	check.Positive("Live", c.Live)
	check.Set("ReplicaID", c.ReplicaID)
	return check.Err()
}

// registrySignals are the registry service's test signals.
type registrySignals struct {
	// Beat: a heartbeat was written and the registry read (the number of
	// replicas it holds).
	Beat service.Signal[int]
}

// registry is the engine's service that heartbeats this process's keys
// and keeps the latest read of the registry. Its lock is a leaf: it
// guards the fields below it and nothing is called while it is held.
type registry struct {
	e       engineBase
	kinds   placements // the Placer kinds: the keys served, the key a task needs
	cfg     registryConfig
	loop    service.Loop
	signals registrySignals

	mu      sync.Mutex
	records []store.ReplicaRecord // the latest read
	serves  map[string]bool       // the keys of the latest heartbeat
	alive   map[string]bool       // the other replicas live at the latest read
	gone    uint64                // departures: see departures
}

// placements are the kinds' Placers (*kinds has them).
type placements interface {
	placers() []Placer
	placer(t *store.Task) Placer
}

func newRegistry(e engineBase, kinds placements, cfg registryConfig) (*registry, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &registry{e: e, kinds: kinds, cfg: cfg}, nil
}

// Name names the service.
func (g *registry) Name() string { return "replicas' registry" }

// Start writes the first heartbeat and reads the registry before it
// returns (the recovery that follows sees the other replicas), then
// beats every Interval.
func (g *registry) Start(ctx context.Context) error {
	g.beat(ctx, false)
	g.loop.Start(ctx, g.cfg.Interval, service.Every(g.cfg.Interval, func(ctx context.Context) { g.beat(ctx, false) }))
	return nil
}

// Stop ends the heartbeats with one that says this process stops.
func (g *registry) Stop() {
	g.loop.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Live)
	defer cancel()
	g.beat(ctx, true)
}

// keys returns the keys this process serves: those of its Placer kinds.
func (g *registry) keys() []string {
	var out []string
	for _, p := range g.kinds.placers() {
		out = append(out, p.Serves()...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// beat writes a heartbeat and reads the registry.
func (g *registry) beat(ctx context.Context, stopped bool) {
	now := g.cfg.Now()
	keys := g.keys()
	set := make(map[string]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	g.mu.Lock()
	g.serves = set
	g.mu.Unlock()
	hb := store.Heartbeat{Replica: g.cfg.ReplicaID, Serves: keys, At: now, Stopped: stopped, Forget: now.Add(-replicaForget)}
	if err := g.e.Store().Heartbeat(ctx, hb); err != nil {
		g.e.Logger().Warn("writing this process's heartbeat to the replicas' registry", "error", err)
		return
	}
	if stopped {
		return
	}
	if _, err := g.read(ctx); err != nil {
		g.e.Logger().Warn("reading the replicas' registry", "error", err)
		return
	}
}

// read reads the registry from the store and keeps it.
func (g *registry) read(ctx context.Context) ([]store.ReplicaRecord, error) {
	recs, err := g.e.Store().Replicas(ctx)
	if err != nil {
		return nil, err
	}
	now := g.cfg.Now()
	live := make(map[string]bool, len(recs))
	for i := range recs {
		if recs[i].ID != g.cfg.ReplicaID && g.live(&recs[i], now) {
			live[recs[i].ID] = true
		}
	}
	g.mu.Lock()
	g.records = recs
	for id := range g.alive {
		if !live[id] {
			g.gone++
		}
	}
	g.alive = live
	g.mu.Unlock()
	g.signals.Beat.Send(len(recs))
	return recs, nil
}

// departures counts the other replicas that one read of the registry
// found live and a later one did not (they stopped, or their heartbeats
// aged past Live: a crash). Each may have left behind an effect that a
// write of its promised and that it never carried out (a cancelled
// workflow's undo task): the takeover then hands the cancelled tasks to
// the kinds that may owe one (recovery.owed), as a start does.
func (g *registry) departures() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gone
}

// servesHere reports whether this process serves key.
func (g *registry) servesHere(key string) bool {
	g.mu.Lock()
	ok := g.serves[key]
	g.mu.Unlock()
	if ok {
		return true
	}
	// Registered since the latest heartbeat.
	return slices.Contains(g.keys(), key)
}

// served says what recs say of key at now.
func (g *registry) served(recs []store.ReplicaRecord, key string, now time.Time) Served {
	s := Served{Here: g.servesHere(key)}
	for i := range recs {
		rec := &recs[i]
		at, ok := rec.Serves[key]
		if !ok {
			continue
		}
		if at.After(s.Last) {
			s.Last = at
		}
		if g.cfg.Shared && rec.ID != g.cfg.ReplicaID && g.live(rec, now) && rec.ServesNow(key) {
			s.Live = append(s.Live, rec.ID)
		}
	}
	if s.Here && now.After(s.Last) {
		s.Last = now
	}
	return s
}

// live reports whether the replica of rec counts as live at now. On an
// exclusive store no other replica is: the records are of the processes
// that held the store before (a SIGKILLed one among them, whose
// heartbeats have not aged yet).
func (g *registry) live(rec *store.ReplicaRecord, now time.Time) bool {
	return !rec.Stopped && now.Sub(rec.SeenAt) < g.cfg.Live
}

// elsewhere reports whether another live replica serves the key t needs
// while this process does not, by the latest read of the registry: then
// the engine leaves t to that replica.
func (g *registry) elsewhere(t *store.Task) bool {
	p := g.kinds.placer(t)
	if p == nil {
		return false
	}
	key := p.Needs(t)
	if key == "" || g.servesHere(key) {
		return false
	}
	g.mu.Lock()
	recs := g.records
	g.mu.Unlock()
	return len(g.served(recs, key, g.cfg.Now()).Live) > 0
}

// servedBy reads the registry from the store and says who serves key
// (Router.ServedBy).
func (g *registry) servedBy(ctx context.Context, key string) (Served, error) {
	recs, err := g.read(ctx)
	if err != nil {
		return Served{}, err
	}
	return g.served(recs, key, g.cfg.Now()), nil
}
