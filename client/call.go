package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// EventKind says what an Event reports.
type EventKind int

// The event kinds, in the order a task produces them.
const (
	// EventCreated: the server created the task (Event.Task).
	EventCreated EventKind = iota + 1
	// EventStatus: the task's status or status message changed
	// (Event.Task).
	EventStatus
	// EventInput: the task (or, in the extension dialect, the tools/call
	// before it became a task) asks for client input (Event.Input), which
	// is being answered through Options.InputHandler.
	EventInput
	// EventResult: the tool's result (Event.Result), the last event. A tool
	// that reported an error has Result.IsError set.
	EventResult
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventCreated:
		return "created"
	case EventStatus:
		return "status"
	case EventInput:
		return "input"
	case EventResult:
		return "result"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one step of a task-augmented tool call.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// Task is the task as last observed (a copy); nil for a result that
	// came without a task, and for input requested before a task existed.
	Task *Task
	// Input is the request for client input (EventInput).
	Input *InputRequest
	// Result is the tool's result (EventResult).
	Result *mcp.CallToolResult
	// ImmediateResponse is the core dialect's optional
	// model-immediate-response text of the creation reply (EventCreated).
	ImmediateResponse string
}

// CallOptions shape one CallTool.
type CallOptions struct {
	// TTL is the task ttl to ask for (core dialect); zero lets the server
	// choose. The server may shorten it; Task.TTL reports the actual value.
	TTL time.Duration
	// Meta is merged into the request's _meta.
	Meta map[string]any
	// CancelOnStop cancels the server task (tasks/cancel) when the call
	// stops before the task has ended: ctx ended, the caller stopped
	// iterating, or following the task failed. Without it the task keeps
	// running on the server and can be picked up with GetTask/TaskResult.
	CancelOnStop bool
	// AllowPlain makes a call the server or tool cannot run as a task go
	// out as a plain tools/call (its result arrives as the only event)
	// instead of failing with ErrCapability.
	AllowPlain bool
}

// CallTool calls a tool as a task and returns the task's life as an
// iterator: EventCreated, EventStatus for each observed change, EventInput
// for each input request being answered, then EventResult. A failure ends
// the sequence with a non-nil error: an *RPCError with the server's own
// code, message and data when the call or the task failed with a JSON-RPC
// error, ErrCancelled when the task was cancelled, ctx.Err() when ctx
// ended, ErrCapability (before anything is sent) when the server or the
// tool cannot run it as a task.
//
// Nothing is sent until the sequence is iterated. A server may answer
// without creating a task (an extension-dialect server decides for
// itself); the sequence is then a single EventResult.
//
// In the core dialect the task is watched with tasks/get, polled at the
// server's suggested interval (Options.PollInterval when it suggests none)
// with backoff while nothing changes, and with notifications/tasks/status
// when the server pushes them; the outcome comes from tasks/result, whose
// stream also carries the task's input requests. In the extension dialect
// tasks/get is polled, input requests are answered with tasks/update, and
// the outcome is inline.
func (c *Client) CallTool(ctx context.Context, name string, args any, opts *CallOptions) iter.Seq2[Event, error] {
	var o CallOptions
	if opts != nil {
		o = *opts
	}
	return func(yield func(Event, error) bool) {
		r := &callRun{c: c, name: name, args: args, opts: o, yield: yield}
		r.run(ctx)
	}
}

// CallToolAndWait runs CallTool to the end and returns the tool's result.
func (c *Client) CallToolAndWait(ctx context.Context, name string, args any, opts *CallOptions) (*mcp.CallToolResult, error) {
	for ev, err := range c.CallTool(ctx, name, args, opts) {
		if err != nil {
			return nil, err
		}
		if ev.Kind == EventResult {
			return ev.Result, nil
		}
	}
	return nil, errors.New("client: the call ended without a result")
}

// callRun is one CallTool iteration.
type callRun struct {
	c     *Client
	name  string
	args  any
	opts  CallOptions
	yield func(Event, error) bool

	taskID   string
	cur      *Task
	ended    bool // the sequence is over
	stopped  bool // the caller stopped iterating
	terminal bool // the task is known to have ended
}

// emit yields an event; it returns false when the caller stopped.
func (r *callRun) emit(ev Event) bool {
	if r.ended {
		return false
	}
	if !r.yield(ev, nil) {
		r.stopped, r.ended = true, true
		return false
	}
	return true
}

// fail ends the sequence with err.
func (r *callRun) fail(err error) {
	if r.ended {
		return
	}
	r.ended = true
	r.yield(Event{}, err)
}

// finish ends the sequence with a result.
func (r *callRun) finish(res *mcp.CallToolResult) {
	if r.emit(Event{Kind: EventResult, Task: r.cur.clone(), Result: res}) {
		r.ended = true
	}
	if r.taskID != "" {
		r.c.retrieved(r.taskID)
	}
}

// failTask ends the sequence with the error a task ended with.
func (r *callRun) failTask(err error) {
	r.fail(err)
	if r.taskID != "" && r.terminal {
		r.c.retrieved(r.taskID)
	}
}

func (r *callRun) run(ctx context.Context) {
	defer func() {
		if r.taskID != "" && !r.terminal && r.opts.CancelOnStop {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if _, err := r.c.CancelTask(cctx, r.taskID); err != nil {
				r.c.log.Debug("cancelling task on stop", "task", r.taskID, "error", err)
			}
		}
	}()
	asTask, err := r.c.planTaskCall(ctx, r.name, r.opts.AllowPlain)
	if err != nil {
		r.fail(err)
		return
	}
	if r.c.dialect == Extension {
		r.runExtension(ctx)
		return
	}
	r.runCore(ctx, asTask)
}

// planTaskCall decides, before anything is sent, whether the call can be
// a task, and refuses it when it cannot (unless plain calls are allowed).
func (c *Client) planTaskCall(ctx context.Context, name string, allowPlain bool) (bool, error) {
	refuse := func(format string, args ...any) (bool, error) {
		if allowPlain {
			return false, nil
		}
		return false, capabilityError(format, args...)
	}
	switch c.dialect {
	case Core:
		if !c.support.ToolsCall {
			return refuse("the server does not declare tasks.requests.tools.call; it cannot run %q as a task", name)
		}
	case Extension:
		if !c.support.Extension {
			return refuse("the server does not advertise the %s extension; it cannot run %q as a task", ExtensionID, name)
		}
	}
	t, err := c.tool(ctx, name)
	if err != nil {
		return false, err
	}
	// In the core dialect an undeclared support level means forbidden; in
	// the extension the server decides, so only an explicit "forbidden"
	// rules a task out.
	if t.TaskSupport == TaskForbidden && (c.dialect == Core || t.declared) {
		return refuse("tool %q does not support tasks (execution.taskSupport is forbidden)", name)
	}
	return true, nil
}

// callReply is a decoded tools/call reply.
type callReply struct {
	task         *Task
	immediate    string
	result       *mcp.CallToolResult
	inputs       map[string]InputRequest
	inputNeeded  bool
	requestState string
}

func decodeCallReply(raw json.RawMessage) (*callReply, error) {
	var probe struct {
		ResultType    string                     `json:"resultType"`
		Task          json.RawMessage            `json:"task"`
		TaskID        json.RawMessage            `json:"taskId"`
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		RequestState  string                     `json:"requestState"`
		Meta          map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, malformed("tools/call result: %v", err)
	}
	switch {
	case probe.ResultType == "task" || (probe.ResultType == "" && !isAbsent(probe.Task)):
		t, err := decodeTask(raw)
		if err != nil {
			return nil, err
		}
		rep := &callReply{task: t}
		if s, ok := probe.Meta[metaImmediateResponse]; ok {
			_ = json.Unmarshal(s, &rep.immediate)
		}
		return rep, nil
	case probe.ResultType == "input_required":
		inputs, err := decodeInputRequests(probe.InputRequests)
		if err != nil {
			return nil, malformed("tools/call: %v", err)
		}
		return &callReply{inputs: inputs, inputNeeded: true, requestState: probe.RequestState}, nil
	case probe.ResultType == "" || probe.ResultType == "complete":
		res, err := decodeToolResult(raw)
		if err != nil {
			return nil, err
		}
		return &callReply{result: res}, nil
	}
	return nil, malformed("tools/call: unknown resultType %q", probe.ResultType)
}

func decodeToolResult(raw json.RawMessage) (*mcp.CallToolResult, error) {
	var res mcp.CallToolResult
	if isAbsent(raw) {
		return nil, malformed("empty tool result")
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, malformed("tool result: %v", err)
	}
	return &res, nil
}

// ---- core dialect ----

func (r *callRun) runCore(ctx context.Context, asTask bool) {
	params := map[string]any{"name": r.name}
	if r.args != nil {
		params["arguments"] = r.args
	}
	if asTask {
		task := map[string]any{}
		if r.opts.TTL > 0 {
			task["ttl"] = r.opts.TTL.Milliseconds()
		}
		params["task"] = task
	}
	raw, err := r.c.callWith(ctx, methodToolsCall, params, r.opts.Meta, asTask)
	if err != nil {
		r.fail(err)
		return
	}
	rep, err := decodeCallReply(raw)
	if err != nil {
		r.fail(err)
		return
	}
	switch {
	case rep.result != nil:
		r.finish(rep.result)
	case rep.task != nil:
		r.created(rep)
		if !r.ended {
			r.followCore(ctx)
		}
	default:
		r.fail(malformed("tools/call: a %s server asked for input with a result (resultType input_required)", CoreVersion))
	}
}

// created records and reports a new task.
func (r *callRun) created(rep *callReply) {
	r.taskID, r.cur = rep.task.ID, rep.task
	r.terminal = rep.task.Status.Terminal()
	r.c.track(rep.task, r.name)
	r.emit(Event{Kind: EventCreated, Task: rep.task.clone(), ImmediateResponse: rep.immediate})
}

// see takes a new observation of the task. It reports whether the status
// changed; it emits EventStatus for a change.
func (r *callRun) see(t *Task) bool {
	r.c.observe(t)
	if r.cur.Status.Terminal() && !t.Status.Terminal() {
		return false // a stale observation
	}
	changed := t.Status != r.cur.Status || t.StatusMessage != r.cur.StatusMessage
	r.cur = t
	r.terminal = t.Status.Terminal()
	if changed {
		r.emit(Event{Kind: EventStatus, Task: t.clone()})
	}
	return changed
}

type rawOutcome struct {
	raw json.RawMessage
	err error
}

func (r *callRun) followCore(ctx context.Context) {
	c := r.c
	w := c.addWatcher(r.taskID, true)
	defer c.removeWatcher(w)
	pol := newPoller(c, r.cur)
	delay := pol.delay
	// A status pushed before the watcher existed only reached the record.
	if tt, ok := c.trackedStatus(r.taskID); ok && tt.Status != r.cur.Status {
		delay = 0
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	var results chan rawOutcome
	for !r.ended {
		if results == nil && (r.cur.Status == StatusInputRequired || (r.cur.Status.Terminal() && r.cur.Status != StatusCancelled)) {
			results = make(chan rawOutcome, 1)
			go func() {
				raw, err := c.call(rctx, methodTasksResult, map[string]any{"taskId": r.taskID})
				results <- rawOutcome{raw, err}
			}()
		}
		if results == nil && r.cur.Status == StatusCancelled {
			r.failTask(cancelledError(r.cur))
			return
		}
		select {
		case <-ctx.Done():
			r.fail(ctx.Err())
			return
		case t := <-w.status:
			// A pushed status stands in for a poll: the next poll is
			// pushed back, not brought forward.
			pol.base(t)
			if r.see(t) {
				resetTimer(timer, pol.next(true))
			} else {
				resetTimer(timer, pol.delay)
			}
		case ask := <-w.inputs:
			r.answer(ctx, ask)
		case <-timer.C:
			t, err := c.GetTask(ctx, r.taskID)
			if err != nil {
				if ctx.Err() != nil {
					r.fail(ctx.Err())
				} else {
					r.fail(err)
				}
				return
			}
			pol.base(t)
			resetTimer(timer, pol.next(r.see(t)))
		case out := <-results:
			r.coreOutcome(ctx, out)
			return
		}
	}
}

// answer reports an input request and answers it with InputHandler.
func (r *callRun) answer(ctx context.Context, ask *inputAsk) {
	req := ask.req
	r.emit(Event{Kind: EventInput, Task: r.cur.clone(), Input: &req})
	res, err := r.c.answerDirect(ctx, ask.taskID, ask.req)
	ask.reply <- inputAnswer{result: res, err: err}
}

// coreOutcome turns the reply of tasks/result into the last event.
func (r *callRun) coreOutcome(ctx context.Context, out rawOutcome) {
	if out.err == nil {
		res, err := decodeToolResult(out.raw)
		if err != nil {
			r.fail(err)
			return
		}
		if !r.cur.Status.Terminal() {
			// Report the final status before the result.
			if t, err := r.c.GetTask(ctx, r.taskID); err == nil {
				r.see(t)
			}
		}
		r.terminal = true
		r.finish(res)
		return
	}
	if ctx.Err() != nil {
		r.fail(ctx.Err())
		return
	}
	r.failTask(r.c.taskFailure(ctx, r.taskID, out.err, r.see))
}

// taskFailure interprets an error from tasks/result: the task's own
// failure (kept as the server sent it), a cancellation, or a missing task.
// see, when set, receives the task's current state.
func (c *Client) taskFailure(ctx context.Context, id string, err error, see func(*Task) bool) error {
	var re *RPCError
	if !errors.As(err, &re) {
		return err
	}
	t, gerr := c.GetTask(ctx, id)
	if gerr != nil {
		return err // the task is gone: keep the classification (ErrNotFound)
	}
	if see != nil {
		see(t)
	} else {
		c.observe(t)
	}
	switch t.Status {
	case StatusCancelled:
		return fmt.Errorf("%w: %s", cancelledError(t), re.Message)
	case StatusFailed, StatusCompleted:
		// The error is what the tool call itself ended with.
		out := *re
		out.kind = nil
		return &out
	}
	return err
}

func cancelledError(t *Task) error {
	if t.StatusMessage != "" {
		return fmt.Errorf("%w: task %s: %s", ErrCancelled, t.ID, t.StatusMessage)
	}
	return fmt.Errorf("%w: task %s", ErrCancelled, t.ID)
}

// ---- extension dialect ----

// maxInputRounds bounds the input_required round trips of one tools/call.
const maxInputRounds = 10

func (r *callRun) runExtension(ctx context.Context) {
	params := map[string]any{"name": r.name}
	if r.args != nil {
		params["arguments"] = r.args
	}
	for round := 0; ; round++ {
		raw, err := r.c.callWith(ctx, methodToolsCall, params, r.opts.Meta, true)
		if err != nil {
			r.fail(err)
			return
		}
		rep, err := decodeCallReply(raw)
		if err != nil {
			r.fail(err)
			return
		}
		switch {
		case rep.result != nil:
			r.finish(rep.result)
			return
		case rep.task != nil:
			r.created(rep)
			if !r.ended {
				r.followExtension(ctx)
			}
			return
		}
		// input_required: answer and retry the call.
		if round+1 >= maxInputRounds {
			r.fail(fmt.Errorf("client: tools/call %q still needs input after %d rounds", r.name, maxInputRounds))
			return
		}
		responses := map[string]json.RawMessage{}
		for _, key := range slices.Sorted(maps.Keys(rep.inputs)) {
			req := rep.inputs[key]
			r.emit(Event{Kind: EventInput, Input: &req})
			res, err := r.c.answerDirect(ctx, "", req)
			if err != nil {
				r.fail(fmt.Errorf("client: answering input request %q of %s: %w", key, r.name, err))
				return
			}
			responses[key] = res
			if r.ended {
				return
			}
		}
		params["inputResponses"] = responses
		if rep.requestState != "" {
			params["requestState"] = rep.requestState
		} else {
			delete(params, "requestState")
		}
	}
}

func (r *callRun) followExtension(ctx context.Context) {
	c := r.c
	pol := newPoller(c, r.cur)
	// The creation reply carries no outcome: poll at once if it is
	// already terminal.
	delay := pol.delay
	if r.cur.Status.Terminal() || r.cur.Status == StatusInputRequired {
		delay = 0
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	answered := map[string]bool{}
	for !r.ended {
		select {
		case <-ctx.Done():
			r.fail(ctx.Err())
			return
		case <-timer.C:
		}
		t, err := c.GetTask(ctx, r.taskID)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			r.fail(err)
			return
		}
		pol.base(t)
		changed := r.see(t)
		if r.ended {
			return
		}
		switch t.Status {
		case StatusCompleted, StatusFailed:
			r.extOutcome(t)
			return
		case StatusCancelled:
			r.failTask(cancelledError(t))
			return
		case StatusInputRequired:
			n, err := c.answerInputs(ctx, t, answered, func(req InputRequest) bool {
				return r.emit(Event{Kind: EventInput, Task: t.clone(), Input: &req})
			})
			if err != nil {
				r.fail(err)
				return
			}
			if n > 0 {
				changed = true
			}
		}
		resetTimer(timer, pol.next(changed))
	}
}

// extOutcome ends the call with an extension-dialect terminal task.
func (r *callRun) extOutcome(t *Task) {
	r.terminal = true
	switch {
	case t.Error != nil:
		r.failTask(t.Error)
	case !isAbsent(t.Result):
		res, err := decodeToolResult(t.Result)
		if err != nil {
			r.fail(err)
			return
		}
		r.finish(res)
	case t.Status == StatusFailed:
		msg := t.StatusMessage
		if msg == "" {
			msg = "task failed"
		}
		r.failTask(&RPCError{Code: codeInternalError, Message: msg})
	default:
		r.fail(malformed("task %s is completed but tasks/get carries no result", t.ID))
	}
}

// answerInputs answers, through InputHandler, the input requests of an
// extension-dialect task not answered yet, and sends them with
// tasks/update. report is called before each answer (it may return false
// when nobody listens any more; the request is answered anyway). It returns
// how many requests it answered.
func (c *Client) answerInputs(ctx context.Context, t *Task, answered map[string]bool, report func(InputRequest) bool) (int, error) {
	responses := map[string]json.RawMessage{}
	for _, key := range slices.Sorted(maps.Keys(t.InputRequests)) {
		if answered[key] {
			continue
		}
		req := t.InputRequests[key]
		if report != nil {
			report(req)
		}
		res, err := c.answerDirect(ctx, t.ID, req)
		if err != nil {
			return 0, fmt.Errorf("client: answering input request %q of task %s: %w", key, t.ID, err)
		}
		responses[key] = res
	}
	if len(responses) == 0 {
		return 0, nil
	}
	if _, err := c.call(ctx, methodTasksUpdate, map[string]any{"taskId": t.ID, "inputResponses": responses}); err != nil {
		return 0, err
	}
	for key := range responses {
		answered[key] = true
	}
	return len(responses), nil
}

// ---- polling ----

// poller computes polling delays: the server's suggested interval (or
// Options.PollInterval), bounded by Min/MaxPollInterval, growing by half
// after each poll that saw no change up to five times the base.
type poller struct {
	c     *Client
	basis time.Duration
	delay time.Duration
}

func newPoller(c *Client, t *Task) *poller {
	p := &poller{c: c}
	p.base(t)
	p.delay = p.basis
	return p
}

// base updates the base interval from the task's suggestion.
func (p *poller) base(t *Task) {
	d := t.PollInterval
	if d <= 0 {
		d = p.c.opts.PollInterval
	}
	p.basis = p.clamp(d)
}

func (p *poller) clamp(d time.Duration) time.Duration {
	return min(max(d, p.c.opts.MinPollInterval), p.c.opts.MaxPollInterval)
}

// next returns the delay before the next poll.
func (p *poller) next(changed bool) time.Duration {
	if changed {
		p.delay = p.basis
		return p.delay
	}
	p.delay = p.clamp(min(p.delay+p.delay/2, 5*p.basis))
	if p.delay < p.basis {
		p.delay = p.basis
	}
	return p.delay
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(d)
}
