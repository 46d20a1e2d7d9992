// Package workflow defines sequential workflow prompts and runs them, either
// plainly (WorkflowPromptHandler: server steps run during prompts/get, no
// task) or bridged to a durable task (TaskWorkflowPromptHandler: the
// workflow becomes a task whose progress is written step by step, pauses at
// the steps the client must perform, and ends with a handoff).
//
// A workflow is a list of steps. Each step calls one tool with arguments
// bound to sources: a prompt argument, the output of an earlier step
// (optionally a field path into it), a constant, or a task variable. A
// step is either server-executable (the server runs it) or client-deferred
// (the client runs it and reports back by calling the tool with
// _meta._task_id).
package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StepExecution says who performs a step: the server or the client.
type StepExecution string

// The execution modes.
const (
	// ServerExecutable steps run on the server as soon as their inputs exist.
	ServerExecutable StepExecution = "server"
	// ClientDeferred steps are performed by the client, which calls the
	// step's tool with _meta._task_id.
	ClientDeferred StepExecution = "client"
)

// SourceKind is where an argument's value comes from.
type SourceKind string

// The argument sources.
const (
	SourcePromptArg  SourceKind = "prompt_argument"
	SourceStepOutput SourceKind = "step_output"
	SourceConstant   SourceKind = "constant"
	SourceTaskVar    SourceKind = "task_variable"
	SourceClient     SourceKind = "client"
)

// Source is the value bound to one tool argument.
type Source struct {
	Kind SourceKind
	// Name is the prompt argument, output binding or task variable.
	Name string
	// Path is a field path into a step output: object keys and array
	// indexes, e.g. ["items", "0", "id"].
	Path []string
	// Value is a constant's JSON.
	Value json.RawMessage
	// Description tells the client what to supply (SourceClient).
	Description string
	// Default is the JSON value used when an optional prompt argument was
	// not given (SourcePromptArg). Without one, an argument bound to an
	// optional prompt argument that was not given is left out of the tool
	// call.
	Default json.RawMessage
}

// PromptArg binds an argument to a prompt argument. If the prompt argument
// is optional and not given, the tool argument is left out (or gets the
// default set with WithDefault).
func PromptArg(name string) Source { return Source{Kind: SourcePromptArg, Name: name} }

// WithDefault returns s with a default value for an optional prompt
// argument that was not given. It panics if v cannot be encoded as JSON,
// which is a programming error.
func (s Source) WithDefault(v any) Source {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("workflow: Source.WithDefault: %v", err))
	}
	s.Default = b
	return s
}

// StepOutput binds an argument to an earlier step's output binding. A
// path ("items.0.id" or "items", "0", "id") selects a field inside it.
func StepOutput(binding string, path ...string) Source {
	var p []string
	for _, seg := range path {
		p = append(p, strings.Split(seg, ".")...)
	}
	return Source{Kind: SourceStepOutput, Name: binding, Path: p}
}

// Const binds an argument to a constant. It panics if v cannot be encoded
// as JSON, which is a programming error.
func Const(v any) Source {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("workflow.Const: %v", err))
	}
	return Source{Kind: SourceConstant, Value: b}
}

// TaskVar binds an argument to a task variable. Task variables
// are set by tool handlers through the task engine, or by the client with
// _meta._task_vars on a continuation call.
func TaskVar(name string) Source { return Source{Kind: SourceTaskVar, Name: name} }

// FromClient marks an argument of a client-deferred step as one the client
// supplies; the handoff shows the description as a placeholder.
func FromClient(description string) Source {
	return Source{Kind: SourceClient, Description: description}
}

func (s Source) String() string {
	switch s.Kind {
	case SourcePromptArg:
		return fmt.Sprintf("prompt argument %q", s.Name)
	case SourceStepOutput:
		if len(s.Path) > 0 {
			return fmt.Sprintf("output %q at %s", s.Name, strings.Join(s.Path, "."))
		}
		return fmt.Sprintf("output %q", s.Name)
	case SourceConstant:
		return "constant " + string(s.Value)
	case SourceTaskVar:
		return fmt.Sprintf("task variable %q", s.Name)
	case SourceClient:
		return "client: " + s.Description
	}
	return string(s.Kind)
}

// Step is one tool call of a workflow.
type Step struct {
	// Name identifies the step; unique in the workflow.
	Name string
	// Tool is the tool the step calls.
	Tool string
	// Args binds tool arguments to sources.
	Args map[string]Source
	// Output names the binding the step's output is stored under; it
	// defaults to the step name.
	Output string
	// Guidance tells the client (or the LLM) what the step is for and how to
	// perform it.
	Guidance string
	// Retryable says the server may run the step again after a failure:
	// at once, following Retry (DefaultRetryPolicy when Retry is zero), and
	// again after a restart. A step that is not Retryable runs once per
	// attempt the client asks for (a resume) or a restart makes.
	Retryable bool
	// Retry is the retry policy of a Retryable step.
	Retry RetryPolicy
	// OnFailure says what happens when the server gives up on the step;
	// the zero value is HandToClient.
	OnFailure FailurePolicy
	// Execution says who performs the step; the zero value is
	// ServerExecutable.
	Execution StepExecution
}

// RetryPolicy says how the server retries a failing server step.
type RetryPolicy struct {
	// MaxAttempts is how many times the server runs the step before it
	// gives up (at least 1).
	MaxAttempts int
	// Backoff is the pause before the second attempt; it doubles before
	// each later one, up to MaxBackoff.
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// DefaultRetryPolicy is the policy of a Retryable step without its own:
// three attempts, 100ms then 200ms apart.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 3, Backoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second}

// policy returns the step's effective retry policy: one attempt for a step
// that is not Retryable.
func (s *Step) policy() RetryPolicy {
	if !s.Retryable {
		return RetryPolicy{MaxAttempts: 1}
	}
	p := s.Retry
	if p.MaxAttempts <= 0 {
		p = DefaultRetryPolicy
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = max(p.Backoff, DefaultRetryPolicy.MaxBackoff)
	}
	return p
}

// backoff is the pause before attempt n (n >= 2) of the policy.
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.Backoff
	for i := 2; i < n && d < p.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// FailurePolicy says what happens when the server gives up on a server
// step.
type FailurePolicy string

// The failure policies.
const (
	// HandToClient (the default) keeps the task working and hands the step
	// to the client: the handoff lists it as a step the client may perform
	// (with its resolved arguments and the error), a continuation call of
	// its tool with _meta._task_id records it and lets the server run what
	// follows, and a resume (prompts/get with _meta._task_id) makes the
	// server try it again.
	HandToClient FailurePolicy = "hand_to_client"
	// FailWorkflow ends the task failed, with the step's error as the
	// reason.
	FailWorkflow FailurePolicy = "fail_workflow"
)

// Server returns a server-executable step.
func Server(name, tool string) *Step {
	return &Step{Name: name, Tool: tool, Execution: ServerExecutable, Args: map[string]Source{}}
}

// Client returns a client-deferred step.
func Client(name, tool string) *Step {
	return &Step{Name: name, Tool: tool, Execution: ClientDeferred, Args: map[string]Source{}}
}

// Bind binds a tool argument and returns the step for chaining.
func (s *Step) Bind(arg string, src Source) *Step {
	if s.Args == nil {
		s.Args = map[string]Source{}
	}
	s.Args[arg] = src
	return s
}

// As sets the step's output binding name.
func (s *Step) As(binding string) *Step { s.Output = binding; return s }

// WithGuidance sets the step's guidance.
func (s *Step) WithGuidance(g string) *Step { s.Guidance = g; return s }

// WithRetry marks the step retryable with DefaultRetryPolicy.
func (s *Step) WithRetry() *Step { s.Retryable = true; return s }

// WithRetryPolicy marks the step retryable with policy p.
func (s *Step) WithRetryPolicy(p RetryPolicy) *Step { s.Retryable = true; s.Retry = p; return s }

// FailsWorkflow makes the step's failure (once the server gives up) fail
// the whole workflow task instead of handing the step to the client.
func (s *Step) FailsWorkflow() *Step { s.OnFailure = FailWorkflow; return s }

func (s *Step) failurePolicy() FailurePolicy {
	if s.OnFailure == "" {
		return HandToClient
	}
	return s.OnFailure
}

func (s *Step) binding() string {
	if s.Output != "" {
		return s.Output
	}
	return s.Name
}

func (s *Step) execution() StepExecution {
	if s.Execution == "" {
		return ServerExecutable
	}
	return s.Execution
}

// Argument is a declared prompt argument.
type Argument struct {
	Name        string
	Description string
	Required    bool
}

// SequentialWorkflow is a workflow prompt: a name, a description, declared
// prompt arguments and ordered steps.
type SequentialWorkflow struct {
	Name        string
	Description string
	// Goal is what the workflow achieves, shown to the client; it defaults
	// to Description.
	Goal      string
	Arguments []Argument
	Steps     []*Step
}

// New returns an empty workflow to fill with Arg and Step.
func New(name, description string) *SequentialWorkflow {
	return &SequentialWorkflow{Name: name, Description: description}
}

// Arg declares a prompt argument.
func (w *SequentialWorkflow) Arg(name, description string, required bool) *SequentialWorkflow {
	w.Arguments = append(w.Arguments, Argument{Name: name, Description: description, Required: required})
	return w
}

// Step appends steps.
func (w *SequentialWorkflow) Step(steps ...*Step) *SequentialWorkflow {
	w.Steps = append(w.Steps, steps...)
	return w
}

// WithGoal sets the goal.
func (w *SequentialWorkflow) WithGoal(goal string) *SequentialWorkflow { w.Goal = goal; return w }

func (w *SequentialWorkflow) goal() string {
	if w.Goal != "" {
		return w.Goal
	}
	return w.Description
}

// Prompt returns the MCP prompt that advertises the workflow.
func (w *SequentialWorkflow) Prompt() *mcp.Prompt {
	p := &mcp.Prompt{Name: w.Name, Description: w.Description}
	for _, a := range w.Arguments {
		p.Arguments = append(p.Arguments, &mcp.PromptArgument{Name: a.Name, Description: a.Description, Required: a.Required})
	}
	return p
}

// ToolLookup finds a tool's definition by name.
type ToolLookup func(name string) (*mcp.Tool, bool)

// ToolsLookup returns a ToolLookup over a list of tools.
func ToolsLookup(tools []*mcp.Tool) ToolLookup {
	m := make(map[string]*mcp.Tool, len(tools))
	for _, t := range tools {
		m[t.Name] = t
	}
	return func(name string) (*mcp.Tool, bool) { t, ok := m[name]; return t, ok }
}

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
// duplicate names, outputs used before they are produced, undeclared prompt
// arguments, required tool arguments left unbound (or bound to an optional
// prompt argument without a default), a client step that consumes another
// client step's output, and malformed sources. Each problem names the step
// and the fix.
func (w *SequentialWorkflow) Validate(tools ToolLookup) error {
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if w.Name == "" {
		add("the workflow has no name: set SequentialWorkflow.Name")
	}
	if len(w.Steps) == 0 {
		add("the workflow has no steps: add at least one with Step")
	}
	declared := map[string]bool{}
	for _, a := range w.Arguments {
		if a.Name == "" {
			add("a prompt argument has no name")
		} else if declared[a.Name] {
			add("prompt argument %q is declared twice: remove one", a.Name)
		}
		declared[a.Name] = true
	}
	names := map[string]bool{}
	produced := map[string]*Step{} // binding -> step, for steps before the current one
	for i, s := range w.Steps {
		if s == nil {
			add("step %d is nil", i+1)
			continue
		}
		where := fmt.Sprintf("step %q", s.Name)
		dupName := false
		if s.Name == "" {
			where = fmt.Sprintf("step %d", i+1)
			add("%s has no name: set Step.Name", where)
		} else if names[s.Name] {
			dupName = true
			add("%s: the name is used by an earlier step: step names must be unique", where)
		}
		names[s.Name] = true
		if ex := s.execution(); ex != ServerExecutable && ex != ClientDeferred {
			add("%s: execution %q is neither %q nor %q", where, ex, ServerExecutable, ClientDeferred)
		}
		var schema toolSchema
		tool, ok := tools(s.Tool)
		if !ok {
			add("%s: unknown tool %q: register the tool before the workflow, or fix the name", where, s.Tool)
		} else {
			schema = schemaOf(tool)
		}
		argNames := make([]string, 0, len(s.Args))
		for a := range s.Args {
			argNames = append(argNames, a)
		}
		sort.Strings(argNames)
		for _, a := range argNames {
			src := s.Args[a]
			if ok && schema.closed && !schema.has(a) {
				add("%s: tool %q has no argument %q: remove the binding or fix its name", where, s.Tool, a)
			}
			switch src.Kind {
			case SourcePromptArg:
				if !declared[src.Name] {
					add("%s: argument %q reads undeclared prompt argument %q: declare it with Arg", where, a, src.Name)
				}
				if src.Default != nil && !json.Valid(src.Default) {
					add("%s: argument %q has an invalid default", where, a)
				}
			case SourceStepOutput:
				from, ok := produced[src.Name]
				switch {
				case !ok && w.producesLater(src.Name, i):
					add("%s: argument %q uses output %q before the step that produces it: move that step earlier", where, a, src.Name)
				case !ok:
					add("%s: argument %q reads output %q, which no step produces: set a step's Output (or name) to %q", where, a, src.Name, src.Name)
				case s.execution() == ClientDeferred && from.execution() == ClientDeferred:
					add("%s: argument %q depends on output %q of client step %q, but a client-deferred step cannot consume another client-deferred step's output: make %q a server step, or bind %q to a prompt argument or FromClient",
						where, a, src.Name, from.Name, from.Name, a)
				}
				for _, seg := range src.Path {
					if seg == "" {
						add("%s: argument %q has an empty segment in field path %q", where, a, strings.Join(src.Path, "."))
					}
				}
			case SourceConstant:
				if !json.Valid(src.Value) {
					add("%s: argument %q has an invalid constant", where, a)
				}
			case SourceTaskVar:
				if src.Name == "" {
					add("%s: argument %q reads a task variable with no name", where, a)
				} else if strings.HasPrefix(src.Name, ReservedPrefix) {
					add("%s: argument %q reads reserved task variable %q: the %q prefix belongs to the workflow engine", where, a, src.Name, ReservedPrefix)
				}
			case SourceClient:
				if s.execution() != ClientDeferred {
					add("%s: argument %q is FromClient, but the step runs on the server: bind it to another source or make the step ClientDeferred", where, a)
				}
			default:
				add("%s: argument %q has unknown source kind %q", where, a, src.Kind)
			}
		}
		if ok && s.execution() == ServerExecutable {
			for _, req := range schema.required {
				src, bound := s.Args[req]
				switch {
				case !bound:
					add("%s: required argument %q of tool %q is not bound: bind it with Bind(%q, ...)", where, req, s.Tool, req)
				case src.Kind == SourcePromptArg && !w.requiredArg(src.Name) && src.Default == nil:
					add("%s: required argument %q of tool %q is bound to optional prompt argument %q, which may be left out: make the prompt argument required, or give the binding a default with PromptArg(%q).WithDefault(...)", where, req, s.Tool, src.Name, src.Name)
				}
			}
		}
		if p := s.failurePolicy(); p != HandToClient && p != FailWorkflow {
			add("%s: unknown failure policy %q: use HandToClient or FailWorkflow", where, p)
		}
		if s.Retry.MaxAttempts < 0 || s.Retry.Backoff < 0 || s.Retry.MaxBackoff < 0 {
			add("%s: the retry policy has a negative value", where)
		}
		if s.Name != "" {
			b := s.binding()
			if prev, dup := produced[b]; dup && !(dupName && s.Output == "") {
				add("%s: output binding %q is already produced by step %q: give one of them another Output", where, b, prev.Name)
			}
			produced[b] = s
		}
	}
	if len(probs) > 0 {
		return &ValidationError{Workflow: w.Name, Problems: probs}
	}
	return nil
}

func (w *SequentialWorkflow) requiredArg(name string) bool {
	for _, a := range w.Arguments {
		if a.Name == name {
			return a.Required
		}
	}
	return false
}

func (w *SequentialWorkflow) producesLater(binding string, i int) bool {
	return slices.ContainsFunc(w.Steps[i:], func(s *Step) bool { return s != nil && s.binding() == binding })
}

// toolSchema is what validation needs from a tool's input schema.
type toolSchema struct {
	props    map[string]bool
	required []string
	closed   bool // additionalProperties is false
}

func (s toolSchema) has(name string) bool { return s.props[name] }

func schemaOf(t *mcp.Tool) toolSchema {
	var raw struct {
		Properties           map[string]json.RawMessage `json:"properties"`
		Required             []string                   `json:"required"`
		AdditionalProperties json.RawMessage            `json:"additionalProperties"`
	}
	b, err := json.Marshal(t.InputSchema)
	if err != nil {
		return toolSchema{}
	}
	_ = json.Unmarshal(b, &raw)
	s := toolSchema{props: map[string]bool{}, required: raw.Required}
	for k := range raw.Properties {
		s.props[k] = true
	}
	s.closed = strings.TrimSpace(string(raw.AdditionalProperties)) == "false"
	return s
}

// stepIndex parses a numeric path segment.
func stepIndex(seg string) (int, bool) {
	n, err := strconv.Atoi(seg)
	return n, err == nil && n >= 0
}
