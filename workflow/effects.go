package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Events and effects: what a decision (plan.go) is about, and what it
// leaves to do once its write is made. The instance carries effects out
// (carry) after the write, outside every lock; those that learn something
// (a queue's answer, a child's state) hand it to the next decision as its
// event. Every effect is idempotent: a queue entry and a child are named
// by the task, the slot and the attempt, so doing one twice finds what
// the first did.

// occurrence is an event: what a decision is about.
type occurrence struct {
	// reason says why steps that ran before run again: ReasonRestart (a
	// recovery after a crash), ReasonTakeover (another replica's lease
	// ran out), ReasonResume (a client
	// resumed the workflow); "" for a kick, a timer or a wake-up.
	reason string
	// results are the outcomes of attempts that came in.
	results []stepResult
	// places are the answers of the queues the last decision asked for
	// places, by entry id.
	places map[string]placeAnswer
	// children are what the last decision's effects found of child
	// workflows, by the path of the slot that started them.
	children map[string]childAnswer
	// stop is a graceful stop (Bridge.Close): every open attempt is
	// handed back.
	stop bool
	// pause pauses the workflow; resume resumes it, by whom (pause.go).
	pause  *Pause
	resume string
	// parent, on a resume, is the parent whose resume it is: only a pause
	// that parent's pause made is resumed. heldBy, on another resume, is
	// the task's parent when it is paused (read before the decision): a
	// pause that parent made stays until the parent's resume.
	parent, heldBy string
	// freed are the queue entries the executor gave up as the tools of
	// their runs returned, before this decision (freeEarly).
	freed map[string]bool
}

// answers reports whether ev holds answers of effects.
func (ev *occurrence) answers() bool {
	return ev != nil && (len(ev.places) > 0 || len(ev.children) > 0)
}

// placeAnswer is a queue's answer to a request for a place.
type placeAnswer struct {
	entry store.QueueEntry
	res   store.QueueResult
	err   error
}

// childAnswer is what an effect found of a child workflow: the child as
// read (task), or why it could not be read or started (err), or why it
// cannot start whatever is tried again (final).
type childAnswer struct {
	id    string
	task  *store.Task
	err   error
	final string
}

// effect is one thing a decision leaves to do after its write.
type effect interface{ effectName() string }

type (
	// startAttempt starts the tool of attempt n of the slot at path.
	startAttempt struct {
		path string
		n    int
	}
	// cutAttempt stops the tool of the attempt of the slot at path that
	// runs here (n: that attempt; 0: any), with cause.
	cutAttempt struct {
		path  string
		n     int
		cause error
	}
	// takePlace asks queue q for a place for entry (or looks again); the
	// store keeps the entry's key in its task's scope (queue_owner.go).
	takePlace struct {
		q     *Queue
		entry store.QueueEntry
		lim   store.QueueLimits
	}
	// freePlace gives entry id's place on queue up.
	freePlace struct {
		queue, id string
		lim       store.QueueLimits
	}
	// startChild creates child id (workflow, on args) for the slot at
	// path, unless it exists, and reads it.
	startChild struct {
		path, id, workflow string
		args               map[string]string
	}
	// readChild reads child id of the slot at path.
	readChild struct{ path, id string }
	// holdChild pauses (resume "") or resumes (resume: by whom) child id.
	holdChild struct {
		id     string
		pause  *Pause
		resume string
	}
	// recheckParent reads parent again after the write that paused the
	// task with it (heldByParent): when the parent was resumed
	// meanwhile, the task is resumed too.
	recheckParent struct{ parent string }
	// noticeStep tells the observer of an attempt.
	noticeStep struct{ e StepEvent }
)

func (startAttempt) effectName() string  { return "start an attempt" }
func (cutAttempt) effectName() string    { return "cut an attempt" }
func (takePlace) effectName() string     { return "take a queue place" }
func (freePlace) effectName() string     { return "free a queue place" }
func (startChild) effectName() string    { return "start a child" }
func (readChild) effectName() string     { return "read a child" }
func (holdChild) effectName() string     { return "pause or resume a child" }
func (recheckParent) effectName() string { return "look at the parent's pause again" }
func (noticeStep) effectName() string    { return "tell the observer" }

// effectWait bounds one effect's call (a queue, a child, the store).
const effectWait = 10 * time.Second

// carry carries out the effects of a decision whose write is made (or
// that wrote nothing), in order, holding no lock: it returns the event of
// their answers (queue places, children's states), nil when none.
func (in *instance) carry(effects []effect) *occurrence {
	b := in.b
	var next *occurrence
	answer := func() *occurrence {
		if next == nil {
			next = &occurrence{places: map[string]placeAnswer{}, children: map[string]childAnswer{}}
		}
		return next
	}
	for _, e := range effects {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), effectWait)
		switch e := e.(type) {
		case startAttempt:
			in.launch(e.path, e.n)
		case cutAttempt:
			in.locked(func() {
				if ru := in.running[e.path]; ru != nil && (e.n == 0 || ru.attempt == e.n) {
					ru.cancel(e.cause)
				}
			})
		case takePlace:
			var t *store.Task
			in.locked(func() { t = in.task })
			res, err := b.queues().Enqueue(ctx, scoped(t, in.id, e.q, e.entry), e.lim)
			if err != nil {
				b.engine.Logger().Warn("asking a queue for a place", "task", in.id, "queue", e.entry.Queue, "error", err)
			} else {
				b.wakeGranted(in.id, res.Granted, e.entry.ID)
				b.replaced(e.q, res.Replaced, t)
				res.Holders = visibleHolders(t, in.id, e.q, res.Holders) // a status names only what its reader may see
			}
			answer().places[e.entry.ID] = placeAnswer{entry: e.entry, res: res, err: err}
		case freePlace:
			b.freePlace(ctx, in.id, e)
		case startChild:
			t, _ := in.known()
			ca := childAnswer{id: e.id}
			if t == nil {
				ca.err = errors.New("the parent task is not known here")
			} else if ct, err := b.startChild(ctx, t, e.workflow, e.args, e.id, e.path); err != nil {
				ca.err = err
				if errors.Is(err, errNotStarted) {
					ca.final = err.Error()
				}
			} else {
				ca.task = ct
			}
			answer().children[e.path] = ca
		case readChild:
			ct, err := b.engine.Task(ctx, e.id)
			answer().children[e.path] = childAnswer{id: e.id, task: ct, err: err}
		case holdChild:
			b.holdChild(ctx, in.id, e)
		case recheckParent:
			if b.parentPause(ctx, e.parent) == nil {
				b.holdChild(ctx, e.parent, holdChild{id: in.id, resume: "the resume of its parent, workflow task " + e.parent})
			}
		case noticeStep:
			if o := b.opts.Observer; o != nil {
				o.StepEvent(e.e)
			}
		}
		cancel()
	}
	return next
}

// freePlace gives up the place e names and wakes the tasks that get the
// places it frees (task is the task that held it). The record says the
// place is given up (the write before the effect), so a refusal of the
// store is no reason to keep it: it is tried again at once, then in the
// background (unwrittenBackoff: 100ms, doubling up to 30s) until the store
// takes it or the bridge closes; a recovery gives it up again too
// (freeLost).
func (b *Bridge) freePlace(ctx context.Context, task string, e freePlace) {
	if b.queues() == nil {
		return
	}
	b.until(ctx, func(ctx context.Context) bool { return b.dequeue(ctx, task, e) })
}

// until does what a write promised (done reports it done, or never to
// be: refused for good): at once, again at once, then in the background
// (unwrittenBackoff: 100ms, doubling up to 30s) until it is done or the
// bridge closes.
func (b *Bridge) until(ctx context.Context, done func(ctx context.Context) bool) {
	if done(ctx) || done(ctx) {
		return
	}
	b.spawn(func() {
		for n := 1; ; n++ {
			t := time.NewTimer(unwrittenBackoff(n))
			select {
			case <-b.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(b.ctx, effectWait)
			ok := done(ctx)
			cancel()
			if ok {
				return
			}
		}
	})
}

// dequeue gives up the place e names, waking the tasks that get the
// places it frees; it reports whether it is given up (or never will be:
// the store refuses it for good).
func (b *Bridge) dequeue(ctx context.Context, task string, e freePlace) bool {
	res, err := b.queues().Dequeue(ctx, e.queue, e.id, e.lim)
	if err != nil {
		b.engine.Logger().Warn("giving up a place on a queue; trying again", "task", task, "queue", e.queue, "entry", e.id, "error", err)
		return errors.Is(err, store.ErrNotFound) || permanent(err)
	}
	b.wakeGranted(task, res.Granted, "")
	return true
}

// holdChild pauses or resumes child e.id of task parent (pause.go: a
// pause and a resume reach a workflow's children as a cancel does). A
// child that ended, or is paused already (or not), is left as it is.
func (b *Bridge) holdChild(ctx context.Context, parent string, e holdChild) {
	var err error
	if e.pause != nil {
		_, _, err = b.Pause(ctx, e.id, taskrouter.PauseRequest{By: parentBy(parent), Reason: fmt.Sprintf("its parent workflow task %s was paused by %s", parent, e.pause.By), Cut: e.pause.Cut})
	} else {
		_, _, err = b.resumeChild(ctx, e.id, parent, e.resume)
	}
	if err != nil && !errors.Is(err, taskrouter.ErrNotPausable) {
		b.engine.Logger().Warn("pausing or resuming a child workflow", "task", parent, "child", e.id, "error", err)
	}
}
