package workflow

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// handoffSchemaJSON is the handoff document's JSON Schema.
func handoffSchemaJSON() []byte { return handoff.SchemaJSON() }

// handoff builds the handoff document of task t at progress p, for a
// client that speaks dialect d (its continuation names only methods d
// has).
func (h *TaskWorkflowPromptHandler) handoff(t *store.Task, p *WorkflowProgress, d mcptask.Dialect) *handoff.Document {
	w := h.Plain.Workflow
	r := h.Plain.runner(t.ID, func(name string) (json.RawMessage, bool) { return userVar(name, t.Variables) })
	doc := &handoff.Document{
		SchemaVersion:  handoff.SchemaVersion,
		TaskID:         t.ID,
		Workflow:       w.Name,
		Goal:           w.goal(),
		Status:         string(t.Status),
		PauseReason:    p.PauseReason,
		CompletedSteps: []handoff.CompletedStep{},
		RemainingSteps: []handoff.RemainingStep{},
		Continuation:   handoff.NewContinuation(t.ID, d),
	}
	if t.Status.Terminal() && t.Status != store.StatusCompleted && t.StatusMessage != "" {
		doc.PauseReason = t.StatusMessage
	}
	for _, s := range w.Steps {
		sp := p.step(s.Name)
		if sp != nil && sp.Status == StepCompleted {
			cs := handoff.CompletedStep{Name: s.Name, Tool: s.Tool, Result: p.Outputs[s.binding()], By: sp.CompletedBy}
			if sp.Attempts > 1 {
				cs.Attempts = sp.Attempts
			}
			doc.CompletedSteps = append(doc.CompletedSteps, cs)
			continue
		}
		args, _ := r.resolve(p, s, true)
		rs := handoff.RemainingStep{Name: s.Name, Tool: s.Tool, Execution: handoff.ExecServer, Arguments: args, Guidance: s.Guidance}
		if sp != nil {
			rs.Status, rs.Attempts = sp.Status, sp.Attempts
			if sp.Status == StepFailed {
				rs.Error = sp.Error
			}
			rs.HandedToClient = sp.HandedToClient
		}
		if s.execution() == ClientDeferred || rs.HandedToClient {
			rs.Execution = handoff.ExecClient
		}
		for _, arg := range slices.Sorted(maps.Keys(s.Args)) {
			if src := s.Args[arg]; src.Kind == SourceStepOutput {
				if from := w.producer(src.Name); from != nil && !slices.Contains(rs.DependsOn, from.Name) {
					rs.DependsOn = append(rs.DependsOn, from.Name)
				}
			}
		}
		doc.RemainingSteps = append(doc.RemainingSteps, rs)
	}
	for _, e := range p.Errors {
		doc.Errors = append(doc.Errors, handoff.StepError{Step: e.Step, Tool: e.Tool, Message: e.Message, Retryable: e.Retryable})
	}
	return doc
}

func (w *SequentialWorkflow) producer(binding string) *Step {
	for _, s := range w.Steps {
		if s.binding() == binding {
			return s
		}
	}
	return nil
}
