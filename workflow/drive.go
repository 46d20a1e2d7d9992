package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
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
	msg     string // the failure; "" on success
	final   bool   // a failure retrying cannot fix (the arguments could not be resolved)
	stopped string // why the task's work was stopped (taskrouter.Stopped): nothing is recorded
}

// inProcessWait bounds how long the drive loop waits in process for a
// retry due soon (holding the lease); later ones are left to the
// scheduler, which wakes the task on whichever process is up then.
const inProcessWait = 2 * time.Second

// kick makes sure the drive loop runs for the task, starting it unless it
// runs; reason is why steps that ran before run again (ReasonRestart,
// ReasonResume; "" otherwise).
func (in *instance) kick(reason string) {
	b := in.b
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.driving {
		in.again = true
		select {
		case in.poke <- struct{}{}:
		default:
		}
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	in.refs++
	b.wg.Add(1)
	b.mu.Unlock()
	in.driving = true
	go in.drive(reason)
}

func (in *instance) drive(reason string) {
	b := in.b
	defer b.wg.Done()
	defer b.done(in)
	defer func() {
		if p := recover(); p != nil {
			// A bug must cost one task, never the process.
			b.engine.Logger().Error("panic running a workflow task's steps", "task", in.id, "panic", p, "stack", string(debug.Stack()))
			in.mu.Lock()
			in.driving = false
			in.stopAll(errTaskEnded)
			in.invalidate()
			in.mu.Unlock()
			b.failTask(context.WithoutCancel(b.ctx), in.id, fmt.Sprintf("internal error while running the workflow's steps: %v", p))
		}
	}()
	var results []stepResult
	for {
		wake, more := in.locked(func() (time.Time, bool) {
			in.again = false
			wake, more := in.pass(b.ctx, reason, results)
			if !more && !in.again {
				in.driving = false
			}
			return wake, more || in.again
		})
		reason, results = "", nil
		if !more {
			return
		}
		var timer <-chan time.Time
		if !wake.IsZero() {
			t := time.NewTimer(max(0, wake.Sub(b.engine.Now())))
			defer t.Stop()
			timer = t.C
		}
		select {
		case r := <-in.results:
			results = append(results, r)
		case <-in.poke:
		case <-timer:
		case <-b.ctx.Done():
			in.mu.Lock()
			in.driving = false
			in.mu.Unlock()
			return
		}
		for drained := false; !drained; { // take every outcome that arrived
			select {
			case r := <-in.results:
				results = append(results, r)
			default:
				drained = true
			}
		}
	}
}

// locked runs f with mu held, unlocking even when f panics.
func (in *instance) locked(f func() (time.Time, bool)) (time.Time, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return f()
}

// pass records results, plans what is due and writes both, then starts
// the tools of the attempts it opened. It returns when the loop should
// look again by the clock (zero: only on an outcome or a kick) and whether
// it should keep running. Call with mu held.
func (in *instance) pass(ctx context.Context, reason string, results []stepResult) (wake time.Time, more bool) {
	b := in.b
	log := b.engine.Logger()
	for _, r := range results {
		if ru := in.running[r.step]; ru != nil && ru.attempt == r.attempt {
			delete(in.running, r.step)
		}
	}
	for _, r := range results {
		if r.stopped != "" {
			// The task's work was stopped (a cancel, its expiry, a lost
			// lease, the shutdown): whoever stopped it decides what comes
			// next; nothing is recorded here.
			in.stopAll(errTaskEnded)
			in.invalidate()
			in.logStopped(r.step, r.stopped)
			return time.Time{}, false
		}
	}
	if err := in.load(ctx); err != nil {
		log.Warn("reading a workflow task", "task", in.id, "error", err)
		return time.Time{}, len(in.running) > 0
	}
	if in.task.Status.Terminal() {
		// A pass runs because something was due (a record, a wake-up, an
		// outcome): the task ended before it could act.
		if len(results) > 0 {
			log.Info("not recording a workflow step's outcome: the task ended meanwhile (cancelled, expired, or ended in another process)", "task", in.id, "step", results[0].step, "status", in.task.Status)
		} else {
			log.Info("not running a workflow task's steps here: the task ended meanwhile (cancelled, expired, or ended in another process)", "task", in.id, "status", in.task.Status)
		}
		in.stopAll(errTaskEnded)
		return time.Time{}, false
	}
	if in.verr != nil {
		in.unserved(ctx)
		return time.Time{}, false
	}
	kept := results
	var pl plan
	for attempt := 0; attempt < 3; attempt++ {
		err := in.commit(ctx, func(p *Progress) (store.Update, error) {
			pl = in.plan(p, kept, reason)
			return pl.update, pl.err
		})
		switch {
		case err == nil:
		case errors.Is(err, errNeedLease):
			if lerr := in.holdLease(ctx); lerr != nil {
				switch {
				case errors.Is(lerr, store.ErrTerminal), errors.Is(lerr, store.ErrNotFound):
					log.Info("not running a workflow task's steps here: the task ended meanwhile (cancelled, expired, or ended in another process)", "task", in.id)
				case !errors.Is(lerr, store.ErrLeased):
					log.Warn("claiming a workflow task's lease", "task", in.id, "error", lerr)
				}
				// Another process runs the task's server steps (or it
				// ended): it records what comes next.
				return time.Time{}, len(in.running) > 0
			}
			continue
		case errors.Is(err, errNoWrite), errors.Is(err, errUnchanged):
		case errors.Is(err, errEnded):
			log.Info("not recording a workflow task's progress here: the task ended meanwhile (cancelled, expired, or ended in another process)", "task", in.id)
			in.stopAll(errTaskEnded)
			return time.Time{}, false
		case errors.Is(err, errTakenOver):
			log.Warn("lease lost; not recording a workflow task's progress here: another process took the task over", "task", in.id)
			in.stopAll(errTaskEnded)
			return time.Time{}, false
		default:
			log.Error("recording a workflow task's progress", "task", in.id, "error", err)
			in.stopAll(errTaskEnded)
			return time.Time{}, false
		}
		break
	}
	if in.task.Status.Terminal() {
		in.stopAll(errTaskEnded) // a group that failed fast: its other members stop
		return time.Time{}, false
	}
	for _, name := range pl.start {
		in.launch(name)
	}
	if w := in.p.timerWake(); !w.IsZero() && w.Sub(b.engine.Now()) < inProcessWait && in.lease != nil {
		wake = w
	}
	return wake, len(in.running) > 0 || !wake.IsZero()
}

// logStopped says why the tool of a server step was stopped without its
// outcome being recorded (why is taskrouter.Stopped's word), in the words
// README ("Running several replicas") promises a replica that was paused
// or cut off past its lease.
func (in *instance) logStopped(step, why string) {
	log := in.b.engine.Logger()
	switch why {
	case "lease lost":
		log.Warn("lease lost; stopped a workflow step without recording its outcome: another process took the task over", "task", in.id, "step", step)
	case "ended":
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

// plan is what one pass decided.
type plan struct {
	update store.Update
	err    error
	start  []string // steps whose attempts the write opens
}

// plan applies the outcomes to p, then moves p forward: steps reached,
// retries and waits whose time came, the end of the workflow. It decides
// the write (status, result, lease release) and which tools to start.
//
// The steps are walked in order. Ended steps are passed; a step that needs
// a skipped step's output is skipped; a client step is reached (the client
// may perform it, and consecutive client steps in any order) and the walk
// goes on; a step handed to the client, or a server step, ends the walk:
// nothing after it may run before it ends.
func (in *instance) plan(p *Progress, results []stepResult, reason string) plan {
	b, wf := in.b, in.wf
	now := b.engine.Now()
	var pl plan
	before, _ := json.Marshal(p)
	quick := b.opts.ProgressInterval > 0 && len(results) > 0 && now.Sub(in.written) < b.opts.ProgressInterval
	var failure string
	for _, r := range results {
		s := wf.byName[r.step]
		applied, fails := in.record(p, s, r, now)
		if !applied {
			continue
		}
		quick = quick && r.msg == "" && s.Retryable
		if fails != "" && failure == "" {
			failure = fails
		}
	}
	if failure == "" {
		failure = in.walk(p, now, reason, &pl)
	}
	p.refresh()
	switch {
	case failure != "":
		p.PauseReason = failure
		pl.update = store.Update{Status: store.StatusFailed, StatusMessage: &failure,
			Error: &store.ErrorInfo{Code: mcptask.CodeInternalError, Message: failure}}
		pl.start = nil
		return pl
	case p.done():
		p.PauseReason = completedMessage(p)
		raw, err := b.resultJSON(in.task, wf, p)
		if err != nil {
			pl.err = err
			return pl
		}
		pl.update = store.Update{Status: store.StatusCompleted, Result: raw, StatusMessage: &p.PauseReason}
		return pl
	}
	if len(pl.start) > 0 && in.lease == nil {
		pl.err = errNeedLease
		return pl
	}
	for _, name := range pl.start {
		sp := p.step(name)
		sp.Status = StepRunning
		sp.RetryAt = nil
	}
	p.PauseReason = pauseReason(wf, p)
	if in.lease != nil && in.lease.Held() && len(pl.start) == 0 && len(in.running) == 0 && !waitSoon(p, now) {
		pl.update.ReleaseLease = true
	}
	if !pl.update.ReleaseLease && len(pl.start) == 0 && in.task.Status == wantStatus(in.task, p) {
		if after, _ := json.Marshal(p); bytes.Equal(before, after) {
			pl.err = errUnchanged // nothing new to record
			return pl
		}
	}
	if quick && len(pl.start) > 0 {
		allRetryable := true
		for _, name := range pl.start {
			allRetryable = allRetryable && wf.byName[name].Retryable
		}
		if allRetryable {
			pl.err = errNoWrite
		}
	}
	return pl
}

// walk moves p forward stage by stage (a step alone is a stage, a
// group's members are one). A stage's steps that need a skipped step's
// output, or whose condition does not hold, are skipped. Its client-side
// steps are reached: the client may perform them (a client step, an event)
// and, through consecutive client stages, in any order. Its server-side
// steps run, unless a client step of an earlier stage is not done yet: the
// server waits for every stage before its own. A stage that has not ended
// and holds a server-side step, or a step handed to the client, holds back
// every later stage. It returns a failure that ends the workflow, or "".
func (in *instance) walk(p *Progress, now time.Time, reason string, pl *plan) string {
	wf := in.wf
	waits := false // a client step of an earlier stage is not done
	for _, members := range wf.stages {
		blocks := false
		for _, i := range members {
			s, sp := wf.steps[i], &p.Steps[i]
			if sp.ended() || sp.GaveUp {
				continue
			}
			if why := in.skipReason(p, s, waits); why != "" {
				sp.Status, sp.SkipReason = StepSkipped, why
				sp.RetryAt, sp.ReachedAt, sp.Deadline = nil, nil, nil
				continue
			}
			why := reason
			if clientSide(s, sp) {
				failure, back := in.reach(s, sp, now)
				switch {
				case failure != "":
					return failure
				case sp.ended():
					continue // skipped: its wait ran out
				case !back:
					blocks = blocks || sp.HandedToClient
					continue
				}
				why = ReasonTimeout
			}
			blocks = true
			if waits {
				continue // the server waits for the client's earlier step
			}
			if failure := in.serve(p, s, sp, now, why, pl); failure != "" {
				return failure
			}
		}
		open, gaveUp := false, []string{}
		for _, i := range members {
			switch sp := &p.Steps[i]; {
			case sp.GaveUp:
				gaveUp = append(gaveUp, fmt.Sprintf("step %q (tool %q): %s", sp.Name, sp.Tool, oneLine(sp.Error)))
			case !sp.ended():
				open = true
			}
		}
		switch {
		case !open && len(gaveUp) > 0:
			return fmt.Sprintf("group %q failed: %s; the workflow failed", wf.groupOf[wf.steps[members[0]].Name].Name, strings.Join(gaveUp, "; "))
		case !open:
			continue
		case blocks || len(gaveUp) > 0:
			return ""
		}
		waits = true
	}
	return ""
}

// skipReason says why step s will not run, or "": it needs the output of a
// skipped step (for its arguments, its condition or its sleep), or its
// condition does not hold. A condition is judged once the step's stage is
// reached (for a server step, once no earlier client step waits).
func (in *instance) skipReason(p *Progress, s *Step, waits bool) string {
	if waits && !clientSide(s, p.step(s.Name)) {
		return skipInput(in.wf.def, p, s) // the condition waits too
	}
	return (&runner{wf: in.wf.def, vars: in.vars}).skipReason(p, s)
}

// serve does the server's part of step s, reached: a tool step runs (or
// waits for its retry), a sleep starts or ends. It returns a failure that
// ends the workflow, or "".
func (in *instance) serve(p *Progress, s *Step, sp *StepProgress, now time.Time, reason string, pl *plan) string {
	if s.kind() == KindSleep {
		return in.sleep(p, s, sp, now)
	}
	return in.runnable(p, s, sp, now, reason, pl)
}

// clientSide reports whether the client performs step s now: a client
// step (unless the server took it back), an event, or a server step
// handed to the client.
func clientSide(s *Step, sp *StepProgress) bool {
	return (s.execution() == ClientDeferred && !sp.ServerTakeover) || sp.HandedToClient
}

// waitSoon reports whether a retry is due within inProcessWait, which the
// drive loop waits for holding the lease.
func waitSoon(p *Progress, now time.Time) bool {
	for i := range p.Steps {
		if at := p.Steps[i].RetryAt; at != nil && !p.Steps[i].ended() && at.Sub(now) < inProcessWait {
			return true
		}
	}
	return false
}

// reached reports whether step i is reached for the client: every stage
// before its own has ended, or holds only steps the client may perform
// (the client performs consecutive client steps in any order).
func reached(wf *compiled, p *Progress, i int) bool {
	for j := range p.Steps[:i] {
		if wf.stage[j] == wf.stage[i] {
			break
		}
		sp, s := &p.Steps[j], wf.steps[j]
		if sp.ended() || (clientSide(s, sp) && !sp.HandedToClient) {
			continue
		}
		return false
	}
	return true
}

// markReached marks the client steps now reached as waiting for the
// client (starting their waits), as plan does, without running anything:
// a continuation records the next client steps with its own outcome.
func markReached(wf *compiled, p *Progress, now time.Time) {
	for i, s := range wf.steps {
		sp := &p.Steps[i]
		if sp.ended() || !reached(wf, p, i) {
			continue
		}
		if clientSide(s, sp) {
			markStep(s, sp, now)
		}
	}
}

// markStep marks a reached client-side step as waiting for the client and
// starts its wait.
func markStep(s *Step, sp *StepProgress, now time.Time) {
	if !sp.HandedToClient && sp.Status == StepPending {
		sp.Status = StepAwaitingClient
		if s.kind() == KindEvent {
			sp.Status = StepAwaitingEvent
		}
	}
	if sp.ReachedAt == nil {
		at := now
		sp.ReachedAt = &at
		if s.ClientWait > 0 {
			end := now.Add(s.ClientWait)
			sp.Deadline = &end
		}
	}
}

// reach marks a client step (or a server step handed to the client) as
// waiting for the client, starting its wait, and applies its timeout when
// the wait has run out: it returns a failure that ends the workflow
// (TimeoutFail), or reports that the server takes the step back
// (TimeoutServer); a step skipped by TimeoutSkip is ended.
func (in *instance) reach(s *Step, sp *StepProgress, now time.Time) (failure string, back bool) {
	markStep(s, sp, now)
	if sp.Deadline == nil || now.Before(*sp.Deadline) {
		return "", false
	}
	why := fmt.Sprintf("the client did not perform step %q (tool %q) within %s", s.Name, s.Tool, s.ClientWait)
	switch s.timeoutPolicy() {
	case TimeoutSkip:
		sp.Status, sp.SkipReason = StepSkipped, why
		sp.ReachedAt, sp.Deadline = nil, nil
		return "", false
	case TimeoutServer:
		sp.HandedToClient, sp.ReachedAt, sp.Deadline = false, nil, nil
		sp.ServerTakeover = s.execution() == ClientDeferred
		sp.Status, sp.Tries = StepPending, 0
		return "", true
	}
	return why + "; the workflow failed", false
}

// runnable decides what happens to the server step s, the first step not
// done: it runs (an attempt is opened), it waits for its retry, or it runs
// here already. A step found running that does not run here was cut short
// by a process that stopped: it runs again. It returns a failure that ends
// the workflow, or "".
func (in *instance) runnable(p *Progress, s *Step, sp *StepProgress, now time.Time, reason string, pl *plan) string {
	if in.running[s.Name] != nil {
		return "" // runs here now
	}
	interrupted := false
	if a := sp.open(); a != nil {
		if in.lease == nil {
			pl.start = append(pl.start, s.Name)
			return "" // only the lease holder may tell a cut attempt from a running one
		}
		a.Outcome, a.Error = OutcomeError, "interrupted: the server stopped while the step ran"
		a.DurationMs = max(0, now.Sub(a.At).Milliseconds())
		sp.Interrupted++
		if sp.Interrupted > maxInterrupted {
			msg := fmt.Sprintf("the server stopped %d times in a row while running this step", sp.Interrupted)
			sp.Interrupted = 0
			return in.giveUp(s, sp, msg)
		}
		interrupted = true
	}
	if sp.RetryAt != nil && now.Before(*sp.RetryAt) && !interrupted {
		return "" // the scheduler (or the drive loop) wakes the task then
	}
	if in.lease == nil {
		pl.start = append(pl.start, s.Name)
		return "" // plan asks for the lease first
	}
	switch {
	case interrupted:
		reason = ReasonRestart
	case reason == ReasonTimeout:
	case sp.Attempts == 0:
		reason = ReasonFirst
	case reason == ReasonResume, reason == ReasonRestart:
	default:
		reason = ReasonRetry
	}
	sp.begin(reason, "server", now)
	if !interrupted {
		sp.Tries++
	}
	if sp.IdempotencyKey == "" {
		sp.IdempotencyKey = idempotencyKey(in.id, s.Name)
	}
	pl.start = append(pl.start, s.Name)
	return ""
}

// maxInterrupted bounds how many times in a row a step may be cut short by
// the server stopping before the engine stops running it (a tool that
// crashes the process must not crash it forever).
const maxInterrupted = 3

// record applies the outcome r of a server step's attempt to p. It
// reports false when r no longer applies (its attempt is not the open
// one), and the failure that ends the workflow when the server gave up on
// a FailWorkflow step.
func (in *instance) record(p *Progress, s *Step, r stepResult, now time.Time) (applied bool, failure string) {
	sp := p.step(r.step)
	if s == nil || sp == nil {
		return false, ""
	}
	if a := sp.open(); a == nil || a.N != r.attempt {
		return false, ""
	}
	sp.Interrupted = 0
	if r.msg == "" {
		complete(p, s, "server", r.args, r.res, now)
		sp.Tries, sp.RetryAt = 0, nil
		emit(in.b.opts.Observer, in.id, p, s, nil)
		return true, ""
	}
	fail(p, s, "server", r.msg, now)
	emit(in.b.opts.Observer, in.id, p, s, nil)
	if pol := s.policy(); !r.final && sp.Tries < pol.MaxAttempts {
		at := now.Add(pol.backoff(sp.Tries + 1))
		sp.RetryAt = &at
		return true, ""
	}
	return true, in.giveUp(s, sp, r.msg)
}

// giveUp applies s's failure policy once the server gives up on it: the
// step is handed to the client, or the workflow fails (the returned
// message). In a group that fails fast, the workflow fails at once; in one
// that collects, a step whose failure fails the workflow waits for the
// group's other steps to end (GaveUp).
func (in *instance) giveUp(s *Step, sp *StepProgress, msg string) string {
	sp.RetryAt, sp.Tries = nil, 0
	if g := in.wf.groupOf[s.Name]; g != nil && g.FailFast {
		return fmt.Sprintf("step %q (tool %q) of group %q failed: %s; the group fails fast, so the workflow failed", s.Name, s.Tool, g.Name, oneLine(msg))
	}
	if s.failurePolicy() == FailWorkflow {
		if in.wf.groupOf[s.Name] != nil {
			sp.GaveUp, sp.Status, sp.Error = true, StepFailed, msg
			return ""
		}
		return failedWorkflowMessage(s, msg)
	}
	sp.HandedToClient = true
	sp.Status, sp.Error = StepFailed, msg
	sp.ReachedAt, sp.Deadline = nil, nil
	return ""
}

// launch starts the tool of step name's open attempt, apart from any
// request. Call with mu held, after the write that opened the attempt.
func (in *instance) launch(name string) {
	b, wf, p := in.b, in.wf, in.p
	s, sp := wf.byName[name], p.step(name)
	a := sp.open()
	if s == nil || a == nil {
		return
	}
	args, err := (&runner{wf: wf.def, vars: in.vars}).resolveFor(p, s, sp.ServerTakeover)
	tctx, untrack := b.engine.Track(b.ctx, in.id)
	ctx, cancel := context.WithCancelCause(tctx)
	in.running[name] = &stepRun{attempt: a.N, cancel: cancel}
	meta := mcp.Meta{mcptask.MetaIdempotencyKey: sp.IdempotencyKey}
	go func() {
		defer untrack()
		defer cancel(nil)
		r := stepResult{step: name, attempt: a.N}
		if err != nil {
			r.msg, r.final = err.Error(), true
		} else {
			r.args = marshal(args)
			res, cerr := b.runTool(ctx, s.Tool, args, meta)
			switch {
			case ctx.Err() != nil:
				r.stopped = taskrouter.Stopped(ctx)
				if r.stopped == "" {
					r.stopped = "shutdown"
				}
			case cerr != nil:
				r.msg = cerr.Error()
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
// taken over). Call with mu held.
func (in *instance) stopAll(cause error) {
	for name, ru := range in.running {
		ru.cancel(cause)
		delete(in.running, name)
	}
	in.dropLease()
}

// skipInput says why s cannot run because a step whose output it needs
// (for an argument or its sleep) was skipped, or "".
func skipInput(w *Definition, p *Progress, s *Step) string {
	for _, src := range s.inputs() {
		if skippedOutput(w, p, src) {
			return fmt.Sprintf("it needs the output of step %q, which was skipped", w.producer(src.Name).Name)
		}
	}
	return ""
}

// skippedOutput reports whether src reads the output of a skipped step.
func skippedOutput(w *Definition, p *Progress, src Source) bool {
	if src.Kind != SourceStepOutput {
		return false
	}
	from := w.producer(src.Name)
	if from == nil {
		return false
	}
	sp := p.step(from.Name)
	return sp != nil && sp.Status == StepSkipped
}

// failTask ends a task failed with msg, whatever its progress says (a
// definition gone, a bug): the last resort that keeps one bad task from
// anything else.
func (b *Bridge) failTask(ctx context.Context, id, msg string) {
	_, err := b.engine.Update(ctx, id, store.Update{Status: store.StatusFailed, StatusMessage: &msg,
		Error: &store.ErrorInfo{Code: mcptask.CodeInternalError, Message: msg}})
	if err != nil && !errors.Is(err, store.ErrTerminal) && !errors.Is(err, store.ErrNotFound) {
		b.engine.Logger().Error("failing a workflow task", "task", id, "error", err)
	}
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
