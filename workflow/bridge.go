package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/internal/testhooks"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Labels the bridge keeps on workflow tasks.
const (
	// LabelWorkflow is the task label holding the workflow name.
	LabelWorkflow = "workflow"
	// LabelVersion holds the workflow version the task runs on.
	LabelVersion = "workflow.version"
	// LabelFingerprint holds the fingerprint of the definition the task
	// started on (see VersionOf): a definition changed under a declared
	// version is not the one the task runs on.
	LabelFingerprint = "workflow.fingerprint"
	// LabelTouched is set on a workflow task once a client holds its id:
	// the prompt (or tool) that created it returned its handoff, or a
	// client named it in a request (tasks/*, a continuation, a resume).
	// Until then the task is a possible orphan (see Options.OrphanTimeout).
	LabelTouched = "touched"
	// LabelDeadline says which rule set the task's current expiry:
	// DeadlineIdle or DeadlineOrphan.
	LabelDeadline = "deadline"
	// DeadlineIdle: the task expires when it has rested for its ttl (every
	// recorded step moves the deadline to now + ttl).
	DeadlineIdle = "idle"
	// DeadlineOrphan: no client holds the task's id yet and it waits for
	// one; it expires after the orphan timeout.
	DeadlineOrphan = "orphan"
)

// Defaults of Options.
const (
	// DefaultOrphanTimeout is the default Options.OrphanTimeout.
	DefaultOrphanTimeout = 10 * time.Minute
	// DefaultPromptWait is the default Options.PromptWait.
	DefaultPromptWait = 3 * time.Second
	// DefaultVersionGrace is the default Options.VersionGrace: longer
	// than a rolling deploy's overlap and a restart, shorter than the
	// default ttl, so that a task whose version is gone fails saying so.
	DefaultVersionGrace = 10 * time.Minute
)

// Options configure a Bridge. The zero value is valid; zero fields mean
// the defaults.
type Options struct {
	// TTL is the ttl of new workflow tasks whose definition sets none: how
	// long a task may rest between two recorded steps before it expires.
	// The task's deadline starts at creation + TTL and every write that
	// records progress moves it to now + TTL when that is later, so a
	// workflow that keeps making progress never expires, and one waiting
	// for a human waits TTL after its last step. Zero means the engine's
	// default ttl. It must not exceed the engine's MaxTTL (nor may a
	// definition's TTL): registration refuses it rather than cut it.
	TTL time.Duration
	// OrphanTimeout bounds how long a workflow task waits for a client when
	// no client holds its id: its creating prompts/get (or workflow tool
	// call) did not return the handoff (the caller gave up, or the process
	// died first) and no client has named it since. Past it the task
	// expires as failed, with a reason. A delivered handoff is never
	// orphaned. Zero means DefaultOrphanTimeout; negative disables it.
	OrphanTimeout time.Duration
	// PromptWait bounds how long prompts/get, a workflow tool call, a
	// resume and a continuation wait for the server steps they set off
	// before they answer: with the handoff of a workflow that rests (it
	// waits for the client, or for a time after the bound), or with one
	// saying which steps still run (the steps go on, on the engine; the
	// client follows with tasks/get, task_result or a resume). Zero means
	// DefaultPromptWait; negative waits until the workflow rests, however
	// long its server steps take.
	PromptWait time.Duration
	// ProgressInterval, when positive, lets quick Retryable server steps
	// share progress writes: when a Retryable step succeeds within
	// ProgressInterval of the last write and only Retryable server steps
	// start next, its outcome is written with the next write instead of
	// one of its own. Every other moment is written at once. A crash
	// between writes runs the unwritten steps again, which Retryable
	// allows (with the same idempotency keys). Zero or negative writes
	// every step's outcome before the next step starts.
	ProgressInterval time.Duration
	// VersionGrace bounds how long a task whose workflow version no live
	// server process serves waits for one (see "Versions and deploys" in
	// docs/SEMANTICS.md). A process that does not serve a task's version
	// leaves the task to a live replica that does (the replicas' registry,
	// taskrouter.Placer); when none does, the task waits, saying so in its
	// status message, until a process that serves its version takes it up
	// or VersionGrace has passed since a process last served that
	// version, and then fails, saying why. Zero means DefaultVersionGrace;
	// negative fails such a task the first time a process meets it.
	VersionGrace time.Duration
	// Observer, when set, learns of every step attempt (metrics, traces).
	Observer StepObserver
	// ResultMeta, when set, adds _meta entries to every prompt result of a
	// workflow task (the handoff's message): a tracer puts the task's
	// traceparent there, so a client continues the trace on its
	// continuation calls.
	ResultMeta func(t *store.Task) map[string]any
	// EventTool names the tool a model delivers an event with (the bridge
	// registers it with the first workflow that has an event step): called
	// with the task id (_task_id), the event's name and its payload. Empty
	// means DefaultEventTool.
	EventTool string
	// ResultTool names the server's tool that waits for a task and returns
	// its state (taskrouter's built-in task_result), when it has one: the
	// handoff tells clients that cannot call tasks/get (a model) to use it.
	ResultTool string
	// ResumeTool names the server's tool that resumes a paused task
	// (taskrouter's built-in task_resume), when it has one: the handoff of
	// a paused workflow names it.
	ResumeTool string
	// WebhookURL is where the server mounts WebhookHandler, as outside
	// systems reach it (say "https://example.com/hooks"): the handoff then
	// gives each webhook step its URL and token. Empty leaves them out.
	WebhookURL string
	// MaxInterruptions bounds how many times in a row a step's attempt may
	// be cut short by its server process ending without handing it back
	// (a crash, a SIGKILL) before the server gives up on the step (as on
	// a failure: its FailurePolicy applies). A graceful stop (Close, a
	// SIGTERM that closes the server) hands running steps back and does
	// not count. Zero means DefaultMaxInterruptions; negative gives up at
	// the first crash.
	MaxInterruptions int
	// hooks are the test hooks, set by the module's tests through
	// internal/testhooks (testhooks.go).
	hooks testhooks.Workflow
}

// withDefaults fills zero fields and checks the others against engine e.
func (o Options) withDefaults(e TaskEngine) (Options, error) {
	var errs []error
	if o.TTL < 0 {
		errs = append(errs, fmt.Errorf("workflow: Options.TTL is negative (%s)", o.TTL))
	}
	if max := e.MaxTTL(); o.TTL > max {
		errs = append(errs, fmt.Errorf("workflow: Options.TTL %s is above the engine's MaxTTL %s: raise MaxTTL (TASKBRIDGE_MAX_TTL) or lower the ttl", o.TTL, max))
	}
	if o.VersionGrace == 0 {
		o.VersionGrace = DefaultVersionGrace
	}
	if o.OrphanTimeout == 0 {
		o.OrphanTimeout = DefaultOrphanTimeout
	}
	if o.PromptWait == 0 {
		o.PromptWait = DefaultPromptWait
	}
	if o.EventTool == "" {
		o.EventTool = DefaultEventTool
	}
	switch {
	case o.MaxInterruptions == 0:
		o.MaxInterruptions = DefaultMaxInterruptions
	case o.MaxInterruptions < 0:
		o.MaxInterruptions = 0
	}
	return o, errors.Join(errs...)
}

// Bridge connects task-aware workflow prompts to a task engine: it starts
// workflow tasks, runs their server steps on the engine, serves
// continuation calls (tools/call with _task_id) and resumptions
// (prompts/get with _task_id), recovers tasks after a restart or a
// takeover, and expires orphaned ones. See the package documentation.
type Bridge struct {
	engine TaskEngine
	opts   Options
	ctx    context.Context // ends at Close: the lifetime of all background work
	stop   context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	workflows map[string]*versions
	instances map[string]*instance
	closed    bool
	eventTool bool // the event tool is registered
	// queueLimits are the limits of the queues the registered workflows
	// use, by name (queue.go).
	queueLimits map[string]Queue
}

// NewBridge returns a bridge over engine; opts may be nil. It reports
// every invalid option by name.
func NewBridge(engine TaskEngine, opts *Options) (*Bridge, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o, err := o.withDefaults(engine)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Bridge{engine: engine, opts: o, ctx: ctx, stop: stop,
		workflows: map[string]*versions{}, instances: map[string]*instance{}}, nil
}

// Options returns the bridge's effective options (defaults filled in).
func (b *Bridge) Options() Options { return b.opts }

// Install serves continuation calls through the engine, publishes the
// progress and handoff schemas as resources, and registers the recovery,
// wake-up, expiry and touch hooks of workflow tasks. Call it once, after
// the task engine is installed on s.
func (b *Bridge) Install(s *mcp.Server) {
	b.engine.SetContinuation(b.continueCall)
	RegisterSchemaResources(s)
	b.engine.HandleKind(taskrouter.KindWorkflow, kindHooks{b})
	b.engine.HandleKind(KindLeg, legHooks{b})
}

// Close stops the server steps running for workflow tasks (they run again
// when a process picks the tasks up: a restart, another replica) and waits
// for the work to end. It does not close the engine.
func (b *Bridge) Close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.stop()
	b.wg.Wait()
}

// Register validates w against tools and adds it to s as a task-aware
// workflow prompt (and as a tool when w.Tool is set). Several versions of
// one workflow may be registered (see Definition.Version): new tasks start
// on the one registered last, and every task continues on its own.
// Registering a second definition under a version already registered is
// an error, as is a TTL above the engine's MaxTTL.
func (b *Bridge) Register(s *mcp.Server, w *Definition, tools ToolLookup) (*TaskPromptHandler, error) {
	served := func(name string) *Definition {
		if wf := b.newest(name); wf != nil {
			return wf.def
		}
		return nil
	}
	if err := w.validate(tools, served); err != nil {
		return nil, err
	}
	if max := b.engine.MaxTTL(); w.TTL > max {
		return nil, fmt.Errorf("workflow %q: TTL %s is above the engine's MaxTTL %s: raise MaxTTL (TASKBRIDGE_MAX_TTL) or lower the workflow's TTL", w.Name, w.TTL, max)
	}
	c := compile(w)
	for _, st := range c.steps {
		if tool := toolOf(st); tool != "" {
			if t, ok := tools(tool); ok {
				c.schemas[tool] = schemaOf(t)
			}
		}
	}
	b.mu.Lock()
	if err := b.checkQueues(w); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	v := b.workflows[w.Name]
	if v == nil {
		v = &versions{byVersion: map[string]*compiled{}}
		v.prompt = &TaskPromptHandler{bridge: b, name: w.Name}
	}
	if w.Tool && !v.tool {
		if _, taken := tools(w.Name); taken {
			b.mu.Unlock()
			return nil, fmt.Errorf("workflow %q: a tool of that name exists, so the workflow cannot also be served as a tool: rename one", w.Name)
		}
	}
	if err := v.add(c); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	addTool := w.Tool && !v.tool
	v.tool = v.tool || w.Tool
	b.workflows[w.Name] = v
	b.mu.Unlock()
	if addTool {
		s.AddTool(workflowTool(w), b.toolHandler(w.Name))
		// A client that takes tasks gets one for the call: a leg (leg.go).
		b.engine.SetToolOptions(w.Name, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional, Preflight: b.preflight(w.Name)})
	}
	for _, st := range w.flat() { // a container's members too
		st.kind.configure(&b.opts)
		for _, tool := range st.kind.tools(&b.opts) {
			if tool == b.opts.EventTool {
				b.addEventTool(s)
			}
			b.engine.AcceptTaskIDArgument(tool) // a step the client may be asked to perform
		}
	}
	s.AddPrompt(promptOf(w), v.prompt.Handle)
	return v.prompt, nil
}

// CanRun reports whether this bridge can run workflow task t: nil when it
// serves the version t started on and t's progress matches it; otherwise
// why not, in the words a task's wait or failure uses (an error matching
// ErrVersionNotServed, a *MismatchError, or one that says the progress
// cannot be read). A process that cannot run a task leaves it to one
// that can, or makes it wait for one (Options.VersionGrace); a replayer
// (workflowtest.Replay) asks it of every recorded task.
func (b *Bridge) CanRun(t *store.Task) error {
	p, err := decodeProgress(t)
	if err != nil {
		return err
	}
	_, err = b.compiledFor(t, p)
	return err
}

// compiledFor returns the served version task t runs on, its progress p
// checked against it, or why there is none.
func (b *Bridge) compiledFor(t *store.Task, p *Progress) (*compiled, error) {
	wf, err := b.versionFor(t.Labels[LabelWorkflow], t.Labels[LabelVersion], t.Labels[LabelFingerprint], p)
	if err == nil {
		err = wf.check(p)
	}
	if err != nil {
		return nil, err
	}
	return wf, nil
}

// versionFor returns the version task progress p of workflow name runs on
// (recorded, started on the definition whose fingerprint is print).
func (b *Bridge) versionFor(name, recorded, print string, p *Progress) (*compiled, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.workflows[name].find(name, recorded, print, p)
}

// newest returns the version new tasks of workflow name start on.
func (b *Bridge) newest(name string) *compiled {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v := b.workflows[name]; v != nil {
		return v.newest()
	}
	return nil
}

// Versions returns the versions of workflow name this bridge serves, the
// newest last.
func (b *Bridge) Versions(name string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v := b.workflows[name]; v != nil {
		return v.servedVersions()
	}
	return nil
}

// ttlOf is the ttl of a new task of wf.
func (b *Bridge) ttlOf(wf *compiled) time.Duration {
	if wf.def.TTL > 0 {
		return wf.def.TTL
	}
	return b.opts.TTL
}

// promptOf is the prompt that advertises w. It also accepts the argument
// _task_id (to resume a task), which it does not advertise: a host shows
// advertised arguments as fields to fill in when a user starts a prompt.
func promptOf(w *Definition) *mcp.Prompt { return w.Prompt() }

// RegisterPlain validates w and adds it to s as a plain workflow prompt.
func RegisterPlain(s *mcp.Server, w *Definition, tools ToolLookup, call ToolCaller) (*PromptHandler, error) {
	if err := w.Validate(tools); err != nil {
		return nil, err
	}
	if err := w.plainOnly(); err != nil {
		return nil, err
	}
	h := NewPromptHandler(w, call)
	s.AddPrompt(w.Prompt(), h.Handle)
	return h, nil
}

// EngineCaller is the ToolCaller that runs tools registered with e in
// process, on the session of the prompt request that runs the workflow,
// for plain workflow prompts registered with RegisterPlain.
func EngineCaller(e TaskEngine) ToolCaller {
	return func(ctx context.Context, ss *mcp.ServerSession, tool string, args map[string]json.RawMessage, meta mcp.Meta) (*mcp.CallToolResult, error) {
		return e.RunTool(ctx, toolRequest(ss, tool, args, meta))
	}
}

// RegisterSchemaResources publishes the Progress and handoff JSON Schemas
// as MCP resources.
func RegisterSchemaResources(s *mcp.Server) {
	add := func(uri, name, desc string, body func() []byte) {
		s.AddResource(&mcp.Resource{URI: uri, Name: name, Description: desc, MIMEType: "application/schema+json"},
			func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/schema+json", Text: string(body())}}}, nil
			})
	}
	add(ProgressSchemaURI, "workflow-progress-schema", "JSON Schema of the workflow Progress kept in a workflow task's variables", ProgressSchemaJSON)
	add(HandoffSchemaURI, "handoff-schema", "JSON Schema of the workflow handoff document", handoffSchemaJSON)
}

// HandoffSchemaURI is the URI of the MCP resource that publishes the
// handoff document's JSON Schema.
const HandoffSchemaURI = "taskbridge://schemas/handoff.json"
