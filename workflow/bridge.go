package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Meta keys a client uses on continuation calls.
const (
	// MetaTaskID binds a tools/call (or a prompts/get, to resume) to a
	// workflow task.
	MetaTaskID = mcptask.MetaTaskID
	// MetaTaskVars carries task variables a continuation call sets (an
	// object of JSON values; keys under ReservedPrefix are refused).
	MetaTaskVars = mcptask.MetaTaskVars
	// MetaWorkflow is the _meta key of the mcptask.WorkflowSummary added to
	// a continuation call's result.
	MetaWorkflow = mcptask.MetaWorkflow
	// LabelWorkflow is the task label holding the workflow name.
	LabelWorkflow = "workflow"
	// LabelTouched is set on a workflow task the first time a client names
	// it in a request after it was created (tasks/*, a continuation, a
	// resume). Until then the task is a possible orphan (see
	// Bridge.OrphanTimeout).
	LabelTouched = "touched"
)

// DefaultOrphanTimeout is the default Bridge.OrphanTimeout.
const DefaultOrphanTimeout = 10 * time.Minute

// Bridge connects task-aware workflow prompts to a task engine: it serves
// continuation calls (tools/call with _meta._task_id), resumptions
// (prompts/get with _meta._task_id), restart recovery, and the expiry of
// orphaned workflow tasks.
type Bridge struct {
	engine   TaskEngine
	mu       sync.Mutex
	handlers map[string]*TaskWorkflowPromptHandler
	locks    [64]sync.Mutex
	wg       sync.WaitGroup

	// TTL is the ttl of new workflow tasks; zero means the engine default.
	TTL time.Duration
	// OrphanTimeout bounds how long a workflow task waits for a client when
	// no client has named it in any request since it was created (no
	// tasks/get, continuation or resume): a prompts/get cut off after the
	// task was created leaves a task whose id nobody received. Past it the
	// task expires as failed, with a reason, instead of waiting out its
	// ttl. Zero means DefaultOrphanTimeout; negative disables it.
	OrphanTimeout time.Duration
	// ProgressInterval, when positive, lets quick Retryable server steps
	// share progress writes: when a Retryable step succeeds within
	// ProgressInterval of the last write and another Retryable server step
	// runs next, its outcome is written with the next write instead of in
	// one of its own. Every other moment is written at once: a step that
	// is not Retryable (before it runs and after), a slow step, a failure,
	// a retry wait, the handoff and the end. A crash between writes runs
	// the unwritten steps again, which Retryable allows (with the same
	// idempotency keys). Zero or negative (the default) writes every
	// step's outcome before the next step starts.
	ProgressInterval time.Duration
	// Observer, when set, learns of every step attempt (metrics, traces).
	Observer StepObserver
	// ResultMeta, when set, adds _meta entries to every prompt result of a
	// workflow task (the handoff's message): a tracer puts the task's
	// traceparent there, so a client continues the trace on its
	// continuation calls.
	ResultMeta func(t *store.Task) map[string]any
}

// NewBridge returns a bridge over engine.
func NewBridge(engine TaskEngine) *Bridge {
	return &Bridge{engine: engine, handlers: map[string]*TaskWorkflowPromptHandler{}}
}

func (b *Bridge) orphanTimeout() time.Duration {
	if b.OrphanTimeout == 0 {
		return DefaultOrphanTimeout
	}
	return b.OrphanTimeout
}

// Install serves continuation calls through the engine, publishes the
// progress and handoff schemas as resources, and registers the recovery,
// expiry and touch hooks of workflow tasks. Call it once, after the task
// engine is installed on s.
func (b *Bridge) Install(s *mcp.Server) {
	b.engine.SetContinuation(b.continueCall)
	RegisterSchemaResources(s)
	b.engine.OnRecover(taskrouter.KindWorkflow, b.recoverTask)
	b.engine.OnExpire(taskrouter.KindWorkflow, b.expiryMessage)
	b.engine.OnTouch(taskrouter.KindWorkflow, b.touched)
}

// Close waits for background resumptions started by recovery.
func (b *Bridge) Close() { b.wg.Wait() }

// Register validates w against tools and adds it to s as a task-aware
// workflow prompt.
func (b *Bridge) Register(s *mcp.Server, w *SequentialWorkflow, tools ToolLookup) (*TaskWorkflowPromptHandler, error) {
	if err := w.Validate(tools); err != nil {
		return nil, err
	}
	h := &TaskWorkflowPromptHandler{Plain: NewPromptHandler(w, b.caller()), bridge: b}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.handlers[w.Name]; dup {
		return nil, fmt.Errorf("workflow %q is already registered", w.Name)
	}
	b.handlers[w.Name] = h
	s.AddPrompt(w.Prompt(), h.Handle)
	return h, nil
}

// caller runs server steps through the engine, on behalf of the session
// the context names (SessionFrom), or the engine's loopback session.
func (b *Bridge) caller() ToolCaller { return EngineCaller(b.engine) }

// EngineCaller is the ToolCaller that runs tools registered with e in
// process, on the session of the prompt request that runs the workflow
// (SessionFrom), for plain workflow prompts registered with RegisterPlain.
func EngineCaller(e TaskEngine) ToolCaller {
	return func(ctx context.Context, tool string, args map[string]json.RawMessage, meta mcp.Meta) (*mcp.CallToolResult, error) {
		return e.CallTool(ctx, SessionFrom(ctx), tool, args, meta)
	}
}

// RegisterPlain validates w and adds it to s as a plain workflow prompt.
func RegisterPlain(s *mcp.Server, w *SequentialWorkflow, tools ToolLookup, call ToolCaller) (*WorkflowPromptHandler, error) {
	if err := w.Validate(tools); err != nil {
		return nil, err
	}
	h := NewPromptHandler(w, call)
	s.AddPrompt(w.Prompt(), h.Handle)
	return h, nil
}

func (b *Bridge) handler(name string) *TaskWorkflowPromptHandler {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.handlers[name]
}

// lock serializes the bridge's work on one task in this process (other
// processes are kept out by the recorder's compare-and-swap).
func (b *Bridge) lock(id string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	m := &b.locks[h.Sum32()%uint32(len(b.locks))]
	m.Lock()
	return m.Unlock
}

// RegisterSchemaResources publishes the WorkflowProgress and handoff JSON
// Schemas as MCP resources.
func RegisterSchemaResources(s *mcp.Server) {
	add := func(uri, name, desc string, body func() []byte) {
		s.AddResource(&mcp.Resource{URI: uri, Name: name, Description: desc, MIMEType: "application/schema+json"},
			func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/schema+json", Text: string(body())}}}, nil
			})
	}
	add(ProgressSchemaURI, "workflow-progress-schema", "JSON Schema of the WorkflowProgress kept in a workflow task's variables", ProgressSchemaJSON)
	add(HandoffSchemaURI, "handoff-schema", "JSON Schema of the workflow handoff document", handoffSchemaJSON)
}

// HandoffSchemaURI is the URI of the MCP resource that publishes the
// handoff document's JSON Schema.
const HandoffSchemaURI = "taskbridge://schemas/handoff.json"
