package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Queues. A step's runs (Step.OnQueue), or a whole workflow's tasks
// (Definition.OnQueue), can be placed on a named Queue: a run starts once
// it holds a place, and holds it until it ends, so that at most
// Concurrency runs hold places at once, at most PerKey per key (a
// repository: one deploy at a time per repo), at most Rate start per Per,
// higher Priority first. The places are decided in the store (see
// store.Queues), so the limits hold across replicas and restarts; a run
// waiting for a place is recorded (QueuePlace) and shown as queued: in the
// task's status message, the handoff, the dashboard and /metrics.
//
// The queue pass of a decision (plan.go). A slot's turn (attempt.go's
// runnable) needs a place before its attempt opens (queueTurn): the
// decision asks the queue for one (the effect takePlace, after its write)
// and the slot waits; the queue's answer is the next decision's event
// (answered): granted, the attempt opens; not, the slot waits, and the
// task wakes when an operation on the queue grants it (the operation's
// caller wakes it: wakeGranted), or to look again at QueuePlace.Next (the
// time rules). A decision frees the places of the slots that ended, were
// handed to the client or paused (freePlaces: the effect freePlace), and
// every place when the task ends. A task that ends otherwise (cancelled,
// expired) frees its places at once too (cancel.go): an entry of a task
// that is not active holds nothing in the store, and the runs waiting
// for its places are woken. A place freed by a write whose process
// stopped before the store heard of it is freed again at the next
// recovery (freeLost).

// A Queue is a named queue and its limits. Every workflow and step placed
// on the same name must use the same limits (registration checks it);
// replicas running the same code do.
type Queue struct {
	// Name names the queue.
	Name string
	// Concurrency bounds the runs holding a place at once (0: no bound).
	Concurrency int
	// PerKey bounds the runs of one key holding a place at once (0: no
	// bound); the key comes from QueueKey.
	PerKey int
	// Rate bounds the starts in any window of Per (0: no bound).
	Rate int
	Per  time.Duration
	// Debounce, on a workflow's queue, makes a new task of the same key
	// started within this window replace the one still waiting (which is
	// cancelled, naming the new one): of starts close together, the last
	// runs, Debounce after it arrived.
	Debounce time.Duration
	// SharedKeys makes a key one across owners: PerKey counts every
	// owner's runs of the key together, and a debounced start replaces
	// any owner's waiting start of it. By default a key is its owner's
	// (taskrouter.OwnerScope: a token's user, a session; each task of a
	// stateless anonymous client alone): PerKey counts the owner's runs,
	// a debounce replaces only the owner's own start, and a status names
	// only the owner's own tasks. Concurrency and Rate count every run
	// either way. Declare it for a key that is a shared resource (a
	// repository everyone deploys), knowing that one owner's start then
	// waits for, or replaces, another's.
	SharedKeys bool
}

// limits are q's limits as the store takes them.
func (q *Queue) limits() store.QueueLimits {
	return store.QueueLimits{Concurrency: q.Concurrency, PerKey: q.PerKey, Rate: q.Rate, Period: q.Per, Debounce: q.Debounce}
}

// A QueueOption says how a run is placed on its queue.
type QueueOption func(*placement)

// QueueKey sets the run's concurrency key (Queue.PerKey counts per key):
// the value src reads, a string as it is, anything else as JSON; a
// missing or null value is the empty key.
func QueueKey(src Source) QueueOption { return func(p *placement) { p.key = &src } }

// QueuePriority sets the run's priority: the number (or a string holding
// one) src reads, within ±2^30 (a value beyond counts as the bound);
// higher runs first, the default is 0.
func QueuePriority(src Source) QueueOption { return func(p *placement) { p.priority = &src } }

// placement is a queue and how runs take a place on it.
type placement struct {
	q        *Queue
	key      *Source
	priority *Source
}

func newPlacement(q *Queue, opts []QueueOption) *placement {
	pl := &placement{q: q}
	for _, o := range opts {
		if o != nil {
			o(pl)
		}
	}
	return pl
}

// OnQueue places the step's runs on queue q: each run of its tool (each
// item, when it is a for-each's body) takes a place before its first
// attempt and holds it until the step ends, across its retries and
// restarts; a step handed to the client gives its place up.
func (s *Step) OnQueue(q *Queue, opts ...QueueOption) *Step {
	s.queue = newPlacement(q, opts)
	return s
}

// OnQueue places the workflow's tasks on queue q: a task starts its first
// step once it holds a place, and holds it until it ends. A key read from
// a prompt argument makes, with PerKey 1, one task per key run at a time.
func (w *Definition) OnQueue(q *Queue, opts ...QueueOption) *Definition {
	w.queue = newPlacement(q, opts)
	return w
}

// PausesOnFailure sets PauseOnFailure: a failure that would fail the
// workflow pauses it instead, for an operator to fix and resume.
func (w *Definition) PausesOnFailure() *Definition { w.PauseOnFailure = true; return w }

// QueuePlace is a run's place on its queue, as the progress records it.
type QueuePlace struct {
	// Queue names the queue.
	Queue string `json:"queue"`
	// Key is the run's concurrency key.
	Key string `json:"key,omitempty"`
	// Priority is the run's priority.
	Priority int `json:"priority,omitempty"`
	// Since is when the run joined the queue.
	Since time.Time `json:"since"`
	// GrantedAt is when the run was granted its place; absent while it
	// waits.
	GrantedAt *time.Time `json:"grantedAt,omitempty"`
	// Ahead counts the runs that go before it, when it last looked.
	Ahead int `json:"ahead,omitempty"`
	// Why says why it waits, in words.
	Why string `json:"why,omitempty"`
	// Next is when the engine looks at the queue again for it (a rate
	// window or a debounce window ends; or a periodic look).
	Next *time.Time `json:"next,omitempty"`
}

// waiting reports a run still waiting for its place.
func (q *QueuePlace) waiting() bool { return q != nil && q.GrantedAt == nil }

// queuePoll is how often a run waiting for a place looks again when
// nothing tells it sooner (the operation that grants it wakes its task;
// the look covers a process that stopped between the grant and the
// wake).
const queuePoll = 30 * time.Second

// queueEngine is what the queues need of the engine: *taskrouter.Queues
// has it, which *taskrouter.Router hands out (queueHolder); a test's
// engine may be one itself. Registration refuses a queue on an engine
// without either.
type queueEngine interface {
	Enqueue(ctx context.Context, e store.QueueEntry, lim store.QueueLimits) (store.QueueResult, error)
	Dequeue(ctx context.Context, queue, id string, lim store.QueueLimits) (store.QueueResult, error)
	WakeNow(ctx context.Context, id string) error
}

// queueHolder is an engine that hands out its queues (*taskrouter.Router).
type queueHolder interface{ Queues() *taskrouter.Queues }

// queues returns the engine's queues, or nil.
func (b *Bridge) queues() queueEngine {
	switch e := b.engine.(type) {
	case queueHolder:
		return e.Queues()
	case queueEngine:
		return e
	}
	return nil
}

// queue checks a placement at registration: the queue's limits, that the
// step runs a tool on the server, and the sources of its key and
// priority (a workflow's read only what a task starts with).
func (c *checker) queue(pl *placement, workflow bool) {
	if pl == nil {
		return
	}
	q := pl.q
	switch {
	case q == nil:
		c.add("OnQueue has no queue: pass a *Queue")
		return
	case q.Name == "":
		c.add("its queue has no name: set Queue.Name")
	case q.Concurrency < 0 || q.PerKey < 0 || q.Rate < 0 || q.Per < 0 || q.Debounce < 0:
		c.add("queue %q has a negative limit", q.Name)
	case q.Rate > 0 && q.Per <= 0:
		c.add("queue %q has a Rate of %d without Per: say per how long", q.Name, q.Rate)
	case q.Debounce > 0 && !workflow:
		c.add("queue %q debounces, which replaces a waiting start of a workflow: place the workflow on it (Definition.OnQueue), not a step", q.Name)
	}
	if !workflow {
		s := c.step
		switch {
		case s.kind != nil && (len(s.kind.members()) > 0 || bodyOf(s) != nil):
			c.add("a %s step takes no place on a queue itself: place the steps it runs on it (each run takes a place)", s.Kind())
		case callOf(s) == nil:
			c.add("OnQueue applies to a step that runs a tool, not a %s step", s.Kind())
		case s.Execution() == mcptask.ExecClient:
			c.add("OnQueue applies to the server's runs: a client step is performed by the client")
		}
	}
	for label, src := range map[string]*Source{"(queue key)": pl.key, "(queue priority)": pl.priority} {
		if src == nil {
			continue
		}
		if workflow {
			switch src.Kind {
			case SourcePromptArg, SourceConstant, SourceTaskVar:
			default:
				c.add("its %s reads a %s, but a workflow's place is taken when its task starts: read a prompt argument, a constant or a task variable", strings.Trim(label, "()"), src.Kind)
				continue
			}
		}
		c.source(label, *src, toolSchema{}, false)
	}
}

// bodyOf is the body of a step that keeps records of its runs (a
// for-each, a loop), or nil.
func bodyOf(s *Step) *Step {
	if s == nil || s.kind == nil {
		return nil
	}
	return s.kind.body()
}

// checkQueues checks that every queue w uses has the limits the queues
// of that name registered before it have, and that the engine keeps
// queues, and records them. Call with b.mu held.
func (b *Bridge) checkQueues(w *Definition) error {
	var used []*Queue
	if w.queue != nil && w.queue.q != nil {
		used = append(used, w.queue.q)
	}
	for _, s := range w.flat() {
		if s.queue != nil && s.queue.q != nil {
			used = append(used, s.queue.q)
		}
		if body := bodyOf(s); body != nil && body.queue != nil && body.queue.q != nil {
			used = append(used, body.queue.q)
		}
	}
	if len(used) == 0 {
		return nil
	}
	if b.queues() == nil {
		return fmt.Errorf("workflow %q uses queue %q, but its task engine keeps no queues: use a *taskrouter.Router", w.Name, used[0].Name)
	}
	if b.queueLimits == nil {
		b.queueLimits = map[string]Queue{}
	}
	for _, q := range used {
		if prev, ok := b.queueLimits[q.Name]; ok && prev != *q {
			return fmt.Errorf("workflow %q: queue %q is defined with other limits by another workflow or step (%+v, here %+v): share one *Queue", w.Name, q.Name, prev, *q)
		}
	}
	for _, q := range used {
		b.queueLimits[q.Name] = *q
	}
	return nil
}

// placeOf resolves the key and priority of a run of pl at the record (a
// record's item, when it has one).
func (r *record) placeOf(item json.RawMessage, pl *placement) (key string, prio int) {
	res := r.resolver(item)
	if pl.key != nil {
		if v, err := res.value(r.p, *pl.key); err == nil {
			key = keyText(v)
		}
	}
	if pl.priority != nil {
		if v, err := res.value(r.p, *pl.priority); err == nil {
			prio = priorityOf(v)
		}
	}
	return key, prio
}

// keyText is a key value as the queue counts it: a string as it is,
// anything else as JSON, null as "".
func keyText(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	if t := strings.TrimSpace(string(v)); t != "null" {
		return t
	}
	return ""
}

// maxPriority bounds a run's priority (QueuePriority): a value beyond
// ±maxPriority counts as ±maxPriority.
const maxPriority = 1 << 30

// priorityOf reads a priority: a number, or a string holding one (its
// fraction dropped), clamped to ±maxPriority before it becomes an
// integer (a float64 beyond the int range has no integer value: 1e308
// would wrap below -5); 0 otherwise, and for NaN.
func priorityOf(v json.RawMessage) int {
	var f float64
	if json.Unmarshal(v, &f) != nil {
		var s string
		if json.Unmarshal(v, &s) != nil {
			return 0
		}
		var err error
		if f, err = strconv.ParseFloat(strings.TrimSpace(s), 64); err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0
		}
	}
	switch {
	case f != f: // NaN
		return 0
	case f >= maxPriority:
		return maxPriority
	case f <= -maxPriority:
		return -maxPriority
	}
	return int(f)
}

// slotEntry is the queue entry id of the slot at path of task id.
func slotEntry(id, path string) string { return id + "#" + path }

// queueTurn reports whether the slot sl holds its place on its queue (or
// has none); when it does not, the decision asks for it (after its
// write), and the slot waits for the answer.
func (r *record) queueTurn(sl *slot) bool {
	pl := sl.s.queue
	if pl == nil || pl.q == nil {
		return true
	}
	if q := sl.sp.Queue; q != nil && q.GrantedAt != nil && q.Queue == pl.q.Name {
		return true // held (the store still has it, unless the task ended; a pause gave it up: then it is nil)
	}
	id := slotEntry(r.id, sl.path)
	if _, answered := r.ev.places[id]; answered {
		return false // the answer of this decision's event: it waits (answered recorded why)
	}
	key, prio := r.placeOf(sl.item, pl)
	r.effect(takePlace{q: pl.q, entry: store.QueueEntry{Queue: pl.q.Name, ID: id, TaskID: r.id, Key: key, Priority: prio}, lim: pl.q.limits()})
	return false
}

// workflowTurn reports whether the task holds its place on the workflow's
// queue (or it has none); when it does not, the decision asks for it.
func (r *record) workflowTurn() bool {
	pl := r.wf.def.queue
	if pl == nil || pl.q == nil {
		return true
	}
	if q := r.p.Queue; q != nil && q.GrantedAt != nil && q.Queue == pl.q.Name {
		return true
	}
	if _, answered := r.ev.places[r.id]; answered {
		return false
	}
	key, prio := r.placeOf(nil, pl)
	r.effect(takePlace{q: pl.q, entry: store.QueueEntry{Queue: pl.q.Name, ID: r.id, TaskID: r.id, Key: key, Priority: prio}, lim: pl.q.limits()})
	return false
}

// answered records the queues' answers of the decision's event where the
// runs that asked stand (their QueuePlace: granted, or waiting and why,
// and when they look again). It reports whether it recorded any.
func (r *record) answered() bool {
	if len(r.ev.places) == 0 {
		return false
	}
	any := false
	for id, a := range r.ev.places {
		var place **QueuePlace
		var pl *placement
		done := false
		if id == r.id {
			place, pl = &r.p.Queue, r.wf.def.queue
			done = r.p.Paused != nil && !r.p.running()
		} else if task, path, ok := strings.Cut(id, "#"); ok && task == r.id {
			if sl := r.wf.slotAt(r.p, path); sl != nil {
				place, pl = &sl.sp.Queue, sl.s.queue
				done = sl.sp.ended() || sl.sp.HandedToClient || sl.sp.GaveUp || r.p.Paused != nil && sl.sp.open() == nil
			}
		}
		if pl == nil || pl.q == nil || pl.q.Name != a.entry.Queue {
			continue
		}
		if done {
			// It no longer asks (it ended, or its task was paused
			// after it asked: an answer may come after the pause's
			// decision gave up what the record held): the entry the
			// queue made for it, granted or waiting, goes, and the
			// place to the next run. A paused run asks again on resume.
			r.givePlace(pl, id)
			*place = nil
			continue
		}
		if held := *place; held != nil && held.GrantedAt != nil && held.Queue == a.entry.Queue && (a.err != nil || !a.res.Entry.Granted()) {
			continue // an older answer (one handed over late): the place is held
		}
		r.placed(place, pl, a)
		any = true
	}
	return any
}

// placed records answer a of queue pl in *place.
func (r *record) placed(place **QueuePlace, pl *placement, a placeAnswer) {
	e, now := a.entry, r.now
	if *place == nil || (*place).Queue != e.Queue {
		*place = &QueuePlace{Queue: e.Queue, Key: e.Key, Priority: e.Priority, Since: now}
	}
	qp := *place
	if a.err != nil {
		next := now.Add(time.Second)
		qp.Why, qp.Next = fmt.Sprintf("the queue could not be read (%s); looking again", oneLine(a.err.Error())), &next
		return
	}
	res := a.res // its holders filtered for this task's status when it was carried (queue_owner.go)
	if res.Entry.Granted() {
		at := res.Entry.GrantedAt
		qp.GrantedAt, qp.Ahead, qp.Why, qp.Next = &at, 0, "", nil
		return
	}
	qp.GrantedAt = nil
	qp.Ahead, qp.Why = res.Ahead, waitWhy(pl.q, e, res)
	next := now.Add(queuePoll)
	if !res.Next.IsZero() && res.Next.Before(next) {
		next = res.Next
	}
	qp.Next = &next
}

// waitWhy says in words why entry e waits on q.
func waitWhy(q *Queue, e store.QueueEntry, res store.QueueResult) string {
	held := func() string {
		var names []string
		for _, h := range res.Holders {
			names = append(names, holderName(h))
		}
		if len(names) == 0 {
			return ""
		}
		return ": held by " + strings.Join(names, ", ")
	}
	switch res.Reason {
	case store.QueueWaitKey:
		return fmt.Sprintf("queue %q runs %d at a time per key, and key %q has them%s", q.Name, q.PerKey, e.Key, held())
	case store.QueueWaitConcurrency:
		return fmt.Sprintf("queue %q runs %d at a time, and all are taken%s", q.Name, q.Concurrency, held())
	case store.QueueWaitRate:
		return fmt.Sprintf("queue %q starts at most %d per %s, and that many started; the next place opens at %s", q.Name, q.Rate, q.Per, stamp(res.Next))
	case store.QueueWaitDebounce:
		return fmt.Sprintf("queue %q waits %s after the latest start of key %q (a newer one replaces this one); it may start at %s", q.Name, q.Debounce, e.Key, stamp(res.Entry.NotBefore))
	case store.QueueWaitBusy:
		return fmt.Sprintf("queue %q was deciding its places (another server process); it looks again", q.Name)
	}
	return fmt.Sprintf("queue %q gives the places there are to runs of higher priority or earlier arrival", q.Name)
}

// holderName names a queue entry for a person: its task, and its step.
func holderName(e store.QueueEntry) string {
	if task, path, ok := strings.Cut(e.ID, "#"); ok {
		return fmt.Sprintf("task %s (step %q)", task, path)
	}
	return "task " + e.TaskID
}

// wakeGranted wakes the tasks whose entries an operation of task id
// granted (except entry self, the one the operation asked for, whose
// answer its decision has): the task's instance here (task id's own too:
// it looks again), and its wake-up time in the store for whichever
// process runs it. It does not wait.
func (b *Bridge) wakeGranted(id string, granted []store.QueueEntry, self string) {
	var ids []string
	seen := map[string]bool{}
	for _, e := range granted {
		if e.ID != self && !seen[e.TaskID] {
			seen[e.TaskID] = true
			ids = append(ids, e.TaskID)
		}
	}
	if len(ids) == 0 {
		return
	}
	qe := b.queues()
	b.spawn(func() {
		for _, other := range ids {
			b.mu.Lock()
			in := b.instances[other]
			b.mu.Unlock()
			if in != nil {
				in.offer(granted) // its next decision knows it, without asking the queue again
				in.kick("")
			}
			if other == id {
				continue // its own pass writes its wake-up
			}
			ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
			if err := qe.WakeNow(ctx, other); err != nil {
				b.engine.Logger().Warn("waking a task granted a place on its queue; it looks again later", "task", other, "error", err)
			}
			cancel()
		}
	})
}

// replaced cancels the tasks whose waiting entries a debounced start of
// task by replaced. It does not wait.
func (b *Bridge) replaced(q *Queue, entries []store.QueueEntry, by *store.Task) {
	if len(entries) == 0 {
		return
	}
	go func() {
		for _, e := range entries {
			ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
			msg := fmt.Sprintf("replaced by %s, a newer start of key %q on queue %q within its debounce window; it was cancelled before it started", b.replacer(ctx, q, e, by), plainKey(q, e.Key), e.Queue)
			_, err := b.engine.Update(ctx, e.TaskID, store.Update{Status: mcptask.StatusCancelled, StatusMessage: &msg})
			cancel()
			if err != nil && !isGone(err) {
				b.engine.Logger().Warn("cancelling a task a debounced start replaced", "task", e.TaskID, "error", err)
			}
		}
	}()
}

// freePlaces gives up the places the task no longer needs: those of the
// slots that ended, were handed to the client or gave up; with the task
// paused, those no attempt runs on (they queue again on resume); and
// every one, the workflow's too, when ending is set (the task ends in
// this decision). The store hears of it after the write (freePlace).
func (r *record) freePlaces(ending bool) {
	if !r.queues {
		return
	}
	p := r.p
	running := false
	for _, sl := range r.wf.slots(p) {
		sp := sl.sp
		if sp.open() != nil {
			running = true
		}
		if sp.Queue != nil && sl.s.queue != nil {
			paused := p.Paused != nil && sp.open() == nil
			if ending || paused || sp.ended() || sp.HandedToClient || sp.GaveUp || sp.Status == mcptask.StepFailed && sp.RetryAt == nil {
				if id := slotEntry(r.id, sl.path); !r.ev.freed[id] {
					r.givePlace(sl.s.queue, id)
				}
				sp.Queue = nil
			}
		}
	}
	if pl := r.wf.def.queue; p.Queue != nil && pl != nil && (ending || p.Paused != nil && !running) {
		r.givePlace(pl, r.id)
		p.Queue = nil
	}
}

// freeEarly gives up the places of the runs whose tools returned with
// success (results), as soon as they did, before the decision that
// records them: a run holds its place while its work runs, not while its
// outcome is written (as the decision's freePlace would after its write).
// It reports the entries it gave up (the decision frees them no more). A
// run whose outcome a stop keeps from being recorded asks for its place
// again when it runs again (runnable). The executor's, holding no lock
// while it calls the queue.
func (in *instance) freeEarly(results []stepResult) map[string]bool {
	var frees []freePlace
	in.writing(func() {
		if in.wf == nil || in.p == nil || in.b.queues() == nil {
			return
		}
		for _, res := range results {
			if res.msg != "" || res.stopped != "" {
				continue // a failure may be retried in its place; the decision frees what ends
			}
			sl := in.wf.slotAt(in.p, res.step)
			if sl == nil || sl.s.queue == nil || sl.s.queue.q == nil || sl.sp.Queue == nil || sl.sp.Queue.GrantedAt == nil {
				continue
			}
			if a := sl.sp.open(); a == nil || a.N != res.attempt {
				continue
			}
			q := sl.s.queue.q
			frees = append(frees, freePlace{queue: q.Name, id: slotEntry(in.id, res.step), lim: q.limits()})
		}
	})
	if len(frees) == 0 {
		return nil
	}
	freed := make(map[string]bool, len(frees))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(in.b.ctx), effectWait)
	defer cancel()
	for _, f := range frees {
		in.b.freePlace(ctx, in.id, f)
		freed[f.id] = true
	}
	return freed
}

// offer keeps the grants an operation of another task made, for this
// task's next decision (offered): a run granted its place needs not ask
// its queue again to learn it.
func (in *instance) offer(granted []store.QueueEntry) {
	in.locked(func() {
		for _, e := range granted {
			if e.TaskID != in.id {
				continue
			}
			if in.offers == nil {
				in.offers = map[string]placeAnswer{}
			}
			in.offers[e.ID] = placeAnswer{entry: e, res: store.QueueResult{Entry: e}}
		}
	})
}

// offered adds the grants offered since the last decision to ev's
// answers (an answer ev holds already wins).
func (in *instance) offered(ev *occurrence) {
	in.locked(func() {
		if len(in.offers) == 0 {
			return
		}
		if ev.places == nil {
			ev.places = map[string]placeAnswer{}
		}
		for id, a := range in.offers {
			if _, ok := ev.places[id]; !ok {
				ev.places[id] = a
			}
		}
		in.offers = nil
	})
}

// freeLost gives up, at a recovery, the places of the slots that no
// longer hold one by their record but may by the store's (a process that
// stopped between the write that freed them and the store hearing of
// it; or a queue that granted a paused task the place it had asked for
// before its pause, and woke it: lostPlaces); freeing a place not held
// does nothing.
func (r *record) freeLost() {
	if !r.queues {
		return
	}
	paused := r.p.Paused != nil
	for _, sl := range r.wf.slots(r.p) {
		if sl.s.queue != nil && sl.s.queue.q != nil && sl.sp.Queue == nil && (sl.sp.ended() || sl.sp.HandedToClient || sl.sp.GaveUp || paused && sl.sp.open() == nil) {
			r.givePlace(sl.s.queue, slotEntry(r.id, sl.path))
		}
	}
	if pl := r.wf.def.queue; pl != nil && pl.q != nil && r.p.Queue == nil && r.p.Paused != nil {
		r.givePlace(pl, r.id)
	}
}

// lostPlaces reports whether a decision of event ev on the task as
// stored (t, at progress p) at now looks for places the store may hold
// that the record gave up (freeLost): at a recovery, and at a wake-up of
// a paused task (nothing wakes one but its deadline, or a queue granting
// it a place it no longer asks for: queue.go's wakeGranted).
func lostPlaces(t *store.Task, p *Progress, reason string, now time.Time) bool {
	return reason == ReasonRestart || reason == ReasonTakeover || p.Paused != nil && staleWake(t, p, now)
}

// queued reports whether the definition places the workflow or one of
// the slots of p on a queue: a recovery looks for places a stopped
// process may not have freed (freeLost).
func (c *compiled) queued(p *Progress) bool {
	if c.def.queue != nil {
		return true
	}
	for _, sl := range c.slots(p) {
		if sl.s.queue != nil {
			return true
		}
	}
	return false
}

// givePlace frees entry id of pl's queue after the write.
func (r *record) givePlace(pl *placement, id string) {
	r.effect(freePlace{queue: pl.q.Name, id: id, lim: pl.q.limits()})
}

// mayWalk reports whether a decision may move the workflow's steps: not
// while it is paused (pause.go), nor before the task holds its place on
// the workflow's queue.
func (r *record) mayWalk() bool {
	if r.p.Paused != nil {
		r.closeInterrupted()
		return false
	}
	return r.workflowTurn()
}

// queued reports a step record (or a record its container keeps, at any
// depth) waiting for a place, and the earliest time one looks again.
func queued(sp *StepProgress) (waits bool, next time.Time) {
	if sp.Queue.waiting() && !sp.ended() {
		waits = true
		if sp.Queue.Next != nil {
			next = *sp.Queue.Next
		}
	}
	for i := range sp.Items {
		w, n := queued(&sp.Items[i])
		waits = waits || w
		if !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return waits, next
}

// queueWake is the earliest time a run of p waiting for a place looks
// again (the workflow's own place included); zero for none.
func (p *Progress) queueWake() time.Time {
	var at time.Time
	if p.Queue.waiting() && p.Queue.Next != nil {
		at = *p.Queue.Next
	}
	for i := range p.Steps {
		if _, n := queued(&p.Steps[i]); !n.IsZero() && (at.IsZero() || n.Before(at)) {
			at = n
		}
	}
	return at
}

// queuedLine is the status line of a step (or the workflow, s nil)
// waiting for its place.
func queuedLine(s *Step, q *QueuePlace) string {
	who := "the workflow"
	if s != nil {
		who = toolLine(s)
	}
	line := fmt.Sprintf("%s is queued on %q", who, q.Queue)
	if q.Key != "" {
		line += fmt.Sprintf(" (key %q)", q.Key)
	}
	if q.Ahead > 0 {
		line += fmt.Sprintf(", %d ahead of it", q.Ahead)
	}
	if q.Why != "" {
		line += ": " + q.Why
	}
	return line
}

// queuedDo is the sentence a model reads for a step waiting for its
// place.
func queuedDo(q *QueuePlace) string {
	ahead := ""
	if q.Ahead > 0 {
		ahead = fmt.Sprintf(", %d ahead of it", q.Ahead)
	}
	return fmt.Sprintf("the server runs it once queue %q gives it a place (it is queued%s); do not call it yourself", q.Queue, ahead)
}
