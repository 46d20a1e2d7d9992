package workflow

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// A loop runs its body again until a condition on the body's output holds
// (Until; the condition reads the body's output binding, as a later step
// would) or it has run AtMost times, sleeping durably Every between two
// runs. A run whose tool fails (after the body's own retries) counts as a
// run whose condition did not hold. When the last run ends without the
// condition, the loop fails (FailsWorkflow, the default) or is skipped
// (SkipsOnExhaust). The loop keeps its latest runs (KeepRuns of them, and
// a count of all), not an ever-growing history: a long poll stays small.
// Its output is the output of the run that satisfied the condition (or the
// last one). A fork from it starts over.

// KeepRuns is how many of its latest runs a loop keeps in its record.
const KeepRuns = 3

// loop is the kind of Repeat steps.
type loop struct {
	base
	do    *Step
	until *Condition
	max   int
	every time.Duration
	skip  bool
}

// Repeat returns a step that runs body until Until's condition holds of
// its output, at most AtMost times, Every apart (see loop).
func Repeat(name string, body *Step) *Step { return newStep(name, &loop{do: body}) }

type looper interface{ loopSet(func(*loop)) }

func (k *loop) loopSet(f func(*loop)) { f(k) }
func (k *loop) body() *Step           { return k.do }

func (s *Step) loopSet(method string, f func(*loop)) *Step {
	return on(s, method, "only a loop (Repeat) runs again", func(k looper) { k.loopSet(f) })
}

// Until ends a loop as soon as c holds of its body's latest output.
func (s *Step) Until(c Condition) *Step { return s.loopSet("Until", func(k *loop) { k.until = &c }) }

// AtMost bounds how many times a loop runs its body.
func (s *Step) AtMost(n int) *Step { return s.loopSet("AtMost", func(k *loop) { k.max = n }) }

// Every makes a loop sleep d, durably, between two runs.
func (s *Step) Every(d time.Duration) *Step { return s.loopSet("Every", func(k *loop) { k.every = d }) }

// SkipsOnExhaust makes a loop that ran AtMost times without its condition
// skipped (with the reason) instead of failing the workflow.
func (s *Step) SkipsOnExhaust() *Step {
	return s.loopSet("SkipsOnExhaust", func(k *loop) { k.skip = true })
}

func (k *loop) name() mcptask.StepKind    { return mcptask.StepKindLoop }
func (k *loop) tools(o *Options) []string { return k.do.kind.tools(o) }
func (k *loop) reads() []read {
	if k.do == nil || k.do.kind == nil {
		return nil
	}
	return k.do.kind.reads()
}

func (k *loop) check(c *checker) {
	c.body(k.do, false)
	switch {
	case k.max <= 0:
		c.add("a loop needs a bound: AtMost(n), n at least 1")
	case k.max > MaxItems:
		c.add("a loop runs at most %d times (AtMost(%d))", MaxItems, k.max)
	}
	if k.every < 0 || k.every > MaxWait {
		c.add("its pause between runs (Every) must be between 0 and MaxWait (%s)", maxWaitText)
	}
	if k.until == nil {
		c.add("a loop needs a condition to end on: Until(...) of its body's output")
		return
	}
	if k.do == nil {
		return
	}
	// The condition reads the body's output as a later step would.
	b := k.do.binding()
	prev, had := c.v.produced[b]
	c.v.produced[b] = k.do
	c.condition(k.until)
	if had {
		c.v.produced[b] = prev
	} else {
		delete(c.v.produced, b)
	}
}

func (k *loop) print() any {
	x := map[string]any{"loop": printOf(k.do, nil), "max": k.max, "every": k.every, "skip": k.skip}
	if k.until != nil {
		x["until"] = k.until.describe()
	}
	return printed{Extra: x}
}

// sub: run n (from 1) of the loop, when it still keeps it.
func (k *loop) sub(self *Step, sp *StepProgress, n int) (*Step, *StepProgress, json.RawMessage) {
	for i := range sp.Items {
		if sp.Items[i].N == n {
			return k.do, &sp.Items[i], nil
		}
	}
	return nil, nil, nil
}

// serve runs the loop's current run; when it ends, ends the loop (its
// condition holds, or its bound is reached) or sleeps until the next run.
func (k *loop) serve(x *turn) string {
	sp := x.sp
	if sp.Runs == 0 {
		sp.begin(ReasonFirst, string(mcptask.ExecServer), x.now)
		return k.next(x)
	}
	cur := x.sl.child(sp.Runs)
	if cur == nil {
		return k.next(x) // a damaged record: start a run again
	}
	if failure, open := k.run(x, cur); failure != "" || open {
		return failure
	}
	if sp.Until != nil && cur.sp.Until != nil && sp.Until.Equal(*cur.sp.Until) {
		sp.Until = nil // the run's own timer (a sleep), shown while it ran
	}
	if cur.sp.Status == mcptask.StepCompleted && k.holds(x, cur.sp.Result) {
		return k.end(x, cur.sp.Result, "")
	}
	if sp.Runs >= k.max {
		why := fmt.Sprintf("step %q ran %d time(s) without %s", x.sl.path, sp.Runs, k.until) // the record the handoff shows ("smoke[1]" in a for-each)
		if !k.skip {
			sp.RetryAt, sp.Until, sp.Deadline = nil, nil, nil
			sp.end(ReasonFirst, string(mcptask.ExecServer), x.now, why)
			sp.Status, sp.Error = mcptask.StepFailed, why // it failed: it is not left running
			return why + "; the workflow failed"
		}
		return k.end(x, cur.sp.Result, why)
	}
	if k.every > 0 {
		if sp.Until == nil {
			at := x.now.Add(k.every)
			sp.Until, sp.Status = &at, mcptask.StepSleeping
		}
		if x.now.Before(*sp.Until) {
			return ""
		}
	}
	return k.next(x)
}

// next starts the loop's next run, keeping only its latest runs.
func (k *loop) next(x *turn) string {
	sp := x.sp
	sp.Runs++
	sp.Until = nil
	sp.Items = append(sp.Items, StepProgress{Name: fmt.Sprintf("%s[%d]", x.sl.path, sp.Runs), Tool: toolOf(k.do),
		Execution: string(k.do.Execution()), Status: mcptask.StepPending, Output: k.do.binding(), N: sp.Runs})
	if n := len(sp.Items); n > KeepRuns {
		sp.Items = append([]StepProgress(nil), sp.Items[n-KeepRuns:]...)
	}
	failure, _ := k.run(x, x.sl.child(sp.Runs))
	return failure
}

// run gives the loop's current run cur its turn (the client's: it waits
// for the client; the server's: it runs) and shows where it stands on the
// loop's record; open reports a run that has not ended.
func (k *loop) run(x *turn, cur *slot) (failure string, open bool) {
	defer k.show(x.sp, cur.sp)
	if cur.sp.ended() || cur.sp.GaveUp {
		return "", false
	}
	if clientSide(cur.s, cur.sp) {
		failure, back := reach(x.p, cur.s, cur.sp, x.now)
		if failure != "" || !back {
			return failure, !cur.sp.ended()
		}
	}
	failure = cur.s.kind.serve(x.sub(cur))
	return failure, !cur.sp.ended() && !cur.sp.GaveUp
}

// show sets the loop's record from its current run's: its status, and
// the timers the time rules wake the task for (a retry, a client's wait,
// a timer of its own: a sleep's end, a child's next look).
func (k *loop) show(sp, cur *StepProgress) {
	sp.RetryAt, sp.Deadline = cur.RetryAt, cur.Deadline
	if !cur.ended() && !cur.GaveUp && cur.Until != nil {
		sp.Until = cur.Until
	}
	switch {
	case cur.Status == mcptask.StepRunning || cur.open() != nil:
		sp.Status = mcptask.StepRunning
	case cur.Status == mcptask.StepAwaitingClient || cur.Status == mcptask.StepAwaitingEvent || cur.HandedToClient:
		sp.Status = mcptask.StepAwaitingClient
	default:
		sp.Status = mcptask.StepRunning
	}
}

// holds reports whether the loop's condition holds of a run's output.
func (k *loop) holds(x *turn, out json.RawMessage) bool {
	b := k.do.binding()
	ok, err := k.until.eval(func(src Source) (json.RawMessage, error) {
		if src.Kind == SourceStepOutput && src.Name == b {
			if out == nil {
				return json.RawMessage("null"), nil
			}
			return selectPath(out, src.Path)
		}
		return x.value(src)
	})
	return err == nil && ok
}

// end ends the loop: completed with out, or skipped for why.
func (k *loop) end(x *turn, out json.RawMessage, why string) string {
	sp := x.sp
	sp.RetryAt, sp.Until, sp.Deadline = nil, nil, nil
	sp.end(ReasonFirst, string(mcptask.ExecServer), x.now, why)
	if why != "" {
		sp.Status, sp.SkipReason = mcptask.StepSkipped, why
		return ""
	}
	sp.Status, sp.CompletedBy = mcptask.StepCompleted, string(mcptask.ExecServer)
	if out == nil {
		out = json.RawMessage("null")
	}
	x.sl.output(x.p, out)
	x.p.UpdatedAt = x.now
	x.emit()
	return ""
}

// memberGaveUp: a run the server gave up on is a run whose condition did
// not hold (held, so the loop decides what comes next).
func (k *loop) memberGaveUp(self, m *Step, msg string, fails bool) (string, bool, bool) {
	return "", false, true
}

func (k *loop) status(s *Step, sp *StepProgress) (string, rank) {
	if sp.Runs == 0 || sp.ended() {
		return "", rankNone
	}
	line := fmt.Sprintf("step %q: run %d of at most %d (%s), until %s", s.Name, sp.Runs, k.max, bodyLine(k.do), k.until)
	if sp.Status == mcptask.StepSleeping && sp.Until != nil {
		return line + fmt.Sprintf("; the next run starts at %s", stamp(*sp.Until)), rankTimer
	}
	return line, rankOf(sp)
}

func (k *loop) entry(v *view, s *Step, sp *StepProgress, rs *handoff.RemainingStep) {
	rs.Tool = ""
	rs.Until = sp.Until
	if sp.Runs == 0 {
		rs.Do = fmt.Sprintf("runs %s until %s, at most %d times, once the steps before it are done.", bodyLine(k.do), k.until, k.max)
		return
	}
	line, _ := k.status(s, sp)
	rs.Do = line + "."
}

func (k *loop) entries(v *view, sl *slot) []handoff.RemainingStep {
	if sl.sp.Runs == 0 {
		return nil
	}
	cur := sl.child(sl.sp.Runs)
	if cur == nil || cur.sp.ended() || cur.sp.Status == mcptask.StepPending || !clientSide(cur.s, cur.sp) {
		return nil
	}
	rs := v.sub(cur).entryFor(cur.s, cur.sp)
	rs.Name = cur.path
	return []handoff.RemainingStep{rs}
}
