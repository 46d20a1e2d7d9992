package workflow

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The decision alone (plan.go): a record and an event in, the next
// progress, the update and the effects out; nothing is called. Each pass
// is tested alone here, then in order; the engine's tests drive the same
// decisions through the instance.

var decideNow = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)

// decisionOf is a record of a fresh task of w, leased by this process,
// for the decision tests.
type decisionOf struct {
	t  *testing.T
	wf *compiled
	p  *Progress
	tk *store.Task
	// here are the attempts running "in this process".
	here   map[string]int
	leased bool
	now    time.Time
}

func newDecisionOf(t *testing.T, w *Definition) *decisionOf {
	t.Helper()
	require.NoError(t, w.Validate(func(string) (*mcp.Tool, bool) {
		return &mcp.Tool{InputSchema: map[string]any{"type": "object"}}, true
	}))
	wf := compile(w)
	p := newProgress(wf, map[string]string{}, decideNow)
	tk := &store.Task{ID: "T", Status: mcptask.StatusWorking, CreatedAt: decideNow, TTL: time.Hour, Labels: map[string]string{}, Variables: map[string]json.RawMessage{}}
	return &decisionOf{t: t, wf: wf, p: p, tk: tk, here: map[string]int{}, leased: true, now: decideNow}
}

// decide decides ev on a copy of the progress, keeps the next progress,
// and returns the decision.
func (x *decisionOf) decide(ev *occurrence) decision {
	opts := Options{MaxInterruptions: DefaultMaxInterruptions}
	r := &record{id: x.tk.ID, task: x.tk, p: x.p.clone(), wf: x.wf, opts: &opts, now: x.now, here: x.here, leased: x.leased, queues: true,
		peer: func(string) (bool, bool) { return false, false },
		result: func(*store.Task, *Progress, mcptask.Status, string) (json.RawMessage, error) {
			return json.RawMessage(`{}`), nil
		}}
	before := x.p.clone()
	d := decide(r, ev)
	require.Equal(x.t, before, x.p, "a decision moves the record it is given on, nothing else")
	if d.err == nil || errors.Is(d.err, errUnchanged) || errors.Is(d.err, errNoWrite) {
		x.p = r.p
	}
	return d
}

// run records the start effects as running "here".
func (x *decisionOf) run(d decision) {
	for _, e := range d.effects {
		if s, ok := e.(startAttempt); ok {
			x.here[s.path] = s.n
		}
	}
}

// result is attempt n of step's outcome: msg "" succeeds.
func (x *decisionOf) result(step string, n int, msg string) *occurrence {
	delete(x.here, step)
	return &occurrence{results: []stepResult{{step: step, attempt: n, msg: msg, res: ok(map[string]any{"ok": true})}}}
}

// effectsOf lists the effects of type E of d.
func effectsOf[E effect](d decision) []E {
	var out []E
	for _, e := range d.effects {
		if x, ok := e.(E); ok {
			out = append(out, x)
		}
	}
	return out
}

// The attempt budget: every attempt counts; failures and timeouts count
// against MaxAttempts; a cut attempt (a graceful stop, a pause with Cut)
// is re-run, is no failure, and never resets the count; a crash is no
// failure either.
func TestDecideAttemptBudget(t *testing.T) {
	t.Run("a step not marked retryable fails at its first failure, across a graceful stop", func(t *testing.T) {
		x := newDecisionOf(t, New("w", "").Step(Server("charge", "charge").FailsWorkflow()))
		d := x.decide(&occurrence{})
		require.Equal(t, []startAttempt{{path: "charge", n: 1}}, effectsOf[startAttempt](d))
		x.run(d)
		d = x.decide(&occurrence{stop: true}) // SIGTERM: handed back
		require.True(t, d.update.ReleaseLease)
		sp := x.p.step("charge")
		require.Equal(t, OutcomeStopped, sp.History[0].Outcome)
		require.Equal(t, 0, sp.Tries, "a cut attempt is not a failure")
		x.here = map[string]int{}
		d = x.decide(&occurrence{reason: ReasonRestart})
		require.Equal(t, []startAttempt{{path: "charge", n: 2}}, effectsOf[startAttempt](d), "re-run, counted")
		x.run(d)
		d = x.decide(x.result("charge", 2, "card declined"))
		require.Equal(t, mcptask.StatusFailed, d.update.Status, "its first failure fails it")
		require.Empty(t, effectsOf[startAttempt](d))
	})
	t.Run("MaxAttempts bounds failures and timeouts exactly, across a stop and a crash", func(t *testing.T) {
		x := newDecisionOf(t, New("w", "").Step(Server("s", "s").WithRetryPolicy(RetryPolicy{MaxAttempts: 2, Backoff: time.Second}).FailsWorkflow()))
		d := x.decide(&occurrence{})
		x.run(d)
		d = x.decide(x.result("s", 1, "timed out after 1.5s")) // failure 1 of 2
		require.Equal(t, 1, x.p.step("s").Tries)
		require.NotNil(t, x.p.step("s").RetryAt)
		x.now = x.now.Add(2 * time.Second)
		d = x.decide(&occurrence{})
		require.Equal(t, []startAttempt{{path: "s", n: 2}}, effectsOf[startAttempt](d))
		x.run(d)
		x.decide(&occurrence{stop: true}) // SIGTERM during attempt 2
		require.Equal(t, 1, x.p.step("s").Tries, "the cut keeps the count")
		x.here = map[string]int{}
		d = x.decide(&occurrence{reason: ReasonRestart})
		require.Equal(t, []startAttempt{{path: "s", n: 3}}, effectsOf[startAttempt](d))
		x.run(d)
		x.here = map[string]int{} // SIGKILL during attempt 3: found open, not running here
		d = x.decide(&occurrence{reason: ReasonRestart})
		require.Equal(t, []startAttempt{{path: "s", n: 4}}, effectsOf[startAttempt](d), "a crash re-runs it")
		require.Equal(t, 1, x.p.step("s").Tries, "a crash is not a failure")
		require.Equal(t, 1, x.p.step("s").Interrupted)
		x.run(d)
		d = x.decide(x.result("s", 4, "timed out after 1.5s")) // failure 2 of 2
		require.Equal(t, mcptask.StatusFailed, d.update.Status)
		sp := x.p.step("s")
		require.Equal(t, 4, sp.Attempts, "every attempt that started is counted")
		var failed int
		for _, a := range sp.History {
			if a.Outcome == OutcomeError && a.Error != "interrupted: the server stopped while the step ran" {
				failed++
			}
		}
		require.Equal(t, 2, failed, "two failures, no more: MaxAttempts 2")
	})
	t.Run("a success resets the series", func(t *testing.T) {
		x := newDecisionOf(t, New("w", "").Step(Server("s", "s").WithRetry()))
		x.run(x.decide(&occurrence{}))
		x.decide(x.result("s", 1, "flaky"))
		x.now = x.now.Add(time.Second)
		x.run(x.decide(&occurrence{}))
		d := x.decide(x.result("s", 2, ""))
		require.Equal(t, mcptask.StatusCompleted, d.update.Status)
		require.Zero(t, x.p.step("s").Tries)
	})
}

// Timeouts: the workflow's deadline fails it, and a client's wait that
// runs out applies its policy.
func TestDecideTimeouts(t *testing.T) {
	w := New("w", "").Step(Client("ask", "ask").WaitsAtMost(time.Minute, TimeoutSkip), Server("s", "s"))
	w.Deadline = time.Hour
	x := newDecisionOf(t, w)
	x.decide(&occurrence{})
	require.Equal(t, mcptask.StepAwaitingClient, x.p.step("ask").Status)
	x.now = x.now.Add(2 * time.Minute)
	d := x.decide(&occurrence{})
	require.Equal(t, mcptask.StepSkipped, x.p.step("ask").Status)
	require.Equal(t, []startAttempt{{path: "s", n: 1}}, effectsOf[startAttempt](d))
	x.now = x.now.Add(time.Hour)
	d = x.decide(&occurrence{})
	require.Equal(t, mcptask.StatusFailed, d.update.Status)
	require.Contains(t, *d.update.StatusMessage, "deadline of 1h0m0s passed")
}

// Queues: a step asks for its place (after the write) and waits; the
// answer opens its attempt or records why it waits; what ended frees its
// place; a recovery frees again what a stopped process may not have.
func TestDecideQueues(t *testing.T) {
	q := &Queue{Name: "q", Concurrency: 1}
	x := newDecisionOf(t, New("w", "").Step(Server("a", "a").OnQueue(q)))
	d := x.decide(&occurrence{})
	require.Empty(t, effectsOf[startAttempt](d))
	asks := effectsOf[takePlace](d)
	require.Len(t, asks, 1)
	require.Equal(t, "T#a", asks[0].entry.ID)
	require.ErrorIs(t, d.err, errNoWrite, "a question needs no write of its own: its answer's decision writes")

	// Waiting: the answer is recorded, and not asked again at once.
	wait := placeAnswer{entry: asks[0].entry, res: store.QueueResult{Entry: asks[0].entry, Reason: store.QueueWaitConcurrency, Ahead: 2,
		Holders: []store.QueueEntry{{ID: "U#a", TaskID: "U"}}}}
	d = x.decide(&occurrence{places: map[string]placeAnswer{"T#a": wait}})
	require.Empty(t, effectsOf[takePlace](d))
	require.True(t, x.p.step("a").Queue.waiting())
	require.Contains(t, x.p.step("a").Queue.Why, `held by task U (step "a")`)

	// Granted: the attempt opens.
	granted := wait
	granted.res = store.QueueResult{Entry: asks[0].entry}
	granted.res.Entry.GrantedAt = x.now
	d = x.decide(&occurrence{places: map[string]placeAnswer{"T#a": granted}})
	require.Equal(t, []startAttempt{{path: "a", n: 1}}, effectsOf[startAttempt](d))
	x.run(d)

	// It ends: its place is freed in the decision that ends it.
	d = x.decide(x.result("a", 1, ""))
	require.Equal(t, []freePlace{{queue: "q", id: "T#a", lim: q.limits()}}, effectsOf[freePlace](d))
	require.Equal(t, mcptask.StatusCompleted, d.update.Status)

	// A place the executor gave up as the tool returned (freeEarly) is
	// not freed again.
	x1 := newDecisionOf(t, New("w", "").Step(Server("a", "a").OnQueue(q)))
	x1.p.Steps[0].Queue = &QueuePlace{Queue: "q", GrantedAt: &decideNow}
	x1.run(x1.decide(&occurrence{}))
	ev := x1.result("a", 1, "")
	ev.freed = map[string]bool{"T#a": true}
	d = x1.decide(ev)
	require.Empty(t, effectsOf[freePlace](d))
	require.Nil(t, x1.p.step("a").Queue)

	// A run a crash cut asks for its place again (it may have been given
	// up as its tool returned, before its outcome was written).
	x3 := newDecisionOf(t, New("w", "").Step(Server("a", "a").OnQueue(q)))
	x3.p.Steps[0].Queue = &QueuePlace{Queue: "q", GrantedAt: &decideNow}
	x3.run(x3.decide(&occurrence{}))
	x3.here = map[string]int{}
	d = x3.decide(&occurrence{reason: ReasonRestart})
	require.Empty(t, effectsOf[startAttempt](d))
	require.Len(t, effectsOf[takePlace](d), 1)
	require.Equal(t, mcptask.StepPending, x3.p.step("a").Status, "it waits for its place: nothing runs (simulation seed 215)")

	// A graceful stop of a paused task hands its running step back and
	// gives the place that step held up: the paused task runs nothing
	// there until its resume, which asks again (simulation seed 140).
	x4 := newDecisionOf(t, New("w", "").Step(Server("a", "a").OnQueue(q)))
	x4.p.Steps[0].Queue = &QueuePlace{Queue: "q", GrantedAt: &decideNow}
	x4.run(x4.decide(&occurrence{}))
	x4.decide(&occurrence{pause: &Pause{By: "ops"}}) // the step runs on
	d = x4.decide(&occurrence{stop: true})
	require.Equal(t, []freePlace{{queue: "q", id: "T#a", lim: q.limits()}}, effectsOf[freePlace](d))
	require.Nil(t, x4.p.step("a").Queue)
	require.True(t, x4.p.step("a").handedBack())
	x4.here = map[string]int{}
	x4.decide(&occurrence{resume: "ops"})
	d = x4.decide(&occurrence{reason: ReasonRestart})
	require.Len(t, effectsOf[takePlace](d), 1, "the resume queues again")

	// An answer that comes after a pause (the pause decided between the
	// question and its answer, so it gave up nothing) gives the entry
	// up, granted or waiting: a paused task holds no place (simulation
	// seed 18, on a loaded machine). Its resume asks again.
	for _, grant := range []bool{true, false} {
		x5 := newDecisionOf(t, New("w", "").Step(Server("a", "a").OnQueue(q)))
		ask := effectsOf[takePlace](x5.decide(&occurrence{}))[0]
		x5.decide(&occurrence{pause: &Pause{By: "ops"}})
		late := placeAnswer{entry: ask.entry, res: store.QueueResult{Entry: ask.entry, Reason: store.QueueWaitConcurrency}}
		if grant {
			late.res = store.QueueResult{Entry: ask.entry}
			late.res.Entry.GrantedAt = x5.now
		}
		d = x5.decide(&occurrence{places: map[string]placeAnswer{"T#a": late}})
		require.Equal(t, []freePlace{{queue: "q", id: "T#a", lim: q.limits()}}, effectsOf[freePlace](d), "granted %v", grant)
		require.Empty(t, effectsOf[startAttempt](d))
		require.Nil(t, x5.p.step("a").Queue)
		x5.decide(&occurrence{resume: "ops"})
		require.Len(t, effectsOf[takePlace](x5.decide(&occurrence{})), 1, "the resume queues again")
	}

	// An older answer handed to the drive loop late (a resume's, decided
	// after the loop asked again and got the place) takes nothing back.
	x6 := newDecisionOf(t, New("w", "").Step(Server("a", "a").OnQueue(q)))
	ask := effectsOf[takePlace](x6.decide(&occurrence{}))[0]
	got := placeAnswer{entry: ask.entry, res: store.QueueResult{Entry: ask.entry}}
	got.res.Entry.GrantedAt = x6.now
	x6.run(x6.decide(&occurrence{places: map[string]placeAnswer{"T#a": got}}))
	stale := placeAnswer{entry: ask.entry, res: store.QueueResult{Entry: ask.entry, Reason: store.QueueWaitConcurrency}}
	x6.decide(&occurrence{places: map[string]placeAnswer{"T#a": stale}})
	require.NotNil(t, x6.p.step("a").Queue.GrantedAt, "the place stays held")

	// A recovery frees the places of what ended, in case the store never
	// heard of it.
	x2 := newDecisionOf(t, New("w", "").Step(Server("a", "a").OnQueue(q), Client("b", "b")))
	x2.p.Steps[0].Status = mcptask.StepCompleted
	d = x2.decide(&occurrence{reason: ReasonRestart})
	require.Equal(t, []freePlace{{queue: "q", id: "T#a", lim: q.limits()}}, effectsOf[freePlace](d))
}

// A paused workflow holds no queue place, whatever came between its
// pause and the store (simulation seed 59): the pause gives its place up
// in its own write; a recovery, and a wake-up of a paused task (a queue
// granting it the place it asked for before its pause, whose give-up a
// crash lost), give it up again; and a wake-up that came for nothing
// writes the task's wake-up, so the scheduler does not wake it again and
// again.
func TestDecidePausedQueue(t *testing.T) {
	q := &Queue{Name: "q", Concurrency: 1}
	free := []freePlace{{queue: "q", id: "T", lim: q.limits()}}
	x := newDecisionOf(t, New("w", "").OnQueue(q).Step(Server("a", "a")))
	x.p.Queue = &QueuePlace{Queue: "q", Since: decideNow}
	d := x.decide(&occurrence{pause: &Pause{By: "ops"}})
	require.NoError(t, d.err)
	require.Equal(t, free, effectsOf[freePlace](d), "the pause's own write gives the place up")
	require.Nil(t, x.p.Queue)

	// The process crashed before the store heard of it; the queue then
	// granted the place and woke the task.
	x.tk.WakeAt = x.now
	d = x.decide(&occurrence{})
	require.Equal(t, free, effectsOf[freePlace](d), "a paused task woken gives up the place it no longer asks for")
	require.NotErrorIs(t, d.err, errUnchanged, "its wake-up is written: it came for nothing")
	require.True(t, x.p.nextWake(x.now).IsZero())
	require.True(t, staleWake(x.tk, x.p, x.now))

	// A recovery gives it up too.
	x.tk.WakeAt = time.Time{}
	d = x.decide(&occurrence{reason: ReasonRestart})
	require.Equal(t, free, effectsOf[freePlace](d))
	require.ErrorIs(t, d.err, errUnchanged, "nothing to write: only the effect")

	// A step's place the pause gave up is given up again at a recovery.
	x2 := newDecisionOf(t, New("w", "").Step(Server("a", "a").OnQueue(q)))
	x2.p.Steps[0].Queue = &QueuePlace{Queue: "q", Since: decideNow}
	d = x2.decide(&occurrence{pause: &Pause{By: "ops"}})
	require.Equal(t, []freePlace{{queue: "q", id: "T#a", lim: q.limits()}}, effectsOf[freePlace](d))
	d = x2.decide(&occurrence{reason: ReasonRestart})
	require.Equal(t, []freePlace{{queue: "q", id: "T#a", lim: q.limits()}}, effectsOf[freePlace](d))
}

// A workflow waiting for its place (a resume asked for it again) judges
// its steps' timers once it holds it: its wake-up is the queue's next
// look, never a retry that fell due meanwhile (simulation seed 1202: the
// scheduler woke it at every round, a queue write each time).
func TestWakeOfWorkflowWaitingForItsPlace(t *testing.T) {
	x := newDecisionOf(t, New("w", "").OnQueue(&Queue{Name: "q", Concurrency: 1}).Step(Server("a", "a")))
	past, next := x.now.Add(-2*time.Hour), x.now.Add(30*time.Second)
	x.p.Steps[0].Status, x.p.Steps[0].RetryAt = mcptask.StepFailed, &past
	x.p.Queue = &QueuePlace{Queue: "q", Since: x.now, Next: &next}
	require.Equal(t, next, x.p.nextWake(x.now))
	x.p.Queue.GrantedAt = &x.now
	require.Equal(t, past, x.p.nextWake(x.now), "holding its place, the retry is due")
}

// Pause: a pause records who and why, cuts the running attempts (with
// Cut) after the write without counting them as failures, and pauses the
// children; a paused workflow starts nothing; a resume re-runs what the
// pause cut and resumes the children the pause paused.
func TestDecidePause(t *testing.T) {
	x := newDecisionOf(t, New("w", "").Step(Parallel("g", Server("a", "a"), Child("c", "other"))))
	x.wf.def.Steps[0].kind.members()[1].kind.(*childStep).workflow = "other"
	d := x.decide(&occurrence{})
	x.run(d)
	require.Len(t, effectsOf[startChild](d), 1)
	id := effectsOf[startChild](d)[0].id
	d = x.decide(&occurrence{children: map[string]childAnswer{"c": {id: id, task: &store.Task{ID: id, Status: mcptask.StatusWorking}}}})
	require.Equal(t, id, x.p.step("c").Child)

	d = x.decide(&occurrence{pause: &Pause{By: "ops", Reason: "look", Cut: true}})
	require.NoError(t, d.err)
	require.Equal(t, "ops", x.p.Paused.By)
	require.Equal(t, []cutAttempt{{path: "a", n: 1, cause: errPauseCut}}, effectsOf[cutAttempt](d))
	require.Equal(t, []holdChild{{id: id, pause: x.p.Paused}}, effectsOf[holdChild](d))
	require.Equal(t, OutcomeStopped, x.p.step("a").History[0].Outcome)
	require.Zero(t, x.p.step("a").Tries, "a cut is not a failure")
	require.Equal(t, mcptask.StepAwaitingChild, x.p.step("c").Status, "a child is paused, not cut: it is not started again")

	x.here = map[string]int{}
	d = x.decide(&occurrence{})
	require.Empty(t, effectsOf[startAttempt](d), "a paused workflow starts nothing")
	d = x.decide(&occurrence{pause: &Pause{By: "ops"}})
	require.ErrorIs(t, d.err, ErrPaused)

	d = x.decide(&occurrence{resume: "ops"})
	require.NoError(t, d.err)
	require.Nil(t, x.p.Paused)
	require.Equal(t, []holdChild{{id: id, resume: "ops"}}, effectsOf[holdChild](d))
	d = x.decide(&occurrence{})
	require.Equal(t, []startAttempt{{path: "a", n: 2}}, effectsOf[startAttempt](d), "what the pause cut runs again")
	d = x.decide(&occurrence{resume: "ops"})
	require.ErrorIs(t, d.err, ErrNotPaused)
}

// A child whose parent is paused (the executor read it before the
// decision) pauses itself as its parent's pause would, starts nothing,
// and looks at its parent again after the write.
func TestDecideParentPaused(t *testing.T) {
	x := newDecisionOf(t, New("w", "").Step(Server("a", "a")))
	r := &record{id: "T", task: x.tk, p: x.p.clone(), wf: x.wf, opts: &Options{}, now: x.now, leased: true, queues: true,
		parent: &parentHold{id: "P", pause: &Pause{By: "ops", Cut: true}}}
	d := decide(r, &occurrence{})
	require.NoError(t, d.err)
	require.Empty(t, effectsOf[startAttempt](d), "a paused parent's child starts nothing")
	require.Equal(t, []recheckParent{{parent: "P"}}, effectsOf[recheckParent](d))
	require.Equal(t, parentBy("P"), r.p.Paused.By)
	require.True(t, r.p.Paused.Cut)
	require.Len(t, d.update.Events, 2, "the pause is in the task's event log, and push webhooks hear of it, once")
}

// Undo: a failure with something to undo cuts what runs (after the
// write), waits for it, lists the undo steps and runs them one at a
// time, with the idempotency key of the task whose undo it is.
func TestDecideUndo(t *testing.T) {
	w := New("w", "").Step(
		Server("deploy", "deploy").Undo(Server("rollback", "rollback")),
		Parallel("g", Server("slow", "slow").Undo(Server("unslow", "unslow")), Server("bad", "bad").FailsWorkflow()).StopOnFailure(),
	)
	x := newDecisionOf(t, w)
	x.run(x.decide(&occurrence{}))
	d := x.decide(x.result("deploy", 1, ""))
	x.run(d)
	require.Len(t, effectsOf[startAttempt](d), 2)
	d = x.decide(x.result("bad", 1, "broken"))
	require.NotNil(t, x.p.Undo)
	require.Equal(t, []cutAttempt{{path: "slow", n: 1, cause: errUndoing}}, effectsOf[cutAttempt](d))
	require.False(t, x.p.Undo.Listed, "it waits for the step that runs")
	d = x.decide(x.result("slow", 1, errUndoing.Error()))
	require.True(t, x.p.Undo.Listed)
	require.Equal(t, []startAttempt{{path: "undo:deploy", n: 1}}, effectsOf[startAttempt](d))
	require.Equal(t, "T/undo:deploy", x.p.Undo.Steps[0].IdempotencyKey)
	x.run(d)
	d = x.decide(x.result("undo:deploy", 1, ""))
	require.Equal(t, mcptask.StatusFailed, d.update.Status)
	require.Contains(t, *d.update.StatusMessage, "undone, last first: deploy (rollback)")

	// A pause holds the compensation as it holds the steps: no undo
	// step starts while paused (an outcome that arrives is recorded),
	// and the next runs at the resume (simulation seed 5).
	x3 := newDecisionOf(t, New("w", "").Step(
		Server("one", "one").Undo(Server("unone", "unone")),
		Server("two", "two").Undo(Server("untwo", "untwo")),
		Server("bad", "bad").FailsWorkflow()))
	x3.run(x3.decide(&occurrence{}))
	x3.run(x3.decide(x3.result("one", 1, "")))
	x3.run(x3.decide(x3.result("two", 1, "")))
	d = x3.decide(x3.result("bad", 1, "broken"))
	require.Equal(t, []startAttempt{{path: "undo:two", n: 1}}, effectsOf[startAttempt](d))
	x3.run(d)
	x3.decide(&occurrence{pause: &Pause{By: "ops"}})
	d = x3.decide(x3.result("undo:two", 1, ""))
	require.Equal(t, mcptask.StepCompleted, x3.p.Undo.Steps[0].Status, "the outcome that arrives while paused is recorded")
	require.Empty(t, effectsOf[startAttempt](d), "no undo step starts while paused")
	require.Equal(t, mcptask.StepPending, x3.p.Undo.Steps[1].Status)
	x3.decide(&occurrence{resume: "ops"})
	d = x3.decide(&occurrence{})
	require.Equal(t, []startAttempt{{path: "undo:one", n: 1}}, effectsOf[startAttempt](d), "the undo goes on at the resume")
	// A crash while paused with an undo step running: the recovery is
	// due (dueNow), and closes the attempt the dead process left open as
	// interrupted; the step runs again at the resume (simulation seed
	// 41: the paused task's undo step read running forever).
	x3.run(d)
	x3.decide(&occurrence{pause: &Pause{By: "ops"}})
	x3.here = map[string]int{}
	require.True(t, dueNow(x3.p, x3.now), "a paused task with an undo step running is recovered")
	d = x3.decide(&occurrence{reason: ReasonRestart})
	require.Empty(t, effectsOf[startAttempt](d))
	require.Equal(t, mcptask.StepPending, x3.p.Undo.Steps[1].Status)
	require.Equal(t, 1, x3.p.Undo.Steps[1].Interrupted)
	x3.decide(&occurrence{resume: "ops"})
	d = x3.decide(&occurrence{})
	require.Equal(t, []startAttempt{{path: "undo:one", n: 2}}, effectsOf[startAttempt](d))
	// A pause with Cut stops the undo step that runs; it runs again, with
	// its key, at the resume.
	x3.run(d)
	d = x3.decide(&occurrence{pause: &Pause{By: "ops", Cut: true}})
	require.Equal(t, []cutAttempt{{path: "undo:one", n: 2, cause: errPauseCut}}, effectsOf[cutAttempt](d))
	x3.here = map[string]int{}
	x3.decide(&occurrence{resume: "ops"})
	d = x3.decide(&occurrence{})
	require.Equal(t, []startAttempt{{path: "undo:one", n: 3}}, effectsOf[startAttempt](d))
	require.Equal(t, "T/undo:one", x3.p.Undo.Steps[1].IdempotencyKey)

	// The undo task of a cancelled one keeps the cancelled task's key.
	x2 := newDecisionOf(t, w)
	x2.p.Steps[0].Status = mcptask.StepCompleted
	x2.p.Steps[0].History = []Attempt{{N: 1, Outcome: OutcomeOK, At: decideNow}}
	x2.p.Undo = &Undoing{Reason: "cancelled", Of: "CANCELLED"}
	x2.tk.ID = "UNDO"
	d = x2.decide(&occurrence{})
	require.Equal(t, []startAttempt{{path: "undo:deploy", n: 1}}, effectsOf[startAttempt](d))
	require.Equal(t, "CANCELLED/undo:deploy", x2.p.Undo.Steps[0].IdempotencyKey)
}

// Cancel: the end the engine wrote frees every place, cancels the
// children, starts the undo task of one that was undoing, and tells the
// parent; it writes nothing.
func TestDecideCancel(t *testing.T) {
	q := &Queue{Name: "q", Concurrency: 1}
	w := New("w", "").Step(Server("deploy", "deploy").Undo(Server("rollback", "rollback")), Server("a", "a").OnQueue(q), Child("c", "other"))
	x := newDecisionOf(t, w)
	x.p.Steps[0].Status = mcptask.StepCompleted
	x.p.Steps[1].Queue = &QueuePlace{Queue: "q", GrantedAt: &decideNow}
	x.p.Steps[2].Child = "CHILD"
	x.p.Undo = &Undoing{Reason: "a failed", Listed: true, Steps: []StepProgress{{Name: "undo:deploy", Tool: "rollback", Status: mcptask.StepRunning}}}
	x.tk.Status = mcptask.StatusCancelled
	x.tk.Labels[LabelParent] = "PARENT"
	r := &record{id: "T", task: x.tk, p: x.p, wf: x.wf, opts: &Options{}, now: x.now, queues: true, ev: &occurrence{}, d: &decision{}}
	r.ended()
	require.Equal(t, []effect{
		freePlace{queue: "q", id: "T#a", lim: q.limits()},
		cancelChild{id: "CHILD", why: "cancelled"},
		undoTask{},
		pokeParent{},
	}, r.d.effects)
	require.Zero(t, r.d.update, "an ended task takes no write")

	// The engine's end closes the records in its own write
	// (kindHooks.EndWrite: closeRecords, keeping the places): the end's
	// effects are the same, read from the closed records.
	closed := x.p.clone()
	closeRecords(closed, x.now, "the task was cancelled", true)
	walkRecords(closed, func(sp *StepProgress) {
		require.NotEqual(t, mcptask.StepRunning, sp.Status, sp.Name)
		require.Nil(t, sp.open(), sp.Name)
	})
	require.True(t, cutByEnd(&closed.Undo.Steps[0]) || closed.Undo.Steps[0].open() == nil)
	r = &record{id: "T", task: x.tk, p: closed, wf: x.wf, opts: &Options{}, now: x.now, queues: true, ev: &occurrence{}, d: &decision{}}
	r.ended()
	require.Equal(t, []effect{
		freePlace{queue: "q", id: "T#a", lim: q.limits()},
		cancelChild{id: "CHILD", why: "cancelled"},
		undoTask{},
		pokeParent{},
	}, r.d.effects)

	// The cancel of an undo task cuts the undo: no undo task of its own
	// (simulation seed 5).
	x.p.Undo.Of = "CANCELLED"
	x.tk.Labels[LabelUndoOf] = "CANCELLED"
	r = &record{id: "T", task: x.tk, p: x.p, wf: x.wf, opts: &Options{}, now: x.now, queues: true, ev: &occurrence{}, d: &decision{}}
	r.ended()
	require.Empty(t, effectsOf[undoTask](decision{effects: r.d.effects}))
}

// The ttl pass: a paused task does not expire while paused (up to
// MaxPause after the pause), and its ttl counts again from its resume.
func TestDecideTTL(t *testing.T) {
	b := &Bridge{}
	x := newDecisionOf(t, New("w", "").Step(Client("c", "c")))
	x.tk.Labels[LabelTouched] = "1"
	x.tk.ExpiresAt = decideNow.Add(time.Hour)
	u := store.Update{}
	b.deadline(x.tk, x.p, &u, decideNow)
	require.Equal(t, decideNow.Add(time.Hour), *u.ExpiresAt)

	x.p.Paused = &Pause{By: "ops", At: decideNow}
	u = store.Update{}
	b.deadline(x.tk, x.p, &u, decideNow)
	require.Equal(t, decideNow.Add(MaxPause), *u.ExpiresAt, "paused: it expires MaxPause after its pause, not at its ttl")
	require.Equal(t, DeadlinePaused, u.Labels[LabelDeadline])

	x.tk.ExpiresAt, x.tk.Labels[LabelDeadline] = *u.ExpiresAt, DeadlinePaused
	x.p.Paused = nil
	later := decideNow.Add(10 * 24 * time.Hour)
	u = store.Update{}
	b.deadline(x.tk, x.p, &u, later)
	require.Equal(t, later.Add(time.Hour), *u.ExpiresAt, "resumed: its ttl counts from the resume")

	x.tk.ExpiresAt, x.tk.Labels[LabelDeadline] = decideNow.Add(MaxPause), DeadlinePaused
	x.tk.Variables[VarProgress] = marshal(&Progress{Paused: &Pause{By: "ops", At: decideNow}})
	require.Contains(t, pausedExpiry(x.tk), "paused by ops since 2026-11-24T09:00:00Z, longer than the most a workflow stays paused (MaxPause, 30 days)")
}

// A kind's own pass: a child step asks for its child to be started,
// records it when the answer comes (and reads it again), and takes in
// its end.
func TestDecideChildKind(t *testing.T) {
	x := newDecisionOf(t, New("w", "").Step(Child("c", "other"), Server("after", "after")))
	d := x.decide(&occurrence{})
	starts := effectsOf[startChild](d)
	require.Equal(t, []startChild{{path: "c", id: childID("T", "c", 1), workflow: "other", args: map[string]string{}}}, starts)
	require.Empty(t, x.p.step("c").Child, "nothing is recorded of the child before it exists")
	require.Zero(t, x.p.step("c").Attempts)
	id := starts[0].id
	d = x.decide(&occurrence{children: map[string]childAnswer{"c": {id: id, task: &store.Task{ID: id, Status: mcptask.StatusWorking}}}})
	require.Equal(t, []readChild{{path: "c", id: id}}, effectsOf[readChild](d), "read again once recorded")
	require.Equal(t, mcptask.StepAwaitingChild, x.p.step("c").Status)
	done := &store.Task{ID: id, Status: mcptask.StatusCompleted, Variables: map[string]json.RawMessage{VarProgress: marshal(&Progress{Outputs: map[string]json.RawMessage{"x": marshal(1)}})}}
	d = x.decide(&occurrence{children: map[string]childAnswer{"c": {id: id, task: done}}})
	require.Equal(t, mcptask.StepCompleted, x.p.step("c").Status)
	require.Equal(t, []startAttempt{{path: "after", n: 1}}, effectsOf[startAttempt](d))
}

// The passes in order, in one decision: the outcome that ends a queued
// step (1) frees its place (3) before the next queued step asks for one
// (6); and a decision is a function of its record and event only.
func TestDecidePassesInOrder(t *testing.T) {
	q := &Queue{Name: "q", Concurrency: 1}
	x := newDecisionOf(t, New("w", "").Step(Server("a", "a").OnQueue(q), Server("b", "b").OnQueue(q)))
	at := decideNow
	x.p.Steps[0].Queue = &QueuePlace{Queue: "q", GrantedAt: &at}
	x.run(x.decide(&occurrence{}))
	again := x.p.clone()
	d := x.decide(x.result("a", 1, ""))
	var kinds []string
	for _, e := range d.effects {
		kinds = append(kinds, e.effectName())
	}
	require.Equal(t, []string{"free a queue place", "take a queue place"}, kinds, "the place of what ended is freed before the next asks")
	require.Equal(t, "T#b", effectsOf[takePlace](d)[0].entry.ID)

	// The same record and event decide the same.
	x2 := *x
	x2.p = again
	x2.here = map[string]int{}
	d2 := x2.decide(&occurrence{results: []stepResult{{step: "a", attempt: 1, res: ok(map[string]any{"ok": true})}}})
	require.True(t, reflect.DeepEqual(d.effects, d2.effects))
	require.Equal(t, x.p, x2.p)
}
