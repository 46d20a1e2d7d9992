package sim

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Operations. A simulation's operations are drawn from its seed alone,
// before it runs: each names what it does and carries picks (numbers)
// that it resolves against the world as it finds it (the picks-th task
// among those that can take it, in a stable order). So a plan replays
// exactly, and a shorter plan (a shrink) is still a plan: an operation
// that finds nothing to act on does nothing.

// OpKind says what an operation does.
type OpKind int

// The operations.
const (
	OpStart      OpKind = iota // start a workflow (prompts/get): N picks it, M its arguments
	OpRelease                  // a held tool call returns: N picks it; Flag: it succeeds (else fails)
	OpClient                   // the client performs a step it is handed: N picks the task, M the step
	OpClientBad                // a continuation with a wrong tool or arguments: N picks the task
	OpClientDup                // the client repeats its last continuation exactly
	OpClientLate               // a continuation for a task that ended: N picks it
	OpEvent                    // an event is delivered (early, on time or late): N picks the task; Flag: twice
	OpCancel                   // a task is cancelled: N picks it
	OpPause                    // a task is paused: N picks it; Flag: the running work is cut
	OpResume                   // a paused task is resumed: N picks it
	OpAdvance                  // time passes: D, stopping at every wake-up on the way
	OpStop                     // a graceful stop and a restart (a deploy of the same code)
	OpCrash                    // the process crashes now and restarts
	OpCrashAfter               // the process crashes at its N-th write from now
	OpRefuse                   // the store refuses the N-th write from now, once
	OpLoseWake                 // the next N reads of the wake index find nothing
	OpDeploy                   // a stop and a restart serving other versions: N picks the deploy
	OpFork                     // a task is run again from what it has not completed (a fork): N picks it
	opKinds
)

var opNames = [...]string{"start", "release", "client", "client-bad", "client-dup", "client-late", "event", "cancel",
	"pause", "resume", "advance", "stop", "crash", "crash-after", "refuse", "lose-wake", "deploy", "fork"}

func (k OpKind) String() string {
	if k >= 0 && k < opKinds {
		return opNames[k]
	}
	return fmt.Sprintf("op(%d)", int(k))
}

// An Op is one operation of a plan.
type Op struct {
	// At is the operation's place in the plan it was drawn in: the tasks
	// it starts are named after it (t<At>), and the tools' behaviour
	// follows from those names, so an operation behaves the same in a
	// shorter plan (a shrink) as in the plan it came from.
	At   int
	Kind OpKind
	N, M int
	Flag bool
	D    time.Duration
}

// String writes o as ParseOp reads it: "At:kind picks".
func (o Op) String() string { return fmt.Sprintf("%d:%s", o.At, o.body()) }

func (o Op) body() string {
	switch o.Kind {
	case OpAdvance:
		return fmt.Sprintf("advance %s", o.D)
	case OpStop, OpCrash, OpClientDup:
		return o.Kind.String()
	}
	s := fmt.Sprintf("%s %d", o.Kind, o.N)
	if o.M != 0 {
		s += "," + strconv.Itoa(o.M)
	}
	if o.Flag {
		s += " !"
	}
	return s
}

// ParseOp reads an Op as String writes it; without its "At:" it is at
// place 0.
func ParseOp(s string) (Op, error) {
	s = strings.TrimSpace(s)
	var o Op
	if at, body, ok := strings.Cut(s, ":"); ok {
		if n, err := strconv.Atoi(at); err == nil {
			o.At, s = n, body
		}
	}
	name, rest, _ := strings.Cut(s, " ")
	found := false
	for k := OpKind(0); k < opKinds; k++ {
		if k.String() == name {
			o.Kind, found = k, true
		}
	}
	if !found {
		return o, fmt.Errorf("sim: unknown operation %q", name)
	}
	if o.Kind == OpAdvance {
		d, err := time.ParseDuration(rest)
		o.D = d
		return o, err
	}
	rest, o.Flag = strings.CutSuffix(strings.TrimSpace(rest), " !")
	if rest == "" {
		return o, nil
	}
	n, m, hasM := strings.Cut(rest, ",")
	var err error
	if o.N, err = strconv.Atoi(n); err != nil {
		return o, fmt.Errorf("sim: operation %q: %w", s, err)
	}
	if hasM {
		if o.M, err = strconv.Atoi(m); err != nil {
			return o, fmt.Errorf("sim: operation %q: %w", s, err)
		}
	}
	return o, nil
}

// ParsePlan reads a plan written one operation a line (or separated by
// ";"), as FormatPlan writes it; an operation without its "At:" is at
// its place in s.
func ParsePlan(s string) ([]Op, error) {
	var out []Op
	for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == ';' }) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		o, err := ParseOp(line)
		if err != nil {
			return nil, err
		}
		if !strings.Contains(line, ":") {
			o.At = len(out)
		}
		out = append(out, o)
	}
	return out, nil
}

// FormatPlan writes a plan on one line, operations separated by "; ".
func FormatPlan(plan []Op) string {
	parts := make([]string, len(plan))
	for i, o := range plan {
		parts[i] = o.String()
	}
	return strings.Join(parts, "; ")
}

// weights are how often each operation is drawn.
var weights = [opKinds]int{
	OpStart: 14, OpRelease: 22, OpClient: 12, OpClientBad: 2, OpClientDup: 3, OpClientLate: 2, OpEvent: 5,
	OpCancel: 4, OpPause: 4, OpResume: 5, OpAdvance: 12, OpStop: 2, OpCrash: 2, OpCrashAfter: 3,
	OpRefuse: 2, OpLoseWake: 2, OpDeploy: 1, OpFork: 2,
}

// jumps are the time jumps OpAdvance draws from.
var jumps = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute,
	45 * time.Minute, 2 * time.Hour, 26 * time.Hour, 3 * 24 * time.Hour}

// Generate draws a plan of n operations from seed.
func Generate(seed int64, n int) []Op {
	r := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	total := 0
	for _, w := range weights {
		total += w
	}
	plan := make([]Op, 0, n)
	for len(plan) < n {
		x := r.IntN(total)
		k := OpKind(0)
		for ; x >= weights[k]; k++ {
			x -= weights[k]
		}
		o := Op{At: len(plan), Kind: k, N: r.IntN(1000), M: r.IntN(1000)}
		switch k {
		case OpRelease:
			o.Flag = r.IntN(4) != 0
		case OpEvent:
			o.Flag = r.IntN(4) == 0
		case OpPause:
			o.Flag = r.IntN(2) == 0
		case OpAdvance:
			o.D, o.N, o.M = jumps[r.IntN(len(jumps))], 0, 0
		case OpStop, OpCrash, OpClientDup:
			o.N, o.M = 0, 0
		case OpCrashAfter:
			o.N, o.M = 1+r.IntN(12), 0
		case OpRefuse:
			o.N, o.M = 1+r.IntN(6), 0
		case OpLoseWake:
			o.N, o.M = 1+r.IntN(5), 0
		case OpDeploy:
			o.N, o.M = r.IntN(3), 0
		}
		plan = append(plan, o)
	}
	return plan
}
