package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// ToolCaller runs a tool on the server for the client of session ss (nil
// when no client session is at hand): the tool's logs and progress reach
// that client. meta is the request's _meta (it carries the step's
// idempotency key).
type ToolCaller func(ctx context.Context, ss *mcp.ServerSession, tool string, args map[string]json.RawMessage, meta mcp.Meta) (*mcp.CallToolResult, error)

// Recorder persists progress after each step. The plain handler keeps it
// in memory; the task bridge writes it into the task's variables.
type Recorder interface {
	Record(ctx context.Context, p *Progress) error
}

// RecorderFunc adapts a function to Recorder.
type RecorderFunc func(ctx context.Context, p *Progress) error

// Record calls f.
func (f RecorderFunc) Record(ctx context.Context, p *Progress) error { return f(ctx, p) }

// runner runs a plain workflow's tool steps in the request (see
// advance).
type runner struct {
	wf       *Definition
	call     ToolCaller
	session  *mcp.ServerSession // the client the plain workflow runs for
	now      func() time.Time
	trace    []*mcp.PromptMessage
	observer StepObserver
}

// resolver reads the plain workflow's sources (it has no task
// variables).
func (r *runner) resolver() *resolver { return &resolver{w: r.wf} }

// OutputOf is the value a tool result contributes as a step output: its
// structured content when present; otherwise its text, decoded when the
// text is JSON.
func OutputOf(res *mcp.CallToolResult) json.RawMessage {
	if res == nil {
		return json.RawMessage("null")
	}
	if res.StructuredContent != nil {
		if raw, ok := res.StructuredContent.(json.RawMessage); ok && json.Valid(raw) {
			return raw
		}
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			return b
		}
	}
	text := toolText(res)
	if t := strings.TrimSpace(text); t != "" && json.Valid([]byte(t)) && (t[0] == '{' || t[0] == '[') {
		return json.RawMessage(t)
	}
	b, _ := json.Marshal(text)
	return b
}

// toolText joins the text content of a tool result.
func toolText(res *mcp.CallToolResult) string {
	var texts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// toolError is the message of a failed tool result.
func toolError(res *mcp.CallToolResult) string {
	if t := toolText(res); t != "" {
		return t
	}
	return "the tool reported an error"
}

// idempotencyKey is the key passed to every run of step of task taskID.
func idempotencyKey(taskID, step string) string {
	if taskID == "" {
		return ""
	}
	return taskID + "/" + step
}

// complete records the success of the slot's step in p.
func complete(p *Progress, sl *slot, by string, args json.RawMessage, res *mcp.CallToolResult, now time.Time) {
	sp := sl.sp
	sp.end(ReasonClient, by, now, "")
	sp.Status = mcptask.StepCompleted
	sp.CompletedBy = by
	sp.Error = ""
	sp.HandedToClient = false
	sp.Arguments = args
	sl.output(p, OutputOf(res))
	p.UpdatedAt = now
	p.refresh()
}

// fail records a failed attempt of the slot's step in p.
func fail(p *Progress, sl *slot, by, msg string, now time.Time) {
	sp, s := sl.sp, sl.s
	sp.end(ReasonClient, by, now, msg)
	sp.Status = mcptask.StepFailed
	sp.Error = msg
	c := callOf(s)
	p.Errors = append(p.Errors, StepError{Step: sl.path, Tool: toolOf(s), Message: msg, Retryable: c != nil && c.retryable, At: now})
	if len(p.Errors) > maxHistory {
		p.Errors = append(p.Errors[:1], p.Errors[len(p.Errors)-maxHistory+1:]...)
	}
	p.UpdatedAt = now
	p.refresh()
}

// ErrWorkflowFailed is matched by the error advance returns when a step
// whose failure policy is FailWorkflow fails for good.
var ErrWorkflowFailed = errors.New("workflow: a step failed the workflow")

type stepFailedError struct {
	step, msg string
}

func (e *stepFailedError) Error() string {
	return fmt.Sprintf("step %q failed: %s; the workflow failed", e.step, e.msg)
}
func (e *stepFailedError) Unwrap() error { return ErrWorkflowFailed }

// next returns the first step not completed, or nil when all are.
func (r *runner) next(p *Progress) (*Step, *StepProgress) {
	for _, s := range r.wf.Steps {
		if sp := p.step(s.Name); sp != nil && !sp.ended() {
			return s, sp
		}
	}
	return nil, nil
}

// advance runs a plain workflow's server steps in order, in the request,
// recording after each attempt, until the workflow is done, reaches a step
// for the client, or a step fails for good. A failing step is retried as
// its policy says; when the server gives up, the step is handed to the
// client (HandToClient) or advance returns an error matching
// ErrWorkflowFailed (FailWorkflow). It returns the context's cause when
// the context ends. (A task-aware workflow runs its steps on the engine
// instead; see the drive loop.)
func (r *runner) advance(ctx context.Context, p *Progress, rec Recorder) error {
	for {
		s, sp := r.next(p)
		if s != nil && !sp.HandedToClient {
			if why := r.resolver().skipReason(p, s); why != "" {
				sp.Status, sp.SkipReason = mcptask.StepSkipped, why
				p.refresh()
				continue
			}
		}
		switch {
		case s == nil:
			p.PauseReason = ""
			return nil
		case s.Execution() == mcptask.ExecClient:
			sp.Status = mcptask.StepAwaitingClient
			p.PauseReason = awaitingMessage(s, sp)
			return rec.Record(ctx, p)
		case sp.HandedToClient:
			p.PauseReason = handedMessage(s, sp)
			return rec.Record(ctx, p)
		}
		if err := r.runStep(ctx, p, s, sp, rec); err != nil {
			return err
		}
	}
}

// runStep runs server step s of a plain workflow with its retry policy.
func (r *runner) runStep(ctx context.Context, p *Progress, s *Step, sp *StepProgress, rec Recorder) error {
	c := callOf(s)
	pol := c.policy()
	for try := 1; ; try++ {
		reason := ReasonFirst
		if sp.Attempts > 0 {
			reason = ReasonRetry
		}
		sp.begin(reason, string(mcptask.ExecServer), r.now())
		sp.Status = mcptask.StepRunning
		p.PauseReason = runningMessage(s, sp)
		args, rerr := c.resolve(r.resolver(), p, false, false)
		var res *mcp.CallToolResult
		var msg string
		if rerr != nil {
			msg = rerr.Error()
		} else {
			r.trace = append(r.trace, callMessage(s.Name, c.tool, args))
			var err error
			res, err = r.call(ctx, r.session, c.tool, args, nil)
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			switch {
			case err != nil:
				msg = err.Error()
			case res == nil:
				msg = "the tool returned no result"
			case res.IsError:
				msg = toolError(res)
			}
		}
		now := r.now()
		if msg == "" {
			sl := &slot{path: s.Name, s: s, sp: sp}
			complete(p, sl, string(mcptask.ExecServer), marshal(args), res, now)
			emit(r.observer, "", p, sl, nil)
			r.trace = append(r.trace, resultMessage(s.Name, c.tool, OutputOf(res)))
			return rec.Record(ctx, p)
		}
		sl := &slot{path: s.Name, s: s, sp: sp}
		fail(p, sl, string(mcptask.ExecServer), msg, now)
		emit(r.observer, "", p, sl, nil)
		r.trace = append(r.trace, textMessage("assistant", fmt.Sprintf("Step %q failed: %s", s.Name, msg)))
		if rerr == nil && try < pol.MaxAttempts {
			wait := pol.backoff(try + 1)
			p.PauseReason = retryingMessage(s, msg, try, pol.MaxAttempts, wait)
			if err := rec.Record(ctx, p); err != nil {
				return err
			}
			if err := sleepCtx(ctx, wait); err != nil {
				return err
			}
			continue
		}
		if c.failurePolicy() == FailWorkflow {
			p.PauseReason = failedWorkflowMessage(s, msg)
			return &stepFailedError{step: s.Name, msg: msg}
		}
		sp.HandedToClient = true
		return nil // advance records the handoff
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func textMessage(role, text string) *mcp.PromptMessage {
	return &mcp.PromptMessage{Role: mcp.Role(role), Content: &mcp.TextContent{Text: text}}
}

func callMessage(step, tool string, args map[string]json.RawMessage) *mcp.PromptMessage {
	return textMessage("assistant", fmt.Sprintf("Step %q: calling tool %q with %s", step, tool, marshal(args)))
}

func resultMessage(step, tool string, out json.RawMessage) *mcp.PromptMessage {
	return textMessage("user", fmt.Sprintf("Result of step %q (tool %q): %s", step, tool, out))
}
