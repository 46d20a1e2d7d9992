package sim

import (
	"fmt"
	"sync"
)

// The ledger: every call of the simulation's tools, by task, step,
// attempt and idempotency key, with how it ended. The tools write it as
// they run; the invariants read it (effects applied twice, attempts past
// the budget, undo steps run twice or in the wrong order).

// Call outcomes.
const (
	outRunning = "running" // not ended yet (held, or still running)
	outOK      = "ok"      // the effect was applied
	outFail    = "fail"    // the tool failed: an attempt the budget counts
	outTimeout = "timeout" // cut by the step's own Timeout: counted too
	outCut     = "cut"     // cut by a stop, a pause or a cancel: not counted
	outDead    = "dead"    // the process crashed: nothing was applied
)

// A Call is one call of a simulation tool.
type Call struct {
	// N numbers the ledger's calls from 1.
	N int
	// Op is the operation during which the call started.
	Op int
	// Proc is the process that ran it.
	Proc int
	// Task is the task id; Handle the simulation's name of its task.
	Task, Handle string
	// Step is the step's path ("deploy[1]", "undo:s1"); Attempt and Key
	// are what the engine passed (workflow.StepFrom).
	Step    string
	Attempt int
	Key     string
	// By is server or client.
	By string
	// Spec is the spec the step binds; Undo marks an undo step's call.
	Spec string
	Undo bool
	// Nth numbers the server calls of (Handle, Step) from 0: it picks
	// the call's behaviour.
	Nth int
	// StartWrite and EndWrite are the Disk's write count when the call
	// started and ended.
	StartWrite, EndWrite uint64
	// Outcome is how it ended (the out* values).
	Outcome string
}

func (c *Call) String() string {
	return fmt.Sprintf("#%d %s %s/%s attempt %d by %s (%s) -> %s", c.N, c.Spec, c.Handle, c.Step, c.Attempt, c.By, c.Key, c.Outcome)
}

// ledger is the simulation's record of calls.
type ledger struct {
	mu     sync.Mutex
	calls  []*Call
	byKey  map[string][]*Call
	nth    map[string]int // server calls by handle + "/" + step
	series map[string]int // a step's calls (by task/step) before this N are an older series
}

func newLedger() *ledger {
	return &ledger{byKey: map[string][]*Call{}, nth: map[string]int{}, series: map[string]int{}}
}

// begin records a call that starts.
func (l *ledger) begin(c *Call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c.N = len(l.calls) + 1
	c.Outcome = outRunning
	if c.By == "server" {
		k := c.Handle + "/" + c.Step
		c.Nth = l.nth[k]
		l.nth[k]++
	}
	l.calls = append(l.calls, c)
	l.byKey[c.Key] = append(l.byKey[c.Key], c)
}

// end records how call c ended.
func (l *ledger) end(c *Call, outcome string, write uint64) {
	l.mu.Lock()
	c.Outcome, c.EndWrite = outcome, write
	l.mu.Unlock()
}

// newSeries starts a new series of attempts for step of task id (an
// operator resumes a task its failure paused: the step runs again, maybe
// before the resume returns), and returns a func that takes it back (the
// resume failed).
func (l *ledger) newSeries(id, step string) (undo func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := id + "/" + step
	old, had := l.series[k]
	l.series[k] = len(l.calls) + 1
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if had {
			l.series[k] = old
		} else {
			delete(l.series, k)
		}
	}
}

// budgetState counts the failed server attempts of key in its current
// series (not counting call self) whose failure the engine could know
// (known: a failure lost with its process is a crash's cut, not a
// failure), and says whether a stop, a crash or a cut interrupted an
// attempt of the key, or a process ended between them.
func (l *ledger) budgetState(self *Call, known func(c, self *Call) bool) (failed int, interrupted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := l.series[self.Task+"/"+self.Step]
	for _, c := range l.byKey[self.Key] {
		if c == self || c.By != "server" {
			continue
		}
		switch c.Outcome {
		case outFail, outTimeout:
			switch {
			case !known(c, self):
				interrupted = true
			case c.N >= from:
				failed++
			}
		case outCut, outDead:
			interrupted = true
		}
		if c.Proc != self.Proc {
			interrupted = true
		}
	}
	return failed, interrupted
}

// all returns a copy of the calls so far.
func (l *ledger) all() []Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Call, len(l.calls))
	for i, c := range l.calls {
		out[i] = *c
	}
	return out
}
