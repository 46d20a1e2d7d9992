package taskrouter

import (
	"context"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
)

// Pausing a task. A task kind whose work can stop starting and go on later
// (a workflow: no new step starts, its timers keep their times) implements
// Pauser on its KindHandler; Router.Pauses (Pause, Resume), the built-in
// tools task_pause and task_resume, the dashboard and the CLI all reach
// it. A paused task keeps the wire status working (the one the
// spec defines for it; clients reject others): its status message says
// it is paused and by whom.

// Default names of the built-in pause tools.
const (
	DefaultPauseToolName  = "task_pause"
	DefaultResumeToolName = "task_resume"
)

// ErrNotPausable is matched by the errors of a pause or resume of a task
// whose kind cannot pause (a tool call), or that has ended.
var ErrNotPausable = errors.New("taskrouter: the task cannot be paused or resumed")

// PauseRequest says who pauses a task, why, and what happens to the work
// running at that moment.
type PauseRequest struct {
	// By names who pauses: the requestor's owner, an operator's name.
	By string
	// Reason says why, for the task's status message and history.
	Reason string
	// Cut stops the work running now (it runs again on resume) instead
	// of letting it finish.
	Cut bool
}

// A Pauser is implemented by a KindHandler whose tasks can be paused
// (workflows). Both methods record who did it in the task's history, and
// return the task as written and a sentence saying what happened.
type Pauser interface {
	// Pause pauses active task t: nothing new starts; running work
	// finishes, or is stopped with p.Cut.
	Pause(ctx context.Context, t *store.Task, p PauseRequest) (*store.Task, string, error)
	// Resume resumes paused task t, by by: what was due starts.
	Resume(ctx context.Context, t *store.Task, by string) (*store.Task, string, error)
}

// pauser returns t's kind handler when it is a Pauser.
func (k *kinds) pauser(t *store.Task) Pauser {
	p, _ := k.of(t).(Pauser)
	return p
}

// Pauses is the handle of pausing tasks (Router.Pauses): a task whose
// kind's handler is a Pauser pauses and resumes through it.
type Pauses struct{ p *pauses }

// pauses pauses and resumes tasks through their kinds' Pausers. It reads
// the tasks from st and their kinds from the kinds' registry.
type pauses struct {
	st    store.Store
	kinds *kinds
}

// pausable returns the Pauser of task t, or an error that says why t
// cannot be paused or resumed.
func (ps *pauses) pausable(t *store.Task) (Pauser, error) {
	if t.Status.Terminal() {
		return nil, fmt.Errorf("%w: task %s has ended (%s)", ErrNotPausable, t.ID, t.Status)
	}
	p := ps.kinds.pauser(t)
	if p == nil {
		return nil, fmt.Errorf("%w: task %s is a %s task; only workflow tasks can be paused (cancel it instead)", ErrNotPausable, t.ID, t.Labels[LabelKind])
	}
	return p, nil
}

// Pause pauses task id (see Pauser), whoever owns it: callers check who
// may (the built-in tools let a requestor pause the tasks it may
// access).
func (h *Pauses) Pause(ctx context.Context, id string, p PauseRequest) (*store.Task, string, error) {
	return h.p.with(ctx, id, func(pr Pauser, t *store.Task) (*store.Task, string, error) { return pr.Pause(ctx, t, p) })
}

// Resume resumes paused task id, by by (see Pauser).
func (h *Pauses) Resume(ctx context.Context, id, by string) (*store.Task, string, error) {
	return h.p.with(ctx, id, func(pr Pauser, t *store.Task) (*store.Task, string, error) { return pr.Resume(ctx, t, by) })
}

// with reads task id and hands it to its kind's Pauser.
func (ps *pauses) with(ctx context.Context, id string, do func(pr Pauser, t *store.Task) (*store.Task, string, error)) (*store.Task, string, error) {
	t, err := ps.st.Get(ctx, id)
	if err != nil {
		return nil, "", err
	}
	pr, err := ps.pausable(t)
	if err != nil {
		return nil, "", err
	}
	return do(pr, t)
}

// taskPauseIn is task_pause's input.
type taskPauseIn struct {
	TaskID string `json:"task_id" jsonschema:"the id of the workflow task to pause"`
	Reason string `json:"reason,omitempty" jsonschema:"why, for the task's status and history"`
	Cut    bool   `json:"cut,omitempty" jsonschema:"stop the steps running now too (they run again on resume); by default they finish"`
}

// taskResumeIn is task_resume's input.
type taskResumeIn struct {
	TaskID string `json:"task_id" jsonschema:"the id of the paused workflow task to resume"`
}

// pauseToolsIfPausable registers the pause tools once both AddTaskTools
// asked for them and a kind can be paused, in either order.
func (tt *taskTools) pauseToolsIfPausable() {
	if !tt.kinds.pausable() {
		return
	}
	if names := tt.tools.claimPauseTools(); names != nil {
		tt.addPauseTools(*names)
	}
}

// addPauseTools registers task_pause and task_resume (names from o).
func (tt *taskTools) addPauseTools(o TaskToolsOptions) {
	addTool(tt.tools, &mcp.Tool{Name: o.PauseName, Description: "Pause a workflow task: no new step starts (its timers keep their times) until it is resumed; the steps running now finish, or stop with cut (they run again on resume). The task stays working; its status says paused and by whom. Call it with the task id a tool result or handoff gave you."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in taskPauseIn) (*mcp.CallToolResult, any, error) {
			return tt.pauseTool(ctx, in.TaskID, func(q *Request, t *store.Task, p Pauser) (*store.Task, string, error) {
				return p.Pause(ctx, t, PauseRequest{By: q.Owner, Reason: in.Reason, Cut: in.Cut})
			})
		}, nil)
	addTool(tt.tools, &mcp.Tool{Name: o.ResumeName, Description: "Resume a paused workflow task: what was due starts again. Call it with the task id a tool result or handoff gave you."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in taskResumeIn) (*mcp.CallToolResult, any, error) {
			return tt.pauseTool(ctx, in.TaskID, func(q *Request, t *store.Task, p Pauser) (*store.Task, string, error) {
				return p.Resume(ctx, t, q.Owner)
			})
		}, nil)
}

// pauseTool loads the task a pause tool names (as tasks/get would: the
// requestor's own, or an id-capability) and applies do.
func (tt *taskTools) pauseTool(ctx context.Context, id string, do func(q *Request, t *store.Task, p Pauser) (*store.Task, string, error)) (*mcp.CallToolResult, any, error) {
	t, bad := tt.toolTask(ctx, id)
	if bad != nil {
		return bad, nil, nil
	}
	q := tt.e.Resolve(ctx, nil)
	p, err := tt.pauses.pausable(t)
	if err != nil {
		return withState(errorResult("%s", trimPrefix(err)), t), nil, nil
	}
	nt, said, err := do(q, t, p)
	switch {
	case err == nil:
		return withState(textResult("%s", said), nt), nil, nil
	case ctx.Err() != nil:
		return nil, nil, ctx.Err()
	}
	return withState(errorResult("%s", trimPrefix(err)), t), nil, nil
}

// trimPrefix is err's message without the package's prefix.
func trimPrefix(err error) string {
	const p = "taskrouter: "
	s := err.Error()
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// withPauseDefaults fills the default names of the pause tools.
func (o TaskToolsOptions) withPauseDefaults() TaskToolsOptions {
	if o.PauseName == "" {
		o.PauseName = DefaultPauseToolName
	}
	if o.ResumeName == "" {
		o.ResumeName = DefaultResumeToolName
	}
	return o
}
