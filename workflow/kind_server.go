package workflow

import (
	"fmt"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// A server step calls a tool on the server as soon as its inputs exist,
// apart from any request, retrying as its policy says. When the server
// gives up on it, the step is handed to the client (HandToClient, the
// default: the client may perform it with a continuation call of its
// tool) or fails the workflow (FailsWorkflow). A server step handed to the
// client waits for it as a client step does (WaitsAtMost).

// serverStep is the kind of Server steps.
type serverStep struct {
	base
	toolCall
}

// Server returns a step that calls tool on the server.
func Server(name, tool string) *Step {
	return newStep(name, &serverStep{toolCall: newCall(tool)})
}

func (k *serverStep) name() mcptask.StepKind { return mcptask.StepKindTool }

func (k *serverStep) check(c *checker) {
	k.checkCall(c, false)
}

func (k *serverStep) print() any           { return printed{Tool: k.tool, Args: k.printArgs()} }
func (k *serverStep) reads() []read        { return k.callReads() }
func (k *serverStep) acceptsWebhook() bool { return k.webhook }
func (k *serverStep) tools(*Options) []string {
	if k.failurePolicy() == HandToClient {
		return []string{k.tool} // it may be handed to the client
	}
	return nil
}

func (k *serverStep) performs(tool string) bool { return k.calls(tool) }

// clientSide: a server step is the client's once the server gave up on
// it and handed it over.
func (k *serverStep) clientSide(sp *StepProgress) bool { return sp.HandedToClient }

func (k *serverStep) missed(s *Step) string {
	return fmt.Sprintf("the client did not perform step %q (tool %q), which the server had handed to it", s.Name, k.tool)
}

// takeBack: the server tries the step again (a new series of attempts).
func (k *serverStep) takeBack(sp *StepProgress) {
	sp.HandedToClient = false
	sp.Status, sp.Tries = mcptask.StepPending, 0
}

func (k *serverStep) serve(x *turn) string { return x.attempt() }

func (k *serverStep) entry(v *view, s *Step, sp *StepProgress, rs *handoff.RemainingStep) {
	k.callEntry(v, sp, rs)
	rs.Do = serverDo(sp)
	if sp.HandedToClient {
		rs.Do = fmt.Sprintf("failed on the server after %d attempt(s); call it yourself, correcting the value that caused the error, or %s to have the server try again", sp.Attempts, v.resumeAdvice())
		rs.Call = k.callFor(v, sp, true)
	}
}

func (k *serverStep) deliver(d *delivery) error { return d.perform(k.webhook) }
