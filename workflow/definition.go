package workflow

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Definition is a workflow: a name, a description, declared arguments and
// ordered steps, registered as a prompt (and optionally as a tool) and run
// by a Bridge as a durable task, or plainly by RegisterPlain.
type Definition struct {
	Name        string
	Description string
	// Goal is what the workflow achieves, shown to the client; it defaults
	// to Description.
	Goal string
	// Version names this definition among the versions of the workflow a
	// server may serve at once. A task records the version it started with
	// (and the fingerprint of the definition it started on) and runs to its
	// end on it. Empty means the version is derived from the steps (see
	// VersionOf): any change to what the fingerprint covers makes a new
	// version. A declared version whose definition changed under it is not
	// the version a task recorded: see "Changing a workflow" in the README.
	Version string
	// TTL is how long a task of this workflow may rest between two steps
	// before it expires (see the time rules, docs/TIME.md); zero means the
	// bridge's default. Registration refuses a TTL above the engine's
	// MaxTTL.
	TTL time.Duration
	// Deadline, when positive, bounds a task's whole life: when it has run
	// this long it fails (naming the deadline), whatever it was doing.
	Deadline time.Duration
	// UndoOnCancel makes a cancelled task of the workflow undo what it did
	// (the undo steps of its completed steps, as a failure does): a new
	// task, labelled LabelUndoOf, runs them, since a cancelled task takes
	// no more writes.
	UndoOnCancel bool
	// Tool also registers the workflow as a tool of the same name, whose
	// arguments are the workflow's arguments and whose result is the
	// handoff, so that a model (which cannot pick prompts) can start it.
	Tool      bool
	Arguments []Argument
	Steps     []*Step
	// PauseOnFailure pauses a task instead of failing it when the server
	// gives up on a step whose failure would fail the workflow: an
	// operator fixes the cause and resumes it (the step runs again).
	PauseOnFailure bool

	queue *placement // the queue its tasks take a place on (OnQueue, queue.go)
}

// New returns an empty workflow to fill with Arg and Step.
func New(name, description string) *Definition {
	return &Definition{Name: name, Description: description}
}

// Arg declares a string argument.
func (w *Definition) Arg(name, description string, required bool) *Definition {
	return w.ArgOf(Argument{Name: name, Description: description, Required: required})
}

// TypedArg declares an argument of type t (see ArgType): its value is
// checked when a task starts (prompts/get, the workflow's tool, a fork),
// before anything runs, and the workflow's tool advertises the type.
func (w *Definition) TypedArg(name, description string, required bool, t ArgType) *Definition {
	return w.ArgOf(Argument{Name: name, Description: description, Required: required, Type: t})
}

// EnumArg declares an argument that takes one of values.
func (w *Definition) EnumArg(name, description string, required bool, values ...string) *Definition {
	return w.ArgOf(Argument{Name: name, Description: description, Required: required, Type: ArgEnum, Enum: values})
}

// ArgOf declares argument a.
func (w *Definition) ArgOf(a Argument) *Definition {
	w.Arguments = append(w.Arguments, a)
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

// WithUndoOnCancel makes a cancelled task undo what it did (see
// Definition.UndoOnCancel).
func (w *Definition) WithUndoOnCancel() *Definition { w.UndoOnCancel = true; return w }

// WithDeadline bounds a task's whole life (see Definition.Deadline).
func (w *Definition) WithDeadline(d time.Duration) *Definition { w.Deadline = d; return w }

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
		p.Arguments = append(p.Arguments, &mcp.PromptArgument{Name: a.Name, Description: w.argHint(a), Required: a.Required})
	}
	return p
}

// flat returns w's steps with every container replaced by its members:
// the steps that have a progress record, in order.
func (w *Definition) flat() []*Step {
	var out []*Step
	for _, s := range w.Steps {
		if s != nil && s.kind != nil && len(s.kind.members()) > 0 {
			out = append(out, s.kind.members()...)
			continue
		}
		out = append(out, s)
	}
	return out
}

// all is flat with the bodies of containers (a for-each's, a loop's),
// nested: every step with rules of its own.
func (w *Definition) all() []*Step {
	var out []*Step
	var add func(s *Step)
	add = func(s *Step) {
		out = append(out, s)
		if s != nil && s.kind != nil && s.kind.body() != nil {
			add(s.kind.body())
		}
	}
	for _, s := range w.flat() {
		add(s)
	}
	return out
}

// producer returns the step whose output binding is binding (a member of
// a container too), or nil.
func (w *Definition) producer(binding string) *Step {
	for _, s := range w.flat() {
		if s != nil && s.binding() == binding {
			return s
		}
	}
	return nil
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
	props    map[string]json.RawMessage
	required []string
	closed   bool // additionalProperties is false
}

func (s toolSchema) has(name string) bool { _, ok := s.props[name]; return ok }

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
	s := toolSchema{props: raw.Properties, required: raw.Required}
	if s.props == nil {
		s.props = map[string]json.RawMessage{}
	}
	s.closed = strings.TrimSpace(string(raw.AdditionalProperties)) == "false"
	return s
}
