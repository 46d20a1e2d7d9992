package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Meta keys a client uses on continuation calls.
const (
	// MetaTaskID binds a tools/call (or a prompts/get, to resume) to a
	// workflow task (CONT-01).
	MetaTaskID = handoff.TaskIDMetaKey
	// MetaTaskVars carries task variables a continuation call sets (an
	// object of JSON values; keys under ReservedPrefix are refused).
	MetaTaskVars = "_task_vars"
	// MetaWorkflow is the _meta key of the workflow summary added to a
	// continuation call's result.
	MetaWorkflow = "taskbridge/workflow"
	// LabelWorkflow is the task label holding the workflow name.
	LabelWorkflow = "workflow"
)

// TaskEngine is what the bridge needs from the task engine (FNDX-04).
// *taskrouter.Router implements it.
type TaskEngine interface {
	Owner(ctx context.Context, req mcp.Request) (string, error)
	CreateTask(ctx context.Context, owner string, req store.Request, opts taskrouter.CreateOptions) (*store.Task, error)
	OwnedTask(ctx context.Context, owner, id string) (*store.Task, error)
	Task(ctx context.Context, id string) (*store.Task, error)
	Update(ctx context.Context, id string, u store.Update) (*store.Task, error)
	Complete(ctx context.Context, id string, result any, vars map[string]json.RawMessage) (*store.Task, error)
	CallTool(ctx context.Context, name string, args any) (*mcp.CallToolResult, error)
	OnRecover(kind string, f taskrouter.RecoverFunc)
}

// Bridge connects task-aware workflow prompts to a task engine: it owns the
// continuation middleware (tools/call with _meta._task_id), resumption, and
// restart recovery.
type Bridge struct {
	engine   TaskEngine
	mu       sync.Mutex
	handlers map[string]*TaskWorkflowPromptHandler
	locks    [64]sync.Mutex
	wg       sync.WaitGroup
	// TTL is the ttl of new workflow tasks; zero means the engine default.
	TTL time.Duration
}

// NewBridge returns a bridge over engine.
func NewBridge(engine TaskEngine) *Bridge {
	return &Bridge{engine: engine, handlers: map[string]*TaskWorkflowPromptHandler{}}
}

// Install adds the continuation middleware to s, publishes the progress and
// handoff schemas as resources, and registers the restart recovery hook.
// Call it once, after the task engine is installed on s.
func (b *Bridge) Install(s *mcp.Server) {
	s.AddReceivingMiddleware(b.middleware)
	RegisterSchemaResources(s)
	b.engine.OnRecover(taskrouter.KindWorkflow, b.recoverTask)
}

// Close waits for background resumptions started by recovery.
func (b *Bridge) Close() { b.wg.Wait() }

// Register validates w against tools and adds it to s as a task-aware
// workflow prompt.
func (b *Bridge) Register(s *mcp.Server, w *SequentialWorkflow, tools ToolLookup) (*TaskWorkflowPromptHandler, error) {
	if err := w.Validate(tools); err != nil {
		return nil, err
	}
	call := func(ctx context.Context, tool string, args map[string]json.RawMessage) (*mcp.CallToolResult, error) {
		return b.engine.CallTool(ctx, tool, args)
	}
	h := &TaskWorkflowPromptHandler{Plain: NewPromptHandler(w, call), bridge: b}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.handlers[w.Name]; dup {
		return nil, fmt.Errorf("workflow %q is already registered", w.Name)
	}
	b.handlers[w.Name] = h
	s.AddPrompt(w.Prompt(), h.Handle)
	return h, nil
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

func (b *Bridge) lock(id string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	m := &b.locks[h.Sum32()%uint32(len(b.locks))]
	m.Lock()
	return m.Unlock
}

// TaskWorkflowPromptHandler is the task-aware workflow prompt. It composes
// the plain WorkflowPromptHandler (FNDX-05): the plain handler runs steps;
// this one supplies a durable task, a recorder that writes progress into
// the task's variables, and the handoff.
type TaskWorkflowPromptHandler struct {
	Plain  *WorkflowPromptHandler
	bridge *Bridge
}

func invalidParams(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}

func internalError(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(format, args...)}
}

// taskState is a loaded workflow task.
type taskState struct {
	task     *store.Task
	progress *WorkflowProgress
}

func decodeProgress(t *store.Task) (*WorkflowProgress, error) {
	raw, ok := t.Variables[VarProgress]
	if !ok {
		return nil, fmt.Errorf("task %s has no workflow progress", t.ID)
	}
	var p WorkflowProgress
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("task %s: decoding workflow progress: %w", t.ID, err)
	}
	if p.Outputs == nil {
		p.Outputs = map[string]json.RawMessage{}
	}
	return &p, nil
}

// recorder writes progress into the task with compare-and-swap, so two
// writers (two processes, say) cannot silently overwrite each other.
type recorder struct {
	engine TaskEngine
	task   *store.Task
	extra  map[string]json.RawMessage // variables to write with the next record
}

func (r *recorder) Record(ctx context.Context, p *WorkflowProgress) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return internalError("encoding workflow progress: %v", err)
	}
	vars := map[string]json.RawMessage{VarProgress: raw}
	for k, v := range r.extra {
		vars[k] = v
	}
	r.extra = nil
	t, err := r.engine.Update(ctx, r.task.ID, store.Update{IfVersion: r.task.Version, Variables: vars})
	if err != nil {
		return storeErr(err)
	}
	r.task = t
	return nil
}

func storeErr(err error) error {
	var je *jsonrpc.Error
	switch {
	case errors.As(err, &je):
		return err
	case errors.Is(err, store.ErrConflict):
		return internalError("the workflow task was changed concurrently; retry")
	case errors.Is(err, store.ErrTerminal):
		return invalidParams("the workflow task has already ended")
	case errors.Is(err, store.ErrTooLarge):
		return invalidParams("%v", err)
	case errors.Is(err, store.ErrNotFound):
		return invalidParams("workflow task not found")
	}
	return internalError("task store: %v", err)
}

func (r *recorder) vars(name string) (json.RawMessage, bool) {
	return userVar(name, r.extra, r.task.Variables)
}

// userVar looks a task variable up in layers, first match wins, hiding the
// engine's reserved variables from TaskVar sources.
func userVar(name string, layers ...map[string]json.RawMessage) (json.RawMessage, bool) {
	if strings.HasPrefix(name, ReservedPrefix) {
		return nil, false
	}
	for _, l := range layers {
		if v, ok := l[name]; ok {
			return v, true
		}
	}
	return nil, false
}

// Handle is the mcp.PromptHandler. A prompts/get with _meta._task_id
// resumes that workflow task (ADVW-02); otherwise it starts a new one.
func (h *TaskWorkflowPromptHandler) Handle(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	b := h.bridge
	owner, err := b.engine.Owner(ctx, req)
	if err != nil {
		return nil, err
	}
	ext := taskrouter.IsExtension(req)
	if raw, ok := req.Params.GetMeta()[MetaTaskID]; ok {
		id, ok := raw.(string)
		if !ok || id == "" {
			return nil, invalidParams("_meta.%s must be a non-empty string task id", MetaTaskID)
		}
		return h.resume(ctx, owner, id, ext)
	}
	p, err := h.Plain.Start(req.Params.Arguments)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, internalError("encoding workflow progress: %v", err)
	}
	args, _ := json.Marshal(p.Arguments)
	// FNDX-01: the task exists, bound to the caller, before any step runs.
	t, err := b.engine.CreateTask(ctx, owner, store.Request{Method: "prompts/get", Name: h.Plain.Workflow.Name, Arguments: args},
		taskrouter.CreateOptions{TTL: b.TTL, Kind: taskrouter.KindWorkflow, Labels: map[string]string{LabelWorkflow: h.Plain.Workflow.Name},
			Variables: map[string]json.RawMessage{VarProgress: raw}, StatusMessage: "workflow started"})
	if err != nil {
		return nil, storeErr(err)
	}
	unlock := b.lock(t.ID)
	defer unlock()
	return h.advance(ctx, &recorder{engine: b.engine, task: t}, p, ext, true)
}

// resume continues an existing workflow task from its recorded progress.
func (h *TaskWorkflowPromptHandler) resume(ctx context.Context, owner, id string, ext bool) (*mcp.GetPromptResult, error) {
	b := h.bridge
	unlock := b.lock(id)
	defer unlock()
	st, err := b.load(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if st.task.Labels[LabelWorkflow] != h.Plain.Workflow.Name {
		return nil, invalidParams("task %s belongs to workflow %q, not %q", id, st.task.Labels[LabelWorkflow], h.Plain.Workflow.Name)
	}
	if st.task.Status.Terminal() {
		return h.result(st.task, st.progress, nil, ext)
	}
	return h.advance(ctx, &recorder{engine: b.engine, task: st.task}, st.progress, ext, false)
}

// advance runs what is runnable, completes the task when nothing remains,
// and builds the prompt result with the handoff.
func (h *TaskWorkflowPromptHandler) advance(ctx context.Context, rec *recorder, p *WorkflowProgress, ext, fresh bool) (*mcp.GetPromptResult, error) {
	trace, err := h.Plain.Run(ctx, p, rec, rec.vars)
	if err != nil {
		return nil, err
	}
	if fresh {
		r := h.Plain.runner(nil)
		trace = append([]*mcp.PromptMessage{r.startMessage(p)}, trace...)
	}
	t := rec.task
	if p.done() {
		t, err = h.complete(ctx, rec, p)
		if err != nil {
			return nil, err
		}
	}
	return h.result(t, p, trace, ext)
}

// complete ends the task with the workflow's result (CONT-03).
func (h *TaskWorkflowPromptHandler) complete(ctx context.Context, rec *recorder, p *WorkflowProgress) (*store.Task, error) {
	p.PauseReason = ""
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, internalError("encoding workflow progress: %v", err)
	}
	done := *rec.task
	done.Status = store.StatusCompleted
	final, err := h.result(&done, p, nil, false)
	if err != nil {
		return nil, err
	}
	t, err := h.bridge.engine.Complete(ctx, rec.task.ID, final, map[string]json.RawMessage{VarProgress: raw})
	if err != nil {
		return nil, storeErr(err)
	}
	rec.task = t
	return t, nil
}

// result is the prompt result: the trace, then the handoff as the final
// assistant message (HAND-01), with the same document in _meta.
func (h *TaskWorkflowPromptHandler) result(t *store.Task, p *WorkflowProgress, trace []*mcp.PromptMessage, ext bool) (*mcp.GetPromptResult, error) {
	doc := h.handoff(t, p, ext)
	msg, err := doc.Message()
	if err != nil {
		return nil, internalError("rendering handoff: %v", err)
	}
	meta := mcp.Meta{}
	for k, v := range doc.Meta() {
		meta[k] = v
	}
	meta[taskrouter.MetaRelatedTask] = map[string]string{"taskId": t.ID}
	msgs := append(append([]*mcp.PromptMessage{}, trace...), msg)
	return &mcp.GetPromptResult{Meta: meta, Description: h.Plain.Workflow.Description, Messages: msgs}, nil
}

// handoff builds the handoff document from the progress (HAND-02/03).
func (h *TaskWorkflowPromptHandler) handoff(t *store.Task, p *WorkflowProgress, ext bool) *handoff.Document {
	w := h.Plain.Workflow
	r := h.Plain.runner(func(name string) (json.RawMessage, bool) { return userVar(name, t.Variables) })
	doc := &handoff.Document{
		SchemaVersion:  handoff.SchemaVersion,
		TaskID:         t.ID,
		Workflow:       w.Name,
		Goal:           w.goal(),
		Status:         string(t.Status),
		PauseReason:    p.PauseReason,
		CompletedSteps: []handoff.CompletedStep{},
		RemainingSteps: []handoff.RemainingStep{},
		Continuation:   handoff.NewContinuation(t.ID, !ext),
	}
	for _, s := range w.Steps {
		sp := p.step(s.Name)
		if sp != nil && sp.Status == StepCompleted {
			doc.CompletedSteps = append(doc.CompletedSteps, handoff.CompletedStep{Name: s.Name, Tool: s.Tool, Result: p.Outputs[s.binding()]})
			continue
		}
		args, _ := r.resolve(p, s, true)
		exec := handoff.ExecServer
		if s.execution() == ClientDeferred {
			exec = handoff.ExecClient
		}
		rs := handoff.RemainingStep{Name: s.Name, Tool: s.Tool, Execution: exec, Arguments: args, Guidance: s.Guidance}
		for _, arg := range slices.Sorted(maps.Keys(s.Args)) {
			if src := s.Args[arg]; src.Kind == SourceStepOutput {
				if from := w.producer(src.Name); from != nil && !slices.Contains(rs.DependsOn, from.Name) {
					rs.DependsOn = append(rs.DependsOn, from.Name)
				}
			}
		}
		doc.RemainingSteps = append(doc.RemainingSteps, rs)
	}
	for _, e := range p.Errors {
		doc.Errors = append(doc.Errors, handoff.StepError{Step: e.Step, Tool: e.Tool, Message: e.Message, Retryable: e.Retryable})
	}
	return doc
}

func (w *SequentialWorkflow) producer(binding string) *Step {
	for _, s := range w.Steps {
		if s.binding() == binding {
			return s
		}
	}
	return nil
}

// load reads an owner's workflow task.
func (b *Bridge) load(ctx context.Context, owner, id string) (*taskState, error) {
	t, err := b.engine.OwnedTask(ctx, owner, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, invalidParams("unknown workflow task %q", id)
		}
		return nil, storeErr(err)
	}
	if t.Labels[taskrouter.LabelKind] != taskrouter.KindWorkflow {
		return nil, invalidParams("task %q is not a workflow task", id)
	}
	p, err := decodeProgress(t)
	if err != nil {
		return nil, internalError("%v", err)
	}
	return &taskState{task: t, progress: p}, nil
}

// ---- continuation ----

func (b *Bridge) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		ctr, ok := req.(*mcp.CallToolRequest)
		if !ok || ctr.Params == nil {
			return next(ctx, method, req)
		}
		raw, bound := ctr.Params.GetMeta()[MetaTaskID]
		if !bound {
			return next(ctx, method, req)
		}
		return b.continueCall(ctx, ctr, raw, next)
	}
}

// continueCall runs a tool call bound to a workflow task (CONT-01/02): the
// tool runs, its result is recorded against the matching remaining step,
// server steps that became runnable run, and the task completes when no
// step remains. Every check happens before the tool runs, so a bad
// _task_id records nothing.
func (b *Bridge) continueCall(ctx context.Context, req *mcp.CallToolRequest, raw any, next mcp.MethodHandler) (mcp.Result, error) {
	id, ok := raw.(string)
	if !ok || id == "" {
		return nil, invalidParams("_meta.%s must be a non-empty string task id", MetaTaskID)
	}
	owner, err := b.engine.Owner(ctx, req)
	if err != nil {
		return nil, err
	}
	setVars, err := taskVars(req.Params.GetMeta()[MetaTaskVars])
	if err != nil {
		return nil, err
	}
	unlock := b.lock(id)
	defer unlock()
	st, err := b.load(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if st.task.Status.Terminal() {
		return nil, invalidParams("workflow task %s is already %s", id, st.task.Status)
	}
	h := b.handler(st.task.Labels[LabelWorkflow])
	if h == nil {
		return nil, invalidParams("task %s belongs to workflow %q, which this server does not serve", id, st.task.Labels[LabelWorkflow])
	}
	w := h.Plain.Workflow
	step := h.match(st.progress, req.Params.Name)
	if step == nil {
		return nil, invalidParams("tool %q matches no remaining step of workflow %q (task %s); steps the client may perform now: %s",
			req.Params.Name, w.Name, id, h.clientOptions(st.progress))
	}
	delete(req.Params.GetMeta(), MetaTaskVars)
	res, callErr := next(taskrouter.Inline(ctx), "tools/call", req)
	rec := &recorder{engine: b.engine, task: st.task, extra: setVars}
	now := h.Plain.now()
	p := st.progress
	var ctr *mcp.CallToolResult
	switch {
	case callErr != nil:
		recordFailure(p, step, callErr.Error(), now)
	default:
		ctr, _ = res.(*mcp.CallToolResult)
		if ctr == nil {
			return nil, internalError("tool %q returned %T, not a tool result", req.Params.Name, res)
		}
		if ctr.IsError {
			recordFailure(p, step, toolError(ctr), now)
		} else {
			recordSuccess(p, step, ctr, now)
		}
	}
	// CONT-02: the step's result is durable before anything else runs.
	if err := rec.Record(ctx, p); err != nil {
		return nil, err
	}
	if callErr == nil && !ctr.IsError {
		if _, err := h.Plain.Run(ctx, p, rec, rec.vars); err != nil {
			return nil, err
		}
		if p.done() {
			if _, err := h.complete(ctx, rec, p); err != nil {
				return nil, err
			}
		}
	}
	if callErr != nil {
		return nil, callErr
	}
	if ctr.Meta == nil {
		ctr.Meta = mcp.Meta{}
	}
	ctr.Meta[taskrouter.MetaRelatedTask] = map[string]string{"taskId": id}
	ctr.Meta[MetaWorkflow] = map[string]any{
		"taskId":         id,
		"status":         string(rec.task.Status),
		"remainingSteps": p.RemainingSteps,
		"pauseReason":    p.PauseReason,
	}
	return ctr, nil
}

// match finds the remaining step a client call of tool performs: a client
// step not yet completed, or a failed step (the client retries it).
func (h *TaskWorkflowPromptHandler) match(p *WorkflowProgress, tool string) *Step {
	for _, s := range h.Plain.Workflow.Steps {
		sp := p.step(s.Name)
		if sp == nil || sp.Status == StepCompleted || s.Tool != tool {
			continue
		}
		if s.execution() == ClientDeferred || sp.Status == StepFailed {
			return s
		}
	}
	return nil
}

func (h *TaskWorkflowPromptHandler) clientOptions(p *WorkflowProgress) string {
	var opts []string
	for _, s := range h.Plain.Workflow.Steps {
		sp := p.step(s.Name)
		if sp == nil || sp.Status == StepCompleted {
			continue
		}
		if s.execution() == ClientDeferred || sp.Status == StepFailed {
			opts = append(opts, fmt.Sprintf("%q (tool %q)", s.Name, s.Tool))
		}
	}
	if len(opts) == 0 {
		return "none"
	}
	return strings.Join(opts, ", ")
}

// taskVars decodes _meta._task_vars, refusing reserved keys.
func taskVars(raw any) (map[string]json.RawMessage, error) {
	if raw == nil {
		return nil, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, invalidParams("_meta.%s must be an object of task variables", MetaTaskVars)
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		if k == "" || strings.HasPrefix(k, ReservedPrefix) {
			return nil, invalidParams("task variable %q is reserved: names starting with %q belong to the workflow engine", k, ReservedPrefix)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, invalidParams("task variable %q: %v", k, err)
		}
		out[k] = b
	}
	return out, nil
}

// ---- recovery ----

// recoverTask resumes a workflow task a previous process left active: its
// pending server steps run in the background from the recorded progress.
// A server step that was running when the process died runs again.
func (b *Bridge) recoverTask(ctx context.Context, t *store.Task) error {
	h := b.handler(t.Labels[LabelWorkflow])
	if h == nil {
		return fmt.Errorf("workflow %q is not registered", t.Labels[LabelWorkflow])
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx := context.WithoutCancel(ctx)
		unlock := b.lock(t.ID)
		defer unlock()
		st, err := b.load(ctx, t.Owner, t.ID)
		if err != nil || st.task.Status.Terminal() {
			return
		}
		rec := &recorder{engine: b.engine, task: st.task}
		if _, err := h.Plain.Run(ctx, st.progress, rec, rec.vars); err != nil {
			return
		}
		if st.progress.done() {
			_, _ = h.complete(ctx, rec, st.progress)
		}
	}()
	return nil
}

// ---- schemas ----

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
	add(HandoffSchemaURI, "handoff-schema", "JSON Schema of the workflow handoff document", handoff.SchemaJSON)
}

// HandoffSchemaURI is the URI of the MCP resource that publishes the
// handoff document's JSON Schema.
const HandoffSchemaURI = "taskbridge://schemas/handoff.json"
