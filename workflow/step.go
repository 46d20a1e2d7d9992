package workflow

import (
	"fmt"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
)

// Step is one step of a workflow. Every kind of step has what this struct
// holds: a name, the binding its output is stored under, guidance for
// whoever performs or watches it, and an optional condition. The kind
// holds the rest (a tool and its arguments, a group's members, a sleep's
// length, an event's payload schema): build a step with its kind's
// constructor (Server, Client, Parallel, Sleep, SleepFor, SleepUntil,
// Event) and refine it with the methods below. A method that does not
// apply to the step's kind is reported by Validate, naming the step and
// the method.
type Step struct {
	// Name identifies the step; unique in the workflow.
	Name string
	// Output names the binding the step's output is stored under; it
	// defaults to the step name.
	Output string
	// Guidance tells the client (or the LLM) what the step is for and how to
	// perform it.
	Guidance string
	// Condition, when set, must hold when the step is reached; otherwise
	// the step is skipped, with the condition as the reason, and so is
	// every step whose arguments need its output. A condition reads the
	// output of a skipped step as null, so a step may run because another
	// was skipped (Unless(Truthy(StepOutput("approve", "approved"))) runs
	// when the approval was refused or its wait ran out).
	Condition *Condition

	kind   kind       // the kind's own fields and rules
	undo   *Step      // the step that takes back what this one did (Undo)
	misuse []string   // builder methods that do not apply to the kind
	queue  *placement // the queue its runs take a place on (OnQueue, queue.go)
}

// Kind says what the step does: a tool call (performed by the server or
// the client), a group, a sleep, an event.
func (s *Step) Kind() mcptask.StepKind {
	if s.kind == nil {
		return ""
	}
	return s.kind.name()
}

// Execution says who performs the step when nothing goes wrong.
func (s *Step) Execution() mcptask.Execution {
	if s.kind == nil {
		return mcptask.ExecServer
	}
	return s.kind.execution()
}

// newStep returns a step of kind k.
func newStep(name string, k kind) *Step { return &Step{Name: name, kind: k} }

// misused records a builder method that does not apply to the step's kind.
func (s *Step) misused(method, what string) {
	s.misuse = append(s.misuse, fmt.Sprintf("%s does not apply to a %s step (%s)", method, s.Kind(), what))
}

// on applies set to s's kind when the kind is a K (the kinds builder
// method applies to), and records the method's misuse otherwise (what
// says which kinds it applies to); it returns s for chaining.
func on[K any](s *Step, method, what string, set func(K)) *Step {
	if k, ok := s.kind.(K); ok {
		set(k)
	} else {
		s.misused(method, what)
	}
	return s
}

// As sets the step's output binding name.
func (s *Step) As(binding string) *Step { s.Output = binding; return s }

// WithGuidance sets the step's guidance.
func (s *Step) WithGuidance(g string) *Step { s.Guidance = g; return s }

// When makes the step run only if c holds when it is reached (see
// Step.Condition).
func (s *Step) When(c Condition) *Step { s.Condition = &c; return s }

// Unless makes the step run only if c does not hold.
func (s *Step) Unless(c Condition) *Step { return s.When(Not(c)) }

// The builder methods below apply to some kinds only: each kind that
// takes one implements the matching interface.

type (
	binder    interface{ bind(arg string, src Source) }
	retrier   interface{ setRetry(p RetryPolicy) }
	failer    interface{ setFailure(p FailurePolicy) }
	waiter    interface{ wait() *clientWait }
	webhooked interface{ acceptWebhook() }
	payloaded interface{ setPayload(schema any) }
	stopper   interface{ stopOnFailure() }
)

// Bind binds a tool argument of a tool step and returns the step for
// chaining.
func (s *Step) Bind(arg string, src Source) *Step {
	return on(s, "Bind", "it calls no tool: bind a tool step's arguments", func(k binder) { k.bind(arg, src) })
}

// WithRetry makes a tool step retryable with DefaultRetryPolicy: the
// server may run it again after a failure, at once, and after a restart.
func (s *Step) WithRetry() *Step { return s.WithRetryPolicy(RetryPolicy{}) }

// WithRetryPolicy makes a tool step retryable with policy p (a zero
// MaxAttempts means DefaultRetryPolicy).
func (s *Step) WithRetryPolicy(p RetryPolicy) *Step {
	return on(s, "WithRetry", "only a tool step's attempts are retried", func(k retrier) { k.setRetry(p) })
}

// FailsWorkflow makes a tool step's failure (once the server gives up)
// fail the whole workflow task instead of handing the step to the client.
func (s *Step) FailsWorkflow() *Step {
	return on(s, "FailsWorkflow", "only a tool step fails", func(k failer) { k.setFailure(FailWorkflow) })
}

// WaitsAtMost bounds how long the workflow waits for the client to
// perform the step (a client step, an event, or a server step once it is
// handed to the client), and says what happens then.
func (s *Step) WaitsAtMost(d time.Duration, then TimeoutPolicy) *Step {
	return on(s, "WaitsAtMost", "the client never performs it", func(k waiter) {
		w := k.wait()
		w.max, w.then = d, then
	})
}

// AcceptsWebhook lets an HTTP POST with the task's webhook token perform
// a client step (an event always accepts it).
func (s *Step) AcceptsWebhook() *Step {
	return on(s, "AcceptsWebhook", "only a client step or an event may be performed through the webhook", func(k webhooked) { k.acceptWebhook() })
}

// WithPayload sets the JSON Schema an event's payload must match.
func (s *Step) WithPayload(schema any) *Step {
	return on(s, "WithPayload", "only an event has a payload", func(k payloaded) { k.setPayload(schema) })
}

// StopOnFailure makes a group or a for-each fail fast: as soon as the
// server gives up on one member (one item), the others are stopped
// (recorded as cancelled) and the workflow fails.
func (s *Step) StopOnFailure() *Step {
	return on(s, "StopOnFailure", "only a group or a for-each fails fast", func(k stopper) { k.stopOnFailure() })
}

// binding is the name the step's output is stored under.
func (s *Step) binding() string {
	if s.Output != "" {
		return s.Output
	}
	return s.Name
}

// quote is %q of s, for messages built with +.
func quote(s string) string { return fmt.Sprintf("%q", s) }
