package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/handoff"
)

// maxFollowSteps bounds how many client steps Follow performs.
const maxFollowSteps = 1000

// GetPrompt gets a prompt (prompts/get). When the prompt is a task-aware
// workflow, the result ends with a handoff and doc is that handoff
// document; otherwise doc is nil. A result that carries a handoff in
// _meta["taskbridge/handoff"] that does not validate is an error.
//
// A handoff of a workflow that is still running is acknowledged at once
// with a tasks/get of its task: a taskbridge server expires workflow tasks
// that no client names in any request within a few minutes (orphans whose
// handoff never arrived).
func (c *Client) GetPrompt(ctx context.Context, name string, args map[string]string) (*mcp.GetPromptResult, *handoff.Document, error) {
	res, doc, err := c.getPrompt(ctx, name, args, nil)
	if err == nil && doc != nil && !mcptask.Status(doc.Status).Terminal() {
		if _, gerr := c.GetTask(ctx, doc.TaskID); gerr != nil {
			c.log.Debug("acknowledging the handoff", "task", doc.TaskID, "error", gerr)
		}
	}
	return res, doc, err
}

// ResumePrompt gets the handoff of an existing workflow task (prompts/get
// with _meta._task_id): the server runs whatever it can, retrying server
// steps that failed, and answers with the workflow's current handoff.
func (c *Client) ResumePrompt(ctx context.Context, workflow, taskID string) (*mcp.GetPromptResult, *handoff.Document, error) {
	return c.getPrompt(ctx, workflow, nil, map[string]any{mcptask.MetaTaskID: taskID})
}

func (c *Client) getPrompt(ctx context.Context, name string, args map[string]string, meta map[string]any) (*mcp.GetPromptResult, *handoff.Document, error) {
	params := map[string]any{"name": name}
	if args != nil {
		params["arguments"] = args
	}
	raw, err := c.retryingCall(ctx, mcptask.MethodPromptsGet, params, meta)
	if err != nil {
		return nil, nil, err
	}
	var res mcp.GetPromptResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, nil, malformed("prompts/get result: %v", err)
	}
	doc, herr := handoff.FromPromptResult(&res)
	switch {
	case herr == nil:
		c.rememberTrace(doc, &res)
		return &res, doc, nil
	case errors.Is(herr, handoff.ErrNoHandoff):
		return &res, nil, nil
	}
	if _, ok := res.Meta[mcptask.MetaHandoff]; ok {
		return &res, nil, fmt.Errorf("client: prompt %q: %w", name, herr)
	}
	// A ```json block in an ordinary prompt's text is not a handoff.
	return &res, nil, nil
}

// retryingCall sends a request that may be answered input_required
// (SEP-2322 multi round-trip, 2026-07-28): it answers the input requests
// through the InputHandler and retries until it gets a result.
func (c *Client) retryingCall(ctx context.Context, method string, params, meta map[string]any) (json.RawMessage, error) {
	for round := 0; round < maxInputRounds; round++ {
		raw, err := c.callWith(ctx, method, params, meta, false)
		if err != nil {
			return nil, err
		}
		var probe struct {
			ResultType    string                     `json:"resultType"`
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
			RequestState  string                     `json:"requestState"`
		}
		if json.Unmarshal(raw, &probe) != nil || probe.ResultType != mcptask.ResultTypeInputRequired {
			return raw, nil
		}
		inputs, err := decodeInputRequests(probe.InputRequests)
		if err != nil {
			return nil, malformed("%s: %v", method, err)
		}
		responses := map[string]json.RawMessage{}
		for _, key := range slices.Sorted(maps.Keys(inputs)) {
			res, err := c.answerDirect(ctx, "", inputs[key])
			if err != nil {
				return nil, fmt.Errorf("client: answering input request %q of %s: %w", key, method, err)
			}
			responses[key] = res
		}
		params = maps.Clone(params)
		params["inputResponses"] = responses
		if probe.RequestState != "" {
			params["requestState"] = probe.RequestState
		} else {
			delete(params, "requestState")
		}
	}
	return nil, fmt.Errorf("client: %s still needs input after %d rounds", method, maxInputRounds)
}

// FollowOptions configure Follow.
type FollowOptions struct {
	// Fill supplies the arguments of a client step that are still
	// placeholders ("<description>" strings, see handoff.IsPlaceholder).
	// placeholders names them, sorted; the returned map must have a value
	// for each (it may also override resolved arguments). Fill is required
	// when a step has placeholders.
	Fill func(ctx context.Context, step handoff.RemainingStep, placeholders []string) (map[string]any, error)
	// TaskVars, when set, are sent with every client step as
	// _meta["_task_vars"]: workflow task variables that later steps read
	// (a taskbridge extension).
	TaskVars map[string]any
	// TraceParent, when set, is sent as _meta["traceparent"] (W3C trace
	// context) on every continuation call. When empty, Follow sends the
	// traceparent of the latest prompt result this client read for the
	// task (GetPrompt, ResumePrompt, and Follow's own re-reads), if the
	// server put one there (a taskbridge server with tracing does), so the
	// client's steps join the workflow's trace.
	TraceParent string
	// Repair, when set, is asked what to do about a server step the server
	// gave up on and handed to the client (handoff.RemainingStep
	// HandedToClient, with its Error and resolved Arguments): it returns
	// the arguments to perform the step with, corrected where they caused
	// the error. Without it, Follow returns a *WorkflowError for such a
	// step. (Follow re-reads the handoff after each client step by resuming
	// the prompt, which already makes the server try failed steps again.)
	Repair func(ctx context.Context, step handoff.RemainingStep) (map[string]any, error)
	// OnEvent, when set, receives the workflow task's events while Follow
	// runs (StreamEvents: each step's attempts, the progress and log lines
	// of its tools, status changes), from a goroutine of its own, one at
	// a time, from the task's first event on; the events up to the task's
	// end come before Follow returns, as far as the server sends them
	// within a few seconds.
	OnEvent func(TaskEvent)
}

// WorkflowError reports that a workflow stopped somewhere Follow cannot
// continue from: a step failed, or the task ended failed or cancelled.
type WorkflowError struct {
	// TaskID and Workflow identify the workflow task.
	TaskID, Workflow string
	// Step is the step the workflow stopped at, when known.
	Step string
	// Status is the task status the server reported.
	Status string
	// Reason is the server's pause reason or error message.
	Reason string
	// RemainingSteps names the steps not done.
	RemainingSteps []string
}

// Error implements error.
func (e *WorkflowError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: workflow %q (task %s)", e.Workflow, e.TaskID)
	if e.Step != "" {
		fmt.Fprintf(&b, " stopped at step %q", e.Step)
	} else {
		b.WriteString(" stopped")
	}
	fmt.Fprintf(&b, " (status %s)", e.Status)
	if e.Reason != "" {
		fmt.Fprintf(&b, ": %s", e.Reason)
	}
	return b.String()
}

// Follow continues a workflow task from its handoff: it performs the
// remaining client steps in order, calling each step's tool with
// _meta {"_task_id": doc.TaskID} and the step's arguments (asking
// opts.Fill for any still a placeholder), then waits for the task to end
// and returns the workflow's final result (a tool result as JSON, whose
// _meta carries the final handoff). A step without a tool of its own (an
// event, a question, a text to write) is performed with the call its
// handoff names (handoff.Call: the event tool), Fill asked for the values
// the call lists.
//
// After each client step the server runs the server steps that follow;
// when the workflow then waits on another client step, Follow re-reads the
// handoff (prompts/get with the task id, so arguments resolved from the
// step just performed are filled in) and continues. When a step fails, or
// the task ends failed or cancelled, Follow returns a *WorkflowError,
// with the workflow's final result when it has one (a failed workflow's
// is a tool result with isError).
func (c *Client) Follow(ctx context.Context, doc *handoff.Document, o *FollowOptions) (json.RawMessage, error) {
	var opts FollowOptions
	if o != nil {
		opts = *o
	}
	if doc == nil {
		return nil, errors.New("client: Follow needs a handoff document")
	}
	if err := doc.Validate(); err != nil {
		return nil, err
	}
	if opts.OnEvent == nil {
		return c.follow(ctx, doc, opts)
	}
	stop := c.followEvents(ctx, doc.TaskID, opts.OnEvent)
	res, err := c.follow(ctx, doc, opts)
	var wf *WorkflowError
	if err == nil || errors.As(err, &wf) && mcptask.Status(wf.Status).Terminal() {
		stop(eventsGrace) // the workflow ended: its last events first
	} else {
		stop(0)
	}
	return res, err
}

// follow is Follow without OnEvent.
func (c *Client) follow(ctx context.Context, doc *handoff.Document, opts FollowOptions) (json.RawMessage, error) {
	cur := doc
	for range maxFollowSteps {
		if mcptask.Status(cur.Status).Terminal() {
			return c.waitWorkflow(ctx, cur) // its result, with a *WorkflowError unless completed
		}
		next := nextClientStep(cur)
		if next == nil && !mayAsk(cur) {
			// Only the server's work is left.
			return c.waitWorkflow(ctx, cur)
		}
		if next == nil {
			// The server works toward a step the client will perform (a
			// for-each's items, a child workflow's steps): read the
			// handoff again once the workflow rests.
			var err error
			if cur, err = c.awaitClientStep(ctx, cur); err != nil {
				return nil, err
			}
			continue
		}
		step := *next
		var args map[string]any
		var err error
		switch {
		case step.HandedToClient && opts.Repair != nil:
			args, err = opts.Repair(ctx, step)
		case step.HandedToClient:
			return nil, docError(cur)
		case step.Tool == "" && step.Call != nil:
			// An event, a question, a text to write: performed with
			// the call the handoff names (the event tool).
			step = step.AsCall()
			args, err = fillArguments(ctx, cur.TaskID, step, opts.Fill)
			args = step.Call.Nest(args)
		default:
			args, err = fillArguments(ctx, cur.TaskID, step, opts.Fill)
		}
		if err != nil {
			return nil, fmt.Errorf("client: workflow %q step %q: %w", cur.Workflow, step.Name, err)
		}
		sum, err := c.performStep(ctx, cur, step, args, opts.TaskVars, c.traceFor(cur.TaskID, opts.TraceParent))
		if err != nil {
			return nil, err
		}
		if sum.TaskID == cur.TaskID && sum.Status.Terminal() {
			return c.waitWorkflow(ctx, cur)
		}
		if stepRef(step, cur.TaskID) != cur.TaskID {
			// A record of a container, or a child workflow's step: the
			// summary is of what the call performed; read the workflow's.
			if cur, err = c.refreshHandoff(ctx, cur, step.Name); err != nil {
				return nil, err
			}
			continue
		}
		if sum.Status.Terminal() || len(sum.RemainingSteps) == 0 {
			return c.waitWorkflow(ctx, cur)
		}
		if len(sum.ClientSteps) == 0 {
			// A server without clientSteps in its summary: go on while
			// the next remaining step is the client's.
			if next := stepNamed(cur, sum.RemainingSteps[0]); next == nil || next.Execution != mcptask.ExecClient {
				return c.waitWorkflow(ctx, cur)
			}
		}
		cur, err = c.refreshHandoff(ctx, cur, step.Name)
		if err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("client: workflow %q (task %s) did not end after %d client steps", doc.Workflow, doc.TaskID, maxFollowSteps)
}

// performStep calls a client step's tool bound to the workflow task and
// returns the workflow summary the server attached to the result.
func (c *Client) performStep(ctx context.Context, doc *handoff.Document, step handoff.RemainingStep, args map[string]any, vars map[string]any, traceParent string) (*mcptask.WorkflowSummary, error) {
	meta := map[string]any{mcptask.MetaTaskID: stepRef(step, doc.TaskID)}
	if len(vars) > 0 {
		meta[mcptask.MetaTaskVars] = vars
	}
	if traceParent != "" {
		meta[MetaTraceParent] = traceParent
	}
	res, err := c.plainCall(ctx, step.Tool, args, meta)
	if err != nil {
		return nil, fmt.Errorf("client: workflow %q (task %s) step %q (tool %q): %w", doc.Workflow, doc.TaskID, step.Name, step.Tool, err)
	}
	sum, err := mcptask.SummaryFromMeta(res.Meta)
	if err != nil {
		return nil, malformed("step %q: _meta[%q]: %v", step.Name, mcptask.MetaWorkflow, err)
	}
	if sum == nil {
		sum = &mcptask.WorkflowSummary{}
	}
	if sum.Status == "" {
		// Not a continuation's reply (the event tool's, or another
		// server's): ask the task itself.
		t, err := c.GetTask(ctx, doc.TaskID)
		if err != nil {
			return nil, fmt.Errorf("client: workflow %q step %q: the result carries no workflow summary and tasks/get failed: %w", doc.Workflow, step.Name, err)
		}
		sum.Status = t.Status
		sum.PauseReason = t.StatusMessage
		if !t.Status.Terminal() {
			for _, s := range doc.RemainingSteps {
				if s.Name != step.Name {
					sum.RemainingSteps = append(sum.RemainingSteps, s.Name)
				}
			}
		}
	}
	if res.IsError {
		if hd, herr := handoff.FromToolResult(res); herr == nil && hd.TaskID == doc.TaskID && mcptask.Status(hd.Status).Terminal() {
			// The call was recorded, and the workflow has ended (failed,
			// cancelled): its end is the answer, as waitWorkflow reads it.
			return &mcptask.WorkflowSummary{TaskID: hd.TaskID, Workflow: hd.Workflow, Status: mcptask.Status(hd.Status), PauseReason: hd.PauseReason}, nil
		}
		reason := sum.PauseReason
		if reason == "" || !sum.Status.Terminal() {
			reason = toolText(res)
		}
		return nil, &WorkflowError{TaskID: doc.TaskID, Workflow: doc.Workflow, Step: step.Name, Status: string(sum.Status), Reason: reason, RemainingSteps: sum.RemainingSteps}
	}
	return sum, nil
}

// MetaTraceParent is the _meta key of the W3C trace context a taskbridge
// server with tracing puts on workflow prompt results, and that Follow
// sends back on continuation calls.
const MetaTraceParent = "traceparent"

// maxTraces bounds the traceparents a Client remembers.
const maxTraces = 1024

// rememberTrace keeps the traceparent of a workflow prompt result.
func (c *Client) rememberTrace(doc *handoff.Document, res *mcp.GetPromptResult) {
	tp, _ := res.Meta[MetaTraceParent].(string)
	if doc == nil || tp == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.traces == nil || len(c.traces) >= maxTraces {
		c.traces = map[string]string{}
	}
	c.traces[doc.TaskID] = tp
}

// traceFor returns the traceparent to send on a continuation of task id.
func (c *Client) traceFor(id, explicit string) string {
	if explicit != "" {
		return explicit
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.traces[id]
}

// plainCall is a tools/call that never asks for a task; if the server
// makes one anyway, its result is awaited.
func (c *Client) plainCall(ctx context.Context, tool string, args map[string]any, meta map[string]any) (*mcp.CallToolResult, error) {
	params := map[string]any{"name": tool, "arguments": args}
	raw, err := c.retryingCall(ctx, mcptask.MethodToolsCall, params, meta)
	if err != nil {
		return nil, err
	}
	rep, err := decodeCallReply(raw)
	if err != nil {
		return nil, err
	}
	if rep.task != nil {
		out, err := c.TaskResult(ctx, rep.task.ID)
		if err != nil {
			return nil, err
		}
		return decodeToolResult(out)
	}
	if rep.result == nil {
		return nil, malformed("tools/call %q returned no result", tool)
	}
	return rep.result, nil
}

// refreshHandoff re-reads the handoff of a workflow task after a client
// step. If the server cannot resume the prompt, the old document minus the
// performed step is used.
func (c *Client) refreshHandoff(ctx context.Context, doc *handoff.Document, performed string) (*handoff.Document, error) {
	_, fresh, err := c.ResumePrompt(ctx, doc.Workflow, doc.TaskID)
	if err == nil && fresh != nil && fresh.TaskID == doc.TaskID {
		return fresh, nil
	}
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	c.log.Debug("re-reading the handoff failed; continuing from the old one", "task", doc.TaskID, "error", err)
	next := *doc
	next.RemainingSteps = slices.DeleteFunc(slices.Clone(doc.RemainingSteps), func(s handoff.RemainingStep) bool { return s.Name == performed })
	return &next, nil
}

// waitWorkflow waits for the workflow task to end and returns its result.
// A workflow that failed ends with a tool result with isError (in either
// dialect): its result is returned with a *WorkflowError.
func (c *Client) waitWorkflow(ctx context.Context, doc *handoff.Document) (json.RawMessage, error) {
	raw, err := c.TaskResult(ctx, doc.TaskID)
	if err == nil {
		if res, derr := decodeToolResult(raw); derr == nil && res.IsError {
			e := &WorkflowError{TaskID: doc.TaskID, Workflow: doc.Workflow, Status: string(mcptask.StatusFailed), Reason: toolText(res)}
			if fdoc, herr := handoff.FromToolResult(res); herr == nil {
				if d := docError(fdoc).(*WorkflowError); d.Reason != "" {
					e.Reason, e.Step, e.RemainingSteps = d.Reason, d.Step, d.RemainingSteps
				}
			}
			return raw, e
		}
		return raw, nil
	}
	if errors.Is(err, ErrCancelled) {
		return nil, &WorkflowError{TaskID: doc.TaskID, Workflow: doc.Workflow, Status: string(mcptask.StatusCancelled), Reason: err.Error()}
	}
	var re *RPCError
	if errors.As(err, &re) && re.Kind() == nil {
		return nil, &WorkflowError{TaskID: doc.TaskID, Workflow: doc.Workflow, Status: string(mcptask.StatusFailed), Reason: re.Message}
	}
	return nil, err
}

// fillArguments resolves a client step's arguments, asking fill for the
// placeholders. An argument named _task_id (a step tool that takes the
// workflow task as an argument) is the task's id, never asked for.
func fillArguments(ctx context.Context, taskID string, step handoff.RemainingStep, fill func(context.Context, handoff.RemainingStep, []string) (map[string]any, error)) (map[string]any, error) {
	args := make(map[string]any, len(step.Arguments))
	var holes []string
	for k, v := range step.Arguments {
		switch {
		case k == mcptask.MetaTaskID:
			args[k] = stepRef(step, taskID)
		case handoff.IsPlaceholder(v):
			holes = append(holes, k)
		default:
			args[k] = v
		}
	}
	if len(holes) == 0 {
		return args, nil
	}
	slices.Sort(holes)
	if fill == nil {
		return nil, fmt.Errorf("arguments %q are placeholders and FollowOptions.Fill is nil", holes)
	}
	vals, err := fill(ctx, step, holes)
	if err != nil {
		return nil, err
	}
	for _, h := range holes {
		if _, ok := vals[h]; !ok {
			return nil, fmt.Errorf("Fill returned no value for argument %q", h)
		}
	}
	for k, v := range vals {
		args[k] = v
	}
	return args, nil
}

// nextClientStep is the first remaining step the client may perform now,
// or nil.
func nextClientStep(doc *handoff.Document) *handoff.RemainingStep {
	for i := range doc.RemainingSteps {
		s := &doc.RemainingSteps[i]
		if s.Execution == mcptask.ExecClient && (s.Status != mcptask.StepPending || s.Call != nil) {
			return s
		}
	}
	return nil
}

// mayAsk reports whether a remaining step may yet give the client
// something to perform: a client step, or a step whose kind holds others
// (a for-each's items, a loop's runs, a child workflow's steps).
func mayAsk(doc *handoff.Document) bool {
	for _, s := range doc.RemainingSteps {
		switch {
		case s.Execution == mcptask.ExecClient:
			return true
		case s.Kind == string(mcptask.StepKindForEach), s.Kind == string(mcptask.StepKindLoop), s.Kind == string(mcptask.StepKindChild):
			return true
		}
	}
	return false
}

// stepRef is the task id a call that performs step sends: the step's own
// (a container's record, "TASK#review[1]"; a child workflow's step, the
// child's id), or the workflow's.
func stepRef(step handoff.RemainingStep, taskID string) string {
	var ref string
	if step.Call != nil && json.Unmarshal(step.Call.Arguments[mcptask.ArgTaskID], &ref) == nil && ref != "" {
		return ref
	}
	if json.Unmarshal(step.Arguments[mcptask.ArgTaskID], &ref) == nil && ref != "" && !handoff.IsPlaceholder(step.Arguments[mcptask.ArgTaskID]) {
		return ref
	}
	return taskID
}

// awaitClientStep waits until the workflow of doc rests again and returns
// its handoff (a resume of its prompt, which the server answers once the
// workflow rests or its prompt wait passed), pausing between reads that
// find it unchanged.
func (c *Client) awaitClientStep(ctx context.Context, doc *handoff.Document) (*handoff.Document, error) {
	fresh, err := c.refreshHandoff(ctx, doc, "")
	if err != nil {
		return nil, err
	}
	if fresh.PauseReason == doc.PauseReason && nextClientStep(fresh) == nil {
		select {
		case <-time.After(followPause):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return fresh, nil
}

// followPause is how long Follow waits before reading an unchanged
// handoff again.
const followPause = 250 * time.Millisecond

func stepNamed(doc *handoff.Document, name string) *handoff.RemainingStep {
	for i := range doc.RemainingSteps {
		if doc.RemainingSteps[i].Name == name {
			return &doc.RemainingSteps[i]
		}
	}
	return nil
}

func docError(doc *handoff.Document) error {
	e := &WorkflowError{TaskID: doc.TaskID, Workflow: doc.Workflow, Status: doc.Status, Reason: doc.PauseReason}
	if len(doc.RemainingSteps) > 0 {
		e.Step = doc.RemainingSteps[0].Name
	}
	for _, s := range doc.RemainingSteps {
		e.RemainingSteps = append(e.RemainingSteps, s.Name)
	}
	if e.Reason == "" && len(doc.Errors) > 0 {
		e.Reason = doc.Errors[len(doc.Errors)-1].Message
	}
	return e
}

// toolText joins the text content of a tool result.
func toolText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok && tc.Text != "" {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}
