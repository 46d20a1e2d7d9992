package workflow

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/invopop/jsonschema"
)

// Task variable names the workflow engine owns. Clients cannot write keys
// under ReservedPrefix.
const (
	ReservedPrefix = "_workflow."
	// VarProgress holds the WorkflowProgress JSON (FNDX-03).
	VarProgress = "_workflow.progress"
)

// ProgressSchemaVersion is the version of the WorkflowProgress format.
const ProgressSchemaVersion = 1

// Step statuses in WorkflowProgress.
const (
	StepPending        = "pending"
	StepAwaitingClient = "awaiting_client"
	StepCompleted      = "completed"
	StepFailed         = "failed"
)

// WorkflowProgress is a workflow task's durable state, kept in the task
// variable VarProgress and rewritten after every step, before the next one
// starts (EXEC-01).
type WorkflowProgress struct {
	SchemaVersion int `json:"schemaVersion" jsonschema:"description=Version of this format"`
	// Workflow is the workflow (prompt) name.
	Workflow string `json:"workflow" jsonschema:"description=Workflow (prompt) name"`
	// Goal is what the workflow achieves.
	Goal string `json:"goal,omitempty" jsonschema:"description=What the workflow achieves"`
	// Arguments are the prompt arguments the workflow was started with.
	Arguments map[string]string `json:"arguments" jsonschema:"description=Prompt arguments the workflow was started with"`
	// Steps is every step with its status, in order.
	Steps []StepProgress `json:"steps" jsonschema:"description=Every step in order with its status"`
	// CompletedSteps and RemainingSteps name the steps done and still to do.
	CompletedSteps []string `json:"completedSteps" jsonschema:"description=Names of completed steps in order"`
	RemainingSteps []string `json:"remainingSteps" jsonschema:"description=Names of steps still to do in order"`
	// Outputs holds each completed step's output by binding name.
	Outputs map[string]json.RawMessage `json:"outputs" jsonschema:"description=Output of each completed step by binding name"`
	// PauseReason says why the server stopped running steps.
	PauseReason string `json:"pauseReason,omitempty" jsonschema:"description=Why the server stopped running steps"`
	// Errors lists step failures, oldest first.
	Errors []StepError `json:"errors,omitempty" jsonschema:"description=Step failures oldest first"`
	// UpdatedAt is when the progress was last written.
	UpdatedAt time.Time `json:"updatedAt" jsonschema:"description=When this progress was last written"`
}

// StepProgress is one step's state.
type StepProgress struct {
	Name      string `json:"name"`
	Tool      string `json:"tool"`
	Execution string `json:"execution" jsonschema:"enum=server,enum=client"`
	Status    string `json:"status" jsonschema:"enum=pending,enum=awaiting_client,enum=completed,enum=failed"`
	Output    string `json:"output" jsonschema:"description=Binding name of the step's output"`
	Attempts  int    `json:"attempts"`
	Error     string `json:"error,omitempty"`
}

// StepError records one failed attempt of a step (EXEC-03).
type StepError struct {
	Step      string    `json:"step"`
	Tool      string    `json:"tool"`
	Message   string    `json:"message"`
	Retryable bool      `json:"retryable"`
	At        time.Time `json:"at"`
}

var progressSchema = sync.OnceValue(func() []byte {
	r := &jsonschema.Reflector{DoNotReference: true}
	s := r.Reflect(&WorkflowProgress{})
	if v, ok := s.Properties.Get("schemaVersion"); ok {
		v.Const = ProgressSchemaVersion // invopop ignores a const tag
	}
	s.ID = "https://taskbridge.dev/schemas/workflow-progress-v1.json"
	s.Title = "taskbridge WorkflowProgress"
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
})

// ProgressSchemaJSON returns the JSON Schema of WorkflowProgress.
func ProgressSchemaJSON() []byte { return progressSchema() }

// ProgressSchemaURI is the URI of the MCP resource that publishes
// ProgressSchemaJSON (see RegisterSchemaResources).
const ProgressSchemaURI = "taskbridge://schemas/workflow-progress.json"

func newProgress(w *SequentialWorkflow, args map[string]string, now time.Time) *WorkflowProgress {
	p := &WorkflowProgress{
		SchemaVersion: ProgressSchemaVersion,
		Workflow:      w.Name,
		Goal:          w.goal(),
		Arguments:     args,
		Outputs:       map[string]json.RawMessage{},
		UpdatedAt:     now,
	}
	if p.Arguments == nil {
		p.Arguments = map[string]string{}
	}
	for _, s := range w.Steps {
		p.Steps = append(p.Steps, StepProgress{Name: s.Name, Tool: s.Tool, Execution: string(s.execution()), Status: StepPending, Output: s.binding()})
	}
	p.refresh()
	return p
}

// refresh recomputes the derived step name lists.
func (p *WorkflowProgress) refresh() {
	p.CompletedSteps = []string{}
	p.RemainingSteps = []string{}
	for _, s := range p.Steps {
		if s.Status == StepCompleted {
			p.CompletedSteps = append(p.CompletedSteps, s.Name)
		} else {
			p.RemainingSteps = append(p.RemainingSteps, s.Name)
		}
	}
}

func (p *WorkflowProgress) step(name string) *StepProgress {
	for i := range p.Steps {
		if p.Steps[i].Name == name {
			return &p.Steps[i]
		}
	}
	return nil
}

// done reports whether every step completed.
func (p *WorkflowProgress) done() bool {
	for _, s := range p.Steps {
		if s.Status != StepCompleted {
			return false
		}
	}
	return true
}

func (p *WorkflowProgress) clone() *WorkflowProgress {
	b, _ := json.Marshal(p)
	var c WorkflowProgress
	_ = json.Unmarshal(b, &c)
	return &c
}
