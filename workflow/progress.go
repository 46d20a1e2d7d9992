package workflow

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/invopop/jsonschema"
	"github.com/taskbridge/taskbridge/mcptask"
)

// Task variable names the workflow engine owns. Clients cannot write keys
// under ReservedPrefix.
const (
	ReservedPrefix = "_workflow."
	// VarProgress holds the Progress JSON.
	VarProgress = "_workflow.progress"
	// VarResultPrefix starts the variable that keeps the full tool result
	// of a step the client performed (VarResultPrefix + step name), so that
	// a retried continuation is answered with the recorded result.
	VarResultPrefix = "_workflow.result."
)

// ProgressSchemaVersion is the version of the Progress format this package
// writes. Older versions are read as they are (the fields they lack are
// zero): 1, before workflow versions, retry times and client deadlines;
// 2, before step kinds (kind, group, until, gaveUp, the statuses sleeping,
// awaiting_event and skipped by a condition, completedBy webhook); 3,
// before step fingerprints (print), events kept until awaited (early),
// the status cancelled and the attempt outcomes stopped and cancelled.
const ProgressSchemaVersion = 4

// Why an attempt was made (Attempt.Reason).
const (
	ReasonFirst   = "first"   // the step's first run
	ReasonRetry   = "retry"   // the server's retry policy
	ReasonRestart = "restart" // the server restarted while the step was due or running
	// ReasonTakeover: on a shared store, another replica took the task
	// over (its process stopped renewing the lease) while the step was
	// due or running.
	ReasonTakeover = "takeover"
	ReasonResume   = "resume"  // a client resumed the workflow (prompts/get with _meta._task_id)
	ReasonClient   = "client"  // the client performed the step (a continuation call)
	ReasonTimeout  = "timeout" // the server performs a step whose client did not in time (TimeoutServer)
)

// Attempt outcomes (Attempt.Outcome).
const (
	OutcomeRunning = "running"
	OutcomeOK      = "ok"
	OutcomeError   = "error"
	// OutcomeStopped: a graceful stop of the server (a deploy) cut the
	// attempt short and handed the step back; it runs again, and does not
	// count as a crash.
	OutcomeStopped = "stopped"
	// OutcomeCancelled: the workflow failed without the attempt (a group
	// that fails fast) and stopped it.
	OutcomeCancelled = "cancelled"
)

// Progress is a workflow task's durable state, kept in the task variable
// VarProgress and rewritten after every step (and every attempt), before
// the next one starts.
type Progress struct {
	SchemaVersion int `json:"schemaVersion" jsonschema:"description=Version of this format"`
	// Workflow is the workflow (prompt) name.
	Workflow string `json:"workflow" jsonschema:"description=Workflow (prompt) name"`
	// Version is the workflow version the task runs on (see
	// Definition.Version); empty in progress written before versions.
	Version string `json:"version,omitempty" jsonschema:"description=Workflow version the task runs on"`
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
	// PauseReason says why the server stopped running steps; while the
	// workflow runs it says what is running. The task's status message
	// says the same.
	PauseReason string `json:"pauseReason,omitempty" jsonschema:"description=Why the server stopped running steps (or what it is running)"`
	// Errors lists step failures, oldest first.
	Errors []StepError `json:"errors,omitempty" jsonschema:"description=Step failures oldest first"`
	// UpdatedAt is when the progress was last written.
	UpdatedAt time.Time `json:"updatedAt" jsonschema:"description=When this progress was last written"`
	// Undo, when set, is the compensation of a workflow that failed (or
	// was cancelled) after steps with an undo completed: what it undoes,
	// and how far it got (see compensation.go).
	Undo *Undoing `json:"undo,omitempty" jsonschema:"description=The compensation of a workflow that failed after steps with an undo completed"`
	// DeadlineAt is when the workflow fails if it has not ended (its
	// Definition.Deadline after it started).
	DeadlineAt *time.Time `json:"deadlineAt,omitempty" jsonschema:"description=When the workflow fails if it has not ended"`
	// Revision counts the writes of this progress; a writer that finds it
	// changed since it read the progress lost a race with another writer.
	Revision int `json:"revision" jsonschema:"description=Number of times this progress was written"`
	// Queue is the workflow's place on its queue (Definition.OnQueue): no
	// step starts before it holds one.
	Queue *QueuePlace `json:"queue,omitempty" jsonschema:"description=The workflow's place on its queue: no step starts before it holds one"`
	// Paused, when set, says the workflow is paused: no step starts until
	// it is resumed.
	Paused *Pause `json:"paused,omitempty" jsonschema:"description=Set while the workflow is paused: who paused it when and why"`
}

// StepProgress is one step's state. Its Status is an mcptask.StepStatus:
// a step found running after a restart runs again; a failed server step
// the server gave up on is handed to the client (HandedToClient), one it
// retries has a RetryAt; a skipped or cancelled step's SkipReason says
// why.
type StepProgress struct {
	Name      string             `json:"name"`
	Tool      string             `json:"tool"`
	Execution string             `json:"execution" jsonschema:"enum=server,enum=client"`
	Status    mcptask.StepStatus `json:"status" jsonschema:"enum=pending,enum=running,enum=awaiting_client,enum=awaiting_event,enum=sleeping,enum=awaiting_child,enum=completed,enum=failed,enum=skipped,enum=cancelled"`
	// Kind is the step's kind: tool (the default, left out), sleep,
	// event, or a later kind's name.
	Kind string `json:"kind,omitempty" jsonschema:"description=The step's kind when not a tool call (sleep, event, ...)"`
	// Print is the step's fingerprint when the task started: a
	// definition changed under the task's declared version is detected
	// step by step (see VersionOf).
	Print string `json:"print,omitempty" jsonschema:"description=Fingerprint of the step's definition when the task started"`
	// Group names the parallel group the step belongs to.
	Group  string `json:"group,omitempty" jsonschema:"description=The parallel group the step belongs to"`
	Output string `json:"output" jsonschema:"description=Binding name of the step's output"`
	// Attempts counts every run of the step: by the server (first runs,
	// retries, re-runs after a restart or a resume) and by the client.
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"`
	// HandedToClient is set on a server step the server gave up on: the
	// client may perform it (a continuation call of its tool).
	HandedToClient bool `json:"handedToClient,omitempty" jsonschema:"description=The server gave up on this server step; the client may perform it"`
	// CompletedBy says who performed a completed step: server or client.
	CompletedBy string `json:"completedBy,omitempty" jsonschema:"enum=server,enum=client,enum=webhook"`
	// Arguments are the arguments of the call that completed the step.
	Arguments json.RawMessage `json:"arguments,omitempty" jsonschema:"description=Arguments of the call that completed the step"`
	// IdempotencyKey is passed to the step's tool on every run in
	// _meta["taskbridge/idempotency-key"], the same for every run of this
	// step of this task.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// History records every attempt, oldest first.
	History []Attempt `json:"history,omitempty" jsonschema:"description=Every attempt at the step oldest first"`
	// RetryAt is when the server tries a failed server step again (its
	// retry policy's backoff); the engine's scheduler wakes the task then,
	// on any replica, after a restart too.
	RetryAt *time.Time `json:"retryAt,omitempty" jsonschema:"description=When the server retries this failed step"`
	// ReachedAt is when the workflow started waiting for the client to
	// perform the step (a client step reached, or a server step handed to
	// the client).
	ReachedAt *time.Time `json:"reachedAt,omitempty" jsonschema:"description=When the workflow started waiting for the client on this step"`
	// Deadline is when the wait for the client ends (ReachedAt plus the
	// step's ClientWait); what happens then is the step's
	// OnClientTimeout.
	Deadline *time.Time `json:"deadline,omitempty" jsonschema:"description=When the wait for the client on this step ends"`
	// SkipReason says why a skipped step did not run.
	SkipReason string `json:"skipReason,omitempty" jsonschema:"description=Why the step was skipped"`
	// Tries counts the server's attempts in the current series, which its
	// retry policy bounds (a resume or a timeout starts a new series).
	Tries int `json:"tries,omitempty" jsonschema:"description=Server attempts in the current retry series"`
	// Interrupted counts the attempts in a row cut short by the server
	// stopping; past a few the step is given up on.
	Interrupted int `json:"interrupted,omitempty" jsonschema:"description=Attempts in a row cut short by the server stopping"`
	// ServerTakeover is set on a client step the server performs itself
	// because the client's wait ran out (TimeoutServer).
	ServerTakeover bool `json:"serverTakeover,omitempty" jsonschema:"description=The server performs this client step because the client's wait ran out"`
	// Until is when a sleep ends, set once when it starts: a restart or a
	// takeover never starts the wait again from zero.
	Until *time.Time `json:"until,omitempty" jsonschema:"description=When a sleep ends"`
	// GaveUp is set on a step of a parallel group that the server gave up
	// on and whose failure fails the workflow once the group's other steps
	// have ended.
	GaveUp bool `json:"gaveUp,omitempty" jsonschema:"description=The server gave up on this group step; the workflow fails once the group ends"`
	// Early is an event delivered before the workflow awaited it, kept
	// until it does.
	Early *Early `json:"early,omitempty" jsonschema:"description=An event delivered before the workflow awaited it, kept until it does"`
	// Items are the records a container step keeps of its body's runs: a
	// for-each's items, a loop's latest iterations. Each is a step record
	// of its own (its attempts, status, result).
	Items []StepProgress `json:"items,omitempty" jsonschema:"description=The records a container step keeps of its body's runs: a for-each's items or a loop's latest iterations"`
	// N numbers a record a container keeps: the item's index in a
	// for-each, the iteration's number (from 1) in a loop.
	N int `json:"n,omitempty" jsonschema:"description=The index of a for-each's item or the number of a loop's iteration"`
	// Item is the value a for-each's item record works on.
	Item json.RawMessage `json:"item,omitempty" jsonschema:"description=The value a for-each's item works on"`
	// Result is the output of a record a container keeps (a step's own
	// output is in Progress.Outputs).
	Result json.RawMessage `json:"result,omitempty" jsonschema:"description=The output of a record a container keeps"`
	// Runs counts the runs of a container's body started so far: a loop's
	// iterations (the records it keeps are the latest ones only).
	Runs int `json:"runs,omitempty" jsonschema:"description=How many runs of its body a container started (a loop's iterations)"`
	// Child is the task a child-workflow step started.
	Child string `json:"child,omitempty" jsonschema:"description=The task a child-workflow step started"`
	// Queue is the step's place on its queue (Step.OnQueue): waiting for
	// one, or holding it while its attempts run.
	Queue *QueuePlace `json:"queue,omitempty" jsonschema:"description=The step's place on its queue: waiting for one or holding it"`
	// Asked is how a step that asks the client (a sampling step, a
	// question) reaches it.
	Asked *Asked `json:"asked,omitempty" jsonschema:"description=How a step that asks the client (sampling or a question) reaches it"`
}

// Asked is how a step that asks the client (a sampling step, a question;
// see kind_sample.go) reaches it
// (StepProgress.Asked).
type Asked struct {
	// Via says how: task, request, input or handoff (the AskVia
	// constants).
	Via string `json:"via" jsonschema:"enum=task,enum=request,enum=input,enum=handoff"`
	// ClientTask is the client's task that answers a task-augmented
	// request: followed again after a restart.
	ClientTask string `json:"clientTask,omitempty" jsonschema:"description=The client's own task that answers a task-augmented request"`
	// Why says why the client cannot be asked (Via handoff).
	Why string `json:"why,omitempty" jsonschema:"description=Why the client cannot be asked"`
	// Request is the input request ({"method", "params"}) the workflow
	// task lists for the step (Via input).
	Request json.RawMessage `json:"request,omitempty" jsonschema:"description=The input request the workflow task lists for the step"`
}

// Early is a delivery kept for a step the workflow has not reached yet.
type Early struct {
	// Payload is the event's payload.
	Payload json.RawMessage `json:"payload,omitempty"`
	// By says who delivered it: client or webhook.
	By string `json:"by"`
	// At is when it arrived.
	At time.Time `json:"at"`
	// Skip, when set, is a declined input request: the step is skipped
	// for this reason when reached.
	Skip string `json:"skip,omitempty"`
}

// Attempt is one run of a step.
type Attempt struct {
	// N numbers the step's attempts from 1.
	N int `json:"n"`
	// Reason says why the step ran: first, retry, restart, takeover,
	// resume, client, timeout.
	Reason string `json:"reason" jsonschema:"enum=first,enum=retry,enum=restart,enum=takeover,enum=resume,enum=client,enum=timeout"`
	// By says who ran it: server or client.
	By string `json:"by" jsonschema:"enum=server,enum=client"`
	// At is when the attempt started.
	At time.Time `json:"at"`
	// DurationMs is how long it took, once it ended.
	DurationMs int64 `json:"durationMs,omitempty"`
	// Outcome is running, ok or error.
	Outcome string `json:"outcome" jsonschema:"enum=running,enum=ok,enum=error,enum=stopped,enum=cancelled"`
	// Error is the failure, when Outcome is error.
	Error string `json:"error,omitempty"`
}

// StepError records one failed attempt of a step.
type StepError struct {
	Step      string    `json:"step"`
	Tool      string    `json:"tool"`
	Message   string    `json:"message"`
	Retryable bool      `json:"retryable"`
	At        time.Time `json:"at"`
}

var progressSchema = sync.OnceValue(func() []byte {
	// The root is inlined; a step record is a definition of its own,
	// since a container's records (items) are step records too.
	r := &jsonschema.Reflector{ExpandedStruct: true}
	s := r.Reflect(&Progress{})
	if v, ok := s.Properties.Get("schemaVersion"); ok {
		for n := 1; n <= ProgressSchemaVersion; n++ { // the versions read
			v.Enum = append(v.Enum, n)
		}
	}
	s.ID = "https://taskbridge.dev/schemas/workflow-progress-v4.json"
	s.Title = "taskbridge workflow Progress"
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
})

// ProgressSchemaJSON returns the JSON Schema of Progress.
func ProgressSchemaJSON() []byte { return progressSchema() }

// ProgressSchemaURI is the URI of the MCP resource that publishes
// ProgressSchemaJSON (see RegisterSchemaResources).
const ProgressSchemaURI = "taskbridge://schemas/workflow-progress.json"

func newProgress(wf *compiled, args map[string]string, now time.Time) *Progress {
	w := wf.def
	p := &Progress{
		SchemaVersion: ProgressSchemaVersion,
		Workflow:      w.Name,
		Version:       wf.version,
		Goal:          w.goal(),
		Arguments:     args,
		Outputs:       map[string]json.RawMessage{},
		UpdatedAt:     now,
	}
	if p.Arguments == nil {
		p.Arguments = map[string]string{}
	}
	if d := w.Deadline; d > 0 {
		at := now.Add(d)
		p.DeadlineAt = &at
	}
	for i, s := range wf.steps {
		sp := StepProgress{Name: s.Name, Tool: toolOf(s), Execution: string(s.Execution()), Status: mcptask.StepPending, Output: s.binding(), Print: wf.prints[i]}
		if g := wf.parent[s.Name]; g != nil {
			sp.Group = g.Name
		}
		if s.Kind() != mcptask.StepKindTool { // a tool step's kind is left out
			sp.Kind = string(s.Kind())
		}
		p.Steps = append(p.Steps, sp)
	}
	p.refresh()
	return p
}

// refresh recomputes the derived step name lists.
func (p *Progress) refresh() {
	p.CompletedSteps = []string{}
	p.RemainingSteps = []string{}
	for _, s := range p.Steps {
		switch s.Status {
		case mcptask.StepCompleted:
			p.CompletedSteps = append(p.CompletedSteps, s.Name)
		case mcptask.StepSkipped, mcptask.StepCancelled:
		default:
			p.RemainingSteps = append(p.RemainingSteps, s.Name)
		}
	}
}

func (p *Progress) step(name string) *StepProgress {
	for i := range p.Steps {
		if p.Steps[i].Name == name {
			return &p.Steps[i]
		}
	}
	return nil
}

// done reports whether every step ended (completed or skipped).
func (p *Progress) done() bool {
	for i := range p.Steps {
		if !p.Steps[i].ended() {
			return false
		}
	}
	return true
}

// ended reports whether the step is completed, skipped or cancelled:
// nothing more happens to it.
func (sp *StepProgress) ended() bool {
	return sp.Status == mcptask.StepCompleted || sp.Status == mcptask.StepSkipped || sp.Status == mcptask.StepCancelled
}

// maxHistory bounds the attempts kept per step (the first and the latest).
const maxHistory = 20

// begin opens an attempt at step sp and returns it.
func (sp *StepProgress) begin(reason, by string, at time.Time) *Attempt {
	sp.Attempts++
	if len(sp.History) >= maxHistory {
		sp.History = append(sp.History[:1], sp.History[2:]...)
	}
	sp.History = append(sp.History, Attempt{N: sp.Attempts, Reason: reason, By: by, At: at, Outcome: OutcomeRunning})
	return &sp.History[len(sp.History)-1]
}

// open returns the step's attempt still marked running, if any.
func (sp *StepProgress) open() *Attempt {
	if n := len(sp.History); n > 0 && sp.History[n-1].Outcome == OutcomeRunning {
		return &sp.History[n-1]
	}
	return nil
}

// end closes the open attempt (opening one for reason if none is open).
func (sp *StepProgress) end(reason, by string, at time.Time, errMsg string) {
	a := sp.open()
	if a == nil {
		a = sp.begin(reason, by, at)
	}
	a.DurationMs = max(0, at.Sub(a.At).Milliseconds())
	if errMsg == "" {
		a.Outcome = OutcomeOK
	} else {
		a.Outcome, a.Error = OutcomeError, errMsg
	}
}

// walkRecords calls f on every record of p: its steps', those their
// containers keep, and its undo steps'.
func walkRecords(p *Progress, f func(sp *StepProgress)) {
	var walk func(sp *StepProgress)
	walk = func(sp *StepProgress) {
		f(sp)
		for i := range sp.Items {
			walk(&sp.Items[i])
		}
	}
	for i := range p.Steps {
		walk(&p.Steps[i])
	}
	if p.Undo != nil {
		for i := range p.Undo.Steps {
			walk(&p.Undo.Steps[i])
		}
	}
}
