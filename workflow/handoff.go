package workflow

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// handoffSchemaJSON is the handoff document's JSON Schema.
func handoffSchemaJSON() []byte { return handoff.SchemaJSON() }

// handoff builds the handoff document of task t at progress p, for a
// client that speaks dialect d (its continuation names only methods d
// has). The steps come from the progress; the definition of the task's
// version, when this server serves it, adds guidance and the arguments of
// the steps still to do. Each step the client may perform carries the task
// id among its arguments (_task_id), so a model that copies the arguments
// continues the right task.
func (b *Bridge) handoff(t *store.Task, p *Progress, d mcptask.Dialect) *handoff.Document {
	wf, _ := b.compiledFor(t, p) // nil: a version not served here
	doc := &handoff.Document{
		SchemaVersion:  handoff.SchemaVersion,
		TaskID:         t.ID,
		Workflow:       p.Workflow,
		Version:        p.Version,
		Goal:           p.Goal,
		Status:         string(t.Status),
		PauseReason:    p.PauseReason,
		CompletedSteps: []handoff.CompletedStep{},
		RemainingSteps: []handoff.RemainingStep{},
		Continuation:   handoff.NewContinuation(t.ID, d),
	}
	if b.opts.ResultTool != "" {
		doc.Continuation = doc.Continuation.WithResultTool(b.opts.ResultTool)
	}
	if t.Status.Terminal() && t.Status != store.StatusCompleted && t.StatusMessage != "" {
		doc.PauseReason = t.StatusMessage
	}
	var r *runner
	if wf != nil {
		r = &runner{wf: wf.def, vars: func(name string) (json.RawMessage, bool) { return userVar(name, t.Variables) }}
	}
	for i := range p.Steps {
		sp := &p.Steps[i]
		switch sp.Status {
		case StepCompleted:
			cs := handoff.CompletedStep{Name: sp.Name, Tool: sp.Tool, Kind: sp.Kind, Result: p.Outputs[sp.Output], By: sp.CompletedBy}
			if sp.Attempts > 1 {
				cs.Attempts = sp.Attempts
			}
			doc.CompletedSteps = append(doc.CompletedSteps, cs)
			continue
		case StepSkipped:
			doc.SkippedSteps = append(doc.SkippedSteps, handoff.SkippedStep{Name: sp.Name, Tool: sp.Tool, Kind: sp.Kind, Reason: sp.SkipReason})
			continue
		}
		rs := handoff.RemainingStep{Name: sp.Name, Tool: sp.Tool, Execution: handoff.ExecServer,
			Status: sp.Status, Attempts: sp.Attempts, HandedToClient: sp.HandedToClient,
			RetryAt: sp.RetryAt, Deadline: sp.Deadline, Kind: sp.Kind, Group: sp.Group, Until: sp.Until}
		if sp.GaveUp {
			rs.Status = StepFailed
		}
		if sp.Status == StepFailed {
			rs.Error = sp.Error
		}
		client := sp.Execution == string(ClientDeferred) && !sp.ServerTakeover || sp.HandedToClient
		if client {
			rs.Execution = handoff.ExecClient
		}
		if wf != nil {
			s := wf.steps[i]
			rs.Guidance = s.Guidance
			if s.Condition != nil {
				rs.Condition = s.Condition.String()
			}
			if s.Payload != nil {
				rs.Payload, _ = json.Marshal(s.Payload)
			}
			if (s.Webhook || s.kind() == KindEvent) && b.opts.WebhookURL != "" && !t.Status.Terminal() {
				var token string
				if json.Unmarshal(t.Variables[VarWebhookToken], &token) == nil && token != "" {
					rs.Webhook = &handoff.Webhook{URL: strings.TrimRight(b.opts.WebhookURL, "/") + "/" + t.ID + "/" + s.Name, Token: token}
				}
			}
			rs.Arguments, _ = r.resolve(p, s, true)
			for _, arg := range slices.Sorted(maps.Keys(s.Args)) {
				if src := s.Args[arg]; src.Kind == SourceStepOutput {
					if from := wf.def.producer(src.Name); from != nil && !slices.Contains(rs.DependsOn, from.Name) {
						rs.DependsOn = append(rs.DependsOn, from.Name)
					}
				}
			}
		}
		if client && !t.Status.Terminal() && sp.Kind != string(KindEvent) {
			if rs.Arguments == nil {
				rs.Arguments = map[string]json.RawMessage{}
			}
			rs.Arguments[TaskIDArgument] = marshal(t.ID)
		}
		doc.RemainingSteps = append(doc.RemainingSteps, rs)
	}
	for _, e := range p.Errors {
		doc.Errors = append(doc.Errors, handoff.StepError{Step: e.Step, Tool: e.Tool, Message: e.Message, Retryable: e.Retryable})
	}
	return doc
}

// renderDoc is the handoff's text: prose for a model, then the JSON block.
func renderDoc(doc *handoff.Document) (string, error) { return handoff.Render(doc) }

// producer returns the step whose output binding is binding (a group's
// member too), or nil.
func (w *Definition) producer(binding string) *Step {
	for _, s := range w.flat() {
		if s.binding() == binding {
			return s
		}
	}
	return nil
}
