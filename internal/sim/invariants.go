package sim

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// The invariants. Each has a name; a Violation names the one it breaks.
// Three places check them:
//
//   - every committed write, against the task's previous write
//     (checker.watch): a status never leaves an end, a task's version
//     never changes, a paused task (or a task under a paused parent)
//     opens no attempt, an ended task keeps no record running or
//     waiting, a timer fires no earlier than its time and no later than
//     the first moment the simulation let the engine settle after it, a
//     paused task does not expire, a queue holds no more than its limits;
//   - every tool call as it starts (checker.callStarts): no effect is
//     applied again under an idempotency key whose success was recorded,
//     no step runs past its attempt budget;
//   - every moment the engine rests after an operation (checker.atRest):
//     every task ended or waits for someone or something named (never
//     silence), no queue place is held by a run that ended nor left free
//     while a run waits, every promised undo ran exactly once, in reverse
//     order.

// The invariants' names.
const (
	InvEffectOnce      = "effect-once"           // no effect applied twice under one idempotency key
	InvAttemptBudget   = "attempt-budget"        // no step started more often than its attempt budget allows
	InvAttemptsStops   = "attempts-across-stops" // the same, when a stop, a crash or a cut came between the attempts
	InvUndoOnce        = "undo-once"             // every promised undo runs at most once (one key)
	InvUndoComplete    = "undo-complete"         // every promised undo ran by the end
	InvUndoOrder       = "undo-order"            // undo steps run in the reverse order their steps completed
	InvUndoCancel      = "undo-across-cancel"    // the undo invariants, when a cancel met the compensation
	InvPausedStarts    = "paused-starts-nothing" // a paused task opens no attempt
	InvPausedTree      = "paused-tree"           // a task under a paused ancestor opens no attempt
	InvPausedUndo      = "paused-undo"           // a paused task starts no undo step (its compensation waits)
	InvPausedExpiry    = "paused-no-expiry"      // a paused task does not expire (or fail) while paused
	InvQueueLimit      = "queue-limit"           // no queue holds more than its limits
	InvQueueReleased   = "queue-released"        // no place held by a run that ended
	InvQueueFreed      = "queue-freed"           // no run waits while a place is free (a holder that ended freed it)
	InvPausedQueue     = "paused-queue"          // a paused task holds no queue place it runs nothing on
	InvEndedClean      = "ended-clean"           // no ended task has a record running or waiting
	InvSettles         = "settles"               // every task reaches an end or a documented wait: never silence
	InvRefusal         = "refusal-recovers"      // settles, for a task a write of which the store refused
	InvLoopBody        = "loop-body"             // settles, for a loop whose body is a sleep or an event
	InvVersionFixed    = "version-fixed"         // a task's version never changes
	InvEndFinal        = "end-final"             // a status never goes back from an end
	InvTimerEarly      = "timer-early"           // a timer fires no earlier than its time
	InvTimerLate       = "timer-late"            // nor later than the first settled moment after it
	InvNoPanic         = "no-internal-error"     // an operation never gets an internal error or a panic
	InvOperationBounds = "operation-bounded"     // an operation returns (never hangs the caller)
)

// A Violation is an invariant broken during a simulation.
type Violation struct {
	// Invariant is the invariant's name (the Inv constants).
	Invariant string
	// Op is the index of the operation during (or after) which it was
	// found.
	Op int
	// Task is the simulation's handle of the task concerned, if any.
	Task string
	// Detail says what was seen.
	Detail string
	// Known is set when the invariant is in the Known table: why it is
	// expected to fail today.
	Known string
}

func (v Violation) String() string {
	s := fmt.Sprintf("[%s] op %d", v.Invariant, v.Op)
	if v.Task != "" {
		s += " task " + v.Task
	}
	s += ": " + v.Detail
	if v.Known != "" {
		s += " (known: " + v.Known + ")"
	}
	return s
}

// facts are what the checker keeps of one task, from its writes.
type facts struct {
	id      string
	t       *store.Task
	p       *workflow.Progress
	parent  string
	undoOf  string
	version string
	print   string
	// pausedSince is the write that paused the task (0: not paused);
	// resumedAt when it was last resumed.
	pausedSince uint64
	resumedAt   time.Time
	ended       bool
	deleted     bool
	// cancelledUndoing: the task was cancelled while its compensation
	// ran.
	cancelledUndoing bool
	// rootKnown is the known violation that ended the task (its end
	// broke a Known invariant): what its end breaks next follows from it.
	rootKnown string
	// seq is the task's last write; stuck the write it was last found
	// not resting at, past the bound (0: never): reported once, it is
	// not waited for again until it changes.
	seq, stuck uint64
}

// checker holds the invariants' state.
type checker struct {
	s *Sim

	mu     sync.Mutex
	tasks  map[string]*facts
	done   map[string]uint64    // idempotency key -> the write that first recorded it completed
	doneAt map[string]time.Time // ... and when
	vio    []Violation
	seen   map[string]bool
	stops  []time.Time // the times the engine settled at, ascending

	// failedBy: idempotency key + "#" + attempt -> the process whose
	// write first recorded that attempt failed (or timed out).
	failedBy map[string]int
}

func newChecker(s *Sim) *checker {
	return &checker{s: s, tasks: map[string]*facts{}, done: map[string]uint64{}, doneAt: map[string]time.Time{}, failedBy: map[string]int{}, seen: map[string]bool{}}
}

// fail records a violation once per (invariant, task, key).
func (c *checker) fail(inv, id, key, format string, args ...any) {
	k := inv + "|" + id + "|" + key
	if c.seen[k] {
		return
	}
	c.seen[k] = true
	v := Violation{Invariant: inv, Op: c.s.opIndex(), Detail: fmt.Sprintf(format, args...), Known: Known[inv]}
	if id != "" {
		v.Task = c.s.handleOf(id)
		if f := c.tasks[id]; f != nil {
			if f.undoOf != "" && c.tasks[f.undoOf] != nil && f.rootKnown == "" {
				f = c.tasks[f.undoOf]
			}
			switch {
			case v.Known == "" && f.rootKnown != "" && followsEnd[inv]:
				v.Known = Known[f.rootKnown] + " (follows from " + f.rootKnown + " on this task)"
			case v.Known != "" && endsTask[inv] && f.rootKnown == "":
				f.rootKnown = inv
			}
		}
	}
	c.vio = append(c.vio, v)
}

// endsTask are the invariants about how a task ended; followsEnd those
// that a wrong end breaks in turn (an undo that never ran because the
// task expired while paused).
var (
	endsTask   = map[string]bool{InvPausedExpiry: true, InvUndoCancel: true}
	followsEnd = map[string]bool{InvUndoComplete: true, InvUndoOnce: true, InvUndoOrder: true, InvEndedClean: true}
)

// forget drops the violations found during operation op (a run cut
// short there).
func (c *checker) forget(op int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.vio = slices.DeleteFunc(c.vio, func(v Violation) bool { return v.Op >= op })
}

// violations returns the violations found so far.
func (c *checker) violations() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.vio)
}

// factsOf returns (making) the facts of task id. Call with mu held.
func (c *checker) factsOf(id string) *facts {
	f := c.tasks[id]
	if f == nil {
		f = &facts{id: id}
		c.tasks[id] = f
	}
	return f
}

// watch checks every committed write against the task's previous one.
func (c *checker) watch(w Write) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch w.Op {
	case "Delete":
		if f := c.tasks[w.ID]; f != nil {
			f.deleted = true
		}
		return
	case "Enqueue", "Dequeue":
		c.queueLimits(w.Queue)
		return
	}
	if w.Task == nil {
		return
	}
	c.transition(w.Seq, w.Proc, w.Task)
}

// transition checks task t as write seq of process proc left it against
// its facts.
func (c *checker) transition(seq uint64, proc int, t *store.Task) {
	f := c.factsOf(t.ID)
	f.seq = seq
	prevT, prevP := f.t, f.p
	if f.parent == "" {
		f.parent = t.Labels[workflow.LabelParent]
	}
	if f.undoOf == "" {
		f.undoOf = t.Labels[workflow.LabelUndoOf]
	}
	if prevT != nil && prevT.Status.Terminal() && t.Status != prevT.Status {
		c.fail(InvEndFinal, t.ID, "", "the task ended %s, then a write made it %s", prevT.Status, t.Status)
	}
	if v := t.Labels[workflow.LabelVersion]; v != "" {
		if f.version != "" && v != f.version {
			c.fail(InvVersionFixed, t.ID, "", "the task started on version %q and a write moved it to %q", f.version, v)
		}
		if f.version == "" {
			f.version = v
		}
	}
	if v := t.Labels[workflow.LabelFingerprint]; v != "" {
		if f.print != "" && v != f.print {
			c.fail(InvVersionFixed, t.ID, "print", "the task's fingerprint changed from %q to %q", f.print, v)
		}
		if f.print == "" {
			f.print = v
		}
	}
	if k := t.Labels[taskrouter.LabelKind]; k != taskrouter.KindWorkflow {
		f.t = t // a leg, or another kind: only its status is checked
		return
	}
	p := progressOf(t)
	if p == nil && prevP != nil && t.Variables != nil {
		p = prevP // a write that carried no progress (a wake-up, a label)
	}
	if p == nil {
		f.t = t
		return
	}
	now := t.UpdatedAt
	prev := byPath(records(prevP))
	for _, r := range records(p) {
		sp := r.sp
		if sp.IdempotencyKey != "" && sp.Status == mcptask.StepCompleted && c.done[sp.IdempotencyKey] == 0 {
			c.done[sp.IdempotencyKey], c.doneAt[sp.IdempotencyKey] = seq, now
		}
		for _, a := range sp.History {
			k := fmt.Sprintf("%s#%d", sp.IdempotencyKey, a.N)
			if sp.IdempotencyKey != "" && a.Outcome == workflow.OutcomeError && c.failedBy[k] == 0 {
				c.failedBy[k] = proc
			}
		}
		old := prev[r.path]
		// The write that pauses a task may carry a change decided before
		// the pause and kept unwritten (a child's start that failed, with
		// its failure): what a write opens counts against the pause once
		// the task was paused already (the pause's own decision opens
		// nothing; simulation seed 604).
		if n, reasons := serverOpened(old, sp); n > 0 && prevT != nil && (p.Paused == nil || prevP != nil && prevP.Paused != nil) {
			switch {
			case p.Paused != nil && r.undo:
				c.fail(InvPausedUndo, t.ID, r.path, "write %d opened attempt %d of %s while the task was paused", seq, sp.Attempts, r.path)
			case p.Paused != nil:
				c.fail(InvPausedStarts, t.ID, r.path, "write %d opened attempt %d of %s (%s) while the task was paused", seq, sp.Attempts, r.path, strings.Join(reasons, ","))
			default:
				if anc := c.pausedAncestor(f); anc != "" {
					c.fail(InvPausedTree, t.ID, r.path, "write %d opened attempt %d of %s while its ancestor %s was paused", seq, sp.Attempts, r.path, c.s.handleOf(anc))
				}
			}
			if old != nil && old.RetryAt != nil && now.Before(*old.RetryAt) && slices.Contains(reasons, workflow.ReasonRetry) {
				c.fail(InvTimerEarly, t.ID, r.path, "the retry of %s ran at %s, before its time %s", r.path, stamp(now), stamp(*old.RetryAt))
			}
		}
		if old != nil && old.Status == mcptask.StepSleeping && old.Until != nil && sp.Status == mcptask.StepCompleted {
			until := *old.Until
			switch {
			case now.Before(until):
				c.fail(InvTimerEarly, t.ID, r.path, "sleep %s ended at %s, before its time %s", r.path, stamp(now), stamp(until))
			case prevP.Paused == nil && p.Paused == nil && f.resumedAt.Before(until):
				if at, ok := c.stoppedBetween(until, now); ok {
					inv := InvTimerLate
					if t.Labels[workflow.LabelWorkflow] == "naps" {
						inv = InvLoopBody // a loop over a sleep
					}
					c.fail(inv, t.ID, r.path, "sleep %s was due at %s; the engine settled at %s without ending it, and ended it at %s", r.path, stamp(until), stamp(at), stamp(now))
				}
			}
		}
	}
	switch {
	case p.Paused != nil && f.pausedSince == 0:
		f.pausedSince = seq
	case p.Paused == nil && f.pausedSince != 0:
		f.pausedSince, f.resumedAt = 0, now
	}
	if t.Status.Terminal() && (prevT == nil || !prevT.Status.Terminal()) {
		f.ended = true
		for _, r := range records(p) {
			if live(r.sp) {
				c.fail(InvEndedClean, t.ID, r.path, "the task ended %s with record %s still %s", t.Status, r.path, describe(r.sp))
			}
		}
		if prevP != nil && prevP.Paused != nil && t.Status == mcptask.StatusFailed &&
			(strings.Contains(t.StatusMessage, "expired") || strings.Contains(t.StatusMessage, "orphaned")) {
			c.fail(InvPausedExpiry, t.ID, "", "the task was paused and ended failed: %q", t.StatusMessage)
		}
		if t.Status == mcptask.StatusCancelled && prevP != nil && prevP.Undo != nil {
			f.cancelledUndoing = true
		}
	}
	f.t, f.p = t, p
}

// pausedAncestor returns the id of a paused ancestor of f's task ("" for
// none). Call with mu held.
func (c *checker) pausedAncestor(f *facts) string {
	for id, depth := f.parent, 0; id != "" && depth < 16; depth++ {
		a := c.tasks[id]
		if a == nil {
			return ""
		}
		if a.pausedSince != 0 && !a.ended {
			return id
		}
		id = a.parent
	}
	return ""
}

// settledAt records that the engine rested with the clock at t.
func (c *checker) settledAt(t time.Time) {
	c.mu.Lock()
	if n := len(c.stops); n == 0 || t.After(c.stops[n-1]) {
		c.stops = append(c.stops, t)
	}
	c.mu.Unlock()
}

// stoppedBetween returns a moment the engine settled at in [from, to).
// Call with mu held.
func (c *checker) stoppedBetween(from, to time.Time) (time.Time, bool) {
	i := sort.Search(len(c.stops), func(i int) bool { return !c.stops[i].Before(from) })
	if i < len(c.stops) && c.stops[i].Before(to) {
		return c.stops[i], true
	}
	return time.Time{}, false
}

// queueLimits checks that queue name holds no more than its limits.
// Call with mu held.
func (c *checker) queueLimits(name string) {
	q := simQueue(name)
	if q == nil {
		return
	}
	entries, err := c.s.world.Disk.Store().QueueEntries(context.Background(), name)
	if err != nil {
		return
	}
	holders, byKey := 0, map[string]int{}
	for _, e := range entries {
		if e.Granted() {
			holders++
			byKey[e.Key]++
		}
	}
	if q.Concurrency > 0 && holders > q.Concurrency {
		c.fail(InvQueueLimit, "", name, "queue %q holds %d places, its limit is %d", name, holders, q.Concurrency)
	}
	for k, n := range byKey {
		if q.PerKey > 0 && n > q.PerKey {
			c.fail(InvQueueLimit, "", name+"/"+k, "queue %q holds %d places of key %q, its limit is %d", name, n, k, q.PerKey)
		}
	}
}

func simQueue(name string) *workflow.Queue {
	for _, q := range simQueues {
		if q.Name == name {
			return q
		}
	}
	return nil
}

// callStarts checks a tool call as it starts: its step's success was not
// recorded already (the effect would be applied twice under its key),
// and a server attempt stays within its step's budget.
func (c *checker) callStarts(call *Call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if seq := c.done[call.Key]; seq != 0 {
		c.fail(InvEffectOnce, call.Task, call.Key, "%s's tool ran again (call %d, attempt %d by %s) after write %d recorded its success under key %s",
			call.Step, call.N, call.Attempt, call.By, seq, call.Key)
	}
	if call.By != string(mcptask.ExecServer) {
		return
	}
	budget := specs[call.Spec].Budget
	failed, interrupted := c.s.ledger.budgetState(call, c.failureKnown)
	if failed >= budget {
		inv := InvAttemptBudget
		switch {
		case c.s.world.Disk.Refused(call.Task):
			inv = InvRefusal // an outcome lost with a refused write
		case interrupted:
			inv = InvAttemptsStops
		}
		c.fail(inv, call.Task, call.Key, "%s ran again (attempt %d) after %d failed attempts; its budget is %d", call.Step, call.Attempt, failed, budget)
	}
}

// failureKnown reports whether the engine could know of the failure of
// call (one that failed or timed out): its own process recorded it, or
// that process still runs (its decision of the outcome is under way). A
// failure its process never recorded before it crashed (or stopped, its
// write refused) is lost with the process: the next process finds the
// attempt open, a crash's cut (docs/SEMANTICS.md, SIGKILL: counted, not
// a failure), and the budget does not count it. Call with mu held.
func (c *checker) failureKnown(call *Call, self *Call) bool {
	if call.Proc == self.Proc {
		return true
	}
	return c.failedBy[fmt.Sprintf("%s#%d", call.Key, call.Attempt)] == call.Proc
}

// atRest checks what must hold whenever the engine rests.
func (c *checker) atRest() {
	c.queuesAtRest()
	c.undoAtRest()
}

// queuesAtRest: no place is held by a run that ended, and no run waits
// while the limits would give it a place.
func (c *checker) queuesAtRest() {
	ctx := context.Background()
	now := c.s.world.Clock.Now()
	for _, q := range simQueues {
		entries, err := c.s.world.Disk.Store().QueueEntries(ctx, q.Name)
		if err != nil {
			continue
		}
		c.mu.Lock()
		holders, byKey := 0, map[string]int{}
		for _, e := range entries {
			if !e.Granted() {
				continue
			}
			holders++
			byKey[e.Key]++
			id, path, _ := strings.Cut(e.ID, "#")
			f := c.tasks[id]
			if f == nil || f.p == nil {
				continue
			}
			if path == "" { // the workflow's own place
				if f.p.Paused != nil && !f.ended && !slices.ContainsFunc(records(f.p), func(r record) bool { return openAttempt(r.sp) }) {
					c.fail(InvPausedQueue, id, e.ID, "queue %q: the workflow holds its place while it is paused and runs nothing", q.Name)
				}
				continue
			}
			sp := byPath(records(f.p))[path]
			switch {
			case sp == nil:
			case recordEnded(sp), sp.HandedToClient, sp.Status == mcptask.StepFailed && sp.RetryAt == nil:
				inv := InvQueueReleased
				if c.s.world.Disk.Refused(id) {
					inv = InvRefusal // the write that gave the place up was refused, and not made again
				}
				c.fail(inv, id, e.ID, "queue %q: %s still holds a place, and its record is %s", q.Name, path, describe(sp))
			case f.p.Paused != nil && !openAttempt(sp):
				c.fail(InvPausedQueue, id, e.ID, "queue %q: %s holds a place while its task is paused and runs nothing there", q.Name, path)
			}
		}
		for _, e := range entries {
			if e.Granted() || e.NotBefore.After(now) {
				continue
			}
			if f := c.tasks[e.TaskID]; f != nil && f.p != nil && f.p.Paused != nil {
				continue // a paused run asks again on resume
			}
			free := (q.Concurrency == 0 || holders < q.Concurrency) && (q.PerKey == 0 || byKey[e.Key] < q.PerKey)
			if free {
				c.fail(InvQueueFreed, e.TaskID, e.ID, "queue %q: %s waits (key %q) while a place is free (%d held)", q.Name, e.ID, e.Key, holders)
			}
		}
		c.mu.Unlock()
	}
}

// undoAtRest checks the undo steps: each logical undo (a step's, in a
// task) is applied at most once and under one key, they ran in the
// reverse order of their steps' completion, and a task that ended has
// run every undo it promised.
func (c *checker) undoAtRest() {
	calls := c.s.ledger.all()
	c.mu.Lock()
	defer c.mu.Unlock()
	type undone struct {
		n    int
		keys map[string]bool
		path string
		call int
	}
	byTask := map[string][]*undone{} // original task -> its undo effects, in order
	index := map[string]*undone{}
	for _, call := range calls {
		if !call.Undo || call.Outcome != outOK {
			continue
		}
		orig := call.Task
		if f := c.tasks[call.Task]; f != nil && f.undoOf != "" {
			orig = f.undoOf
		}
		path := strings.TrimPrefix(call.Step, "undo:")
		k := orig + "|" + path
		u := index[k]
		if u == nil {
			u = &undone{keys: map[string]bool{}, path: path, call: call.N}
			index[k] = u
			byTask[orig] = append(byTask[orig], u)
		}
		u.n++
		u.keys[call.Key] = true
	}
	for orig, us := range byTask {
		f := c.tasks[orig]
		cancelled := f != nil && f.cancelledUndoing
		inv := func(normal string) string {
			if cancelled {
				return InvUndoCancel
			}
			return normal
		}
		for _, u := range us {
			// Twice under one key is at least once, as promised (a key
			// re-run after its success was recorded is effect-once's);
			// under two keys, a tool that deduplicates applies it twice.
			if len(u.keys) > 1 {
				c.fail(inv(InvUndoOnce), orig, u.path, "the undo of %s was applied %d times under %d keys", u.path, u.n, len(u.keys))
			}
		}
		// Reverse order: each undo's step completed no earlier than the
		// next undo's step. Steps of the workflow (not a container's
		// records) complete one after the other, in write order; records
		// (a for-each's items) are ordered by the time they completed
		// (the engine's clock; ties in either order).
		for i := 1; i < len(us); i++ {
			first, then := us[i-1].path, us[i].path
			ka, kb := orig+"/"+first, orig+"/"+then
			a, b := c.done[ka], c.done[kb]
			if a == 0 || b == 0 {
				continue
			}
			later := a < b
			if strings.Contains(first, "[") || strings.Contains(then, "[") {
				later = c.doneAt[ka].Before(c.doneAt[kb])
			}
			if later {
				c.fail(inv(InvUndoOrder), orig, then, "%s was undone after %s, but completed after it (write %d at %s, %s's write %d at %s)",
					then, first, b, stamp(c.doneAt[kb]), first, a, stamp(c.doneAt[ka]))
			}
		}
	}
	// A task that ended with a compensation has run all of it, or left
	// it to a task that does (docs/SEMANTICS.md, cancel × undo step): a
	// task cancelled while it undid what it did hands the undo steps
	// left to its undo task; a cancel of that undo task cuts the undo,
	// and its status message says exactly which undo steps ran and which
	// did not.
	undoTasks := map[string]bool{} // the tasks an undo task undoes
	for _, f := range c.tasks {
		if f.undoOf != "" {
			undoTasks[f.undoOf] = true
		}
	}
	for id, f := range c.tasks {
		if !f.ended || f.p == nil || f.p.Undo == nil {
			continue
		}
		orig := id
		if f.undoOf != "" {
			orig = f.undoOf
		}
		of := c.tasks[orig]
		cancelled := (of != nil && of.cancelledUndoing) || f.cancelledUndoing
		inv := InvUndoComplete
		if cancelled {
			inv = InvUndoCancel
		}
		handedOn := f.t.Status == mcptask.StatusCancelled && f.undoOf == "" && undoTasks[id]
		cut := f.t.Status == mcptask.StatusCancelled && f.undoOf != ""
		for _, r := range records(f.p) {
			if !r.undo {
				continue
			}
			switch {
			case r.sp.Status == mcptask.StepCompleted || r.sp.Status == mcptask.StepFailed:
			case handedOn: // its undo task runs it
			case cut:
				c.checkCutTally(id, f, r)
			default:
				c.fail(inv, id, r.path, "the task ended %s with its undo %s %s: a promised undo never ran", f.t.Status, r.path, describe(r.sp))
			}
			if r.sp.Status == mcptask.StepCompleted && index[orig+"|"+strings.TrimPrefix(r.path, "undo:")] == nil {
				c.fail(inv, id, r.path, "undo %s is recorded completed, but its tool never succeeded", r.path)
			}
		}
	}
}

// checkCutTally checks that the status message of undo task id, whose
// cancel cut the undo, names undo record r among those that did not
// undo their step (failed, cut while it ran, never ran). Call with mu
// held.
func (c *checker) checkCutTally(id string, f *facts, r record) {
	msg := f.t.StatusMessage
	_, tally, ok := strings.Cut(msg, "was cut; ")
	_, notDone, ok2 := strings.Cut(tally, "; failed: ")
	if !ok || !ok2 || !strings.Contains(notDone, strings.TrimPrefix(r.path, "undo:")+" (") {
		c.fail(InvUndoCancel, id, r.path, "the undo task was cancelled with its undo %s %s, and its status message does not say so: %q", r.path, describe(r.sp), msg)
	}
}

// unrested lists the tasks that do not rest now: due, expired and not
// swept, running a step with no call of it held, or waiting for nothing
// named. Empty when the engine rests.
func (c *checker) unrested(now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id, f := range c.tasks {
		t := f.t
		if f.deleted || f.ended || t == nil || t.Status.Terminal() || f.stuck != 0 && f.stuck == f.seq {
			continue
		}
		why := c.restless(id, f, now)
		if why != "" {
			out = append(out, id+" "+c.s.handleOf(id)+": "+why)
		}
	}
	slices.Sort(out)
	return out
}

// restless says why task id does not rest ("" when it does). Call with
// mu held.
func (c *checker) restless(id string, f *facts, now time.Time) string {
	return taskRestless(f.t, f.p, now, c.s.holds.holding, func(of string) bool {
		w := c.tasks[of]
		return w != nil && w.ended
	})
}

// describe words a record's state.
func describe(sp *workflow.StepProgress) string {
	s := string(sp.Status)
	if openAttempt(sp) {
		s += ", attempt open"
	}
	if sp.HandedToClient {
		s += ", handed to the client"
	}
	if sp.Queue != nil {
		if sp.Queue.GrantedAt == nil {
			s += ", queued"
		} else {
			s += ", holds a queue place"
		}
	}
	return s
}

// summary words a progress's records.
func summary(p *workflow.Progress) string {
	var parts []string
	for _, r := range records(p) {
		parts = append(parts, r.path+"="+describe(r.sp))
	}
	if p.Paused != nil {
		parts = append(parts, "paused")
	}
	return strings.Join(parts, " ")
}

func stamp(t time.Time) string { return t.UTC().Format("Jan 2 15:04:05.000") }
