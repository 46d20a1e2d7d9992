package taskrouter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/push"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/service"
)

// Push deliveries: from a task's event log to the records the scheduler
// delivers. The source of truth is the task's event log (store.Event),
// written in the same commit as the state it reports. After every write
// this process makes to a task some webhook watches (the fanout's
// changed and create), and, on a shared store, after every change the store's
// feed announces (a write of any replica), the task is queued for a scan:
// its events after the last one scanned are read, and each that a
// webhook asks for (mcptask.WebhookEventOf) becomes a delivery record: a
// task of kind KindPush whose id is derived from the webhook, the task
// and the event's number. So the same event makes the same delivery
// wherever and however often it is scanned: a second Create fails with
// store.ErrExists and changes nothing, and the id, sent as webhook-id,
// is the receiver's key for deduplication.
//
// A delivery record is due at once (WakeAt); the scheduler hands it to
// this kind's Wake hook (push_deliver.go), which claims its lease (on a
// shared store: one replica per attempt), POSTs it, and records the
// outcome: delivered, or the next attempt's time (its WakeAt: durable,
// on any replica, after a restart), or, past PushOptions.MaxAttempts or
// MaxAge, failed, which the webhook's record and the task's event log
// show.
//
// What a crash can cost: the scan runs just after the write commits. A
// process that dies in between leaves the event unscanned until the task
// is scanned again: at its next change, on a shared store at once by
// every other replica (they hear of the change from the feed), and on
// Start, which scans the active tasks and the tasks of the webhooks that
// watch one task. The end of a task watched by an owner's webhook, whose
// process died in the instant after it, on a store that no other process
// shares, is the one case no scan comes back for.

// webhooksSignals are the push service's test signals.
type webhooksSignals struct {
	// Scanned: a task's log was scanned (its id).
	Scanned service.Signal[string]
	// Attempted: a delivery attempt ended (the delivery's id).
	Attempted service.Signal[string]
}

// pushEngine is what push needs of the engine; *Router has it.
type pushEngine interface {
	// Store is the task store: the push records, the tasks' event logs.
	Store() store.Store
	Logger() *slog.Logger
	// Now is the engine's clock.
	Now() time.Time
	// TaskFor reads a task as requestor q may (a webhook for one task
	// needs the rights of tasks/get on it).
	TaskFor(ctx context.Context, q *Request, id string) (*store.Task, error)
	// TryLease claims a delivery's record for one attempt.
	TryLease(ctx context.Context, id string) (*Lease, error)
	// Update writes a task and tells its readers (a failed delivery in
	// its task's event log).
	Update(ctx context.Context, id string, u store.Update) (*store.Task, error)
}

// waker is told of the wake-up times push writes itself (a delivery's
// next attempt): the engine's scheduler.
type waker interface{ note(at time.Time) }

// webhooks is the engine's push service: the registrations (hookSet),
// the scans of task logs into deliveries, and the refresh of the
// registrations on a shared store. It is also the KindHandler of
// KindPush, the deliveries (push_deliver.go), whose attempts run on its
// own workers (push_workers.go).
type webhooks struct {
	e     pushEngine
	sched waker
	opts  PushOptions
	// sessionBound is Options.SessionBound: without it, what an
	// unauthenticated requestor registers is reachable by its id.
	sessionBound bool
	policy       urlPolicy
	hooks        hookSet
	scans        scanQueue
	pool         deliveryPool
	http         *http.Client
	loop         service.Loop
	signals      webhooksSignals
	jitter       func() float64 // in [0, 1); tests fix it
}

func newWebhooks(e pushEngine, sched waker, opts PushOptions, sessionBound bool) *webhooks {
	w := &webhooks{e: e, sched: sched, opts: opts, policy: opts.policy(), sessionBound: sessionBound}
	w.scans.w = w
	w.pool.init(opts)
	w.http = w.policy.client(opts.Timeout)
	w.jitter = rand.Float64
	for _, s := range opts.Hooks {
		w.hooks.add(staticHook(s))
	}
	return w
}

// Name names the service.
func (w *webhooks) Name() string { return "push deliveries" }

// Start loads the registrations, starts the scans, scans what a previous
// process may have left unscanned, and re-reads the registrations every
// RefreshInterval (on a shared store, those other replicas registered or
// deleted; on any, it forgets the webhooks of tasks whose records
// expired).
func (w *webhooks) Start(ctx context.Context) error {
	if w.opts.Disabled {
		return nil
	}
	if err := w.load(ctx); err != nil {
		return err
	}
	w.scans.start(defaultPushScanWorkers)
	every := w.opts.RefreshInterval
	first := true
	w.loop.Start(ctx, 0, func(ctx context.Context) time.Duration {
		if first {
			first = false
			w.rescan(ctx)
			return every
		}
		if err := w.load(ctx); err != nil {
			w.e.Logger().Warn("re-reading the webhooks", "error", err)
		}
		return every
	})
	return nil
}

// Stop ends the refreshes, the scans (those running finish first) and the
// delivery attempts (cut short: each is due again at once, uncounted).
func (w *webhooks) Stop() {
	w.loop.Stop()
	w.scans.stop()
	w.pool.stop()
}

// rescan queues for a scan the active tasks some webhook watches and the
// tasks of the webhooks that watch one task: what a process that died
// may have left unscanned.
func (w *webhooks) rescan(ctx context.Context) {
	if w.hooks.empty() {
		return
	}
	for _, h := range w.hooks.all() {
		if h.task != "" {
			w.scans.enqueue(h.task, nil)
		}
	}
	active, err := w.e.Store().Active(ctx)
	if err != nil {
		w.e.Logger().Warn("reading the active tasks to scan for push deliveries", "error", err)
		return
	}
	now := w.e.Now()
	for _, t := range active {
		if len(w.hooks.match(t, now)) > 0 {
			w.scans.enqueue(t.ID, t)
		}
	}
}

// changed queues a task this process just wrote for a scan, if a webhook
// watches it.
func (w *webhooks) changed(t *store.Task) {
	if w == nil || t == nil || w.opts.Disabled || len(w.hooks.match(t, w.e.Now())) == 0 {
		return
	}
	w.scans.enqueue(t.ID, t)
}

// feedChange queues a task another process (or this one) wrote, as the
// store's change feed announced it, if a webhook may watch it.
func (w *webhooks) feedChange(c store.Change) {
	if w == nil || w.opts.Disabled || c.Resync || c.Deleted || c.ID == "" || !w.hooks.mayWatch(c.ID) {
		return
	}
	w.scans.enqueue(c.ID, nil)
}

// scan reads task id's events after the last one scanned and makes the
// deliveries its webhooks ask for. t is the task as just written, or nil
// to read it.
func (w *webhooks) scan(ctx context.Context, sh *scanShard, id string, t *store.Task) {
	st, log := w.e.Store(), w.e.Logger()
	if t == nil {
		var err error
		if t, err = st.Get(ctx, id); err != nil {
			if !errors.Is(err, store.ErrNotFound) {
				log.Warn("reading a task to scan for push deliveries", "task", id, "error", err)
			}
			sh.forget(id)
			return
		}
	}
	now := w.e.Now()
	hooks := w.hooks.match(t, now)
	if len(hooks) == 0 {
		sh.forget(id)
		return
	}
	cur, known := sh.cursor(id)
	horizon := now.Add(-w.opts.Retention)
	// A delivery shows the task as read after the events it reports (t
	// may be older than them: the write that queued the scan).
	var fresh *store.Task
	current := func() *store.Task {
		if fresh == nil {
			if got, err := st.Get(ctx, id); err == nil {
				fresh = got
			} else {
				fresh = t
			}
		}
		return fresh
	}
	for {
		page, err := st.Events(ctx, id, cur, store.MaxPageSize)
		if errors.Is(err, store.ErrNotFound) {
			sh.forget(id)
			return
		}
		if err != nil {
			log.Warn("reading a task's events for push deliveries", "task", id, "error", err)
			return
		}
		for _, e := range page.Events {
			what, ok := mcptask.WebhookEventOf(e.Type, eventStatus(e))
			if !ok || e.At.Before(horizon) {
				continue
			}
			for _, h := range hooks {
				if h.wants(what) && h.since(e) {
					if err := w.deliver(ctx, h, current(), e, what, known); err != nil {
						log.Warn("making a push delivery", "task", id, "webhook", h.id, "seq", e.Seq, "error", err)
						return // scanned again at the task's next change
					}
				}
			}
		}
		if page.Last > cur {
			cur = page.Last
		}
		if len(page.Events) == 0 || cur >= page.Last {
			break
		}
	}
	if t.Status.Terminal() || fresh != nil && fresh.Status.Terminal() {
		sh.forget(id) // an ended task's last event is its end
	} else {
		sh.setCursor(id, cur)
	}
	w.signals.Scanned.Send(id)
}

// eventStatus is the status an EventStatus event reports, or "".
func eventStatus(e store.Event) mcptask.Status {
	if e.Type != mcptask.EventStatus {
		return ""
	}
	var se mcptask.StatusEvent
	_ = json.Unmarshal(e.Data, &se)
	return se.Status
}

// deliveryID names the delivery of event seq of task to webhook hook.
func deliveryID(hook, task string, seq uint64) string {
	sum := sha256.Sum256([]byte(hook + "\x00" + task + "\x00" + strconv.FormatUint(seq, 10)))
	return "whd_" + hex.EncodeToString(sum[:16])
}

// deliver stores the delivery of event e of task t to webhook h, due at
// once, unless it exists. known says the scan had a cursor, so e is new
// to it; otherwise e may have been scanned before (by a process gone
// since), and the record is looked for first: a read is cheaper than a
// refused write.
func (w *webhooks) deliver(ctx context.Context, h *webhook, t *store.Task, e store.Event, what mcptask.WebhookEvent, known bool) error {
	st := w.e.Store()
	id := deliveryID(h.id, t.ID, e.Seq)
	if !known {
		if _, err := st.Get(ctx, id); err == nil {
			return nil
		}
	}
	body, err := json.Marshal(push.Delivery{ID: id, Type: what, WebhookID: h.id, Task: CoreTask(t),
		Event: push.Event{Seq: e.Seq, Type: e.Type, At: mcptask.FormatTime(e.At), Data: e.Data}})
	if err != nil {
		return err
	}
	now := w.e.Now()
	rec := &store.Task{
		ID: id, Owner: deliveryOwnerPrefix + h.by, Status: mcptask.StatusWorking, CreatedAt: now, UpdatedAt: now,
		TTL: w.opts.MaxAge + w.opts.Retention, WakeAt: now,
		StatusMessage: "delivering to " + h.url,
		Request:       store.Request{Method: mcptask.MethodWebhooksDeliveries, Name: h.id},
		Labels: map[string]string{LabelKind: KindPush, labelPushTask: t.ID, labelPushSeq: strconv.FormatUint(e.Seq, 10),
			labelPushType: string(what), labelPushAttempts: "0"},
		Variables: map[string]json.RawMessage{varPushBody: body},
	}
	created, err := st.Create(ctx, rec)
	if errors.Is(err, store.ErrExists) {
		return nil
	}
	if err != nil {
		return err
	}
	w.sched.note(created.WakeAt)
	return nil
}

// scanQueue holds the tasks waiting for a scan, in shards: a task always
// goes to the same shard, whose one goroutine scans it, so that no task
// is scanned twice at once and its cursor has one writer.
type scanQueue struct {
	w      *webhooks
	mu     sync.Mutex
	shards []*scanShard
	done   sync.WaitGroup
	cancel context.CancelFunc
}

// scanShard is one shard: its queue (a task queued twice is scanned once,
// with the newest record), and the last event scanned of each task it
// follows. Its lock is a leaf.
type scanShard struct {
	mu      sync.Mutex
	order   []string
	queued  map[string]*store.Task // task id -> the record to scan (nil: read it)
	cursors map[string]uint64      // task id -> last event scanned
	wake    chan struct{}
}

// maxScanCursors bounds the cursors a shard keeps; beyond, it forgets
// them all (a task then scanned without a cursor looks for its records
// before making them).
const maxScanCursors = 1 << 16

func (q *scanQueue) start(n int) {
	ctx, cancel := context.WithCancel(context.Background())
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cancel = cancel
	q.shards = make([]*scanShard, n)
	for i := range q.shards {
		sh := &scanShard{queued: map[string]*store.Task{}, cursors: map[string]uint64{}, wake: make(chan struct{}, 1)}
		q.shards[i] = sh
		q.done.Add(1)
		go q.run(ctx, sh)
	}
}

func (q *scanQueue) stop() {
	q.mu.Lock()
	cancel := q.cancel
	q.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	q.done.Wait()
}

// enqueue queues task id for a scan; t is the record just written, or
// nil. Before start (or after stop) it does nothing.
func (q *scanQueue) enqueue(id string, t *store.Task) {
	sh := q.shard(id)
	if sh == nil {
		return
	}
	sh.mu.Lock()
	prev, queued := sh.queued[id]
	if !queued {
		sh.order = append(sh.order, id)
	}
	if t == nil || prev != nil && prev.Version > t.Version {
		t = prev
	}
	sh.queued[id] = t
	sh.mu.Unlock()
	select {
	case sh.wake <- struct{}{}:
	default:
	}
}

// rescan queues task id for a scan from its first event (its cursor
// forgotten): a webhook new to it may want events scanned before.
func (q *scanQueue) rescan(id string) {
	if sh := q.shard(id); sh != nil {
		sh.forget(id)
		q.enqueue(id, nil)
	}
}

// shard returns task id's shard, or nil before start.
func (q *scanQueue) shard(id string) *scanShard {
	q.mu.Lock()
	shards := q.shards
	q.mu.Unlock()
	if len(shards) == 0 {
		return nil
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return shards[h.Sum32()%uint32(len(shards))]
}

func (q *scanQueue) run(ctx context.Context, sh *scanShard) {
	defer q.done.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sh.wake:
		}
		for {
			id, t, ok := sh.pop()
			if !ok || ctx.Err() != nil {
				break
			}
			q.w.scan(ctx, sh, id, t)
		}
	}
}

func (sh *scanShard) pop() (string, *store.Task, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.order) == 0 {
		return "", nil, false
	}
	id := sh.order[0]
	sh.order = sh.order[1:]
	t := sh.queued[id]
	delete(sh.queued, id)
	return id, t, true
}

// cursor returns the last event of task id scanned, and whether it is
// known.
func (sh *scanShard) cursor(id string) (uint64, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c, ok := sh.cursors[id]
	return c, ok
}

func (sh *scanShard) setCursor(id string, seq uint64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.cursors) >= maxScanCursors {
		clear(sh.cursors)
	}
	sh.cursors[id] = seq
}

func (sh *scanShard) forget(id string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.cursors, id)
}
