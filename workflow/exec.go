package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ToolCaller runs a tool on the server.
type ToolCaller func(ctx context.Context, tool string, args map[string]json.RawMessage) (*mcp.CallToolResult, error)

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
	wf    *SequentialWorkflow
	call  ToolCaller
	vars  func(name string) (json.RawMessage, bool) // task variables (ADVW-01)
	now   func() time.Time
	trace []*mcp.PromptMessage
}

// errMissing reports an input that does not exist yet.
type errMissing struct{ what string }

func (e *errMissing) Error() string { return e.what + " is not available yet" }

// resolve computes a step's arguments. With partial set, unresolvable
// arguments become handoff placeholders instead of errors.
func (r *runner) resolve(p *WorkflowProgress, s *Step, partial bool) (map[string]json.RawMessage, error) {
	out := make(map[string]json.RawMessage, len(s.Args))
	for name, src := range s.Args {
		v, err := r.value(p, src)
		if err != nil {
			if partial {
				out[name] = placeholder(src, err)
				continue
			}
			return nil, fmt.Errorf("argument %q: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

func placeholder(src Source, err error) json.RawMessage {
	desc := src.Description
	switch src.Kind {
	case SourceStepOutput:
		desc = "from " + src.String()
	case SourceTaskVar:
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
			return nil, &errMissing{what: fmt.Sprintf("prompt argument %q", src.Name)}
		}
		return marshal(v), nil
	case SourceStepOutput:
		out, ok := p.Outputs[src.Name]
		if !ok {
			return nil, &errMissing{what: fmt.Sprintf("output %q", src.Name)}
		}
		return selectPath(out, src.Path)
	case SourceTaskVar:
		if r.vars != nil {
			if v, ok := r.vars(src.Name); ok {
				return v, nil
			}
		}
		return nil, &errMissing{what: fmt.Sprintf("task variable %q", src.Name)}
	case SourceClient:
		return nil, &errMissing{what: "a value the client supplies (" + src.Description + ")"}
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
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			return b
		}
	}
	var texts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	text := strings.Join(texts, "\n")
	if t := strings.TrimSpace(text); t != "" && json.Valid([]byte(t)) && (t[0] == '{' || t[0] == '[') {
		return json.RawMessage(t)
	}
	b, _ := json.Marshal(text)
	return b
}

// toolError is the message of a failed tool result.
func toolError(res *mcp.CallToolResult) string {
	var texts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	if len(texts) == 0 {
		return "the tool reported an error"
	}
	return strings.Join(texts, "\n")
}

// recordSuccess stores a step's output in p.
func recordSuccess(p *WorkflowProgress, s *Step, res *mcp.CallToolResult, now time.Time) {
	sp := p.step(s.Name)
	sp.Status = StepCompleted
	sp.Attempts++
	sp.Error = ""
	p.Outputs[s.binding()] = OutputOf(res)
	p.PauseReason = ""
	p.UpdatedAt = now
	p.refresh()
}

// recordFailure notes a failed attempt; the step stays remaining (EXEC-03).
func recordFailure(p *WorkflowProgress, s *Step, msg string, now time.Time) {
	sp := p.step(s.Name)
	sp.Status = StepFailed
	sp.Attempts++
	sp.Error = msg
	p.Errors = append(p.Errors, StepError{Step: s.Name, Tool: s.Tool, Message: msg, Retryable: s.Retryable, At: now})
	if s.Retryable {
		p.PauseReason = fmt.Sprintf("step %q failed: %s; it can be retried", s.Name, msg)
	} else {
		p.PauseReason = fmt.Sprintf("step %q failed: %s", s.Name, msg)
	}
	p.UpdatedAt = now
	p.refresh()
}

// advance runs server steps in order from the first step not completed,
// recording after each, until the workflow is done, reaches a client step,
// or a step fails. It returns the trace of what it ran.
func (r *runner) advance(ctx context.Context, p *WorkflowProgress, rec Recorder) error {
	for _, s := range r.wf.Steps {
		sp := p.step(s.Name)
		if sp.Status == StepCompleted {
			continue
		}
		if s.execution() == ClientDeferred {
			if sp.Status != StepFailed {
				sp.Status = StepAwaitingClient
			}
			p.PauseReason = fmt.Sprintf("step %q (tool %q) must be performed by the client", s.Name, s.Tool)
			p.UpdatedAt = r.now()
			return rec.Record(ctx, p)
		}
		if sp.Status == StepFailed && !s.Retryable && sp.Attempts > 0 && p.PauseReason != "" {
			// A failed step that is not retryable stays failed until the
			// client performs it itself.
			return rec.Record(ctx, p)
		}
		args, err := r.resolve(p, s, false)
		if err != nil {
			recordFailure(p, s, err.Error(), r.now())
			return rec.Record(ctx, p)
		}
		r.trace = append(r.trace, callMessage(s, args))
		res, err := r.call(ctx, s.Tool, args)
		switch {
		case err != nil:
			recordFailure(p, s, err.Error(), r.now())
			r.trace = append(r.trace, textMessage("assistant", fmt.Sprintf("Step %q failed: %v", s.Name, err)))
			return rec.Record(ctx, p)
		case res.IsError:
			msg := toolError(res)
			recordFailure(p, s, msg, r.now())
			r.trace = append(r.trace, textMessage("assistant", fmt.Sprintf("Step %q failed: %s", s.Name, msg)))
			return rec.Record(ctx, p)
		}
		recordSuccess(p, s, res, r.now())
		r.trace = append(r.trace, resultMessage(s, res))
		if err := rec.Record(ctx, p); err != nil {
			return err
		}
	}
	p.PauseReason = ""
	return nil
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
