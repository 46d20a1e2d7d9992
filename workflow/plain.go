package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// WorkflowPromptHandler is the plain workflow prompt (INTG-02): on
// prompts/get it runs the workflow's server steps in order and returns the
// conversation trace. It creates no task; at the first client-deferred
// step it stops and describes what remains.
type WorkflowPromptHandler struct {
	Workflow *SequentialWorkflow
	// Call runs a tool; see Router.CallTool in package taskrouter.
	Call ToolCaller
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// NewPromptHandler returns a plain handler for w.
func NewPromptHandler(w *SequentialWorkflow, call ToolCaller) *WorkflowPromptHandler {
	return &WorkflowPromptHandler{Workflow: w, Call: call}
}

func (h *WorkflowPromptHandler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *WorkflowPromptHandler) runner(vars func(string) (json.RawMessage, bool)) *runner {
	return &runner{wf: h.Workflow, call: h.Call, vars: vars, now: h.now}
}

// Start validates prompt arguments and returns fresh progress.
func (h *WorkflowPromptHandler) Start(args map[string]string) (*WorkflowProgress, error) {
	a, err := h.Workflow.promptArgs(args)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("prompt %q: %v", h.Workflow.Name, err)}
	}
	return newProgress(h.Workflow, a, h.now()), nil
}

// Run advances p from where it stands: it runs server steps in order,
// calling rec after each one, until the workflow is done, waits for the
// client, or a step fails. It returns the trace of what ran. vars reads
// task variables (nil when there is no task).
func (h *WorkflowPromptHandler) Run(ctx context.Context, p *WorkflowProgress, rec Recorder, vars func(string) (json.RawMessage, bool)) ([]*mcp.PromptMessage, error) {
	r := h.runner(vars)
	err := r.advance(ctx, p, rec)
	return r.trace, err
}

// Handle is the mcp.PromptHandler.
func (h *WorkflowPromptHandler) Handle(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	var args map[string]string
	if req != nil && req.Params != nil {
		args = req.Params.Arguments
	}
	p, err := h.Start(args)
	if err != nil {
		return nil, err
	}
	r := h.runner(nil)
	if err := r.advance(ctx, p, RecorderFunc(func(context.Context, *WorkflowProgress) error { return nil })); err != nil {
		return nil, err
	}
	msgs := append([]*mcp.PromptMessage{r.startMessage(p)}, r.trace...)
	msgs = append(msgs, textMessage("assistant", h.summary(p, r)))
	return &mcp.GetPromptResult{Description: h.Workflow.Description, Messages: msgs}, nil
}

// summary describes the outcome for the plain handler.
func (h *WorkflowPromptHandler) summary(p *WorkflowProgress, r *runner) string {
	if p.done() {
		return fmt.Sprintf("Workflow %q is complete: all %d steps ran.", h.Workflow.Name, len(p.Steps))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Workflow %q stopped: %s.\nRemaining steps:\n", h.Workflow.Name, p.PauseReason)
	for i, s := range h.Workflow.Steps {
		if p.step(s.Name).Status == StepCompleted {
			continue
		}
		args, _ := r.resolve(p, s, true)
		ab := marshal(args)
		who := "server"
		if s.execution() == ClientDeferred {
			who = "you"
		}
		fmt.Fprintf(&b, "%d. %s (performed by %s): call tool %q with %s", i+1, s.Name, who, s.Tool, ab)
		if s.Guidance != "" {
			fmt.Fprintf(&b, ". %s", s.Guidance)
		}
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n")
}
