package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// Applying an operation. Each returns a line saying what it did, for the
// trace. The client's calls go through the go-sdk client connected to
// the process (prompts/get, tools/call with the task id); cancel, pause
// and resume through the router, as tasks/cancel and the pause tools do.

// opTimeout bounds one client call.
const opTimeout = 20 * time.Second

// apply applies operation o.
func (s *Sim) apply(ctx context.Context, o Op) string {
	p := s.world.Process()
	if p == nil {
		return "no process"
	}
	// The client's calls are bounded (opTimeout); waiting until the
	// engine rests (a time jump's stops) and starting the next process
	// are bounded by Settle's own bounds (on a loaded machine a jump
	// of 40 stops may well take longer than one call may).
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	switch o.Kind {
	case OpStart:
		return s.start(ctx, p, o)
	case OpRelease:
		c := s.releaseHeld(o.N, o.Flag)
		if c == nil {
			return "no call held"
		}
		return fmt.Sprintf("released %s/%s (ok=%v)", c.Handle, c.Step, o.Flag)
	case OpClient:
		return s.perform(ctx, p, o)
	case OpClientBad:
		return s.performBad(ctx, p, o)
	case OpClientDup:
		s.mu.Lock()
		last := s.last
		s.mu.Unlock()
		if last == nil {
			return "no continuation to repeat"
		}
		return "repeated: " + s.continueCall(ctx, p, last)
	case OpClientLate:
		ids := s.tasksWhere(func(f *facts) bool { return f.ended && !f.deleted })
		if len(ids) == 0 {
			return "no ended task"
		}
		id := ids[o.N%len(ids)]
		return "late: " + s.continueCall(ctx, p, &continuation{id: id, tool: toolClient, args: map[string]any{"spec": "b", "answer": "late"}})
	case OpEvent:
		return s.event(ctx, p, o)
	case OpCancel:
		ids := s.tasksWhere(func(f *facts) bool { return !f.ended && !f.deleted })
		if len(ids) == 0 {
			return "no active task"
		}
		id := ids[o.N%len(ids)]
		_, err := p.Server.Router.CancelTask(ctx, id, "cancelled by the simulation")
		return fmt.Sprintf("cancel %s: %s", s.handleOf(id), errText(err))
	case OpPause:
		ids := s.tasksWhere(func(f *facts) bool { return !f.ended && !f.deleted && f.pausedSince == 0 })
		if len(ids) == 0 {
			return "no task to pause"
		}
		id := ids[o.N%len(ids)]
		_, msg, err := p.Server.Router.Pauses().Pause(ctx, id, taskrouter.PauseRequest{By: "sim", Reason: "simulated operator", Cut: o.Flag})
		s.noteInternal(err, "pause")
		return fmt.Sprintf("pause %s (cut=%v): %s %s", s.handleOf(id), o.Flag, msg, errText(err))
	case OpResume:
		ids := s.tasksWhere(func(f *facts) bool { return !f.ended && !f.deleted && f.pausedSince != 0 })
		if len(ids) == 0 {
			return "no paused task"
		}
		id := ids[o.N%len(ids)]
		s.check.mu.Lock()
		var step string
		if f := s.check.tasks[id]; f.p != nil && f.p.Paused != nil {
			step = f.p.Paused.Step // the step whose failure paused it runs again: a new series
		}
		s.check.mu.Unlock()
		undo := func() {}
		if step != "" {
			undo = s.ledger.newSeries(id, step)
		}
		_, msg, err := p.Server.Router.Pauses().Resume(ctx, id, "sim")
		if err != nil {
			undo()
		}
		s.noteInternal(err, "resume")
		return fmt.Sprintf("resume %s: %s %s", s.handleOf(id), msg, errText(err))
	case OpAdvance:
		return s.advance(outer, o.D)
	case OpStop:
		s.world.Stop()
		s.restart(outer, "a graceful stop")
		return "stopped and restarted"
	case OpCrash:
		s.world.Crash()
		s.restart(outer, "a crash")
		return "crashed and restarted"
	case OpCrashAfter:
		p.Conn.CrashAfter(o.N, func() {})
		return fmt.Sprintf("armed a crash at write %d from now", o.N)
	case OpRefuse:
		p.Conn.RefuseAfter(o.N)
		return fmt.Sprintf("armed a refusal of write %d from now", o.N)
	case OpLoseWake:
		p.Conn.LoseWakeups(o.N)
		return fmt.Sprintf("the next %d wake-up reads find nothing", o.N)
	case OpFork:
		ids := s.tasksWhere(func(f *facts) bool { return !f.deleted && f.t.Labels[workflow.LabelUndoOf] == "" })
		if len(ids) == 0 {
			return "no task to fork"
		}
		id := ids[o.N%len(ids)]
		t, err := p.Server.Bridge.Fork(ctx, id, nil)
		s.noteInternal(err, "fork")
		switch {
		case err != nil:
			return fmt.Sprintf("fork %s: %s", s.handleOf(id), errText(err))
		case t == nil:
			s.check.mu.Lock()
			s.check.fail(InvNoPanic, id, "fork", "Bridge.Fork of %s returned neither a task nor an error", s.handleOf(id))
			s.check.mu.Unlock()
			return "fork " + s.handleOf(id) + ": no task, no error"
		}
		return fmt.Sprintf("forked %s as %s", s.handleOf(id), s.handleOf(t.ID))
	case OpDeploy:
		d := deploy(o.N % 3)
		s.world.Stop()
		s.mu.Lock()
		s.deploy = d
		s.mu.Unlock()
		s.restart(outer, "a deploy")
		return "deployed " + d.String()
	}
	return "unknown operation"
}

// start starts a workflow with prompts/get, and names its task.
func (s *Sim) start(ctx context.Context, p *Process, o Op) string {
	var names []int
	for i, w := range startable {
		if !s.excluded[w.name] {
			names = append(names, i)
		}
	}
	w := startable[names[o.N%len(names)]]
	var args map[string]string
	if len(w.args) > 0 {
		args = w.args[o.M%len(w.args)]
	}
	res, err := p.Session.GetPrompt(ctx, &mcp.GetPromptParams{Name: w.name, Arguments: args})
	if err != nil {
		s.noteInternal(err, "prompts/get "+w.name)
		return fmt.Sprintf("start %s: %s", w.name, errText(err))
	}
	doc, err := handoff.FromPromptResult(res)
	if err != nil {
		return fmt.Sprintf("start %s: no handoff: %v", w.name, err)
	}
	return fmt.Sprintf("started %s %v as %s: %s", w.name, args, s.handleOf(doc.TaskID), doc.Status)
}

// tasksWhere returns the ids of the tasks whose facts match, in the
// order of their handles.
func (s *Sim) tasksWhere(match func(*facts) bool) []string {
	s.check.mu.Lock()
	var ids []string
	for id, f := range s.check.tasks {
		if f.t != nil && f.t.Labels[taskrouter.LabelKind] == taskrouter.KindWorkflow && match(f) {
			ids = append(ids, id)
		}
	}
	s.check.mu.Unlock()
	hs := make(map[string]string, len(ids))
	for _, id := range ids {
		hs[id] = s.handleOf(id)
	}
	slices.SortFunc(ids, func(a, b string) int { return strings.Compare(hs[a], hs[b]) })
	return ids
}

// handed is a step the client may perform now.
type handed struct {
	id, path, tool, spec string
}

// handedSteps lists the steps the client may perform, in a stable order.
func (s *Sim) handedSteps() []handed {
	var out []handed
	for _, id := range s.tasksWhere(func(f *facts) bool { return !f.ended && !f.deleted && f.p != nil }) {
		s.check.mu.Lock()
		f := s.check.tasks[id]
		p, wf := f.p, f.t.Labels[workflow.LabelWorkflow]
		for _, r := range records(p) {
			sp := r.sp
			switch {
			case r.undo || strings.Contains(r.path, "["):
			case (sp.Status == mcptask.StepAwaitingClient || sp.Status == mcptask.StepFailed) && sp.Tool == toolClient:
				out = append(out, handed{id: id, path: r.path, tool: toolClient, spec: r.path})
			case sp.HandedToClient && sp.Tool == toolStep:
				out = append(out, handed{id: id, path: r.path, tool: toolStep, spec: wf + "." + r.path})
			}
		}
		s.check.mu.Unlock()
	}
	return out
}

// perform makes the client perform a step handed to it.
func (s *Sim) perform(ctx context.Context, p *Process, o Op) string {
	hs := s.handedSteps()
	if len(hs) == 0 {
		return "no step for the client"
	}
	h := hs[o.N%len(hs)]
	args := map[string]any{"spec": h.spec}
	if h.tool == toolClient {
		args["answer"] = fmt.Sprintf("answer %d", o.M)
	}
	c := &continuation{id: workflow.TaskRef(h.id, h.path), tool: h.tool, args: args}
	s.mu.Lock()
	s.last = c
	s.mu.Unlock()
	return fmt.Sprintf("%s/%s: %s", s.handleOf(h.id), h.path, s.continueCall(ctx, p, c))
}

// performBad makes a continuation that must be refused: a tool the task
// does not wait for, or arguments its tool refuses.
func (s *Sim) performBad(ctx context.Context, p *Process, o Op) string {
	ids := s.tasksWhere(func(f *facts) bool { return !f.ended && !f.deleted })
	if len(ids) == 0 {
		return "no active task"
	}
	id := ids[o.N%len(ids)]
	c := &continuation{id: id, tool: toolUndo, args: map[string]any{"spec": "nobody"}}
	if o.M%2 == 0 {
		c = &continuation{id: id, tool: toolClient, args: map[string]any{"spec": 42}}
	}
	return fmt.Sprintf("bad %s: %s", s.handleOf(id), s.continueCall(ctx, p, c))
}

// continueCall makes a continuation call and words its answer.
func (s *Sim) continueCall(ctx context.Context, p *Process, c *continuation) string {
	res, err := p.Session.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args, Meta: metaTask(c.id)})
	if err != nil {
		s.noteInternal(err, "tools/call "+c.tool)
		return errText(err)
	}
	if res.IsError {
		return "tool error: " + firstText(res)
	}
	if doc, err := handoff.FromToolResult(res); err == nil {
		return "ok, task " + doc.Status
	}
	return "ok"
}

// event delivers the event "go" to a task of the group workflow, with
// the event tool (early, on time or after it ended).
func (s *Sim) event(ctx context.Context, p *Process, o Op) string {
	ids := s.tasksWhere(func(f *facts) bool { return f.t.Labels[workflow.LabelWorkflow] == "group" && !f.deleted })
	if len(ids) == 0 {
		return "no task awaits events"
	}
	id := ids[o.N%len(ids)]
	payload := map[string]any{"approved": o.M%3 != 0}
	times := 1
	if o.Flag {
		times = 2
	}
	var outs []string
	for range times {
		res, err := p.Session.CallTool(ctx, &mcp.CallToolParams{Name: workflow.DefaultEventTool, Meta: metaTask(id),
			Arguments: map[string]any{"event": "go", "payload": payload}})
		switch {
		case err != nil:
			s.noteInternal(err, "event")
			outs = append(outs, errText(err))
		case res.IsError:
			outs = append(outs, "tool error: "+firstText(res))
		default:
			outs = append(outs, "ok")
		}
	}
	return fmt.Sprintf("event go %v to %s: %s", payload["approved"], s.handleOf(id), strings.Join(outs, "; "))
}

// advance moves the clock d forward, stopping at every wake-up and
// expiry on the way (at most maxStops of them), letting the engine rest
// and checking the invariants at each.
func (s *Sim) advance(ctx context.Context, d time.Duration) string {
	const maxStops = 40
	stops, _ := s.world.Advance(ctx, d, maxStops, s.rest(), func(_ time.Time, err error) {
		s.settled(err)
		s.check.atRest()
	})
	return fmt.Sprintf("advanced %s to %s (%d stops on the way)", d, stamp(s.world.Clock.Now()), stops)
}

// noteInternal records an internal error (a panic, an unwrapped failure)
// answered to the client: the engine must never answer one.
func (s *Sim) noteInternal(err error, what string) {
	if err == nil {
		return
	}
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != mcptask.CodeInternalError {
		return
	}
	msg := je.Message
	if strings.Contains(msg, ErrCrashed.Error()) || strings.Contains(msg, ErrRefused.Error()) || strings.Contains(msg, store.ErrClosed.Error()) {
		return // the injected fault itself, reported as it should be
	}
	if !strings.Contains(strings.ToLower(msg), "panic") {
		return
	}
	s.check.mu.Lock()
	s.check.fail(InvNoPanic, "", what+msg, "%s answered an internal error: %s", what, msg)
	s.check.mu.Unlock()
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return "error: " + oneLine(err.Error())
}

func firstText(res *mcp.CallToolResult) string {
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			return oneLine(t.Text)
		}
	}
	return ""
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}
