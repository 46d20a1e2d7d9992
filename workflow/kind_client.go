package workflow

import (
	"fmt"
	"maps"
	"slices"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// A client step is performed by the client: it calls the step's tool with
// the task id (the argument _task_id, or _meta._task_id), once the steps
// before it are done; consecutive client steps may be performed in any
// order. Its FromClient arguments are the client's to fill in. With
// WaitsAtMost the workflow waits for it a bounded time and then fails,
// skips it, or has the server perform it with the FromClient defaults
// (TimeoutServer). AcceptsWebhook lets an outside system perform it
// through the webhook instead.

// clientStep is the kind of Client steps.
type clientStep struct {
	base
	toolCall
}

// Client returns a step the client performs by calling tool.
func Client(name, tool string) *Step {
	return newStep(name, &clientStep{toolCall: newCall(tool)})
}

func (k *clientStep) name() mcptask.StepKind       { return mcptask.StepKindTool }
func (k *clientStep) execution() mcptask.Execution { return mcptask.ExecClient }
func (k *clientStep) print() any                   { return printed{Tool: k.tool, Args: k.printArgs()} }
func (k *clientStep) reads() []read                { return k.callReads() }
func (k *clientStep) acceptsWebhook() bool         { return k.webhook }
func (k *clientStep) tools(*Options) []string      { return []string{k.tool} }
func (k *clientStep) performs(tool string) bool    { return k.calls(tool) }

func (k *clientStep) check(c *checker) {
	k.checkCall(c, true)
	if k.waits.policy() != TimeoutServer {
		return
	}
	for _, a := range slices.Sorted(maps.Keys(k.args)) {
		if src := k.args[a]; src.Kind == SourceClient && src.Default == nil {
			c.add("the server performs the step when the client's wait runs out (TimeoutServer), but argument %q has no default: give it one with FromClient(...).WithDefault(...)", a)
		}
	}
}

// clientSide: the client performs it, unless its wait ran out and the
// server took it over.
func (k *clientStep) clientSide(sp *StepProgress) bool { return !sp.ServerTakeover }

func (k *clientStep) missed(s *Step) string {
	return fmt.Sprintf("the client did not perform step %q (tool %q)", s.Name, k.tool)
}

// takeBack: the server performs the step itself with the FromClient
// defaults.
func (k *clientStep) takeBack(sp *StepProgress) {
	sp.ServerTakeover = true
	sp.Status, sp.Tries = mcptask.StepPending, 0
}

// serve runs a client step the server took over.
func (k *clientStep) serve(x *turn) string { return x.attempt() }

func (k *clientStep) status(s *Step, sp *StepProgress) (string, rank) {
	if sp.ServerTakeover || sp.Status == mcptask.StepPending {
		return "", rankNone
	}
	return awaitingMessage(s, sp), rankWaiting
}

func (k *clientStep) entry(v *view, s *Step, sp *StepProgress, rs *handoff.RemainingStep) {
	k.callEntry(v, sp, rs)
	switch {
	case sp.ServerTakeover:
		rs.Do = serverDo(sp)
	case sp.Status == mcptask.StepPending:
		rs.Do = "yours to perform once the steps before it are done; not yet."
	case sp.Status == mcptask.StepFailed && sp.Error != "":
		rs.Do = fmt.Sprintf("is yours, but your last call failed: %s; call again with corrected values", trimDot(oneLine(sp.Error)))
		rs.Call = k.callFor(v, sp, false)
	default:
		rs.Do = "is yours to perform now"
		rs.Call = k.callFor(v, sp, false)
	}
}

func (k *clientStep) deliver(d *delivery) error { return d.perform(k.webhook) }

// awaitingMessage is the status line of a client step waiting for the
// client.
func awaitingMessage(s *Step, sp *StepProgress) string {
	msg := fmt.Sprintf("waiting for the client to call tool %q for step %q (with the task id as argument _task_id)", toolOf(s), s.Name)
	if sp.Status == mcptask.StepFailed && sp.Error != "" {
		msg += fmt.Sprintf("; its last call failed: %s", oneLine(sp.Error))
	}
	return msg
}
