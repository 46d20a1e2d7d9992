package taskrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The built-in task tools give a client that cannot send tasks/get,
// tasks/result or tasks/cancel (a model in an LLM host, which only calls
// tools) the same reach: task_result waits for a task and returns its
// result, task_cancel cancels one. They obey owners as tasks/get does.

// Default names of the built-in task tools.
const (
	DefaultResultToolName = "task_result"
	DefaultCancelToolName = "task_cancel"
)

// TaskToolsOptions name the built-in task tools; nil or empty names mean
// the defaults.
type TaskToolsOptions struct {
	ResultName string
	CancelName string
	// ForkName names the tool that runs a workflow task again from a step
	// (workflow.Bridge.AddForkTool; default workflow_fork), which the
	// builder registers beside these.
	ForkName string
	// PauseName and ResumeName name the tools that pause and resume a
	// workflow task (default task_pause and task_resume; see Pauser).
	PauseName  string
	ResumeName string
}

// A Reporter is implemented by a KindHandler whose tasks may wait for the
// client while active (workflows): task_result answers with Report for an
// active task of its kind instead of only saying it still runs, and stops
// waiting once Report says the task waits for the client.
type Reporter interface {
	// Report describes active task t for a client that reads tool results
	// (a model): where it stands and what to do next. waiting reports that
	// the task waits for the client, so waiting for it to end is futile.
	Report(ctx context.Context, t *store.Task) (res *mcp.CallToolResult, waiting bool)
}

// taskTools are the built-in task tools (task_result, task_cancel, and
// task_pause and task_resume, pause.go), registered on the tool registry.
type taskTools struct {
	e      taskToolEngine
	kinds  *kinds
	tools  *toolRegistry
	pauses *pauses
	// hostDeadline bounds task_result's wait (Options.HostDeadline).
	hostDeadline time.Duration
}

// taskToolEngine is what the task tools need of the engine; *Router has
// it.
type taskToolEngine interface {
	Store() store.Store
	// Resolve resolves the tool call's request (its owner).
	Resolve(ctx context.Context, req mcp.Request) *Request
	// TaskFor reads the task a tool names, as tasks/get would.
	TaskFor(ctx context.Context, q *Request, id string) (*store.Task, error)
	// Await waits for the task task_result waits for.
	Await(ctx context.Context, id string, done func(*store.Task) bool) (*store.Task, error)
	// cancelTask cancels the task task_cancel names.
	cancelTask(ctx context.Context, t *store.Task, message string) (*store.Task, error)
}

// taskResultIn is task_result's input.
type taskResultIn struct {
	TaskID      string   `json:"task_id" jsonschema:"the id of the task (from the tool result or handoff that named it)"`
	WaitSeconds *float64 `json:"wait_seconds,omitempty" jsonschema:"how long to wait for the task to end, in seconds (default and maximum: the server's host deadline)"`
}

// taskCancelIn is task_cancel's input.
type taskCancelIn struct {
	TaskID string `json:"task_id" jsonschema:"the id of the task to cancel"`
}

func (tt *taskTools) add(opts *TaskToolsOptions) {
	var o TaskToolsOptions
	if opts != nil {
		o = *opts
	}
	if o.ResultName == "" {
		o.ResultName = DefaultResultToolName
	}
	if o.CancelName == "" {
		o.CancelName = DefaultCancelToolName
	}
	addTool(tt.tools, &mcp.Tool{Name: o.ResultName, Description: "Wait for a task (a long tool call that became a task, or a workflow task) and return its result: the tool's own result once the task has ended, or where it stands (for a workflow: its handoff, saying what to do next). Call it with the task id a tool result or handoff gave you.",
		InputSchema: taskResultSchema()},
		tt.taskResultTool, nil)
	addTool(tt.tools, &mcp.Tool{Name: o.CancelName, Description: "Cancel a task (a long tool call that became a task, or a workflow task): its work stops. Call it with the task id a tool result or handoff gave you."},
		tt.taskCancelTool, nil)
	tt.tools.setTaskTools(o.ResultName, o.CancelName, o.withPauseDefaults())
	tt.pauseToolsIfPausable()
}

// toolTask loads the task a built-in tool names, as tasks/get would: an
// unknown or foreign id gets an isError result naming it.
func (tt *taskTools) toolTask(ctx context.Context, id string) (*store.Task, *mcp.CallToolResult) {
	q := tt.e.Resolve(ctx, nil)
	if q.OwnerErr != nil {
		return nil, errorResult("%v", q.OwnerErr)
	}
	if id == "" {
		return nil, errorResult("task_id is empty: pass the id of a task")
	}
	t, err := tt.e.TaskFor(ctx, q, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errorResult("there is no task %q that you may see: the id is wrong, the task expired, or it belongs to someone else", id)
		}
		return nil, errorResult("reading task %q: %v", id, err)
	}
	tt.kinds.touched(ctx, t)
	return t, nil
}

func (tt *taskTools) taskResultTool(ctx context.Context, _ *mcp.CallToolRequest, in taskResultIn) (*mcp.CallToolResult, any, error) {
	t, bad := tt.toolTask(ctx, in.TaskID)
	if bad != nil {
		return bad, nil, nil
	}
	wait, err := waitFor(tt.hostDeadline, in.WaitSeconds)
	if err != nil {
		return errorResult("%v", err), nil, nil
	}
	rep := tt.kinds.reporter(t)
	settled := func(t *store.Task) bool {
		if t.Status.Terminal() {
			return true
		}
		if rep != nil {
			_, waiting := rep.Report(ctx, t)
			return waiting
		}
		return false
	}
	if !settled(t) && wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, wait)
		got, err := tt.e.Await(wctx, t.ID, settled)
		cancel()
		if got != nil {
			t = got
		}
		if err != nil && ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if err != nil {
			// The wait ran out: what it read last may be stale (a change
			// another replica made, whose announcement has not come or
			// was lost), so the answer reads the task again, as the
			// workflow prompt's wait does.
			if cur, gerr := tt.e.Store().Get(ctx, t.ID); gerr == nil {
				t = cur
			}
		}
	}
	return tt.resultOf(ctx, t, rep), nil, nil
}

// taskResultSchema is task_result's input schema: the one inferred from
// taskResultIn, with wait_seconds a plain number (optional: absent means
// the host deadline) rather than the [null, number] a pointer infers,
// which strict validators (the MCP Inspector's --strict) flag.
func taskResultSchema() *jsonschema.Schema {
	s, err := jsonschema.For[taskResultIn](nil)
	if err != nil {
		panic(err) // a fixed type: cannot fail
	}
	if ws := s.Properties["wait_seconds"]; ws != nil {
		ws.Types, ws.Type = nil, "number"
	}
	return s
}

// waitFor is how long task_result waits: the host deadline (hostDeadline,
// DefaultHostDeadline when off), or less when seconds asks for less.
// seconds is clamped before any arithmetic: a value past the deadline
// (1e308, 1e11, +Inf) waits the deadline; a negative one, or NaN, is
// refused.
func waitFor(hostDeadline time.Duration, seconds *float64) (time.Duration, error) {
	wait := hostDeadline
	if wait < 0 {
		wait = DefaultHostDeadline
	}
	if seconds == nil {
		return wait, nil
	}
	switch s := *seconds; {
	case math.IsNaN(s):
		return 0, errors.New("wait_seconds is not a number: pass a number of seconds, or leave it out to wait up to the server's host deadline")
	case s < 0:
		return 0, fmt.Errorf("wait_seconds is negative (%g): pass 0 to read the task without waiting, or a positive number of seconds", s)
	case s >= wait.Seconds():
		return wait, nil
	default:
		return time.Duration(s * float64(time.Second)), nil
	}
}

// resultOf is task_result's answer for t as it stands.
func (tt *taskTools) resultOf(ctx context.Context, t *store.Task, rep Reporter) *mcp.CallToolResult {
	switch {
	case t.Status == mcptask.StatusCompleted || (t.Status == mcptask.StatusFailed && t.Error == nil && len(t.Result) > 0):
		var res mcp.CallToolResult
		if err := json.Unmarshal(t.Result, &res); err != nil {
			return errorResult("task %s ended, but its result cannot be read: %v", t.ID, err)
		}
		if res.Meta == nil {
			res.Meta = mcp.Meta{}
		}
		for k, v := range mcptask.RelatedTaskMeta(t.ID) {
			res.Meta[k] = v
		}
		return &res
	case t.Status == mcptask.StatusFailed:
		msg := t.StatusMessage
		if t.Error != nil {
			msg = t.Error.Message
		}
		return withState(errorResult("task %s failed: %s", t.ID, msg), t)
	case t.Status == mcptask.StatusCancelled:
		return withState(errorResult("task %s was cancelled: %s", t.ID, t.StatusMessage), t)
	}
	latest := latestReport(ctx, tt.e.Store(), t.ID) // the model never sees statusMessage in some hosts
	if rep != nil {
		if res, waiting := rep.Report(ctx, t); res != nil {
			if latest != "" && !waiting {
				res.Content = append(res.Content, &mcp.TextContent{Text: "Latest progress: " + latest})
			}
			return res
		}
	}
	msg := ""
	if t.StatusMessage != "" {
		msg = " (" + t.StatusMessage + ")"
	}
	if latest != "" {
		msg += ". Latest progress: " + latest
	}
	return withState(textResult("Task %s is still running%s. Call %s again with {\"task_id\": %s} to keep waiting, or %s to stop it.",
		t.ID, msg, tt.tools.resultToolName(), strconv.Quote(t.ID), tt.tools.cancelToolName()), t)
}

func (tt *taskTools) taskCancelTool(ctx context.Context, _ *mcp.CallToolRequest, in taskCancelIn) (*mcp.CallToolResult, any, error) {
	t, bad := tt.toolTask(ctx, in.TaskID)
	if bad != nil {
		return bad, nil, nil
	}
	if t.Status.Terminal() {
		return withState(textResult("Task %s had already ended (%s); there was nothing to cancel.", t.ID, t.Status), t), nil, nil
	}
	nt, err := tt.e.cancelTask(ctx, t, "cancelled by request")
	if err != nil {
		if cur, gerr := tt.e.Store().Get(ctx, t.ID); gerr == nil && cur.Status.Terminal() {
			return withState(textResult("Task %s had already ended (%s); there was nothing to cancel.", cur.ID, cur.Status), cur), nil, nil
		}
		return errorResult("cancelling task %s: %v", t.ID, err), nil, nil
	}
	return withState(textResult("Task %s is cancelled; its work was stopped.", nt.ID), nt), nil, nil
}

func errorResult(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

func textResult(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// withState adds t's state as structured content and the related task.
func withState(res *mcp.CallToolResult, t *store.Task) *mcp.CallToolResult {
	res.StructuredContent = taskState(t)
	res.Meta = mcp.Meta(mcptask.RelatedTaskMeta(t.ID))
	return res
}
