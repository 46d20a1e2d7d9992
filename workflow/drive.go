package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// The drive loop runs a workflow task's server steps on the engine, apart
// from any request: a request (a prompt, a continuation, a resume), a
// restart, a takeover or a wake-up of the scheduler only kicks it. The loop
// plans what is due (a step reached, a retry whose time came, a client's
// wait that ran out), writes that plan with the outcomes that came in
// (one write), starts the tools the plan opened attempts for, and waits
// for their outcomes. It ends when nothing runs here and nothing is due
// soon: the task then waits for its client, for the scheduler's wake-up,
// or has ended. Its tools run with a context only a cancel, the task's
// expiry, a lost lease or the server's shutdown ends.

// stepRun is a server step whose tool runs here now.
type stepRun struct {
	attempt int
	cancel  context.CancelCauseFunc
}

// stepResult is what one tool run of a server step ended with.
type stepResult struct {
	step    string
	attempt int
	args    json.RawMessage
	res     *mcp.CallToolResult
	msg     string                // the failure; "" on success
	final   bool                  // a failure retrying cannot fix (the arguments could not be resolved)
	stopped taskrouter.StopReason // why the task's work was stopped (taskrouter.Stopped): nothing is recorded
}

// attemptWork is what a kind's own attempt (toolCall.perform) works
// with: the task's instance, the slot it runs for, the attempt's number
// and the call's resolved arguments.
type attemptWork struct {
	in   *instance
	path string
	n    int
	args map[string]json.RawMessage
}

// finalError is the failure of an attempt that retrying cannot fix (the
// client declined, or cannot do it): the step's failure policy applies at
// once.
type finalError struct{ msg string }

func (e *finalError) Error() string { return e.msg }

// inProcessWait bounds how long the drive loop waits in process for a
// retry due soon (holding the lease); later ones are left to the
// scheduler, which wakes the task on whichever process is up then.
const inProcessWait = 2 * time.Second

// kick makes sure the drive loop runs for the task, starting it unless it
// runs; reason is why steps that ran before run again (ReasonRestart,
// ReasonTakeover, ReasonResume; "" otherwise). The channel it returns is closed when the
// loop's next pass has ended: what was due then is written (a wake-up
// waits for it, so the scheduler does not wake the task again before its
// wake-up time moved).
func (in *instance) kick(reason string) (passed <-chan struct{}) {
	in.locked(func() { passed = in.kickLocked(reason) })
	return passed
}

// kickLocked is kick. Call with mu held.
func (in *instance) kickLocked(reason string) <-chan struct{} {
	b := in.b
	if in.passed == nil {
		in.passed = make(chan struct{})
	}
	passed := in.passed
	if in.driving {
		in.again = true
		select {
		case in.poke <- struct{}{}:
		default:
		}
		return passed
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		close(in.passed)
		in.passed = nil
		return passed
	}
	in.refs++
	b.wg.Add(1)
	b.mu.Unlock()
	in.driving = true
	go in.drive(reason)
	return passed
}

// decided waits until the drive loop's pass under way has decided and
// written what was due, the answers of its effects included (at once when
// the loop does not run), or until ctx ends. A
// new task's prompt answers after its first decision, as it did when the
// decision held the instance's lock: the answer shows it, and a client
// that starts tasks in a loop starts them no faster than they are decided.
func (in *instance) decided(ctx context.Context) {
	var ch <-chan struct{}
	in.locked(func() {
		// A loop parked between passes has decided what was due; the
		// next pass waits for an outcome (a tool's, perhaps one the
		// caller itself is to bring about), so waiting for it could
		// wait forever.
		if in.driving && !in.parked {
			if in.passed == nil {
				in.passed = make(chan struct{})
			}
			ch = in.passed
		}
	})
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// passEnded tells those waiting for a pass (see kick) that one ended.
// Call with mu held.
func (in *instance) passEnded() {
	if in.passed != nil {
		close(in.passed)
		in.passed = nil
	}
}

func (in *instance) drive(reason string) {
	b := in.b
	defer b.wg.Done()
	defer b.done(in)
	defer func() {
		if p := recover(); p != nil {
			// A bug must cost one task, never the process.
			b.engine.Logger().Error("panic running a workflow task's steps", "task", in.id, "panic", p, "stack", string(debug.Stack()))
			in.writing(func() {
				in.stopAll(errTaskEnded)
				in.invalidate()
			})
			in.locked(func() {
				in.driving = false
				in.passEnded()
			})
			b.failTask(context.WithoutCancel(b.ctx), in.id, fmt.Sprintf("internal error while running the workflow's steps: %v", p))
		}
	}()
	ev := in.takeHanded(&occurrence{reason: reason})
	for {
		if !ev.answers() {
			// A kick from now on asks for another pass. (One that came
			// while effects were carried out stays: the decision of
			// their answers looks at nothing again.)
			in.locked(func() { in.again = false })
		}
		wake, more, next := in.pass(b.ctx, ev)
		in.locked(func() {
			if next == nil {
				in.passEnded() // what was due is decided and written (the answers of effects are decided at once, below)
			}
			if !more && next == nil && !in.again {
				in.driving = false
			}
			more = more || next != nil || in.again
		})
		taken := ev.results
		if !more {
			return
		}
		if b.ctx.Err() != nil {
			// Closing: the outcomes the pass saw (a tool stopped by the
			// close) are the drain's to hand back.
			in.drain(taken)
			return
		}
		if next != nil {
			ev = in.takeHanded(next) // the answers of the effects: decided at once
			continue
		}
		var results []stepResult
		var timer <-chan time.Time
		if !wake.IsZero() {
			t := time.NewTimer(max(0, wake.Sub(b.engine.Now())))
			defer t.Stop()
			timer = t.C
		}
		in.locked(func() { in.parked = true })
		select {
		case r := <-in.results:
			results = append(results, r)
		case <-in.poke:
		case <-timer:
		case <-b.ctx.Done():
			in.locked(func() { in.parked = false })
			in.drain(in.takeUnwritten(&occurrence{results: results}).results)
			return
		}
		in.locked(func() { in.parked = false })
		for drained := false; !drained; { // take every outcome that arrived
			select {
			case r := <-in.results:
				results = append(results, r)
			default:
				drained = true
			}
		}
		ev = in.takeHanded(in.takeUnwritten(&occurrence{results: results}))
	}
}

// handAnswers gives the drive loop next, the answers of effects carried
// outside it (a pause's or a resume's decision, Bridge.hold): its next
// pass decides them, as it decides the answers of its own effects. A
// place a queue granted to a resume is then known to the record, and a
// pause that follows gives it up (simulation seed 18: the answer was
// dropped, and the place stayed held by the paused task).
func (in *instance) handAnswers(next *occurrence) {
	if !next.answers() {
		return
	}
	in.locked(func() {
		if in.handed == nil {
			in.handed = &occurrence{places: map[string]placeAnswer{}, children: map[string]childAnswer{}}
		}
		maps.Copy(in.handed.places, next.places)
		maps.Copy(in.handed.children, next.children)
	})
}

// takeHanded returns ev with the answers handed to the drive loop
// (handAnswers) added, ev's own first.
func (in *instance) takeHanded(ev *occurrence) *occurrence {
	var h *occurrence
	in.locked(func() { h, in.handed = in.handed, nil })
	if h == nil {
		return ev
	}
	ev.places = addMissing(ev.places, h.places)
	ev.children = addMissing(ev.children, h.children)
	return ev
}

// addMissing adds to dst (made when nil) the entries of src whose keys
// it lacks, and returns it.
func addMissing[V any](dst, src map[string]V) map[string]V {
	if dst == nil {
		dst = make(map[string]V, len(src))
	}
	for k, v := range src {
		if _, ok := dst[k]; !ok {
			dst[k] = v
		}
	}
	return dst
}

// An event whose decision's write the store refused for a passing reason
// (it was down, or busy) is decided again: the drive loop keeps the event
// (unwritten), waits (unwrittenWait: 100ms, doubling up to
// unwrittenMaxWait, while the refusals go on), then decides it again with
// what came meanwhile, on the task as the store has it. The tools running
// go on, and the lease is kept: a write refused once is never the task's
// silence.

// unwrittenMaxWait bounds the wait before a refused write is tried again.
const unwrittenMaxWait = 30 * time.Second

// keepUnwritten keeps ev, whose decision's write was refused, to decide
// again.
func (in *instance) keepUnwritten(ev *occurrence) {
	in.locked(func() {
		in.unwritten = ev
		in.refusals++
	})
}

// hasUnwritten reports whether an event waits to be decided again.
func (in *instance) hasUnwritten() (has bool) {
	in.locked(func() { has = in.unwritten != nil })
	return has
}

// unwrittenWait is how long the drive loop waits before it decides a
// refused event again.
func (in *instance) unwrittenWait() time.Duration {
	var n int
	in.locked(func() { n = in.refusals })
	return unwrittenBackoff(n)
}

// unwrittenBackoff is the wait before the n-th try again (from 1) of
// something the store refused: 100ms, doubling up to unwrittenMaxWait.
func unwrittenBackoff(n int) time.Duration {
	return min(unwrittenMaxWait, 100*time.Millisecond<<min(max(n-1, 0), 9))
}

// takeUnwritten returns ev with the event kept unwritten (if any) before
// it: its outcomes first, its reason, and its effects' answers.
func (in *instance) takeUnwritten(ev *occurrence) *occurrence {
	var old *occurrence
	in.locked(func() { old, in.unwritten = in.unwritten, nil })
	if old == nil {
		return ev
	}
	old.results = append(old.results, ev.results...)
	old.freed = nil // looked at again by this pass (freeEarly)
	return old
}

// drainWait bounds how long a graceful stop waits for the tools running
// here to return before it hands their steps back anyway.
const drainWait = 5 * time.Second

// drain is a graceful stop (Bridge.Close): the tools running here were
// cancelled; it waits for them (at most drainWait), then decides the stop
// (event.stop: the outcomes that arrived are recorded, results holds
// those already taken, and every step still open is handed back: its
// attempt ends "stopped", it runs again on whichever process picks the
// task up, and it counts as neither a crash nor a failure). The lease is
// released in the same write.
func (in *instance) drain(results []stepResult) {
	b := in.b
	ran := len(results) > 0
	in.locked(func() { ran = ran || len(in.running) > 0 })
	timer := time.NewTimer(drainWait)
	defer timer.Stop()
	for {
		open := 0
		in.locked(func() {
			for _, r := range results {
				if ru := in.running[r.step]; ru != nil && ru.attempt == r.attempt {
					delete(in.running, r.step)
				}
			}
			open = len(in.running)
		})
		if open == 0 {
			break
		}
		select {
		case r := <-in.results:
			results = append(results, r)
			continue
		case <-timer.C:
		}
		break
	}
	ctx, cancel := context.WithTimeout(context.Background(), drainWait)
	defer cancel()
	var effects []effect
	in.writing(func() {
		defer func() {
			in.locked(func() { in.running = map[string]*stepRun{} })
			in.dropLease()
		}()
		if !ran || in.lease == nil {
			return // nothing of the task's ran here
		}
		err := in.commit(ctx, func(p *Progress) (store.Update, error) {
			d := decide(in.recordOf(p), &occurrence{stop: true, results: results})
			effects = d.effects
			return d.update, d.err
		})
		if err != nil {
			effects = nil
			if !errors.Is(err, errEnded) && !errors.Is(err, errTakenOver) {
				b.engine.Logger().Warn("handing a workflow task's steps back at shutdown", "task", in.id, "error", err)
			}
		}
	})
	in.carry(effects) // notices of the outcomes recorded
	in.locked(func() {
		in.driving = false
		in.passEnded()
	})
}

// pass decides ev (a decision, plan.go) and writes it, then carries its
// effects out: it starts the tools of the attempts it opened, and returns
// the answers of its other effects as next (decided at once by the drive
// loop). It returns when the loop should look again by the clock (zero:
// only on an outcome or a kick) and whether it should keep running. It
// holds no lock while it calls the store (only the write turn), and none
// at all while it carries the effects out.
func (in *instance) pass(ctx context.Context, ev *occurrence) (wake time.Time, more bool, next *occurrence) {
	b := in.b
	log := b.engine.Logger()
	in.locked(func() {
		for _, r := range ev.results {
			if ru := in.running[r.step]; ru != nil && ru.attempt == r.attempt {
				delete(in.running, r.step)
			}
		}
	})
	for _, r := range ev.results {
		if r.stopped != "" && ctx.Err() != nil {
			// The bridge is closing (a graceful stop): the drive loop
			// drains, handing the step back.
			return time.Time{}, true, nil
		}
		if r.stopped != "" {
			// The task's work was stopped (a cancel, its expiry, a lost
			// lease): whoever stopped it decides what comes next; nothing
			// is recorded here.
			in.writing(func() {
				in.stopAll(errTaskEnded)
				in.invalidate()
			})
			in.logStopped(r.step, r.stopped)
			return time.Time{}, false, nil
		}
	}
	in.peerRoot(ctx)
	ev.freed = in.freeEarly(ev.results) // queue.go
	in.offered(ev)
	var d decision
	decided, ended := false, false
	in.writing(func() {
		if err := in.load(ctx); err != nil {
			log.Warn("reading a workflow task", "task", in.id, "error", err)
			if !errors.Is(err, store.ErrNotFound) {
				in.keepUnwritten(ev) // read again, and decided, after a while
			}
			return
		}
		if in.task.Status.Terminal() {
			// A pass runs because something was due (a record, a wake-up,
			// an outcome): the task ended before it could act.
			if len(ev.results) > 0 {
				log.Info("not recording a workflow step's outcome: the task ended meanwhile (cancelled, expired, or ended in another process)", "task", in.id, "step", ev.results[0].step, "status", in.task.Status)
			} else {
				log.Info("not running a workflow task's steps here: the task ended meanwhile (cancelled, expired, or ended in another process)", "task", in.id, "status", in.task.Status)
			}
			in.stopAll(errTaskEnded)
			return
		}
		if in.verr != nil {
			in.unserved(ctx)
			return
		}
		var refused bool
		d, decided, refused = in.decideWrite(ctx, ev)
		if refused {
			in.keepUnwritten(ev)
		}
		ended = decided && in.task.Status.Terminal()
	})
	if in.hasUnwritten() {
		return b.engine.Now().Add(in.unwrittenWait()), true, nil // decided again then (takeUnwritten)
	}
	if !decided {
		in.locked(func() { more = len(in.running) > 0 })
		return time.Time{}, more, nil
	}
	in.locked(func() { in.refusals = 0 })
	next = in.carry(d.effects)
	if ended {
		in.writing(func() { in.stopAll(errTaskEnded) }) // a group that failed fast: its other members stop
		return time.Time{}, false, nil
	}
	in.writing(func() {
		if in.p == nil {
			return
		}
		if w := in.p.timerWake(); !w.IsZero() && w.Sub(b.engine.Now()) < inProcessWait && in.lease != nil {
			wake = w
		}
	})
	in.locked(func() { more = len(in.running) > 0 || !wake.IsZero() })
	return wake, more, next
}

// recordOf is the record a decision of this process works on: p (a copy
// of the instance's progress) and what the process observes of itself.
// Call with the turn held.
func (in *instance) recordOf(p *Progress) *record {
	b := in.b
	r := &record{id: in.id, task: in.task, p: p, wf: in.wf, opts: &b.opts, now: b.engine.Now(),
		leased: in.lease != nil, fenced: in.lease != nil && in.lease.Held(), written: in.written, queues: b.queues() != nil, result: b.resultJSON}
	in.locked(func() {
		r.here = make(map[string]int, len(in.running))
		for path, ru := range in.running {
			r.here[path] = ru.attempt
		}
		peer := in.peer
		r.peer = func(method string) (reach, refuses bool) {
			if !peer.reach {
				return false, false
			}
			return true, peer.of != nil && !peer.of.Can(method)
		}
	})
	return r
}

// decideWrite decides ev and writes the decision, taking the lease first
// when it opens attempts. ok is false when the pass stops here: the task
// ended, another process runs it, or the write failed: refused is set
// when it failed for a reason that may pass (the event is decided again:
// see keepUnwritten), and a write the store refuses for good fails the
// task. Call with the turn held.
func (in *instance) decideWrite(ctx context.Context, ev *occurrence) (d decision, ok, refused bool) {
	log := in.b.engine.Logger()
	held := in.parentHold(ctx) // a paused parent's child starts nothing (pause.go)
	for attempt := 0; attempt < 3; attempt++ {
		err := in.commit(ctx, func(p *Progress) (store.Update, error) {
			r := in.recordOf(p)
			r.parent = held
			d = decide(r, ev)
			return d.update, d.err
		})
		switch {
		case err == nil:
		case errors.Is(err, errNeedLease):
			if lerr := in.holdLease(ctx); lerr != nil {
				switch {
				case errors.Is(lerr, store.ErrTerminal), errors.Is(lerr, store.ErrNotFound):
					log.Info("not running a workflow task's steps here: the task ended meanwhile (cancelled, expired, or ended in another process)", "task", in.id)
				case !errors.Is(lerr, store.ErrLeased):
					log.Warn("claiming a workflow task's lease; trying again", "task", in.id, "error", lerr)
					return d, false, true
				}
				// Another process runs the task's server steps (or it
				// ended): it records what comes next.
				return d, false, false
			}
			continue
		case errors.Is(err, errNoWrite), errors.Is(err, errUnchanged):
		case errors.Is(err, errEnded):
			log.Info("not recording a workflow task's progress here: the task ended meanwhile (cancelled, expired, or ended in another process)", "task", in.id)
			in.stopAll(errTaskEnded)
			return d, false, false
		case errors.Is(err, errTakenOver):
			log.Warn("lease lost; not recording a workflow task's progress here: another process took the task over", "task", in.id)
			in.stopAll(errTaskEnded)
			return d, false, false
		case permanent(err):
			// A write the store refuses for a reason that will not go
			// away fails the task with that reason, never leaving it
			// "running" until its ttl.
			log.Error("recording a workflow task's progress", "task", in.id, "error", err)
			in.stopAll(errTaskEnded)
			in.invalidate()
			in.b.failTask(context.WithoutCancel(ctx), in.id, fmt.Sprintf("the workflow's progress cannot be recorded: %v", err))
			return d, false, false
		case errors.As(err, new(*storeFailure)):
			// The store refused the write for a reason that may pass
			// (down, busy): the event is decided again (keepUnwritten);
			// what runs goes on.
			log.Warn("recording a workflow task's progress; trying again", "task", in.id, "error", err)
			return d, false, true
		default:
			log.Error("recording a workflow task's progress", "task", in.id, "error", err)
			in.stopAll(errTaskEnded)
			return d, false, false
		}
		break
	}
	return d, true, false
}

// logStopped says why the tool of a server step was stopped without its
// outcome being recorded (why is taskrouter.Stopped's reason), in the words
// README ("Running several replicas") promises a replica that was paused
// or cut off past its lease.
func (in *instance) logStopped(step string, why taskrouter.StopReason) {
	log := in.b.engine.Logger()
	switch why {
	case taskrouter.StopLeaseLost:
		log.Warn("lease lost; stopped a workflow step without recording its outcome: another process took the task over", "task", in.id, "step", step)
	case taskrouter.StopEnded:
		log.Info("stopped a workflow step without recording its outcome: the task ended meanwhile (in another process)", "task", in.id, "step", step)
	default:
		log.Info("stopped a workflow step without recording its outcome", "task", in.id, "step", step, "why", why)
	}
}

// errNeedLease asks pass to take the lease before the plan may open
// attempts; errNoWrite keeps a plan in memory without a write (coalesced
// progress, see Options.ProgressInterval).
var (
	errNeedLease = errors.New("workflow: the plan needs the task's lease")
	errNoWrite   = errors.New("workflow: nothing to write")
	errUnchanged = errors.New("workflow: nothing changed")
	errTaskEnded = errors.New("workflow: the task ended or was taken over")
)

// launch starts the tool of attempt n of the slot at path, apart from any
// request (the start effect of a decision, after its write). It holds no
// lock while it resolves the arguments and starts the tool.
func (in *instance) launch(name string, n int) {
	b := in.b
	var c *toolCall
	var args map[string]json.RawMessage
	var err error
	var key string
	found := false
	in.writing(func() { // the record: what the attempt calls, with what
		if in.wf == nil || in.p == nil {
			return
		}
		sl := in.wf.slotAt(in.p, name)
		if sl == nil {
			return
		}
		a := sl.sp.open()
		c = callOf(sl.s)
		if a == nil || c == nil || a.N != n {
			return
		}
		found, key = true, sl.sp.IdempotencyKey
		args, err = c.resolve(&resolver{w: in.wf.def, vars: in.vars, item: sl.item}, in.p, false, sl.sp.ServerTakeover)
	})
	if !found {
		return
	}
	tctx, untrack := b.engine.Track(b.ctx, in.id)
	ctx, cancel := context.WithCancelCause(withStepKey(tctx, in.id, name, n, string(mcptask.ExecServer), key))
	in.locked(func() { in.running[name] = &stepRun{attempt: n, cancel: cancel} })
	meta := mcp.Meta{mcptask.MetaIdempotencyKey: key}
	go func() {
		defer untrack()
		defer cancel(nil)
		r := stepResult{step: name, attempt: n}

		if err != nil {
			r.msg, r.final = err.Error(), true
		} else {
			r.args = marshal(args)
			res, cerr, cut := c.run(ctx, func(ctx context.Context) (*mcp.CallToolResult, error) {
				if c.perform != nil {
					return c.perform(ctx, &attemptWork{in: in, path: name, n: n, args: args})
				}
				return b.runTool(ctx, c.tool, args, meta)
			})
			undone := errors.Is(context.Cause(ctx), errUndoing)
			switch {
			case cut != "":
				r.msg = cut // its own timeout or heartbeat: an attempt that failed
			case undone && (cerr != nil || res == nil || res.IsError):
				r.msg = errUndoing.Error() // stopped by the workflow's failure
			case undone: // it completed anyway: recorded, then undone
			case pauseCut(ctx):
				r.msg = errPauseCut.Error() // the pause recorded the attempt stopped: not applied (pause.go)
			case ctx.Err() != nil:
				r.stopped = taskrouter.Stopped(ctx)
				if r.stopped == "" {
					r.stopped = taskrouter.StopShutdown
				}
			case cerr != nil:
				var fe *finalError
				r.msg, r.final = cerr.Error(), errors.As(cerr, &fe)
			case res == nil:
				r.msg = "the tool returned no result"
			case res.IsError:
				r.msg = toolError(res)
			}
			r.res = res
		}
		select {
		case in.results <- r:
		case <-b.ctx.Done():
			select { // a graceful stop drains: it may still take it
			case in.results <- r:
			case <-time.After(drainWait):
			}
		}
	}()
}

// runTool calls a server step's tool, recovering a panicking handler.
func (b *Bridge) runTool(ctx context.Context, tool string, args map[string]json.RawMessage, meta mcp.Meta) (res *mcp.CallToolResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			b.engine.Logger().Error("workflow step tool panicked", "tool", tool, "panic", p, "stack", string(debug.Stack()))
			res, err = nil, fmt.Errorf("the tool panicked: %v", p)
		}
	}()
	return b.engine.RunTool(ctx, toolRequest(nil, tool, args, meta))
}

// stopAll cancels the tools running here for the task (it ended or was
// taken over) and stops renewing its lease. Call with the turn held.
func (in *instance) stopAll(cause error) {
	in.locked(func() {
		for name, ru := range in.running {
			ru.cancel(cause)
			delete(in.running, name)
		}
	})
	in.dropLease()
}

// failTask ends a task failed with msg, whatever its progress says (a
// definition gone, a bug): the last resort that keeps one bad task from
// anything else. Its records are closed in the same write when its
// progress can be read and written (closeRecords: nothing of an ended
// task reads running); when it cannot, the end is written alone.
func (b *Bridge) failTask(ctx context.Context, id, msg string) {
	end := store.Update{Status: mcptask.StatusFailed, StatusMessage: &msg,
		Error: &mcptask.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg}}
	err := errNoWrite
	for attempt := 0; attempt < 8; attempt++ {
		u, ok := b.closedEnd(ctx, id, end)
		if !ok {
			break
		}
		if _, err = b.engine.Update(ctx, id, u); !errors.Is(err, store.ErrConflict) {
			break // written, ended, or refused (too large: the end alone, below)
		}
	}
	if err != nil && !errors.Is(err, store.ErrTerminal) && !errors.Is(err, store.ErrNotFound) {
		_, err = b.engine.Update(ctx, id, end)
	}
	if err != nil && !errors.Is(err, store.ErrTerminal) && !errors.Is(err, store.ErrNotFound) {
		b.engine.Logger().Error("failing a workflow task", "task", id, "error", err)
	}
}

// closedEnd is end (a failure failTask writes) with task id's progress,
// its records closed, written conditional on the task's version; ok is
// false when the task or its progress cannot be read.
func (b *Bridge) closedEnd(ctx context.Context, id string, end store.Update) (u store.Update, ok bool) {
	t, err := b.engine.Task(ctx, id)
	if err != nil {
		return end, false
	}
	p, err := decodeProgress(t)
	if err != nil {
		return end, false
	}
	now := b.engine.Now()
	closeRecords(p, now, "the workflow failed before it ended", false)
	p.PauseReason, p.Revision, p.UpdatedAt = *end.StatusMessage, p.Revision+1, now
	raw, err := json.Marshal(p)
	if err != nil {
		return end, false
	}
	u = end
	u.Variables, u.IfVersion = map[string]json.RawMessage{VarProgress: raw}, t.Version
	return u, true
}

// toolRequest builds the in-process tools/call of tool with args.
func toolRequest(ss *mcp.ServerSession, tool string, args map[string]json.RawMessage, meta mcp.Meta) *mcp.CallToolRequest {
	raw, _ := json.Marshal(args) // json.RawMessage values always encode
	params := &mcp.CallToolParamsRaw{Name: tool, Arguments: raw}
	if len(meta) > 0 {
		params.Meta = meta
	}
	return &mcp.CallToolRequest{Session: ss, Params: params}
}
