package workflow

import (
	"fmt"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The time rules. Every deadline of a workflow task is decided here, from
// its definition and its progress; the engine's scheduler only executes
// them (it wakes the task at store.Task.WakeAt, and the sweeper expires
// it at ExpiresAt). docs/TIME.md says the same for users.
//
//   - Idle ttl. A task's ttl (Definition.TTL, else Options.TTL, else the
//     engine's default) is how long it may rest between two recorded
//     steps: every write that records progress moves its expiry to now +
//     ttl when that is later. A task that keeps making progress never
//     expires; one waiting for a person waits ttl after its last step
//     (ttl.go).
//   - Waiting for the clock is not idle. A task asleep (a sleep), waiting
//     for a retry's backoff, or waiting for the client with a bounded
//     wait (WaitsAtMost) expires no earlier than its next wake-up plus its
//     ttl: a sleep or a wait longer than the ttl runs to its end, and
//     what follows it (the skip branch of a wait) runs.
//   - Orphans. A task no client holds the id of (its handoff never
//     reached a client) that waits for one expires after
//     Options.OrphanTimeout instead.
//   - Client waits. A step waiting for the client with WaitsAtMost(d)
//     waits from the moment it is reached (a server step: from the moment
//     it is handed over) until then + d; then its TimeoutPolicy applies.
//   - Retries. Attempt n (n >= 2) of a retryable step starts its policy's
//     backoff after attempt n-1 failed (doubling from Backoff up to
//     MaxBackoff).
//   - Requests. A prompts/get, a workflow tool call, a resume or a
//     continuation waits for the server's work until Options.PromptWait:
//     it answers as soon as the workflow pauses (it waits for the client,
//     whatever that wait's bound, or for a time after PromptWait), or
//     ends; server work still running at PromptWait goes on (see rests).
//   - Deadline. A workflow with Definition.Deadline fails when it has run
//     that long (a wake-up at its deadline); a step still running is
//     stopped.
//   - Queues. A run waiting for a place on its queue looks again when
//     its queue's rate or debounce window ends, and at least every
//     queuePoll (the operation that grants it wakes it at once); waiting
//     for a place is not idle.
//   - Pause. A paused workflow wakes for nothing but its deadline; its
//     timers keep their times and are judged on resume. It does not
//     expire while paused (its ttl counts again from the resume), up to
//     MaxPause after the pause (ttl.go).
//   - Bounds. No sleep and no client wait is longer than MaxWait.

// MaxWait bounds a sleep's length and a client wait (WaitsAtMost): a
// longer one is refused at registration, or, for a length an argument
// gives, when the task starts (-32602 naming the maximum).
const MaxWait = 366 * 24 * time.Hour

// maxWaitText is MaxWait as messages say it.
const maxWaitText = "366 days"

// TimeoutPolicy says what happens when the client does not perform a step
// within its wait (WaitsAtMost).
type TimeoutPolicy string

// The timeout policies.
const (
	// TimeoutFail ends the workflow task failed, naming the step and the
	// wait.
	TimeoutFail TimeoutPolicy = "fail_workflow"
	// TimeoutSkip records the step skipped (with the reason) and goes on;
	// steps that need its output are skipped too.
	TimeoutSkip TimeoutPolicy = "skip"
	// TimeoutServer hands the step back to the server, which performs it
	// itself: a server step handed to the client is tried again; a client
	// step's tool is called with the defaults of its FromClient arguments
	// (every FromClient argument of such a step needs one).
	TimeoutServer TimeoutPolicy = "server"
)

// clientWait bounds how long the workflow waits for the client on a step
// (WaitsAtMost): zero max waits without bound.
type clientWait struct {
	max  time.Duration
	then TimeoutPolicy
}

func (w clientWait) policy() TimeoutPolicy {
	if w.then == "" {
		return TimeoutFail
	}
	return w.then
}

// waitOf is the client wait of step s (zero when its kind has none).
func waitOf(s *Step) clientWait {
	if k, ok := s.kind.(waiter); ok {
		return *k.wait()
	}
	return clientWait{}
}

// wait checks a client wait at registration.
func (c *checker) wait(w *clientWait) {
	switch {
	case w.max < 0:
		c.add("its wait (WaitsAtMost) is negative (%s)", w.max)
	case w.max > MaxWait:
		c.add("its wait (WaitsAtMost) of %s is longer than the maximum, MaxWait (%s)", w.max, maxWaitText)
	}
	switch p := w.policy(); p {
	case TimeoutFail, TimeoutSkip, TimeoutServer:
	default:
		c.add("unknown timeout policy %q: use TimeoutFail, TimeoutSkip or TimeoutServer", p)
	}
}

// startWait records that step s begins waiting for the client at now:
// its wait's end, when it has a bound.
func startWait(s *Step, sp *StepProgress, now time.Time) {
	if sp.ReachedAt != nil {
		return
	}
	at := now
	sp.ReachedAt = &at
	if w := waitOf(s); w.max > 0 {
		end := now.Add(w.max)
		sp.Deadline = &end
	}
}

// backoff is the pause before attempt n (n >= 2) of the policy.
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.Backoff
	for i := 2; i < n && d < p.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// retryAt is when the next attempt of a step that failed tries times in a
// row under p starts.
func retryAt(p RetryPolicy, tries int, now time.Time) time.Time {
	return now.Add(p.backoff(tries + 1))
}

// waiting reports whether p waits for the client: not done, nothing runs
// on the server or is due to, and some step waits for the client.
func waiting(p *Progress) bool {
	if p.undoing() {
		return false
	}
	if p.Paused != nil {
		return false // an operator's, not a client's (pause.go)
	}
	client := false
	for i := range p.Steps {
		sp := &p.Steps[i]
		switch {
		case sp.ended(), sp.GaveUp:
		case sp.Status == mcptask.StepRunning, sp.RetryAt != nil, sp.Status == mcptask.StepSleeping, sp.Status == mcptask.StepAwaitingChild:
			return false
		case sp.Status == mcptask.StepAwaitingClient, sp.Status == mcptask.StepAwaitingEvent, sp.HandedToClient,
			sp.Status == mcptask.StepFailed && sp.Execution == string(mcptask.ExecClient) && !sp.ServerTakeover:
			client = true // a client step whose last call failed waits for the client too
		}
	}
	return client
}

// timerWake is the earliest time the clock gives the server work on p: a
// retry, the end of a client's wait, a step's own timer (a sleep's end),
// the workflow's deadline; zero for none.
func (p *Progress) timerWake() time.Time {
	at := p.stepsWake()
	if d := p.DeadlineAt; d != nil && (at.IsZero() || d.Before(at)) {
		at = *d
	}
	return at
}

// stepsWake is timerWake without the workflow's deadline: what the steps
// wait for (which keeps a task from being idle).
func (p *Progress) stepsWake() time.Time {
	var at time.Time
	take := func(t *time.Time) {
		if t != nil && (at.IsZero() || t.Before(at)) {
			at = *t
		}
	}
	if p.Queue.waiting() {
		// The workflow waits for its place (a resume asks for it again):
		// its steps' timers are judged once it holds it, a retry that
		// fell due meanwhile included (simulation seed 1202: a retry
		// due while the resumed workflow waited woke it at every round).
		return p.queueWake()
	}
	steps := p.Steps
	if p.undoing() {
		steps = p.Undo.Steps // the workflow's own steps wait no more
	}
	for i := range steps {
		sp := &steps[i]
		if sp.ended() {
			continue
		}
		if !sp.Queue.waiting() {
			take(sp.RetryAt) // a retry waiting for its place runs at the grant (or the queue's next look)
		}
		take(sp.Deadline)
		take(sp.Until)
	}
	if q := p.queueWake(); !q.IsZero() {
		take(&q) // a run waiting for a place looks again (queue.go)
	}
	return at
}

// pastDeadline says why the workflow fails at now for its deadline, or "".
func (p *Progress) pastDeadline(w *Definition, now time.Time) string {
	if p.DeadlineAt == nil || now.Before(*p.DeadlineAt) {
		return ""
	}
	return fmt.Sprintf("the workflow's deadline of %s passed (at %s); the workflow failed", w.Deadline, stamp(*p.DeadlineAt))
}

// nextWake is the task's wake-up time (store.Task.WakeAt) at progress p
// written at now: now when a server step is due but not started (so that
// if this process stops before it starts the step, the engine's scheduler
// has another process start it), else timerWake.
func (p *Progress) nextWake(now time.Time) time.Time {
	if p.Paused != nil {
		return p.deadlineWake() // nothing wakes a paused workflow but its deadline (pause.go)
	}
	if p.serverDue() {
		return now
	}
	return p.timerWake()
}

// staleWake reports whether task t, at progress p, was woken (its stored
// wake-up came by now) for nothing its progress waits for at now: a
// queue's grant to a paused task, a wake-up left from before a pause or
// a crash. Its decision writes the wake-up its progress asks for, even
// when nothing else changed; otherwise the scheduler would wake it again
// and again, and never for anything.
func staleWake(t *store.Task, p *Progress, now time.Time) bool {
	if t == nil || t.WakeAt.IsZero() || t.WakeAt.After(now) {
		return false
	}
	next := p.nextWake(now)
	return next.IsZero() || next.After(now)
}

// serverDue reports whether the server has a step to start now: the first
// step not done (no client step before it waits) is a server step that
// neither runs nor waits for a retry or its own timer, or every step is
// done and the task is not completed yet.
func (p *Progress) serverDue() bool {
	if p.undoing() {
		running := false
		walkRecords(p, func(sp *StepProgress) { running = running || sp.Status == mcptask.StepRunning && sp.Items == nil })
		for _, sp := range p.Undo.Steps {
			running = running || !sp.ended() && !sp.GaveUp && (sp.Status == mcptask.StepRunning || sp.RetryAt != nil)
		}
		return !running // (a step that was running, or an undo step, runs or waits for its retry)
	}
	if p.Paused != nil || p.Queue.waiting() {
		return false // paused, or waiting for the workflow's place (queue.go)
	}
	for i := range p.Steps {
		sp := &p.Steps[i]
		switch {
		case sp.ended(), sp.GaveUp:
			continue
		case sp.HandedToClient:
			return false
		case sp.Execution == string(mcptask.ExecClient) && !sp.ServerTakeover:
			return false
		case sp.Status == mcptask.StepRunning, sp.RetryAt != nil, sp.Until != nil:
			return false
		case settling(sp):
		case sp.Status == mcptask.StepAwaitingClient, sp.Status == mcptask.StepAwaitingEvent:
			return false // a container whose records wait for the client
		case sp.Queue.waiting():
			return false // it waits for a place on its queue (queue.go)
		}
		return true
	}
	return true
}

// dueNow reports whether the server has work to do on p now, in a
// process that runs none of its steps: a step or an undo step was running
// (its process stopped), a server step is due, a timer is due, or a child workflow's
// end may have been missed.
func dueNow(p *Progress, now time.Time) bool {
	if p.Paused != nil {
		d := p.deadlineWake()
		return !d.IsZero() && !d.After(now) || p.running() // its deadline, or steps a stopped process ran (pause.go)
	}
	if !p.queueWake().IsZero() {
		return true // a run waiting for a place looks again when woken (queue.go)
	}
	if p.running() {
		return true // a step whose process is gone (an undo step too) runs again
	}
	child := false // a child to look at: it may have ended while no one was up to hear it
	walkRecords(p, func(sp *StepProgress) { child = child || sp.Child != "" && !sp.ended() && !sp.HandedToClient })
	if child {
		return true
	}
	at := p.timerWake()
	return p.serverDue() || !at.IsZero() && !at.After(now)
}

// rests reports whether a workflow waits for nothing the server does
// before deadline (a request's PromptWait): no step runs or is due to
// start; what remains waits for the client (whatever the bound of that
// wait: a request answers when the workflow pauses, so the client hears
// of the step while it can still act), or for a time after deadline.
// With a zero deadline (no bound), a retry's backoff is waited for, a
// sleep and a client's wait are not.
func rests(p *Progress, deadline time.Time) bool {
	if p.undoing() {
		return false // what it did is being undone
	}
	if p.Paused != nil || p.Queue.waiting() {
		return true // paused, or waiting for the workflow's place
	}
	for i := range p.Steps {
		if p.Steps[i].Status == mcptask.StepRunning {
			return false // a group's member runs, beside a step that waits
		}
	}
	waits := false // a client step before this one is not done
	for i := range p.Steps {
		sp := &p.Steps[i]
		switch {
		case sp.ended(), sp.GaveUp:
			continue
		case sp.Status == mcptask.StepAwaitingChild:
			return false // a child workflow runs its steps
		case sp.Until != nil:
			if !deadline.IsZero() && !sp.Until.After(deadline) {
				return false // the step's timer goes off before deadline
			}
			waits = true // a sleep holds what follows
			continue
		case sp.HandedToClient, sp.Queue.waiting():
			return true // the client's, or waiting for a place on its queue
		case settling(sp):
			return false // the container's turn is due
		case sp.Execution == string(mcptask.ExecClient) && !sp.ServerTakeover,
			sp.Status == mcptask.StepAwaitingClient, sp.Status == mcptask.StepAwaitingEvent:
			waits = true // (a container whose records wait for the client)
			continue
		case waits:
			return true // the server step waits for the client's
		case sp.RetryAt != nil:
			return !deadline.IsZero() && sp.RetryAt.After(deadline)
		}
		return false // a server step due now
	}
	return waits // all done: the completing write is due
}

// stamp formats a time for the prose of the handoff.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// waitNote says, for a status line, until when the workflow waits.
func waitNote(sp *StepProgress) string {
	if sp.Deadline == nil {
		return ""
	}
	return fmt.Sprintf(" (until %s)", stamp(*sp.Deadline))
}

// deadlineWake is the workflow's deadline as a wake-up, or zero.
func (p *Progress) deadlineWake() time.Time {
	if p.DeadlineAt == nil {
		return time.Time{}
	}
	return *p.DeadlineAt
}

// settling reports a container whose records waited for the client and
// have all ended since (the client performed the last one): its own turn
// (end the for-each, judge the loop's condition) is due.
func settling(sp *StepProgress) bool {
	if len(sp.Items) == 0 || sp.ended() || sp.Status != mcptask.StepAwaitingClient && sp.Status != mcptask.StepAwaitingEvent {
		return false
	}
	for i := range sp.Items {
		if r := &sp.Items[i]; !r.ended() && (!r.GaveUp || r.HandedToClient) {
			return false
		}
	}
	return true
}
