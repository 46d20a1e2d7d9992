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

// ToolCaller runs a tool on the server. meta is the request's _meta (it
// carries the step's idempotency key).
type ToolCaller func(ctx context.Context, tool string, args map[string]json.RawMessage, meta mcp.Meta) (*mcp.CallToolResult, error)

// Recorder persists progress after each step. The plain handler keeps it
// in memory; the task bridge writes it into the task's variables.
type Recorder interface {
	Record(ctx context.Context, p *WorkflowProgress) error
}

// RecorderFunc adapts a function to Recorder.
type RecorderFunc func(ctx context.Context, p *WorkflowProgress) error

// Record calls f.
func (f RecorderFunc) Record(ctx context.Context, p *WorkflowProgress) error { return f(ctx, p) }

// runner executes a workflow's server steps against a progress record.
type runner struct {
	wf     *SequentialWorkflow
	call   ToolCaller
	vars   func(name string) (json.RawMessage, bool) // task variables
	now    func() time.Time
	taskID string // "" without a task: no idempotency keys
	// reason is why server steps that already ran (and failed, or were
	// interrupted) run again in this pass: ReasonRestart or ReasonResume.
	reason   string
	trace    []*mcp.PromptMessage
	observer StepObserver
	// coalesce, when positive, lets a successful server step that ended
	// within coalesce of the last progress write go unrecorded until the
	// next write (see Bridge.ProgressInterval); recorded is when that
	// write was.
	coalesce time.Duration
	recorded time.Time
}

// record writes p through rec and remembers when.
func (r *runner) record(ctx context.Context, p *WorkflowProgress, rec Recorder) error {
	err := rec.Record(ctx, p)
	r.recorded = r.now()
	return err
}

// errUnavailable reports an input that does not exist yet: the output of a
// step that has not completed, or a task variable nobody set.
type errUnavailable struct{ what string }

func (e *errUnavailable) Error() string { return e.what + " is not available yet" }

// errNotProvided reports an optional prompt argument the client left out.
var errNotProvided = errors.New("not provided")

// resolve computes a step's arguments. An argument bound to an optional
// prompt argument that was not given is left out (or gets its default).
// With partial set, unresolvable arguments become handoff placeholders
// instead of errors.
func (r *runner) resolve(p *WorkflowProgress, s *Step, partial bool) (map[string]json.RawMessage, error) {
	out := make(map[string]json.RawMessage, len(s.Args))
	for name, src := range s.Args {
		v, err := r.value(p, src)
		switch {
		case errors.Is(err, errNotProvided):
			if src.Default != nil {
				out[name] = src.Default
			}
			continue
		case err != nil && partial:
			out[name] = placeholder(src, err)
			continue
		case err != nil:
			return nil, fmt.Errorf("argument %q: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

func placeholder(src Source, err error) json.RawMessage {
	desc := src.Description
	switch src.Kind {
	case SourceStepOutput, SourceTaskVar:
		desc = "from " + src.String()
	case SourcePromptArg:
		desc = "prompt argument " + src.Name
	}
	if desc == "" {
		desc = err.Error()
	}
	return marshal("<" + desc + ">")
}

// marshal encodes v without HTML escaping, so "<placeholders>" and code
// stay readable for an LLM. v must be encodable.
func marshal(v any) json.RawMessage {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return json.RawMessage("null")
	}
	return json.RawMessage(strings.TrimSuffix(b.String(), "\n"))
}

func (r *runner) value(p *WorkflowProgress, src Source) (json.RawMessage, error) {
	switch src.Kind {
	case SourceConstant:
		return src.Value, nil
	case SourcePromptArg:
		v, ok := p.Arguments[src.Name]
		if !ok {
			if r.wf.requiredArg(src.Name) {
				return nil, fmt.Errorf("required prompt argument %q was not provided", src.Name)
			}
			return nil, fmt.Errorf("prompt argument %q: %w", src.Name, errNotProvided)
		}
		return marshal(v), nil
	case SourceStepOutput:
		out, ok := p.Outputs[src.Name]
		if !ok {
			return nil, &errUnavailable{what: fmt.Sprintf("output %q", src.Name)}
		}
		return selectPath(out, src.Path)
	case SourceTaskVar:
		if r.vars != nil {
			if v, ok := r.vars(src.Name); ok {
				return v, nil
			}
		}
		return nil, &errUnavailable{what: fmt.Sprintf("task variable %q", src.Name)}
	case SourceClient:
		return nil, &errUnavailable{what: "a value the client supplies (" + src.Description + ")"}
	}
	return nil, fmt.Errorf("unknown source kind %q", src.Kind)
}

// selectPath walks object keys and array indexes.
func selectPath(v json.RawMessage, path []string) (json.RawMessage, error) {
	cur := v
	for i, seg := range path {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(cur, &obj); err == nil && obj != nil {
			next, ok := obj[seg]
			if !ok {
				return nil, fmt.Errorf("field path %q: no field %q", strings.Join(path, "."), strings.Join(path[:i+1], "."))
			}
			cur = next
			continue
		}
		var arr []json.RawMessage
		if err := json.Unmarshal(cur, &arr); err == nil {
			n, ok := stepIndex(seg)
			if !ok || n >= len(arr) {
				return nil, fmt.Errorf("field path %q: no element %q", strings.Join(path, "."), strings.Join(path[:i+1], "."))
			}
			cur = arr[n]
			continue
		}
		return nil, fmt.Errorf("field path %q: %q is not an object or array", strings.Join(path, "."), strings.Join(path[:i], "."))
	}
	return cur, nil
}

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

// complete records a step's success in p.
func complete(p *WorkflowProgress, s *Step, by string, args json.RawMessage, res *mcp.CallToolResult, now time.Time) {
	sp := p.step(s.Name)
	sp.end(ReasonClient, by, now, "")
	sp.Status = StepCompleted
	sp.CompletedBy = by
	sp.Error = ""
	sp.HandedToClient = false
	sp.Arguments = args
	p.Outputs[s.binding()] = OutputOf(res)
	p.UpdatedAt = now
	p.refresh()
}

// fail records a failed attempt of a step in p.
func fail(p *WorkflowProgress, s *Step, by, msg string, now time.Time) {
	sp := p.step(s.Name)
	sp.end(ReasonClient, by, now, msg)
	sp.Status = StepFailed
	sp.Error = msg
	p.Errors = append(p.Errors, StepError{Step: s.Name, Tool: s.Tool, Message: msg, Retryable: s.Retryable, At: now})
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
func (r *runner) next(p *WorkflowProgress) (*Step, *StepProgress) {
	for _, s := range r.wf.Steps {
		if sp := p.step(s.Name); sp.Status != StepCompleted {
			return s, sp
		}
	}
	return nil, nil
}

// prepare sets the status of the step that comes next and the progress's
// pause reason: a server step that will run now gets an open attempt (so
// that the write that records this state also says the step is running); a
// client step, or a server step handed to the client, says what the client
// may do. It reports whether a server step is ready to run, and whether it
// opened a new attempt for it (which must be written before the step runs).
//
// reason is why a step that ran before runs again (ReasonRetry when empty);
// a step's first run is always ReasonFirst.
func (r *runner) prepare(p *WorkflowProgress, now time.Time, reason string) (ready, opened bool) {
	s, sp := r.next(p)
	switch {
	case s == nil:
		p.PauseReason = ""
		return false, false
	case s.execution() == ClientDeferred:
		if sp.Status != StepFailed {
			sp.Status = StepAwaitingClient
		}
		p.PauseReason = awaitingMessage(s, sp)
		return false, false
	case sp.HandedToClient:
		p.PauseReason = handedMessage(s, sp)
		return false, false
	}
	if sp.open() == nil {
		switch {
		case sp.Attempts == 0:
			reason = ReasonFirst
		case reason == "":
			reason = ReasonRetry
		}
		sp.begin(reason, "server", now)
		opened = true
	}
	sp.Status = StepRunning
	if sp.IdempotencyKey == "" {
		sp.IdempotencyKey = idempotencyKey(r.taskID, s.Name)
	}
	p.PauseReason = runningMessage(s, sp)
	return true, opened
}

// advance runs server steps in order from the first step not completed,
// recording after each attempt, until the workflow is done, reaches a step
// for the client, or a step fails for good. Every attempt is written as
// running before its tool runs (in the same write that recorded the
// previous step, when there is one). A failing step is retried as its
// policy says; when the server gives up, the step is handed to the client
// (HandToClient) or advance returns an error matching ErrWorkflowFailed
// (FailWorkflow). In a pass after a restart or on a resume (r.reason), an
// attempt found open was cut short by a dead process: it is closed as
// interrupted and the step runs again. advance returns the context's cause
// when the context ends (the task was cancelled or expired, or the server
// is shutting down); the open attempt then stays recorded, and runs again
// after a restart. When the workflow is done, the last step's outcome is
// left for the caller's final write (the task's completion), which
// follows at once.
func (r *runner) advance(ctx context.Context, p *WorkflowProgress, rec Recorder) error {
	tries := map[string]int{} // attempts made in this pass, per step
	for first := true; ; first = false {
		now := r.now()
		s, sp := r.next(p)
		if s == nil {
			p.PauseReason = ""
			return nil
		}
		reason := r.reason
		if tries[s.Name] > 0 {
			reason = ReasonRetry
		}
		if a := sp.open(); a != nil && first && (r.reason == ReasonRestart || r.reason == ReasonResume) {
			// A dead process left this attempt open: close it; the step
			// runs again.
			a.Outcome, a.Error = OutcomeError, "interrupted: the server stopped while the step ran"
			reason = ReasonRestart
		}
		ready, opened := r.prepare(p, now, reason)
		if !ready || opened {
			if err := r.record(ctx, p, rec); err != nil || !ready {
				return err
			}
		}
		tries[s.Name]++
		args, rerr := r.resolve(p, s, false)
		var res *mcp.CallToolResult
		var msg string
		if rerr != nil {
			msg = rerr.Error()
		} else {
			r.trace = append(r.trace, callMessage(s, args))
			var meta mcp.Meta
			if sp.IdempotencyKey != "" {
				meta = mcp.Meta{mcptask.MetaIdempotencyKey: sp.IdempotencyKey}
			}
			var err error
			res, err = r.call(ctx, s.Tool, args, meta)
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
		now = r.now()
		if msg == "" {
			complete(p, s, "server", marshal(args), res, now)
			emit(r.observer, r.taskID, p, s, nil)
			r.trace = append(r.trace, resultMessage(s, res))
			ready, _ := r.prepare(p, now, r.reason) // opens the next server step's attempt in this write
			if p.done() {
				// The last step: the caller's final write (the task's
				// completion) records it, before anything else happens.
				continue
			}
			if ready && r.coalesce > 0 && s.Retryable && now.Sub(r.recorded) < r.coalesce {
				if next, _ := r.next(p); next.Retryable {
					// A quick retryable step, and another runs next: its
					// outcome goes into the next write. A crash before
					// that write runs both again, which retryable steps
					// allow (with the same idempotency keys).
					continue
				}
			}
			if err := r.record(ctx, p, rec); err != nil {
				return err
			}
			continue
		}
		fail(p, s, "server", msg, now)
		emit(r.observer, r.taskID, p, s, nil)
		r.trace = append(r.trace, textMessage("assistant", fmt.Sprintf("Step %q failed: %s", s.Name, msg)))
		pol := s.policy()
		if rerr == nil && tries[s.Name] < pol.MaxAttempts {
			wait := pol.backoff(tries[s.Name] + 1)
			p.PauseReason = retryingMessage(s, msg, tries[s.Name], pol.MaxAttempts, wait)
			if err := r.record(ctx, p, rec); err != nil {
				return err
			}
			if err := sleep(ctx, wait); err != nil {
				return err
			}
			continue
		}
		if s.failurePolicy() == FailWorkflow {
			p.PauseReason = failedWorkflowMessage(s, msg)
			return &stepFailedError{step: s.Name, msg: msg}
		}
		sp.HandedToClient = true
		p.PauseReason = handedMessage(s, sp)
		return r.record(ctx, p, rec)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
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

func callMessage(s *Step, args map[string]json.RawMessage) *mcp.PromptMessage {
	b := marshal(args)
	return textMessage("assistant", fmt.Sprintf("Step %q: calling tool %q with %s", s.Name, s.Tool, b))
}

func resultMessage(s *Step, res *mcp.CallToolResult) *mcp.PromptMessage {
	return textMessage("user", fmt.Sprintf("Result of step %q (tool %q): %s", s.Name, s.Tool, OutputOf(res)))
}

func (r *runner) startMessage(p *WorkflowProgress) *mcp.PromptMessage {
	b := marshal(p.Arguments)
	return textMessage("user", fmt.Sprintf("Run workflow %q: %s. Arguments: %s", r.wf.Name, r.wf.goal(), b))
}

// promptArgs checks and copies the prompt's arguments.
func (w *SequentialWorkflow) promptArgs(in map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range w.Arguments {
		v, ok := in[a.Name]
		if !ok {
			if a.Required {
				return nil, fmt.Errorf("missing required argument %q", a.Name)
			}
			continue
		}
		out[a.Name] = v
	}
	for k := range in {
		if !w.declares(k) {
			return nil, fmt.Errorf("unknown argument %q", k)
		}
	}
	return out, nil
}

func (w *SequentialWorkflow) declares(name string) bool {
	for _, a := range w.Arguments {
		if a.Name == name {
			return true
		}
	}
	return false
}
