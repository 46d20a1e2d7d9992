package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/taskbridge/taskbridge/mcptask"
)

// ValidationError lists everything wrong with a workflow.
type ValidationError struct {
	Workflow string
	Problems []string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("workflow %q is invalid:\n  - %s", e.Workflow, strings.Join(e.Problems, "\n  - "))
}

// ErrInvalid is matched by every *ValidationError.
var ErrInvalid = errors.New("workflow: invalid workflow")

// Is makes a ValidationError match ErrInvalid.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// Validate checks a workflow against the tools it calls: unknown tools,
// duplicate names, outputs used before they are produced, undeclared
// arguments, required tool arguments left unbound (or bound to an
// optional argument without a default), a client step that consumes
// another client step's output, malformed sources, builder methods that do
// not apply to a step's kind, each kind's own rules, and settings the time
// rules refuse. Each problem names the step and the fix.
func (w *Definition) Validate(tools ToolLookup) error { return w.validate(tools, nil) }

// validate is Validate, with the workflows a child step may start when
// the bridge registers w (nil: not checked).
func (w *Definition) validate(tools ToolLookup, workflows func(name string) *Definition) error {
	v := &validation{w: w, tools: tools, workflows: workflows, names: map[string]bool{}, produced: map[string]*Step{}}
	v.workflow()
	for i, s := range w.Steps {
		v.stage(i, s)
	}
	if len(v.probs) > 0 {
		return &ValidationError{Workflow: w.Name, Problems: v.probs}
	}
	return nil
}

// validation collects the problems of one workflow, step by step.
type validation struct {
	w         *Definition
	tools     ToolLookup
	workflows func(name string) *Definition // served here (Register), or nil
	probs     []string
	declared  map[string]bool  // arguments
	names     map[string]bool  // step names so far
	produced  map[string]*Step // output binding -> the earlier step producing it
	bodyOf    *Step            // the container whose body the next step checked is (see checker.body)
}

func (v *validation) add(format string, args ...any) {
	v.probs = append(v.probs, fmt.Sprintf(format, args...))
}

// workflow checks what belongs to the workflow as a whole.
func (v *validation) workflow() {
	w := v.w
	if w.Name == "" {
		v.add("the workflow has no name: set Definition.Name")
	}
	if len(w.Steps) == 0 {
		v.add("the workflow has no steps: add at least one with Step")
	}
	if w.TTL < 0 {
		v.add("the workflow's TTL is negative (%s): use zero for the default", w.TTL)
	}
	if w.Deadline < 0 || w.Deadline > MaxWait {
		v.add("the workflow's Deadline (%s) must be between 0 (none) and MaxWait (%s)", w.Deadline, maxWaitText)
	}
	if strings.ContainsAny(w.Version, " \t\n\"") {
		v.add("version %q contains blanks or quotes: use a short token such as v2", w.Version)
	}
	v.declared = map[string]bool{}
	c := &checker{v: v, w: w}
	for _, a := range w.Arguments {
		switch {
		case a.Name == "":
			v.add("an argument has no name")
		case a.Name == mcptask.ArgTaskID:
			v.add("prompt argument %q is reserved: it resumes a workflow task", mcptask.ArgTaskID)
		case v.declared[a.Name]:
			v.add("prompt argument %q is declared twice: remove one", a.Name)
		}
		v.declared[a.Name] = true
		c.argument(w, a)
	}
	c.where = "the workflow's queue"
	c.queue(w.queue, true) // queue.go
}

// stage checks top-level step s, stage i: a step alone, or a container
// whose members are checked against the outputs of earlier stages only
// (they run together), then publish theirs.
func (v *validation) stage(i int, s *Step) {
	v.step(i, s, nil, false)
	if s == nil || s.kind == nil {
		return
	}
	members := s.kind.members()
	if len(members) == 0 {
		v.publish(s)
		return
	}
	for _, m := range members {
		v.step(i, m, s, false)
	}
	for _, m := range members {
		v.publish(m)
	}
}

// checker is what a kind's check works with: the step, where it is, and
// the helpers that check its parts.
type checker struct {
	v         *validation
	w         *Definition
	step      *Step
	i         int   // its stage
	container *Step // the container it is a member of, or nil
	where     string
	inBody    bool  // it is the body of a for-each: Item sources read its item
	bodyOf    *Step // the container (a for-each, a loop) whose body it is, or nil
}

// add records a problem of the step.
func (c *checker) add(format string, args ...any) {
	if c.where == "" {
		c.v.add(format, args...)
		return
	}
	c.v.add("%s: %s", c.where, fmt.Sprintf(format, args...))
}

// step checks step s of stage i (a member of container when set; the
// body of a for-each, whose records read an item, when inBody).
func (v *validation) step(i int, s *Step, container *Step, inBody bool) {
	if s == nil {
		v.add("step %d is nil", i+1)
		return
	}
	where := fmt.Sprintf("step %q", s.Name)
	if s.Name == "" {
		where = fmt.Sprintf("step %d", i+1)
		v.add("%s has no name: set Step.Name", where)
	} else if v.names[s.Name] {
		v.add("%s: the name is used by an earlier step: step names must be unique", where)
	}
	v.names[s.Name] = true
	c := &checker{v: v, w: v.w, step: s, i: i, container: container, where: where, inBody: inBody, bodyOf: v.bodyOf}
	v.bodyOf = nil // a body's own body is its container's
	if s.kind == nil {
		c.add("it has no kind: build steps with Server, Client, Parallel, Sleep, SleepFor, SleepUntil or Event")
		return
	}
	for _, m := range s.misuse {
		c.add("%s", m)
	}
	s.kind.check(c)
	c.condition(s.Condition)
	c.queue(s.queue, false) // queue.go
	c.checkUndo()
}

// body checks s, the body of the container c checks, whose records run
// it: like a step of the workflow at the container's place, reading the
// outputs of the steps before it (and, when item is set, the item of a
// for-each's record). Its output is its container's to publish.
func (c *checker) body(s *Step, item bool) {
	if s == nil {
		c.add("it has no body")
		return
	}
	if s.kind != nil && len(s.kind.members()) > 0 {
		c.add("its body %q is a group: run a single step per record", s.Name)
		return
	}
	c.v.bodyOf = c.step
	defer func() { c.v.bodyOf = nil }()
	c.v.step(c.i, s, nil, item || c.inBody)
}

// publish records the output binding s produces, for the steps after it.
func (v *validation) publish(s *Step) {
	if s == nil || s.Name == "" {
		return
	}
	b := s.binding()
	if prev, dup := v.produced[b]; dup && prev.Name != s.Name {
		v.add("step %q: output binding %q is already produced by step %q: give one of them another Output", s.Name, b, prev.Name)
	}
	v.produced[b] = s
}

// tool looks up a tool the step calls and returns its schema.
func (c *checker) tool(name string) (toolSchema, bool) {
	tool, ok := c.v.tools(name)
	if !ok {
		c.add("unknown tool %q: register the tool before the workflow, or fix the name", name)
		return toolSchema{}, false
	}
	schema := schemaOf(tool)
	if schema.has(mcptask.ArgTaskID) {
		c.add("tool %q declares an argument %q, which the engine reserves for continuing workflow tasks: rename it", name, mcptask.ArgTaskID)
	}
	return schema, true
}

// source checks source src, read by the step under label (an argument of
// its tool, whose schema is known; or "(condition)", "(sleep length)").
func (c *checker) source(label string, src Source, schema toolSchema, known bool) {
	s := c.step
	if label == mcptask.ArgTaskID {
		c.add("argument %q is reserved for continuing workflow tasks: remove the binding", label)
	}
	if known && schema.closed && !schema.has(label) && !strings.HasPrefix(label, "(") {
		c.add("tool %q has no argument %q: remove the binding or fix its name", toolOf(s), label)
	}
	switch src.Kind {
	case SourcePromptArg:
		if !c.v.declared[src.Name] {
			c.add("%s reads undeclared prompt argument %q: declare it with Arg", labelled(label), src.Name)
		}
		if src.Default != nil && !json.Valid(src.Default) {
			c.add("%s has an invalid default", labelled(label))
		}
	case SourceStepOutput:
		c.output(label, src)
	case SourceConstant:
		if !json.Valid(src.Value) {
			c.add("%s has an invalid constant", labelled(label))
		}
	case SourceTaskVar:
		if src.Name == "" {
			c.add("%s reads a task variable with no name", labelled(label))
		} else if strings.HasPrefix(src.Name, ReservedPrefix) {
			c.add("%s reads reserved task variable %q: the %q prefix belongs to the workflow engine", labelled(label), src.Name, ReservedPrefix)
		}
	case SourceItem:
		if !c.inBody {
			c.add("%s reads the item, but only the body of a for-each (ForEach) has one", labelled(label))
		}
	case SourceClient:
		if strings.HasPrefix(label, "(") {
			c.add("%s is FromClient, but only a client step's tool arguments come from the client", labelled(label))
		}
		if src.Default != nil && !json.Valid(src.Default) {
			c.add("%s has an invalid default", labelled(label))
		}
	default:
		c.add("%s has unknown source kind %q", labelled(label), src.Kind)
	}
}

// output checks a source that reads an earlier step's output.
func (c *checker) output(label string, src Source) {
	s, w := c.step, c.w
	from, ok := c.v.produced[src.Name]
	switch {
	case !ok && c.container != nil && producesMember(c.container, src.Name):
		c.add("%s uses output %q of a step in the same stage (%q): steps that run together cannot read each other's outputs", labelled(label), src.Name, c.container.Name)
	case !ok && producesLater(w, src.Name, c.i):
		c.add("%s uses output %q before the step that produces it: move that step earlier", labelled(label), src.Name)
	case !ok:
		c.add("%s reads output %q, which no step produces: set a step's Output (or name) to %q", labelled(label), src.Name, src.Name)
	case s.Execution() == mcptask.ExecClient && from.Execution() == mcptask.ExecClient && serverBetween(w, from, c.i):
		// A server step between them runs after from and before s is
		// reached: from's output exists by then.
	case s.Execution() == mcptask.ExecClient && from.Execution() == mcptask.ExecClient && strings.HasPrefix(label, "("):
		c.add("%s reads output %q of client step %q, but the client may perform both steps at once, so it could not be judged when this step is reached: make %q a server step, or put a server step between the two",
			labelled(label), src.Name, from.Name, from.Name)
	case s.Execution() == mcptask.ExecClient && from.Execution() == mcptask.ExecClient:
		c.add("%s depends on output %q of client step %q, but a client-deferred step cannot consume another client-deferred step's output: make %q a server step, or bind %q to an argument or FromClient",
			labelled(label), src.Name, from.Name, from.Name, label)
	}
	for _, seg := range src.Path {
		if seg == "" {
			c.add("%s has an empty segment in field path %q", labelled(label), strings.Join(src.Path, "."))
		}
	}
}

// labelled names what reads a source in a problem: `argument "x"`, or
// the label itself ("(condition)").
func labelled(label string) string {
	if strings.HasPrefix(label, "(") {
		return "its " + strings.Trim(label, "()")
	}
	return fmt.Sprintf("argument %q", label)
}

func producesLater(w *Definition, binding string, i int) bool {
	return slices.ContainsFunc(w.Steps[i:], func(s *Step) bool {
		return s != nil && (s.binding() == binding || producesMember(s, binding))
	})
}

// serverBetween reports whether a stage between the one of step from and
// stage i has a step the server performs: the client reaches stage i only
// once from has ended.
func serverBetween(w *Definition, from *Step, i int) bool {
	start := -1
	for j, s := range w.Steps[:min(i, len(w.Steps))] {
		if s == from || producesMember(s, from.binding()) {
			start = j
		}
	}
	if start < 0 {
		return false
	}
	for _, s := range w.Steps[start+1 : i] {
		if s == nil || s.kind == nil {
			continue
		}
		for _, m := range append([]*Step{s}, s.kind.members()...) {
			if m != nil && m.kind != nil && m.Execution() == mcptask.ExecServer && len(m.kind.members()) == 0 {
				return true
			}
		}
	}
	return false
}

// producesMember reports whether a member of container s produces
// binding.
func producesMember(s *Step, binding string) bool {
	if s == nil || s.kind == nil {
		return false
	}
	return slices.ContainsFunc(s.kind.members(), func(m *Step) bool { return m != nil && m.binding() == binding })
}

// plainOnly refuses what only a Bridge runs: a plain workflow
// (RegisterPlain) runs its tool steps in the request, in order, so it has
// only steps that call a tool, and no webhook (conditions it judges).
func (w *Definition) plainOnly() error {
	var probs []string
	for _, s := range w.Steps {
		switch {
		case callOf(s) == nil, s.Kind() != mcptask.StepKindTool:
			probs = append(probs, fmt.Sprintf("step %q is a %s step", s.Name, s.Kind()))
		case s.kind.acceptsWebhook():
			probs = append(probs, fmt.Sprintf("step %q accepts the webhook", s.Name))
		case s.queue != nil:
			probs = append(probs, fmt.Sprintf("step %q is placed on a queue", s.Name))
		}
	}
	if w.queue != nil || w.PauseOnFailure {
		probs = append(probs, "the workflow is placed on a queue, or pauses on failure")
	}
	if len(probs) > 0 {
		return &ValidationError{Workflow: w.Name, Problems: append(probs, "a plain workflow runs its tool steps in the request, in order: register it with a Bridge (Register) for the other kinds")}
	}
	return nil
}
