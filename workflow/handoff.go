package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// handoffSchemaJSON is the handoff document's JSON Schema.
func handoffSchemaJSON() []byte { return handoff.SchemaJSON() }

// view is what a kind's handoff entry (kind.entry) works with: the task,
// its progress, the version it runs on (nil when not served here), and
// what the reader can call.
type view struct {
	b        *Bridge
	t        *store.Task
	p        *Progress
	wf       *compiled
	d        mcptask.Dialect
	update   bool // the reader has tasks/update (events)
	resolver *resolver
	path     string // the record an entry is for, when a container keeps it ("" for a step's own)
}

// taskRef is the task id a call that performs the entry's record sends
// as _task_id: the task's id, and for a record a container keeps, "#"
// and its path.
func (v *view) taskRef() string {
	return TaskRef(v.t.ID, v.path)
}

// sub is v for the entry of the record at sl (its item for Item sources).
func (v *view) sub(sl *slot) *view {
	w := *v
	w.path = sl.path
	if v.resolver != nil {
		r := *v.resolver
		r.item = sl.item
		w.resolver = &r
	}
	return &w
}

// webhook is the webhook of step name of the task, when the bridge knows
// its URL and the task is active; nil otherwise.
func (v *view) webhook(name string) *handoff.Webhook {
	if v.b.opts.WebhookURL == "" || v.t.Status.Terminal() {
		return nil
	}
	var token string
	if json.Unmarshal(v.t.Variables[VarWebhookToken], &token) != nil || token == "" {
		return nil
	}
	return &handoff.Webhook{URL: strings.TrimRight(v.b.opts.WebhookURL, "/") + "/" + v.t.ID + "/" + name, Token: token}
}

// resumeAdvice says how the reader has the server try again: the
// workflow's tool when it is one (what a model can call), else its
// prompt.
func (v *view) resumeAdvice() string {
	if v.wf != nil && v.b.isWorkflowTool(v.wf.def.Name) {
		return fmt.Sprintf("call tool %q with {%q: %q}", v.wf.def.Name, mcptask.ArgTaskID, v.t.ID)
	}
	return fmt.Sprintf("resume the workflow (%s of this prompt with the argument %q: %q)", mcptask.MethodPromptsGet, mcptask.ArgTaskID, v.t.ID)
}

// handoff builds the handoff document of task t at progress p, for a
// client that speaks dialect d (its continuation names only methods d
// has). The steps come from the progress; the definition of the task's
// version, when this server serves it, adds what each kind says of its
// steps still to do (kind.entry). Each step the client may perform carries
// the task id among its arguments (_task_id), so a model that copies the
// arguments continues the right task.
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
	if wf != nil && b.isWorkflowTool(wf.def.Name) {
		doc.Continuation = doc.Continuation.WithResumeTool(wf.def.Name)
	}
	if t.Status.Terminal() && t.Status != mcptask.StatusCompleted && t.StatusMessage != "" {
		doc.PauseReason = t.StatusMessage
	}
	if t.Status == mcptask.StatusCancelled && wf != nil && wf.def.UndoOnCancel {
		if u, err := b.engine.Task(context.WithoutCancel(b.ctx), undoTaskID(t.ID)); err == nil {
			doc.PauseReason += fmt.Sprintf("; what it did is undone by workflow task %s (%s)", u.ID, u.Status)
		}
	}
	holdDoc(doc, t, p, b.opts.ResumeTool) // a paused workflow (pause.go)
	v := &view{b: b, t: t, p: p, wf: wf, d: d, update: d.HasMethod(mcptask.MethodTasksUpdate)}
	if wf != nil {
		v.resolver = &resolver{w: wf.def, vars: func(name string) (json.RawMessage, bool) { return userVar(name, t.Variables) }}
	}
	for i := range p.Steps {
		sp := &p.Steps[i]
		switch sp.Status {
		case mcptask.StepCompleted:
			cs := handoff.CompletedStep{Name: sp.Name, Tool: sp.Tool, Kind: sp.Kind, Result: p.Outputs[sp.Output], By: sp.CompletedBy}
			if sp.Attempts > 1 {
				cs.Attempts = sp.Attempts
			}
			doc.CompletedSteps = append(doc.CompletedSteps, cs)
			continue
		case mcptask.StepSkipped, mcptask.StepCancelled:
			doc.SkippedSteps = append(doc.SkippedSteps, handoff.SkippedStep{Name: sp.Name, Tool: sp.Tool, Kind: sp.Kind, Reason: sp.SkipReason})
			continue
		}
		doc.RemainingSteps = append(doc.RemainingSteps, v.remaining(i, sp))
		if wf != nil {
			doc.RemainingSteps = append(doc.RemainingSteps, wf.steps[i].kind.entries(v, wf.slotOf(p, i))...)
		}
	}
	if p.Undo != nil {
		for _, sp := range p.Undo.Steps {
			u := handoff.UndoStep{Undoes: strings.TrimPrefix(sp.Name, undoPrefix), Tool: sp.Tool, Status: sp.Status, Error: sp.Error}
			if sp.GaveUp {
				u.Status = mcptask.StepFailed
			} else if sp.Status == mcptask.StepFailed {
				u.Status = mcptask.StepRunning // failed, retried
			}
			doc.Undo = append(doc.Undo, u)
		}
	}
	for _, e := range p.Errors { // the history, for programs; the prose shows each step's current error only
		doc.Errors = append(doc.Errors, handoff.StepError{Step: e.Step, Tool: e.Tool, Message: e.Message, Retryable: e.Retryable})
	}
	return doc
}

// remaining is the handoff entry of step i, not ended: what every kind
// has (its status, attempts, times, group, condition, guidance), then
// what its kind adds.
func (v *view) remaining(i int, sp *StepProgress) handoff.RemainingStep {
	var s *Step
	if v.wf != nil {
		s = v.wf.steps[i]
	}
	return v.entryFor(s, sp)
}

// entryFor is the handoff entry of record sp of step s (nil when the
// task's version is not served here); v.path names a record a container
// keeps.
func (v *view) entryFor(s *Step, sp *StepProgress) handoff.RemainingStep {
	rs := handoff.RemainingStep{Name: sp.Name, Tool: sp.Tool, Execution: mcptask.ExecServer,
		Status: sp.Status, Attempts: sp.Attempts, HandedToClient: sp.HandedToClient,
		RetryAt: sp.RetryAt, Deadline: sp.Deadline, Kind: sp.Kind, Group: sp.Group}
	if sp.GaveUp {
		rs.Status = mcptask.StepFailed
	}
	if sp.Status == mcptask.StepFailed {
		rs.Error = sp.Error
	}
	client := sp.Execution == string(mcptask.ExecClient) && !sp.ServerTakeover || sp.HandedToClient
	if client {
		rs.Execution = mcptask.ExecClient
	}
	if s != nil {
		rs.Guidance = s.Guidance
		if s.Condition != nil && v.path == "" {
			rs.Condition = s.Condition.String()
		}
		s.kind.entry(v, s, sp, &rs)
	}
	v.holdEntry(sp, &rs) // queued, or paused (pause.go)
	if v.t.Status.Terminal() {
		endedEntry(v.t, sp, &rs)
	}
	if client && !v.t.Status.Terminal() && rs.Tool != "" {
		if rs.Arguments == nil {
			rs.Arguments = map[string]json.RawMessage{}
		}
		rs.Arguments[mcptask.ArgTaskID] = marshal(v.taskRef())
	}
	return rs
}

// endedEntry words entry rs of record sp of workflow task t, which
// ended: a step it left at work (running, waiting, sleeping) did not
// finish, so the entry never says it runs: failed where the failure was
// (the record or one it holds failed, or the failure names it: "step
// "smoke[0]" ran 3 time(s)..."), cancelled where the end cut it short; a
// step that never started stays pending (it will not run).
func endedEntry(t *store.Task, sp *StepProgress, rs *handoff.RemainingStep) {
	switch rs.Status {
	case mcptask.StepPending, mcptask.StepFailed, mcptask.StepCompleted, mcptask.StepSkipped, mcptask.StepCancelled:
		return
	}
	if t.Status == mcptask.StatusFailed && (recordFailed(sp) || namesRecord(t.StatusMessage, sp.Name)) {
		rs.Status, rs.Do = mcptask.StepFailed, "did not finish: the workflow failed here."
		return
	}
	rs.Status, rs.Do = mcptask.StepCancelled, "did not finish: the workflow ended before it did."
}

// namesRecord reports whether failure message msg is about record name
// or one it holds ("step \"smoke[0]\" ..." for "smoke").
func namesRecord(msg, name string) bool {
	rest, ok := strings.CutPrefix(msg, `step "`+name)
	return ok && (strings.HasPrefix(rest, `"`) || strings.HasPrefix(rest, "[") || strings.HasPrefix(rest, "/"))
}

// recordFailed reports whether record sp, or a record it holds (an item,
// a run), failed.
func recordFailed(sp *StepProgress) bool {
	if sp.Status == mcptask.StepFailed || sp.GaveUp {
		return true
	}
	for i := range sp.Items {
		if recordFailed(&sp.Items[i]) {
			return true
		}
	}
	return false
}

// errNote is " (the error)" for a failed step, or "".
func errNote(msg string) string {
	if msg == "" {
		return ""
	}
	return " (" + trimDot(oneLine(msg)) + ")"
}

// MetaHandoffJSON, set to true in a request's _meta, asks for the
// handoff's JSON block in the text of a tool result too (a program that
// reads the text; structuredContent and _meta carry the document anyway).
// A prompt result always has the block; a tool result, read by a model in
// a host, has only the prose by default.
const MetaHandoffJSON = "taskbridge/handoff-json"

// reader is who reads a handoff the bridge answers with: the methods its
// dialect has, and whether it wants the JSON block in a tool result's
// text (see MetaHandoffJSON).
type reader struct {
	d     mcptask.Dialect
	block bool
}

// readerOf is the reader of the answer to request q.
func readerOf(q *taskrouter.Request) reader {
	r := reader{d: q.Dialect}
	if q.MCP != nil && q.MCP.GetParams() != nil {
		r.block, _ = q.MCP.GetParams().GetMeta()[MetaHandoffJSON].(bool)
	}
	return r
}

// renderTool is the handoff's text in a tool result: the prose, and the
// JSON block only when the reader asked for it.
func renderTool(doc *handoff.Document, rd reader) (string, error) {
	return handoff.RenderWith(doc, &handoff.RenderOptions{NoJSON: !rd.block})
}
