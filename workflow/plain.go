package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
)

// PromptHandler is the plain workflow prompt: on prompts/get it runs the
// workflow's server steps in order (with their retry policies), in the
// request, and returns the conversation trace. It creates no task; at the
// first step for the client, or at a step the server gave up on, it stops
// and describes what remains.
type PromptHandler struct {
	Workflow *Definition
	// Call runs a tool; see Router.CallTool in package taskrouter.
	Call ToolCaller
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// NewPromptHandler returns a plain handler for w.
func NewPromptHandler(w *Definition, call ToolCaller) *PromptHandler {
	return &PromptHandler{Workflow: w, Call: call}
}

func (h *PromptHandler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// Start validates prompt arguments and returns fresh progress.
func (h *PromptHandler) Start(args map[string]string) (*Progress, error) {
	a, err := h.Workflow.promptArgs(args)
	if err != nil {
		return nil, mcptask.InvalidParams("prompt %q: %v", h.Workflow.Name, err)
	}
	return newProgress(compile(h.Workflow), a, h.now()), nil
}

// Handle is the mcp.PromptHandler.
func (h *PromptHandler) Handle(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	var args map[string]string
	if req != nil && req.Params != nil {
		args = req.Params.Arguments
	}
	p, err := h.Start(args)
	if err != nil {
		return nil, err
	}
	r := &runner{wf: h.Workflow, call: h.Call, now: h.now}
	if req != nil {
		// Server steps run on behalf of this client: their logs and
		// progress reach it.
		r.session = req.Session
	}
	err = r.advance(ctx, p, RecorderFunc(func(context.Context, *Progress) error { return nil }))
	if err != nil && !errors.Is(err, ErrWorkflowFailed) {
		return nil, err
	}
	msgs := append([]*mcp.PromptMessage{startMessage(h.Workflow, p)}, r.trace...)
	msgs = append(msgs, textMessage("assistant", h.summary(p, r, err)))
	return &mcp.GetPromptResult{Description: h.Workflow.Description, Messages: msgs}, nil
}

// summary describes the outcome for the plain handler.
func (h *PromptHandler) summary(p *Progress, r *runner, failed error) string {
	if failed != nil {
		return fmt.Sprintf("Workflow %q failed: %s.", h.Workflow.Name, p.PauseReason)
	}
	var skipped strings.Builder
	for _, sp := range p.Steps {
		if sp.Status == mcptask.StepSkipped {
			fmt.Fprintf(&skipped, "\nStep %q was skipped: %s.", sp.Name, sp.SkipReason)
		}
	}
	if p.done() {
		if skipped.Len() > 0 {
			return fmt.Sprintf("Workflow %q is complete: %d of its %d steps ran.", h.Workflow.Name, len(p.CompletedSteps), len(p.Steps)) + skipped.String()
		}
		return fmt.Sprintf("Workflow %q is complete: all %d steps ran.", h.Workflow.Name, len(p.Steps))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Workflow %q stopped: %s.%s\nRemaining steps:\n", h.Workflow.Name, p.PauseReason, skipped.String())
	for i, s := range h.Workflow.Steps {
		sp := p.step(s.Name)
		if sp.ended() {
			continue
		}
		c := callOf(s)
		args, _ := c.resolve(r.resolver(), p, true, false)
		ab := marshal(args)
		who := "server"
		if s.Execution() == mcptask.ExecClient || sp.HandedToClient {
			who = "you"
		}
		fmt.Fprintf(&b, "%d. %s (performed by %s): call tool %q with %s", i+1, s.Name, who, c.tool, ab)
		if sp.HandedToClient {
			fmt.Fprintf(&b, ". The server could not: %s", oneLine(sp.Error))
		}
		if s.Guidance != "" {
			fmt.Fprintf(&b, ". %s", s.Guidance)
		}
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n")
}
