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
		v.step(i, s)
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

// step checks step i.
func (v *validation) step(i int, s *Step) {
	if s == nil {
		v.add("step %d is nil", i+1)
		return
	}
	where := fmt.Sprintf("step %q", s.Name)
	dupName := false
	if s.Name == "" {
		where = fmt.Sprintf("step %d", i+1)
		v.add("%s has no name: set Step.Name", where)
	} else if v.names[s.Name] {
		dupName = true
		v.add("%s: the name is used by an earlier step: step names must be unique", where)
	}
	v.names[s.Name] = true
	if ex := s.execution(); ex != ServerExecutable && ex != ClientDeferred {
		v.add("%s: execution %q is neither %q nor %q", where, ex, ServerExecutable, ClientDeferred)
	}
	schema, known := v.tool(where, s)
	for _, a := range slices.Sorted(maps.Keys(s.Args)) {
		v.binding(where, i, s, a, schema, known)
	}
	if known && s.execution() == ServerExecutable {
		v.required(where, s, schema)
	}
	v.policies(where, s)
	if s.Name != "" {
		b := s.binding()
		if prev, dup := v.produced[b]; dup && !(dupName && s.Output == "") {
			v.add("%s: output binding %q is already produced by step %q: give one of them another Output", where, b, prev.Name)
		}
		v.produced[b] = s
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

// binding checks the source bound to argument a of step s.
func (v *validation) binding(where string, i int, s *Step, a string, schema toolSchema, known bool) {
	src := s.Args[a]
	if a == TaskIDArgument {
		v.add("%s: argument %q is reserved for continuing workflow tasks: remove the binding", where, a)
	}
	if known && schema.closed && !schema.has(a) {
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
	return slices.ContainsFunc(w.Steps[i:], func(s *Step) bool { return s != nil && s.binding() == binding })
}
