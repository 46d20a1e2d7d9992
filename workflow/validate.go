package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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

// TaskIDArgument is the tool (and prompt) argument a client that cannot set
// _meta (a model in an LLM host) uses instead of _meta._task_id. The engine
// removes it before a tool sees its arguments, so no tool a workflow step
// calls may declare an argument of that name.
const TaskIDArgument = mcptask.ArgTaskID

// Validate checks a workflow against the tools it calls: unknown tools,
// duplicate names, outputs used before they are produced, undeclared prompt
// arguments, required tool arguments left unbound (or bound to an optional
// prompt argument without a default), a client step that consumes another
// client step's output, malformed sources, and settings that cannot work
// (a negative TTL or wait, a TimeoutServer step whose client arguments have
// no defaults). Each problem names the step and the fix.
func (w *Definition) Validate(tools ToolLookup) error {
	v := &validation{w: w, tools: tools, names: map[string]bool{}, produced: map[string]*Step{}}
	v.workflow()
	for i, s := range w.Steps {
		if s != nil && s.kind() == KindGroup {
			v.group(i, s)
			continue
		}
		v.step(i, s, nil)
		v.publish(s)
	}
	if len(v.probs) > 0 {
		return &ValidationError{Workflow: w.Name, Problems: v.probs}
	}
	return nil
}

// validation collects the problems of one workflow, step by step.
type validation struct {
	w        *Definition
	tools    ToolLookup
	probs    []string
	declared map[string]bool  // prompt arguments
	names    map[string]bool  // step names so far
	produced map[string]*Step // output binding -> the earlier step producing it
	inGroup  *Step            // the group of the step being checked
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
	if strings.ContainsAny(w.Version, " \t\n\"") {
		v.add("version %q contains blanks or quotes: use a short token such as v2", w.Version)
	}
	v.declared = map[string]bool{}
	for _, a := range w.Arguments {
		switch {
		case a.Name == "":
			v.add("a prompt argument has no name")
		case a.Name == TaskIDArgument:
			v.add("prompt argument %q is reserved: it resumes a workflow task", TaskIDArgument)
		case v.declared[a.Name]:
			v.add("prompt argument %q is declared twice: remove one", a.Name)
		}
		v.declared[a.Name] = true
	}
}

// group checks parallel group g, stage i: its members are checked against
// the outputs of earlier stages only (they run together), then publish
// theirs.
func (v *validation) group(i int, g *Step) {
	where := fmt.Sprintf("group %q", g.Name)
	switch {
	case g.Name == "":
		where = fmt.Sprintf("group %d", i+1)
		v.add("%s has no name: give Parallel a name", where)
	case v.names[g.Name]:
		v.add("%s: the name is used by an earlier step: step names must be unique", where)
	}
	v.names[g.Name] = true
	if len(g.Members) == 0 {
		v.add("%s has no steps: give Parallel at least one", where)
	}
	if g.Tool != "" || len(g.Args) > 0 || g.Condition != nil {
		v.add("%s: a group calls no tool, binds no argument and has no condition: put them on its steps", where)
	}
	for _, m := range g.Members {
		if m != nil && m.kind() == KindGroup {
			v.add("%s: step %q is a group: groups do not nest", where, m.Name)
			continue
		}
		v.step(i, m, g)
	}
	for _, m := range g.Members {
		v.publish(m)
	}
}

// step checks step i (a member of group when group is set).
func (v *validation) step(i int, s *Step, group *Step) {
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
	if ex := s.execution(); ex != ServerExecutable && ex != ClientDeferred {
		v.add("%s: execution %q is neither %q nor %q", where, ex, ServerExecutable, ClientDeferred)
	}
	v.inGroup = group
	defer func() { v.inGroup = nil }()
	switch s.kind() {
	case KindTool:
		schema, known := v.tool(where, s)
		for _, a := range slices.Sorted(maps.Keys(s.Args)) {
			v.binding(where, i, s, a, s.Args[a], schema, known)
		}
		if known && s.execution() == ServerExecutable {
			v.required(where, s, schema)
		}
	case KindSleep:
		v.sleep(where, i, s)
	case KindEvent:
		v.event(where, s)
	default:
		v.add("%s: unknown kind %q", where, s.Kind)
	}
	if s.Condition != nil {
		if err := s.Condition.valid(); err != nil {
			v.add("%s: %v", where, err)
		} else {
			for _, src := range s.Condition.sources() {
				v.binding(where, i, s, "(condition)", src, toolSchema{}, false)
			}
		}
	}
	v.policies(where, s)
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

// sleep checks a sleep: one length or end, read from a valid source.
func (v *validation) sleep(where string, i int, s *Step) {
	n := 0
	if s.Duration > 0 {
		n++
	}
	if s.For != nil {
		n++
		v.binding(where, i, s, "(sleep length)", *s.For, toolSchema{}, false)
	}
	if s.Until != nil {
		n++
		v.binding(where, i, s, "(sleep end)", *s.Until, toolSchema{}, false)
	}
	switch {
	case s.Duration < 0:
		v.add("%s: the sleep's Duration is negative", where)
	case n != 1:
		v.add("%s: a sleep needs exactly one of a Duration (Sleep), a length source (SleepFor) or an end source (SleepUntil)", where)
	}
	if s.Tool != "" || len(s.Args) > 0 {
		v.add("%s: a sleep calls no tool and binds no argument", where)
	}
	if s.execution() != ServerExecutable {
		v.add("%s: a sleep is the server's", where)
	}
}

// event checks an event step.
func (v *validation) event(where string, s *Step) {
	if s.Tool != "" || len(s.Args) > 0 {
		v.add("%s: an event calls no tool and binds no argument: its payload is its output", where)
	}
	if s.Payload != nil {
		if _, err := json.Marshal(s.Payload); err != nil {
			v.add("%s: the payload schema cannot be encoded: %v", where, err)
		}
	}
	if s.timeoutPolicy() == TimeoutServer && s.ClientWait > 0 {
		v.add("%s: an event has no tool the server could call when its wait runs out: use TimeoutFail or TimeoutSkip", where)
	}
}

// tool looks up the step's tool and returns its schema.
func (v *validation) tool(where string, s *Step) (toolSchema, bool) {
	tool, ok := v.tools(s.Tool)
	if !ok {
		v.add("%s: unknown tool %q: register the tool before the workflow, or fix the name", where, s.Tool)
		return toolSchema{}, false
	}
	schema := schemaOf(tool)
	if schema.has(TaskIDArgument) {
		v.add("%s: tool %q declares an argument %q, which the engine reserves for continuing workflow tasks: rename it", where, s.Tool, TaskIDArgument)
	}
	return schema, true
}

// binding checks source src, bound to argument a of step s (or read by
// its condition or its sleep).
func (v *validation) binding(where string, i int, s *Step, a string, src Source, schema toolSchema, known bool) {
	if a == TaskIDArgument {
		v.add("%s: argument %q is reserved for continuing workflow tasks: remove the binding", where, a)
	}
	if known && schema.closed && !schema.has(a) && !strings.HasPrefix(a, "(") {
		v.add("%s: tool %q has no argument %q: remove the binding or fix its name", where, s.Tool, a)
	}
	switch src.Kind {
	case SourcePromptArg:
		if !v.declared[src.Name] {
			v.add("%s: argument %q reads undeclared prompt argument %q: declare it with Arg", where, a, src.Name)
		}
		if src.Default != nil && !json.Valid(src.Default) {
			v.add("%s: argument %q has an invalid default", where, a)
		}
	case SourceStepOutput:
		from, ok := v.produced[src.Name]
		switch {
		case !ok && v.inGroup != nil && v.inGroup.producesMember(src.Name):
			v.add("%s: argument %q uses output %q of a step in the same parallel group %q: steps of a group run together and cannot read each other's outputs", where, a, src.Name, v.inGroup.Name)
		case !ok && v.w.producesLater(src.Name, i):
			v.add("%s: argument %q uses output %q before the step that produces it: move that step earlier", where, a, src.Name)
		case !ok:
			v.add("%s: argument %q reads output %q, which no step produces: set a step's Output (or name) to %q", where, a, src.Name, src.Name)
		case s.execution() == ClientDeferred && from.execution() == ClientDeferred:
			v.add("%s: argument %q depends on output %q of client step %q, but a client-deferred step cannot consume another client-deferred step's output: make %q a server step, or bind %q to a prompt argument or FromClient",
				where, a, src.Name, from.Name, from.Name, a)
		}
		for _, seg := range src.Path {
			if seg == "" {
				v.add("%s: argument %q has an empty segment in field path %q", where, a, strings.Join(src.Path, "."))
			}
		}
	case SourceConstant:
		if !json.Valid(src.Value) {
			v.add("%s: argument %q has an invalid constant", where, a)
		}
	case SourceTaskVar:
		if src.Name == "" {
			v.add("%s: argument %q reads a task variable with no name", where, a)
		} else if strings.HasPrefix(src.Name, ReservedPrefix) {
			v.add("%s: argument %q reads reserved task variable %q: the %q prefix belongs to the workflow engine", where, a, src.Name, ReservedPrefix)
		}
	case SourceClient:
		if s.execution() != ClientDeferred {
			v.add("%s: argument %q is FromClient, but the step runs on the server: bind it to another source or make the step ClientDeferred", where, a)
		}
		if src.Default != nil && !json.Valid(src.Default) {
			v.add("%s: argument %q has an invalid default", where, a)
		}
	default:
		v.add("%s: argument %q has unknown source kind %q", where, a, src.Kind)
	}
}

// required checks that a server step binds every required argument of its
// tool to a value that always exists.
func (v *validation) required(where string, s *Step, schema toolSchema) {
	for _, req := range schema.required {
		src, bound := s.Args[req]
		switch {
		case !bound:
			v.add("%s: required argument %q of tool %q is not bound: bind it with Bind(%q, ...)", where, req, s.Tool, req)
		case src.Kind == SourcePromptArg && !v.w.requiredArg(src.Name) && src.Default == nil:
			v.add("%s: required argument %q of tool %q is bound to optional prompt argument %q, which may be left out: make the prompt argument required, or give the binding a default with PromptArg(%q).WithDefault(...)", where, req, s.Tool, src.Name, src.Name)
		}
	}
}

// policies checks the step's retry, failure and timeout settings.
func (v *validation) policies(where string, s *Step) {
	if p := s.failurePolicy(); p != HandToClient && p != FailWorkflow {
		v.add("%s: unknown failure policy %q: use HandToClient or FailWorkflow", where, p)
	}
	if s.Retry.MaxAttempts < 0 || s.Retry.Backoff < 0 || s.Retry.MaxBackoff < 0 {
		v.add("%s: the retry policy has a negative value", where)
	}
	if s.ClientWait < 0 {
		v.add("%s: ClientWait is negative (%s)", where, s.ClientWait)
	}
	switch p := s.timeoutPolicy(); p {
	case TimeoutFail, TimeoutSkip:
	case TimeoutServer:
		if s.execution() != ClientDeferred {
			break // a handed server step: the server tries again
		}
		for _, a := range slices.Sorted(maps.Keys(s.Args)) {
			if src := s.Args[a]; src.Kind == SourceClient && src.Default == nil {
				v.add("%s: the server performs the step when the client's wait runs out (TimeoutServer), but argument %q has no default: give it one with FromClient(...).WithDefault(...)", where, a)
			}
		}
	default:
		v.add("%s: unknown timeout policy %q: use TimeoutFail, TimeoutSkip or TimeoutServer", where, p)
	}
}

func (w *Definition) requiredArg(name string) bool {
	for _, a := range w.Arguments {
		if a.Name == name {
			return a.Required
		}
	}
	return false
}

func (w *Definition) producesLater(binding string, i int) bool {
	return slices.ContainsFunc(w.Steps[i:], func(s *Step) bool {
		return s != nil && (s.binding() == binding || s.producesMember(binding))
	})
}

// producesMember reports whether a member of group s produces binding.
func (s *Step) producesMember(binding string) bool {
	return slices.ContainsFunc(s.Members, func(m *Step) bool { return m != nil && m.binding() == binding })
}
