package workflow

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// The step-kind contract. Every rule of one kind of step lives in the
// kind's own file (kind_*.go) behind the kind interface below: its fields,
// constructor and builder methods, its registration checks (against the
// time rules too), what the version fingerprint covers of it, what it does
// when its turn comes, its wake-up times, what it records in the progress,
// its status line, its handoff entry (JSON and the sentence a model reads),
// the tool that performs it in host mode, what an outsider's delivery does
// to it, and what a fork from it means. The engine's files (plan, drive,
// continue, deliver, fork, handoff, status, timerules) call the contract
// and name no kind; TestEngineNamesNoKind checks it.
//
// A new kind is one file (its type, constructor, and the methods below it
// overrides of base), its test file, and one line in kinds (below).

// kind is what one kind of step does. Kinds embed base for the defaults
// and override what differs.
type kind interface {
	// name is the kind's name, recorded in the progress (StepProgress.Kind)
	// and the handoff.
	name() mcptask.StepKind
	// execution says who performs the step when nothing went wrong.
	execution() mcptask.Execution

	// check adds the kind's own registration problems (c.step is the
	// step, c.rules the time rules).
	check(c *checker)
	// print is what the version fingerprint covers of the kind beyond the
	// common fields (name, output, condition): anything that changes what
	// a recorded progress means. nil covers nothing more.
	print() any
	// reads lists the sources the step reads besides its condition, in a
	// stable order: its tool's arguments, a sleep's length. A step whose
	// read needs a skipped step's output is skipped too.
	reads() []read
	// members are the steps a container holds (a group's members), which
	// run together as one stage; nil for a leaf.
	members() []*Step
	// body is the step a container runs for each record it keeps (a
	// for-each's, a loop's); nil for none.
	body() *Step
	// sub is record n of the records a container keeps in its own (an
	// item of a for-each, an iteration of a loop), with the step whose
	// rules apply to it (the container's body) and the item it works on
	// (nil: its container's); nil when there is none (see slot.go).
	sub(self *Step, sp *StepProgress, n int) (body *Step, rec *StepProgress, item json.RawMessage)
	// argType is the type a prompt argument read by the step (at label,
	// see reads) must have, when the kind needs one (a sleep's length is a
	// duration); nil for none.
	argType(label string) *ArgType

	// clientSide reports whether the client (or an outsider) performs the
	// step now, given its record.
	clientSide(sp *StepProgress) bool
	// awaiting is the status of the step while it waits for the client.
	awaiting() mcptask.StepStatus
	// missed words what did not happen when the client's wait on the step
	// ran out ("the client did not perform step ...").
	missed(s *Step) string
	// takeBack hands a client-side step back to the server after its wait
	// ran out (TimeoutServer).
	takeBack(sp *StepProgress)
	// serve does the server's part of the step, reached and not client
	// side: start an attempt of its tool, start or end a sleep, start or
	// read a child. It is the kind's pass of a decision (plan.go): it moves
	// the record on and calls nothing; what must happen after the write it
	// asks for as effects (x.r.effect), and their answers come back in the
	// next decision's event (x.r.ev). It returns a failure that ends the
	// workflow, or "".
	serve(x *turn) string
	// onReach is called when the workflow reaches the step for the client
	// (it starts waiting for it); it reports whether the step ended on
	// arrival (an event delivered before it was awaited).
	onReach(p *Progress, s *Step, sp *StepProgress, now time.Time) bool
	// status is the step's status line when it stands for the workflow
	// (see pauseReason), with its rank; "" when it has none.
	status(s *Step, sp *StepProgress) (string, rank)
	// entry fills the kind's part of the step's handoff entry: its
	// arguments, payload schema, webhook, and Do, the sentence that says
	// what to do about it.
	entry(v *view, s *Step, sp *StepProgress, rs *handoff.RemainingStep)
	// entries are the handoff entries of the records a container keeps
	// that the client may act on (an item of a for-each whose body is the
	// client's), after the container's own.
	entries(v *view, sl *slot) []handoff.RemainingStep
	// tools are the tools a client may be asked to call to perform the
	// step (they take the task id as the argument _task_id); o names the
	// bridge's own tools (the event tool).
	tools(o *Options) []string
	// configure gives the step the options of the bridge that registers its
	// workflow (the event kind's status line names the event tool).
	configure(o *Options)
	// performs reports whether a client call of tool performs the step
	// (continuations).
	performs(tool string) bool
	// deliver records an outsider's delivery (an event's payload, a
	// webhook) on the step; see delivery.
	deliver(d *delivery) error
	// acceptsWebhook reports whether the webhook may deliver to the step
	// (the task then gets a webhook token).
	acceptsWebhook() bool
	// inputRequest is the step's input request for tasks/get while it
	// waits (an elicitation form, a sampling request), or nil.
	inputRequest(s *Step, sp *StepProgress) json.RawMessage
	// answer reads the client's answer to the step's input request
	// (inputResponses[key] of tasks/update) into d: the payload it
	// delivers, or why it was declined; an error refuses it (-32602).
	answer(d *delivery, key string, raw json.RawMessage) error
	// fork is the record a fork that starts at this step's stage gives
	// it, from the original's record old (a fresh record: run again).
	fork(fresh, old StepProgress) StepProgress

	// A container's rules (a group): what the server giving up on member m
	// means for the whole (fails: m's own policy fails the workflow): a
	// failure that ends the workflow now, whether its other members stop
	// (recorded cancelled, with stopped's reason), or hold (m's failure
	// fails the workflow once every member has ended, worded by
	// stageFailed); together completes the status line of members
	// running at once.
	memberGaveUp(self, m *Step, msg string, fails bool) (failure string, stopOthers, hold bool)
	stageFailed(self *Step, gaveUp []string) string
	together(self *Step) string
	stopped(self *Step) string
}

// kinds lists the kinds a stored progress may name, for documentation and
// for TestEngineNamesNoKind; one line per kind.
var kinds = []func() kind{
	func() kind { return &serverStep{} },
	func() kind { return &clientStep{} },
	func() kind { return &group{} },
	func() kind { return &sleep{} },
	func() kind { return &event{} },
	func() kind { return &forEach{} },
	func() kind { return &loop{} },
	func() kind { return &childStep{} },
	func() kind { return &sample{} },
	func() kind { return &ask{} },
}

// read is one source a step reads, with the label validation names it by
// (the argument's name, or "(sleep length)").
type read struct {
	label string
	src   Source
}

// rank orders the status lines of the steps that may stand for a
// workflow: a step that runs comes first, then one waiting for its retry,
// then one waiting for its own timer (a sleep), then one the server gave
// up on, then one waiting for the client.
type rank int

const (
	rankNone rank = iota
	rankWaiting
	rankHanded
	rankTimer
	rankRetry
	rankRunning
)

// base holds the defaults of the contract: a leaf the server performs,
// which reads nothing, holds nothing, has no timers and takes no
// deliveries. Kinds embed it.
type base struct{}

func (base) execution() mcptask.Execution { return mcptask.ExecServer }
func (base) serve(*turn) string           { return "" }
func (base) print() any                   { return nil }
func (base) reads() []read                { return nil }
func (base) members() []*Step             { return nil }
func (base) body() *Step                  { return nil }
func (base) sub(*Step, *StepProgress, int) (*Step, *StepProgress, json.RawMessage) {
	return nil, nil, nil
}
func (base) argType(string) *ArgType       { return nil }
func (base) clientSide(*StepProgress) bool { return false }
func (base) awaiting() mcptask.StepStatus  { return mcptask.StepAwaitingClient }
func (base) missed(s *Step) string {
	return "the client did not perform step " + quote(s.Name)
}
func (base) takeBack(*StepProgress)                                    {}
func (base) onReach(*Progress, *Step, *StepProgress, time.Time) bool   { return false }
func (base) acceptsWebhook() bool                                      { return false }
func (base) status(*Step, *StepProgress) (string, rank)                { return "", rankNone }
func (base) tools(*Options) []string                                   { return nil }
func (base) configure(*Options)                                        {}
func (base) performs(string) bool                                      { return false }
func (base) inputRequest(*Step, *StepProgress) json.RawMessage         { return nil }
func (base) answer(d *delivery, key string, raw json.RawMessage) error { return d.elicited(key, raw) }
func (base) fork(fresh, _ StepProgress) StepProgress                   { return fresh }
func (base) deliver(d *delivery) error                                 { return d.notHere() }
func (base) entry(*view, *Step, *StepProgress, *handoff.RemainingStep) {}
func (base) entries(*view, *slot) []handoff.RemainingStep              { return nil }

func (base) memberGaveUp(_, m *Step, msg string, fails bool) (string, bool, bool) {
	if fails {
		return failedWorkflowMessage(m, msg), false, false
	}
	return "", false, false
}
func (base) stageFailed(self *Step, gaveUp []string) string {
	return fmt.Sprintf("step %q failed: %s; the workflow failed", self.Name, strings.Join(gaveUp, "; "))
}
func (base) together(*Step) string { return "" }
func (base) stopped(*Step) string  { return "stopped" }

// toolCaller is implemented by the kinds that call a tool (on the server,
// or by the client): the engine runs their attempts, records their
// outcomes and replays their recorded results through it.
type toolCaller interface {
	call() *toolCall
}

// callOf returns the tool call of step s, or nil when its kind calls no
// tool.
func callOf(s *Step) *toolCall {
	if s == nil {
		return nil
	}
	if c, ok := s.kind.(toolCaller); ok {
		return c.call()
	}
	return nil
}

// toolOf is the tool step s calls, or "".
func toolOf(s *Step) string {
	if c := callOf(s); c != nil {
		return c.tool
	}
	return ""
}
