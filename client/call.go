package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"

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
	// OnEvent, when set, receives the task's events as they happen
	// (StreamEvents: its progress, log lines, output, status changes),
	// from a goroutine of its own, one at a time, from the task's
	// creation on; the events up to the task's end come before the
	// sequence's EventResult (or error), as far as the server sends them
	// within a few seconds.
	OnEvent func(TaskEvent)
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
	ctx   context.Context // the call's

	taskID   string
	events   func(wait time.Duration) // stops following the task's events (OnEvent)
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
	if ev.Kind == EventCreated && ev.Task != nil && r.opts.OnEvent != nil && r.events == nil {
		r.events = r.c.followEvents(r.ctx, ev.Task.ID, r.opts.OnEvent)
	}
	if ev.Kind == EventResult {
		r.stopEvents(eventsGrace)
	}
	if !r.yield(ev, nil) {
		r.stopped, r.ended = true, true
		return false
	}
	return true
}

// stopEvents stops following the task's events (OnEvent), after waiting
// at most wait for the ones still to come.
func (r *callRun) stopEvents(wait time.Duration) {
	if r.events != nil {
		r.events(wait)
		r.events = nil
	}
}

// eventsGrace bounds the wait for a task's last events before its result
// is yielded.
const eventsGrace = 5 * time.Second

// fail ends the sequence with err.
func (r *callRun) fail(err error) {
	if r.ended {
		return
	}
	r.stopEvents(0)
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
	if r.terminal {
		r.stopEvents(eventsGrace) // its last events first
	}
	r.fail(err)
	if r.taskID != "" && r.terminal {
		r.c.retrieved(r.taskID)
	}
}

func (r *callRun) run(ctx context.Context) {
	r.ctx = ctx
	defer r.stopEvents(0)
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
	if r.c.dialect.ServerDecidesTasks() {
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
	if c.dialect.ServerDeclaresTaskMethods() {
		if !c.support.ToolsCall {
			return refuse("the server does not declare tasks.requests.tools.call; it cannot run %q as a task", name)
		}
	} else if !c.support.Extension {
		return refuse("the server does not advertise the %s extension; it cannot run %q as a task", mcptask.ExtensionID, name)
	}
	t, err := c.tool(ctx, name)
	if err != nil {
		return false, err
	}
	// In the core dialect an undeclared support level means forbidden; in
	// the extension the server decides, so only an explicit "forbidden"
	// rules a task out.
	if t.TaskSupport == mcptask.TaskForbidden && (c.dialect.UndeclaredForbidsTasks() || t.declared) {
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

// send makes the tools/call and decodes its reply; on failure it ends the
// run with the error and reports false.
func (r *callRun) send(ctx context.Context, params map[string]any, asTask bool) (*callReply, bool) {
	raw, err := r.c.callWith(ctx, mcptask.MethodToolsCall, params, r.opts.Meta, asTask)
	if err == nil {
		var rep *callReply
		if rep, err = decodeCallReply(raw); err == nil {
			return rep, true
		}
	}
	r.fail(err)
	return nil, false
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
	case probe.ResultType == mcptask.ResultTypeTask || (probe.ResultType == "" && !isAbsent(probe.Task)):
		t, err := decodeTask(raw)
		if err != nil {
			return nil, err
		}
		rep := &callReply{task: t}
		if s, ok := probe.Meta[mcptask.MetaModelImmediateResponse]; ok {
			_ = json.Unmarshal(s, &rep.immediate)
		}
		return rep, nil
	case probe.ResultType == mcptask.ResultTypeInputRequired:
		inputs, err := decodeInputRequests(probe.InputRequests)
		if err != nil {
			return nil, malformed("tools/call: %v", err)
		}
		return &callReply{inputs: inputs, inputNeeded: true, requestState: probe.RequestState}, nil
	case probe.ResultType == "" || probe.ResultType == mcptask.ResultTypeComplete:
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
