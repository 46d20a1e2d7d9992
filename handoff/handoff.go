package handoff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// SchemaVersion is the version of the document format this package
// writes. [Parse] and [Document.Validate] also accept the older versions:
// 1 (before workflow versions, skipped steps, retry times, client
// deadlines and the _task_id argument), 2 (before step kinds, groups,
// conditions, sleeps, events and webhooks) and 3 (before each remaining
// step's do sentence, and kinds beyond sleep and event); any other
// version is rejected.
const SchemaVersion = 4

// MinSchemaVersion is the oldest document version this package reads.
const MinSchemaVersion = 1

// MaxSize is the largest input, in bytes, that [Parse] and
// [FromPromptResult] accept.
const MaxSize = 8 << 20

// Sentinel errors. Every error returned by this package's parsing and
// validation functions wraps exactly one of them; test with errors.Is.
var (
	// ErrNoHandoff means the input holds no handoff at all: no ```json
	// block in the text, or no _meta entry and no assistant text message.
	ErrNoHandoff = errors.New("handoff: no handoff document")
	// ErrInvalid means a handoff is present but unusable: an unterminated
	// fence, malformed JSON, an oversized input or a document that fails
	// [Document.Validate].
	ErrInvalid = errors.New("handoff: invalid handoff document")
)

// handoffError is an error whose message is "handoff: " + msg and which
// wraps one of the sentinels.
type handoffError struct {
	sentinel error
	msg      string
}

func (e *handoffError) Error() string { return "handoff: " + e.msg }
func (e *handoffError) Unwrap() error { return e.sentinel }

func invalidf(format string, args ...any) error {
	return &handoffError{sentinel: ErrInvalid, msg: fmt.Sprintf(format, args...)}
}

func noHandofff(format string, args ...any) error {
	return &handoffError{sentinel: ErrNoHandoff, msg: fmt.Sprintf(format, args...)}
}

// withContext prefixes the message of a package error with where (e.g.
// `_meta["taskbridge/handoff"]: `), keeping its sentinel.
func withContext(err error, where string) error {
	var he *handoffError
	if errors.As(err, &he) {
		return &handoffError{sentinel: he.sentinel, msg: where + he.msg}
	}
	return err
}

// Document is a handoff: the state of a workflow task and what the client
// must do next. Its JSON form is described by [Schema].
type Document struct {
	// SchemaVersion is the format version: [SchemaVersion] in documents
	// this package writes; [MinSchemaVersion] and up are read.
	SchemaVersion int `json:"schemaVersion" jsonschema_description:"Version of the handoff format: 4 (this schema; 3 is the form without each remaining step's do and with only the kinds sleep and event; 2 the form without step kinds, groups, conditions, sleeps, events and webhooks; 1 the older form without version, skippedSteps, retryAt, deadline and the _task_id argument)."`
	// TaskID is the id of the task the workflow runs as.
	TaskID string `json:"taskId" jsonschema:"minLength=1" jsonschema_description:"Id of the task the workflow runs as. Put it in _meta._task_id of continuation tool calls and in the taskId parameter of tasks/get and tasks/result."`
	// Workflow is the name of the workflow prompt.
	Workflow string `json:"workflow" jsonschema:"minLength=1" jsonschema_description:"Name of the workflow prompt."`
	// Version is the workflow version the task runs on.
	Version string `json:"version,omitempty" jsonschema_description:"The workflow version the task runs on (a task runs to its end on the version it started with)."`
	// Goal optionally says what the workflow is for.
	Goal string `json:"goal,omitempty" jsonschema_description:"What the workflow is meant to achieve."`
	// Status is the MCP task status: working, input_required, completed,
	// failed or cancelled.
	Status string `json:"status" jsonschema:"enum=working,enum=input_required,enum=completed,enum=failed,enum=cancelled" jsonschema_description:"The MCP task status when the handoff was written."`
	// PauseReason says why the server stopped, e.g.
	// `step "review" must be performed by the client` or
	// `step "fetch" failed: connection refused`.
	PauseReason string `json:"pauseReason,omitempty" jsonschema_description:"Why the server stopped running steps."`
	// CompletedSteps are the steps already performed, in order. Encoded as
	// [] when empty, never null.
	CompletedSteps []CompletedStep `json:"completedSteps" jsonschema_description:"Steps already performed, in order, with their results."`
	// RemainingSteps are the steps still to perform, in order. Encoded as
	// [] when empty, never null.
	RemainingSteps []RemainingStep `json:"remainingSteps" jsonschema_description:"Steps still to perform, in order. Empty when the workflow is complete."`
	// SkippedSteps are the steps that will not run, with the reason.
	SkippedSteps []SkippedStep `json:"skippedSteps,omitempty" jsonschema_description:"Steps that will not run, with the reason."`
	// Errors lists step failures.
	Errors []StepError `json:"errors,omitempty" jsonschema_description:"Step failures, if any."`
	// Undo lists, for a workflow that failed after steps with an undo
	// completed, the undo steps the server runs (or ran), last completed
	// step first: what was taken back, and what could not be.
	Undo []UndoStep `json:"undo,omitempty" jsonschema_description:"For a workflow that failed after steps with an undo step completed: the undo steps the server runs, in order (the last completed step first), and how each ended."`
	// Continuation says how the client continues the task.
	Continuation Continuation `json:"continuation" jsonschema_description:"How the client continues the task."`
	// Paused, when set, says the workflow is paused: no step starts until
	// it is resumed (its status stays working).
	Paused *Paused `json:"paused,omitempty" jsonschema_description:"Set while the workflow is paused: no step starts, and nothing is to be called for it, until it is resumed (the task's status stays working)."`
}

// Paused says who paused a workflow, when, why, and how it goes on.
type Paused struct {
	// By names who paused it ("the server" when a failure did).
	By string `json:"by" jsonschema_description:"Who paused the workflow (the server, when a step's failure paused it)."`
	// At is when.
	At time.Time `json:"at" jsonschema_description:"When the workflow was paused."`
	// Reason says why.
	Reason string `json:"reason,omitempty" jsonschema_description:"Why the workflow was paused."`
	// Step is the step whose failure paused it, when one did.
	Step string `json:"step,omitempty" jsonschema_description:"The step whose failure paused the workflow; it runs again on resume."`
	// Do says how the workflow goes on, in a sentence for a model.
	Do string `json:"do,omitempty" jsonschema_description:"How the workflow goes on, in a sentence for a model."`
}

// Queued says why a step waits for a place on its queue.
type Queued struct {
	// Queue names the queue.
	Queue string `json:"queue" jsonschema:"minLength=1" jsonschema_description:"The queue the step waits on."`
	// Key is the step's concurrency key.
	Key string `json:"key,omitempty" jsonschema_description:"The step's concurrency key on the queue."`
	// Ahead counts the runs that go before it.
	Ahead int `json:"ahead,omitempty" jsonschema_description:"How many runs go before it."`
	// Why says why it waits.
	Why string `json:"why,omitempty" jsonschema_description:"Why it waits, in words."`
	// Since is when it joined the queue.
	Since time.Time `json:"since" jsonschema_description:"When it joined the queue."`
}

// UndoStep is one undo step of a workflow being undone.
type UndoStep struct {
	// Undoes names the step (or record, "deploy[1]") it takes back.
	Undoes string `json:"undoes" jsonschema:"minLength=1" jsonschema_description:"The step (or a container's record, such as deploy[1]) it takes back."`
	// Tool is the undo step's tool.
	Tool string `json:"tool" jsonschema:"minLength=1" jsonschema_description:"The undo step's tool."`
	// Status is pending, running, completed or failed (the server gave up
	// on it: what it undoes must be taken back by hand).
	Status mcptask.StepStatus `json:"status" jsonschema:"enum=pending,enum=running,enum=completed,enum=failed" jsonschema_description:"pending, running, completed, or failed (the server gave up: take it back by hand)."`
	// Error is the undo's last error, if any.
	Error string `json:"error,omitempty" jsonschema_description:"The undo step's last error."`
}

// CompletedStep is a step that has been performed.
type CompletedStep struct {
	// Name is the step's name, unique within the document.
	Name string `json:"name" jsonschema:"minLength=1" jsonschema_description:"Name of the step, unique within the document."`
	// Tool is the tool the step called; empty for a sleep or an event.
	Tool string `json:"tool" jsonschema_description:"Tool the step called; empty for a sleep or an event (see kind)."`
	// Kind is what the step did when it was not a tool call (sleep,
	// event).
	Kind string `json:"kind,omitempty" jsonschema:"pattern=^[a-z][a-z_]*$" jsonschema_description:"What the step did when it was not a tool call: sleep, event, or another kind's name."`
	// Result is the step's output as JSON (often a CallToolResult), if
	// recorded.
	Result json.RawMessage `json:"result,omitempty" jsonschema_description:"Output of the step as JSON, often a CallToolResult."`
	// By says who performed the step: server, client or webhook.
	By string `json:"by,omitempty" jsonschema:"enum=server,enum=client,enum=webhook" jsonschema_description:"Who performed the step: the server, the client, or an outside system through the webhook."`
	// Attempts counts the step's runs, when more than one was needed.
	Attempts int `json:"attempts,omitempty" jsonschema_description:"How many runs the step took (present when more than one)."`
}

// SkippedStep is a step that will not run.
type SkippedStep struct {
	// Name is the step's name, unique within the document.
	Name string `json:"name" jsonschema:"minLength=1" jsonschema_description:"Name of the step, unique within the document."`
	// Tool is the tool the step would have called; empty for a sleep or
	// an event.
	Tool string `json:"tool" jsonschema_description:"Tool the step would have called; empty for a sleep or an event (see kind)."`
	// Kind is what the step would have done when it is not a tool call
	// (sleep, event).
	Kind string `json:"kind,omitempty" jsonschema:"pattern=^[a-z][a-z_]*$" jsonschema_description:"What the step would have done when it is not a tool call: sleep, event, or another kind's name."`
	// Reason says why it does not run.
	Reason string `json:"reason,omitempty" jsonschema_description:"Why the step does not run."`
}

// RemainingStep is a step still to be performed.
type RemainingStep struct {
	// Name is the step's name, unique within the document.
	Name string `json:"name" jsonschema:"minLength=1" jsonschema_description:"Name of the step, unique within the document."`
	// Tool is the tool to call; empty for a sleep or an event.
	Tool string `json:"tool" jsonschema_description:"Tool to call; empty for a sleep or an event (see kind)."`
	// Execution says who performs the step.
	Execution mcptask.Execution `json:"execution" jsonschema:"enum=server,enum=client" jsonschema_description:"Who performs the step: client means the client must call the tool itself; server means the server runs it automatically once its inputs exist."`
	// Arguments are the tool arguments: resolved JSON values where known,
	// otherwise placeholders (see [Placeholder]). Encoded as {} when empty,
	// never null.
	Arguments map[string]json.RawMessage `json:"arguments" jsonschema_description:"Tool arguments: resolved JSON values where known, otherwise a placeholder string of the form <description> that the client must replace."`
	// Guidance tells the client (or its LLM) how to perform the step.
	Guidance string `json:"guidance,omitempty" jsonschema_description:"How to perform the step."`
	// DependsOn names earlier steps whose output the step needs.
	DependsOn []string `json:"dependsOn,omitempty" jsonschema_description:"Names of earlier steps whose output this step needs."`
	// Status is where the step stands: pending, running, awaiting_client,
	// awaiting_event, sleeping, awaiting_child or failed.
	Status mcptask.StepStatus `json:"status,omitempty" jsonschema:"enum=pending,enum=running,enum=awaiting_client,enum=awaiting_event,enum=sleeping,enum=awaiting_child,enum=failed,enum=cancelled" jsonschema_description:"Where the step stands (in a workflow that ended: failed where it failed, cancelled where the end cut it short, pending if it never started)."`
	// HandedToClient marks a server step the server gave up on: Execution
	// is then client, and the client may perform it.
	HandedToClient bool `json:"handedToClient,omitempty" jsonschema_description:"The server could not perform this server step and hands it to the client, which may call its tool itself (correcting the arguments if they caused the error) or resume the workflow to have the server retry it."`
	// Error is the step's last failure.
	Error string `json:"error,omitempty" jsonschema_description:"The step's last failure."`
	// Attempts counts the step's runs so far.
	Attempts int `json:"attempts,omitempty" jsonschema_description:"How many times the step ran so far."`
	// RetryAt is when the server runs a failed step again.
	RetryAt *time.Time `json:"retryAt,omitempty" jsonschema_description:"When the server runs this failed step again."`
	// Deadline is when the wait for the client on this step ends.
	Deadline *time.Time `json:"deadline,omitempty" jsonschema_description:"When the workflow stops waiting for the client to perform this step (what happens then is the workflow's choice: it fails, skips the step, or the server performs it)."`
	// Kind is what the step does when it is not a tool call: sleep (the
	// server waits until Until) or event (the step waits for its event).
	Kind string `json:"kind,omitempty" jsonschema:"pattern=^[a-z][a-z_]*$" jsonschema_description:"What the step does when it is not a tool call: sleep (a durable wait, ending at until), event (it waits for an event someone delivers), or another kind's name (see do)."`
	// Group names the parallel group the step belongs to: its steps run
	// together.
	Group string `json:"group,omitempty" jsonschema_description:"The parallel group the step belongs to: the group's steps run together (the client may perform its client steps in any order)."`
	// Condition says when the step runs; it is skipped otherwise.
	Condition string `json:"condition,omitempty" jsonschema_description:"The step runs only if this holds when it is reached; it is skipped otherwise."`
	// Until is when a sleep ends.
	Until *time.Time `json:"until,omitempty" jsonschema_description:"When the sleep ends."`
	// Webhook is how an outside system performs the step (delivers the
	// event, or calls the client step's tool): an HTTP POST.
	Webhook *Webhook `json:"webhook,omitempty" jsonschema_description:"How an outside system (a CI job, a chat button) performs the step: POST the event's payload, or the tool's arguments, as a JSON object to url with the header Authorization: Bearer token."`
	// Payload is the JSON Schema of an event's payload.
	Payload json.RawMessage `json:"payload,omitempty" jsonschema_description:"The JSON Schema of an event's payload."`
	// Do says, in a sentence for a model, what to do about the step (or
	// that there is nothing to do): written by the server for the step's
	// kind and state.
	Do string `json:"do,omitempty" jsonschema_description:"What to do about this step now, or that there is nothing to do, in a sentence for a model."`
	// Queue, when set, says the step waits for a place on its queue (its
	// status is pending).
	Queue *Queued `json:"queue,omitempty" jsonschema_description:"Set while the step waits for a place on its queue: the server runs it once it has one."`
	// Call is how the client performs the step now, when it may: the tool
	// to call, the arguments the server resolved, and the ones the client
	// fills in. Absent when the client has nothing to do for the step now.
	Call *Call `json:"call,omitempty" jsonschema_description:"How the client performs this step now (absent when it has nothing to do for it): call tool with arguments, adding the values listed in fill."`
}

// Call is a tool call that performs a step: what a model (or a program)
// sends to do it.
type Call struct {
	// Tool is the tool to call.
	Tool string `json:"tool" jsonschema:"minLength=1" jsonschema_description:"The tool to call."`
	// Arguments are the values the client sends as they are, the task id
	// (_task_id) among them.
	Arguments map[string]json.RawMessage `json:"arguments" jsonschema_description:"Argument values to send as they are (the task id among them)."`
	// Server are the values the server resolved and adds itself when the
	// call leaves them out (a value the call sends wins).
	Server map[string]json.RawMessage `json:"server,omitempty" jsonschema_description:"Argument values the server adds itself when the call leaves them out; send one only to change it."`
	// Fill lists the arguments the client supplies, with their types.
	Fill []Fill `json:"fill,omitempty" jsonschema_description:"Arguments the client supplies, each with its type; none of them is in arguments."`
	// Fix, when set, says the step failed with these arguments: the
	// client corrects the one that caused the error (Arguments holds them
	// all).
	Fix string `json:"fix,omitempty" jsonschema_description:"When set, the error the step failed with: correct the argument that caused it before calling (arguments holds them all)."`
	// Person, when set, says the call records a person's decision: a model
	// asks the user and sends their answer.
	Person bool `json:"person,omitempty" jsonschema_description:"The call records a person's decision: ask the user, then send their answer."`
}

// Fill is an argument the client supplies.
type Fill struct {
	// Name is the argument's name (a payload field for an event: see
	// Under).
	Name string `json:"name" jsonschema:"minLength=1" jsonschema_description:"The argument's name."`
	// Under, when set, names the object argument this one is a field of
	// (an event's payload).
	Under string `json:"under,omitempty" jsonschema_description:"When set, the argument is a field of this object argument."`
	// Type is its JSON type: string, integer, number, boolean, object,
	// array (empty when unknown).
	Type string `json:"type,omitempty" jsonschema_description:"Its JSON type: string, integer, number, boolean, object or array."`
	// Enum lists the values it may take, when it is one of a few.
	Enum []json.RawMessage `json:"enum,omitempty" jsonschema_description:"The values it may take."`
	// Description says what to put there.
	Description string `json:"description,omitempty" jsonschema_description:"What to put there."`
	// Optional marks an argument the client may leave out.
	Optional bool `json:"optional,omitempty" jsonschema_description:"It may be left out."`
}

// Webhook is where and with what token an outside system performs a step.
type Webhook struct {
	URL   string `json:"url" jsonschema_description:"Where to POST."`
	Token string `json:"token" jsonschema_description:"Send it as Authorization: Bearer <token>."`
}

// StepError is a step failure.
type StepError struct {
	// Step is the name of the step that failed.
	Step string `json:"step" jsonschema:"minLength=1" jsonschema_description:"Name of the step that failed."`
	// Tool is the tool the step called, if known.
	Tool string `json:"tool,omitempty" jsonschema_description:"Tool the step called."`
	// Message describes the failure.
	Message string `json:"message" jsonschema:"minLength=1" jsonschema_description:"What went wrong."`
	// Retryable reports whether performing the step again may succeed.
	Retryable bool `json:"retryable,omitempty" jsonschema_description:"Whether performing the step again may succeed."`
}

// Placeholder returns the JSON string "<description>", the value of an
// argument the client must supply.
func Placeholder(description string) json.RawMessage {
	return json.RawMessage(jsonString("<" + description + ">"))
}

// IsPlaceholder reports whether v is a placeholder: a JSON string that
// starts with "<" and ends with ">".
func IsPlaceholder(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	if len(v) < 2 || v[0] != '"' {
		return false
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return false
	}
	return len(s) >= 2 && strings.HasPrefix(s, "<") && strings.HasSuffix(s, ">")
}

// AsCall returns step s as the call that performs it, for a step without
// a tool of its own (an event, a question, a text to write, whose Call
// names the event tool): Tool is the call's tool, Arguments the call's
// arguments plus, for each value the client fills in (Call.Fill), a
// placeholder "<description>" under the value's name. Fill the
// placeholders, then Call.Nest the values. A step with a tool of its own
// is returned as it is.
func (s RemainingStep) AsCall() RemainingStep {
	c := s.Call
	if s.Tool != "" || c == nil {
		return s
	}
	s.Tool = c.Tool
	s.Arguments = make(map[string]json.RawMessage, len(c.Arguments)+len(c.Fill))
	for k, v := range c.Arguments {
		s.Arguments[k] = v
	}
	for _, f := range c.Fill {
		desc := f.Description
		if desc == "" {
			desc = f.Name
		}
		s.Arguments[f.Name], _ = json.Marshal("<" + desc + ">")
	}
	return s
}

// Nest moves each value of args that the call lists under an object
// argument (Fill.Under: an event's payload) into that argument, and
// returns args.
func (c *Call) Nest(args map[string]any) map[string]any {
	if args == nil || c == nil {
		return args
	}
	for _, f := range c.Fill {
		v, ok := args[f.Name]
		if f.Under == "" || !ok {
			continue
		}
		obj, _ := args[f.Under].(map[string]any)
		if obj == nil {
			obj = map[string]any{}
			if raw, ok := c.Arguments[f.Under]; ok {
				_ = json.Unmarshal(raw, &obj)
			}
		}
		obj[f.Name] = v
		args[f.Under] = obj
		delete(args, f.Name)
	}
	return args
}

// ClientSteps returns the remaining steps the client may perform now
// (Execution [mcptask.ExecClient], and not pending behind an earlier step), in
// order.
func (d *Document) ClientSteps() []RemainingStep {
	if d == nil {
		return nil
	}
	var out []RemainingStep
	for _, s := range d.RemainingSteps {
		if s.Execution == mcptask.ExecClient && s.Status != mcptask.StepPending {
			out = append(out, s)
		}
	}
	return out
}

// Message returns the handoff as the final assistant message of a prompt
// result: role "assistant" with the text [Render] produces.
func (d *Document) Message() (*mcp.PromptMessage, error) {
	text, err := Render(d)
	if err != nil {
		return nil, err
	}
	return &mcp.PromptMessage{Role: "assistant", Content: &mcp.TextContent{Text: text}}, nil
}

// Meta returns {[mcptask.MetaHandoff]: d}, to merge into GetPromptResult.Meta. The map
// holds d itself, so later changes to d show through until it is encoded.
func (d *Document) Meta() map[string]any {
	return map[string]any{mcptask.MetaHandoff: d}
}

// docFields has Document's fields without its MarshalJSON method.
type docFields Document

// MarshalJSON encodes d with completedSteps and remainingSteps as [] (not
// null) when empty, and without escaping <, > and & (so placeholders stay
// readable).
func (d Document) MarshalJSON() ([]byte, error) {
	w := docFields(d)
	if w.CompletedSteps == nil {
		w.CompletedSteps = []CompletedStep{}
	}
	if w.RemainingSteps == nil {
		w.RemainingSteps = []RemainingStep{}
	}
	return marshalNoEscape(w)
}

// stepFields has RemainingStep's fields without its MarshalJSON method.
type stepFields RemainingStep

// MarshalJSON encodes s with arguments as {} (not null) when empty, and
// without escaping <, > and &.
func (s RemainingStep) MarshalJSON() ([]byte, error) {
	w := stepFields(s)
	if w.Arguments == nil {
		w.Arguments = map[string]json.RawMessage{}
	}
	return marshalNoEscape(w)
}

// marshalNoEscape is json.Marshal without HTML escaping.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// jsonString returns s as a JSON string literal, without HTML escaping.
func jsonString(s string) string {
	b, err := marshalNoEscape(s)
	if err != nil { // cannot happen for a string
		return `""`
	}
	return string(b)
}
