package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// A child step starts another workflow registered on the same bridge, as
// a task of its own (its own id, listed by tasks/list, linked to its
// parent by LabelParent and back by the step's record), with the
// arguments its Bind sources give, and waits for its end: the child's
// outputs become the step's output. The child's client steps are the
// parent's client's: the parent's handoff lists them after the step, each
// performed with the child's task id as _task_id (in every dialect and in
// host mode), and the answer to such a call shows the parent. A child that
// fails, or is cancelled, fails the workflow (FailsWorkflow, the default),
// is skipped (SkipsOnFailure), or is handed to the client (HandsToClient:
// a resume starts a new child). Cancelling the parent cancels the child.
// The rules that keep the two tasks in step across stops and replicas
// are in lineage.go. A fork from the step starts a new child.

// childStep is the kind of Child steps.
type childStep struct {
	base
	workflow  string
	args      map[string]Source
	onFailure FailurePolicy
}

// Child returns a step that starts workflow (registered on the same
// bridge, before this one) as a child task and waits for its end; Bind
// gives its prompt arguments.
func Child(name, workflow string) *Step {
	return newStep(name, &childStep{workflow: workflow, args: map[string]Source{}})
}

// SkipStep is a failure policy of a child step: the step is skipped, with
// the child's end as the reason (what reads its output is skipped too).
const SkipStep FailurePolicy = "skip"

// SkipsOnFailure makes a child step skipped when its child fails or is
// cancelled, instead of failing the workflow.
func (s *Step) SkipsOnFailure() *Step {
	return on(s, "SkipsOnFailure", "only a child step is skipped when it fails", func(k *childStep) { k.onFailure = SkipStep })
}

// HandsToClient makes a child step handed to the client when its child
// fails or is cancelled: the workflow waits, and a resume starts a new
// child.
func (s *Step) HandsToClient() *Step {
	return on(s, "HandsToClient", "only a tool step or a child step fails", func(k failer) { k.setFailure(HandToClient) })
}

func (k *childStep) name() mcptask.StepKind        { return mcptask.StepKindChild }
func (k *childStep) bind(arg string, src Source)   { k.args[arg] = src }
func (k *childStep) setFailure(p FailurePolicy)    { k.onFailure = p }
func (k *childStep) argNames() []string            { return slices.Sorted(maps.Keys(k.args)) }
func (k *childStep) argType(label string) *ArgType { return nil }

func (k *childStep) reads() []read {
	var out []read
	for _, a := range k.argNames() {
		out = append(out, read{label: a, src: k.args[a]})
	}
	return out
}

func (k *childStep) print() any {
	args := make(map[string]printedSource, len(k.args))
	for a, src := range k.args {
		args[a] = printSource(src)
	}
	return printed{Extra: map[string]any{"child": k.workflow, "args": args, "onFailure": k.policy()}}
}

func (k *childStep) policy() FailurePolicy {
	if k.onFailure == "" {
		return FailWorkflow
	}
	return k.onFailure
}

func (k *childStep) check(c *checker) {
	if k.workflow == "" {
		c.add("a child step names no workflow: Child(name, workflow)")
	}
	if k.workflow == c.w.Name {
		c.add("a workflow cannot start itself as a child")
	}
	switch k.policy() {
	case FailWorkflow, SkipStep, HandToClient:
	default:
		c.add("unknown failure policy %q", k.onFailure)
	}
	for _, a := range k.argNames() {
		src := k.args[a]
		c.source(a, src, toolSchema{}, false)
		if src.Kind == SourceClient {
			c.add("argument %q of the child is filled by the client, but the server starts the child: bind it to an argument, an output or a constant", a)
		}
	}
	if c.v.workflows == nil || k.workflow == "" {
		return // Validate alone: the bridge checks the child when it registers the workflow
	}
	w := c.v.workflows(k.workflow)
	if w == nil {
		c.add("workflow %q is not registered on this bridge: register it before the workflow that starts it", k.workflow)
		return
	}
	declared := map[string]bool{}
	for _, a := range w.Arguments {
		declared[a.Name] = true
		if _, bound := k.args[a.Name]; a.Required && !bound {
			c.add("workflow %q requires argument %q: bind it", k.workflow, a.Name)
		}
	}
	for _, a := range k.argNames() {
		if !declared[a] {
			c.add("workflow %q has no argument %q: remove the binding or fix its name", k.workflow, a)
		}
	}
}

// serve starts the child (once per attempt), then takes in what it finds
// of it: its end, or where it stands (running, or waiting for the
// client), and looks again every childCheck. The kind's pass of a
// decision calls nothing: it asks for the child to be started or read
// (the effects startChild and readChild, after the write), and takes in
// the answer when the next decision's event brings it. The child is
// created before the parent records it (lineage.go): its id is derived
// from the attempt the record will open, so a parent that stops between
// the two finds it again.
func (k *childStep) serve(x *turn) string {
	sp, r := x.sp, x.r
	ans, answered := r.ev.children[x.sl.path]
	if sp.Child == "" {
		if depthOf(r.task) >= MaxDepth {
			return fmt.Sprintf("step %q would start workflow %q deeper than MaxDepth (%d) child workflows; the workflow failed", x.s.Name, k.workflow, MaxDepth)
		}
		args, err := k.resolve(x)
		if err != nil {
			return fmt.Sprintf("step %q cannot start workflow %q: %v; the workflow failed", x.s.Name, k.workflow, err)
		}
		id := childID(r.id, x.sl.path, sp.Attempts+1)
		if !answered || ans.id != id {
			r.effect(startChild{path: x.sl.path, id: id, workflow: k.workflow, args: args})
			return ""
		}
		if ans.final != "" {
			return fmt.Sprintf("step %q cannot start workflow %q: %s; the workflow failed", x.s.Name, k.workflow, ans.final)
		}
		if ans.err != nil {
			// No room under the task limits, or the store: start it again
			// soon, and say why it waits (childStartWait).
			sp.end(ReasonFirst, string(mcptask.ExecServer), x.now, ans.err.Error())
			sp.Attempts--
			at := x.now.Add(time.Second)
			sp.RetryAt, sp.Status, sp.Error = &at, mcptask.StepPending, childStartWait(ans.err)
			return ""
		}
		sp.begin(ReasonFirst, string(mcptask.ExecServer), x.now)
		sp.Child, sp.RetryAt, sp.Error = id, nil, ""
		sp.Status = mcptask.StepAwaitingChild
		x.emit()
		// Read it again once this is written: an end it wrote before
		// (whose poke found no child recorded here) is taken in then.
		r.effect(readChild{path: x.sl.path, id: sp.Child})
		at := x.now.Add(childCheck)
		sp.Until = &at
		return ""
	}
	if !answered || ans.id != sp.Child {
		r.effect(readChild{path: x.sl.path, id: sp.Child})
		if sp.Until == nil {
			at := x.now.Add(childCheck)
			sp.Until = &at
		}
		return ""
	}
	ct, err := ans.task, ans.err
	switch {
	case errors.Is(err, store.ErrNotFound):
		return k.failed(x, fmt.Sprintf("child workflow task %s is gone", sp.Child))
	case err != nil:
		at := x.now.Add(time.Second) // the store: look again soon
		sp.Until = &at
		return ""
	}
	switch ct.Status {
	case mcptask.StatusCompleted:
		cp, err := decodeProgress(ct)
		if err != nil {
			return k.failed(x, fmt.Sprintf("child workflow task %s completed, but its progress cannot be read: %v", sp.Child, err))
		}
		sp.Until = nil
		sp.end(ReasonFirst, string(mcptask.ExecServer), x.now, "")
		sp.Status, sp.CompletedBy = mcptask.StepCompleted, string(mcptask.ExecServer)
		x.sl.output(x.p, marshal(cp.Outputs))
		x.p.UpdatedAt = x.now
		x.emit()
		return ""
	case mcptask.StatusFailed, mcptask.StatusCancelled:
		return k.failed(x, fmt.Sprintf("child workflow %q (task %s) %s: %s", k.workflow, sp.Child, ct.Status, causeLine(ct.StatusMessage)))
	}
	sp.Status = mcptask.StepAwaitingChild
	if cp, err := decodeProgress(ct); err == nil && waiting(cp) {
		sp.Status = mcptask.StepAwaitingClient // its client steps are the client's
	}
	at := x.now.Add(childCheck)
	sp.Until = &at
	return ""
}

// failed applies the step's failure policy to the child's end, why.
func (k *childStep) failed(x *turn, why string) string {
	sp := x.sp
	sp.Until = nil
	sp.end(ReasonFirst, string(mcptask.ExecServer), x.now, why)
	sp.Error = why
	x.emit()
	switch k.policy() {
	case SkipStep:
		sp.Status, sp.SkipReason = mcptask.StepSkipped, why
		return ""
	case HandToClient:
		sp.Status, sp.HandedToClient = mcptask.StepFailed, true
		return ""
	}
	sp.Status = mcptask.StepFailed
	return fmt.Sprintf("step %q failed: %s; the workflow failed", x.s.Name, why)
}

// resolve reads the child's arguments (a prompt argument is a string: a
// string value as it is, anything else as JSON).
func (k *childStep) resolve(x *turn) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range k.argNames() {
		v, err := x.value(k.args[a])
		if err != nil {
			return nil, fmt.Errorf("argument %q: %v", a, err)
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(compact(v))
		}
		out[a] = s
	}
	return out, nil
}

// takeBack: a resume starts a new child.
func (k *childStep) takeBack(sp *StepProgress) {
	sp.Child, sp.Until = "", nil
	sp.Status = mcptask.StepPending
}

// childStartWait says why a child could not start yet: the task limit
// it waits under (a -32000 naming it), or what else failed.
func childStartWait(err error) string {
	var je *jsonrpc.Error
	if errors.As(err, &je) && je.Code == mcptask.CodeTooManyTasks {
		return "it waits for room under the server's task limit: " + oneLine(je.Message)
	}
	return "it could not be started: " + oneLine(err.Error())
}

func (k *childStep) status(s *Step, sp *StepProgress) (string, rank) {
	switch {
	case sp.Child == "" && sp.RetryAt != nil && sp.Status == mcptask.StepPending && sp.Error != "":
		return fmt.Sprintf("step %q has not started child workflow %q: %s; trying again at %s",
			s.Name, k.workflow, sp.Error, sp.RetryAt.UTC().Format(time.RFC3339Nano)), rankRetry
	case sp.HandedToClient:
		return fmt.Sprintf("step %q: %s; resume the workflow to start it again", s.Name, oneLine(sp.Error)), rankHanded
	case sp.Status == mcptask.StepAwaitingClient:
		return fmt.Sprintf("step %q: child workflow %q (task %s) waits for the client", s.Name, k.workflow, sp.Child), rankWaiting
	case sp.Status == mcptask.StepAwaitingChild:
		return fmt.Sprintf("step %q: child workflow %q (task %s) runs its steps", s.Name, k.workflow, sp.Child), rankRunning
	}
	return "", rankNone
}

func (k *childStep) entry(v *view, s *Step, sp *StepProgress, rs *handoff.RemainingStep) {
	rs.Tool = ""
	switch {
	case sp.HandedToClient:
		rs.Do = fmt.Sprintf("failed: %s; %s to start it again.", trimDot(oneLine(sp.Error)), v.resumeAdvice())
	case sp.Child == "":
		rs.Do = fmt.Sprintf("starts workflow %q as a child task once the steps before it are done; the server does it, do not call anything for it.", k.workflow)
	case sp.Status == mcptask.StepAwaitingClient:
		rs.Do = fmt.Sprintf("child workflow %q (task %s) waits for the steps listed next, which you perform on the child: call each with %s set to %q.", k.workflow, sp.Child, mcptask.ArgTaskID, sp.Child)
	default:
		rs.Do = fmt.Sprintf("child workflow %q (task %s) runs its steps on the server; do not call anything for it.", k.workflow, sp.Child)
	}
}

// entries are the child's steps the client performs now, named
// "step/child's step", each called with the child's task id.
func (k *childStep) entries(v *view, sl *slot) []handoff.RemainingStep {
	sp := sl.sp
	if sp.Child == "" || sp.ended() || v.t.Status.Terminal() {
		return nil
	}
	ct, err := v.b.engine.Task(context.WithoutCancel(v.b.ctx), sp.Child)
	if err != nil || ct.Status.Terminal() {
		return nil
	}
	cp, err := decodeProgress(ct)
	if err != nil {
		return nil
	}
	var out []handoff.RemainingStep
	for _, rs := range v.b.handoff(ct, cp, v.d).RemainingSteps {
		if rs.Execution != mcptask.ExecClient {
			continue
		}
		rs.Name = sl.path + "/" + rs.Name
		if rs.Do != "" {
			rs.Do = fmt.Sprintf("(a step of child workflow %q, task %s) %s", k.workflow, sp.Child, rs.Do)
		}
		out = append(out, rs)
	}
	return out
}
