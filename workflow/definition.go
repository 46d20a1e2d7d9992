package workflow

import (
	"encoding/json"
	"fmt"
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
	// not given (SourcePromptArg); without one, an argument bound to an
	// optional prompt argument that was not given is left out of the tool
	// call. For SourceClient it is the value the server uses when it
	// performs a client step itself (TimeoutServer).
	Default json.RawMessage
}

// PromptArg binds an argument to a prompt argument. If the prompt argument
// is optional and not given, the tool argument is left out (or gets the
// default set with WithDefault).
func PromptArg(name string) Source { return Source{Kind: SourcePromptArg, Name: name} }

// WithDefault returns s with a default value: for an optional prompt
// argument that was not given, or for a FromClient argument the server
// fills in itself (TimeoutServer). It panics if v cannot be encoded as JSON,
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
// supplies; the handoff shows the description as a placeholder. A default
// (WithDefault) is what the server uses when it performs the step itself
// after the client's wait ran out (TimeoutServer).
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

// Step is one step of a workflow: a tool call the server or the client
// performs.
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
	// ClientWait, when positive, bounds how long the workflow waits for
	// the client to perform the step: a client step from the moment it is
	// reached, a server step from the moment it is handed to the client.
	// OnClientTimeout says what happens then.
	ClientWait time.Duration
	// OnClientTimeout is what happens when ClientWait passes; the zero
	// value is TimeoutFail.
	OnClientTimeout TimeoutPolicy

	// Kind says what the step does; the zero value is KindTool (a group
	// when Members is set). See the constructors Server, Client, Parallel,
	// Sleep, SleepFor, SleepUntil and Event.
	Kind StepKind
	// Members are the steps of a parallel group (KindGroup): they start
	// together and the group ends when every one of them has ended.
	Members []*Step
	// FailFast makes a group stop its other members and fail the workflow
	// as soon as the server gives up on one member; without it (collect)
	// every member runs to its end and each failure follows its own
	// OnFailure.
	FailFast bool
	// Condition, when set, must hold when the step is reached; otherwise
	// the step is skipped, with the condition as the reason, and so is
	// every step whose arguments need its output. A condition reads the
	// output of a skipped step as null, so a step may run because another
	// was skipped (Unless(Truthy(StepOutput("approve", "approved"))) runs
	// when the approval was refused or its wait ran out).
	Condition *Condition
	// Duration is a sleep's fixed length (Sleep).
	Duration time.Duration
	// For is where a sleep reads its length (SleepFor): a number of
	// seconds, or a Go duration string.
	For *Source
	// Until is where a sleep reads its end (SleepUntil): an RFC 3339 time,
	// or Unix seconds.
	Until *Source
	// Webhook lets an HTTP POST to the bridge's webhook handler, with the
	// task's webhook token, perform the step (a client step or an event):
	// a CI system or a chat button can then answer for the client.
	Webhook bool
	// Payload is the JSON Schema an event's payload must match (Event);
	// nil accepts any JSON object.
	Payload any
}

// StepKind says what a step does.
type StepKind string

// The step kinds.
const (
	// KindTool calls a tool: the server does (Server) or the client does
	// (Client).
	KindTool StepKind = "tool"
	// KindGroup runs its Members together (Parallel).
	KindGroup StepKind = "group"
	// KindSleep waits, durably, for a time (Sleep, SleepFor, SleepUntil):
	// the engine's scheduler ends it on any replica, after a restart too,
	// never restarting the wait from zero.
	KindSleep StepKind = "sleep"
	// KindEvent waits for a named event that an outsider delivers: the
	// client with tasks/update (extension dialect), or anyone holding the
	// task's webhook token with an HTTP POST (Event).
	KindEvent StepKind = "event"
)

// Parallel returns a group of steps that start together: the server runs
// its server steps concurrently, and the client may perform its client
// steps in any order. The group ends when every member has ended; see
// Step.FailFast for how it fails. Members may not read each other's
// outputs, nor be groups.
func Parallel(name string, members ...*Step) *Step {
	return &Step{Name: name, Kind: KindGroup, Members: members, Args: map[string]Source{}}
}

// Sleep returns a step that waits d, durably (see KindSleep).
func Sleep(name string, d time.Duration) *Step {
	return &Step{Name: name, Kind: KindSleep, Duration: d, Args: map[string]Source{}}
}

// SleepFor returns a step that waits as long as src says: a number of
// seconds, or a Go duration string ("90s", "1h30m"; a prompt argument
// "30" is seconds).
func SleepFor(name string, src Source) *Step {
	return &Step{Name: name, Kind: KindSleep, For: &src, Args: map[string]Source{}}
}

// SleepUntil returns a step that waits until the time src says: an RFC 3339
// time, or Unix seconds.
func SleepUntil(name string, src Source) *Step {
	return &Step{Name: name, Kind: KindSleep, Until: &src, Args: map[string]Source{}}
}

// Event returns a step that waits for the event of its name, delivered by
// the client (tasks/update, extension dialect) or by an HTTP webhook with
// the task's token; the event's payload (a JSON object) is the step's
// output. description tells whoever delivers it what it is.
func Event(name, description string) *Step {
	return &Step{Name: name, Kind: KindEvent, Guidance: description, Webhook: true, Execution: ClientDeferred, Args: map[string]Source{}}
}

// When makes the step run only if c holds when it is reached (see
// Step.Condition).
func (s *Step) When(c Condition) *Step { s.Condition = &c; return s }

// Unless makes the step run only if c does not hold.
func (s *Step) Unless(c Condition) *Step { return s.When(Not(c)) }

// StopOnFailure makes a group fail fast (see Step.FailFast).
func (s *Step) StopOnFailure() *Step { s.FailFast = true; return s }

// AcceptsWebhook lets an HTTP POST with the task's webhook token perform
// the step (see Step.Webhook).
func (s *Step) AcceptsWebhook() *Step { s.Webhook = true; return s }

// WithPayload sets the JSON Schema an event's payload must match.
func (s *Step) WithPayload(schema any) *Step { s.Payload = schema; return s }

// kind returns the step's kind, defaulted.
func (s *Step) kind() StepKind {
	switch {
	case s.Kind != "":
		return s.Kind
	case len(s.Members) > 0:
		return KindGroup
	}
	return KindTool
}

// TimeoutPolicy says what happens when the client does not perform a step
// within the step's ClientWait.
type TimeoutPolicy string

// The timeout policies.
const (
	// TimeoutFail ends the workflow task failed, naming the step and the
	// wait.
	TimeoutFail TimeoutPolicy = "fail_workflow"
	// TimeoutSkip records the step skipped (with the reason) and goes on;
	// steps that need its output are skipped too.
	TimeoutSkip TimeoutPolicy = "skip"
	// TimeoutServer hands the step back to the server, which performs it
	// itself: a server step handed to the client is tried again; a client
	// step's tool is called with the defaults of its FromClient arguments
	// (every FromClient argument of such a step needs one).
	TimeoutServer TimeoutPolicy = "server"
)

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

// WaitsAtMost bounds how long the workflow waits for the client to
// perform the step (see Step.ClientWait) and says what happens then.
func (s *Step) WaitsAtMost(d time.Duration, then TimeoutPolicy) *Step {
	s.ClientWait, s.OnClientTimeout = d, then
	return s
}

func (s *Step) timeoutPolicy() TimeoutPolicy {
	if s.OnClientTimeout == "" {
		return TimeoutFail
	}
	return s.OnClientTimeout
}

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
	switch {
	case s.kind() == KindEvent:
		return ClientDeferred
	case s.kind() == KindSleep, s.kind() == KindGroup:
		return ServerExecutable
	case s.Execution == "":
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

// Definition is a workflow: a name, a description, declared prompt
// arguments and ordered steps, registered as a prompt (and optionally as a
// tool) and run by a Bridge as a durable task, or plainly by RegisterPlain.
type Definition struct {
	Name        string
	Description string
	// Goal is what the workflow achieves, shown to the client; it defaults
	// to Description.
	Goal string
	// Version names this definition among the versions of the workflow a
	// server may serve at once. A task records the version it started with
	// and runs to its end on it. Empty means the version is derived from
	// the steps (see VersionOf): any change to a step's name, kind, tool,
	// execution or bindings makes a new version.
	Version string
	// TTL is how long a task of this workflow may rest between two steps
	// before it expires (see Bridge for the exact rule); zero means the
	// bridge's default. Registration refuses a TTL above the engine's
	// MaxTTL.
	TTL time.Duration
	// Tool also registers the workflow as a tool of the same name, whose
	// arguments are the prompt arguments and whose result is the handoff,
	// so that a model (which cannot pick prompts) can start it.
	Tool      bool
	Arguments []Argument
	Steps     []*Step
}

// SequentialWorkflow is the former name of Definition.
//
// Deprecated: use Definition.
type SequentialWorkflow = Definition

// New returns an empty workflow to fill with Arg and Step.
func New(name, description string) *Definition {
	return &Definition{Name: name, Description: description}
}

// Arg declares a prompt argument.
func (w *Definition) Arg(name, description string, required bool) *Definition {
	w.Arguments = append(w.Arguments, Argument{Name: name, Description: description, Required: required})
	return w
}

// Step appends steps.
func (w *Definition) Step(steps ...*Step) *Definition {
	w.Steps = append(w.Steps, steps...)
	return w
}

// WithGoal sets the goal.
func (w *Definition) WithGoal(goal string) *Definition { w.Goal = goal; return w }

// WithVersion declares the definition's version (see Definition.Version).
func (w *Definition) WithVersion(v string) *Definition { w.Version = v; return w }

// WithTTL sets how long a task of the workflow may rest between steps
// (see Definition.TTL).
func (w *Definition) WithTTL(d time.Duration) *Definition { w.TTL = d; return w }

// AsTool also registers the workflow as a tool (see Definition.Tool).
func (w *Definition) AsTool() *Definition { w.Tool = true; return w }

func (w *Definition) goal() string {
	if w.Goal != "" {
		return w.Goal
	}
	return w.Description
}

// Prompt returns the MCP prompt that advertises the workflow.
func (w *Definition) Prompt() *mcp.Prompt {
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
