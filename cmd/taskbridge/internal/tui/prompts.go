package tui

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	tea "charm.land/bubbletea/v2"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/argschema"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/stepview"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// promptsTab lists the server's prompts; a task-aware workflow prompt
// opens as a step list the user works through.
type promptsTab struct {
	list   []*mcp.Prompt
	sel    int
	err    string
	loaded bool
	text   []string // the messages of a plain prompt
	textT  string
	scroll int // the first line of text shown
	wf     *wfView
}

// wfView is a workflow being followed: its latest handoff as a step list.
type wfView struct {
	doc  *handoff.Document
	sel  int    // index into steps()
	busy string // what is being done right now
	err  string
}

// wfStep is a row of the step list: a step completed, skipped or still
// to do, or an entry nested under one (a for-each's item, a loop's run, a
// child workflow's step).
type wfStep struct {
	stepview.Row
	name, tool string
	done       *handoff.CompletedStep
	rem        *handoff.RemainingStep
	skipped    *handoff.SkippedStep
}

func (v *wfView) steps() []wfStep {
	var out []wfStep
	for _, r := range stepview.Rows(v.doc) {
		out = append(out, wfStep{Row: r, name: r.Name, tool: r.Tool, done: r.Done, rem: r.Rem, skipped: r.Skipped})
	}
	return out
}

// actionable reports whether the user can perform the step now: a client
// step reached (not an event, which an outsider delivers), or a server
// step handed to the client.
func (s wfStep) actionable() bool {
	return s.rem != nil && (s.rem.HandedToClient ||
		s.rem.Execution == mcptask.ExecClient && s.rem.Kind == "" && s.rem.Status != mcptask.StepPending)
}

// selectNext selects the first step the user can perform.
func (v *wfView) selectNext() {
	for i, s := range v.steps() {
		if s.actionable() {
			v.sel = i
			return
		}
	}
	v.sel = max(0, len(v.doc.CompletedSteps)-1)
}

type (
	promptsMsg struct {
		prompts []*mcp.Prompt
		err     error
	}
	promptMsg struct {
		name string
		res  *mcp.GetPromptResult
		doc  *handoff.Document
		err  error
	}
	stepMsg struct {
		taskID, step string
		res          *mcp.CallToolResult
		sum          *mcptask.WorkflowSummary
		doc          *handoff.Document // the handoff afterwards
		err          error
	}
)

func (m *Model) loadPrompts() tea.Cmd {
	c, ctx := m.c, m.ui.ctx
	return func() tea.Msg {
		ps, err := c.Prompts(ctx)
		return promptsMsg{ps, err}
	}
}

func (m *Model) promptsLoaded(msg promptsMsg) tea.Cmd {
	m.prompts.loaded = true
	if msg.err != nil {
		m.prompts.err = msg.err.Error()
		return nil
	}
	m.prompts.err = ""
	m.prompts.list = msg.prompts
	m.prompts.sel = min(m.prompts.sel, max(0, len(msg.prompts)-1))
	return nil
}

// promptFields turns a prompt's declared arguments into form fields (all
// text), in the order the prompt declares them.
func promptFields(p *mcp.Prompt) []argschema.Field {
	props := map[string]any{}
	var required []string
	for _, a := range p.Arguments {
		props[a.Name] = map[string]any{"type": "string", "description": a.Description}
		if a.Required {
			required = append(required, a.Name)
		}
	}
	fields, _ := argschema.Fields(map[string]any{"type": "object", "properties": props, "required": required})
	pos := map[string]int{}
	for i, a := range p.Arguments {
		pos[a.Name] = i
	}
	slices.SortStableFunc(fields, func(a, b argschema.Field) int { return pos[a.Name] - pos[b.Name] })
	return fields
}

func (m *Model) promptsKey(k string) tea.Cmd {
	p := &m.prompts
	if p.wf != nil {
		return m.workflowKey(k)
	}
	switch k {
	case "up", "k":
		p.sel = max(0, p.sel-1)
	case "down", "j":
		p.sel = min(len(p.list)-1, p.sel+1)
	case "esc":
		p.text = nil
	case "pgdown", "space":
		p.scroll += 5
	case "pgup":
		p.scroll = max(0, p.scroll-5)
	case "r":
		p.loaded = false
		return m.loadPrompts()
	case "enter":
		if p.sel >= len(p.list) {
			return nil
		}
		pr := p.list[p.sel]
		name := pr.Name
		intro := []string{}
		if pr.Description != "" {
			intro = append(intro, pr.Description)
		}
		m.form = newForm(formSpec{
			title:  "Get prompt " + name,
			intro:  intro,
			fields: promptFields(pr),
			submit: func(v map[string]any) tea.Cmd { return m.getPrompt(name, v) },
		})
	}
	return nil
}

func (m *Model) getPrompt(name string, values map[string]any) tea.Cmd {
	args := map[string]string{}
	for k, v := range values {
		args[k] = argschema.Format(v)
	}
	c, ctx := m.c, m.ui.ctx
	m.say(false, "getting prompt %s…", name)
	return func() tea.Msg {
		res, doc, err := c.GetPrompt(ctx, name, args)
		return promptMsg{name: name, res: res, doc: doc, err: err}
	}
}

// resume re-reads a workflow's handoff (prompts/get with _meta._task_id):
// the server retries failed server steps first.
func (m *Model) resume(workflow, taskID string) tea.Cmd {
	c, ctx := m.c, m.ui.ctx
	if m.prompts.wf != nil {
		m.prompts.wf.busy = "resuming…"
	}
	m.say(false, "resuming workflow %s (task %s)…", workflow, short(taskID))
	return func() tea.Msg {
		res, doc, err := c.ResumePrompt(ctx, workflow, taskID)
		return promptMsg{name: workflow, res: res, doc: doc, err: err}
	}
}

func (m *Model) promptLoaded(msg promptMsg) tea.Cmd {
	p := &m.prompts
	if msg.err != nil {
		m.say(true, "prompt %s: %v", msg.name, msg.err)
		if p.wf != nil {
			p.wf.busy, p.wf.err = "", msg.err.Error()
		}
		return nil
	}
	if msg.doc == nil {
		p.wf = nil
		p.textT = "prompt " + msg.name
		p.text, p.scroll = nil, 0
		for _, pm := range msg.res.Messages {
			if tc, ok := pm.Content.(*mcp.TextContent); ok {
				p.text = append(p.text, fmt.Sprintf("[%s] %s", pm.Role, tc.Text))
			}
		}
		m.say(false, "prompt %s: %d message(s)", msg.name, len(msg.res.Messages))
		return nil
	}
	m.showWorkflow(msg.doc)
	m.say(false, "workflow %s: task %s is %s", msg.doc.Workflow, short(msg.doc.TaskID), msg.doc.Status)
	return nil
}

// showWorkflow shows a handoff in the Prompts tab and its task in the
// Tasks tab.
func (m *Model) showWorkflow(doc *handoff.Document) {
	v := m.prompts.wf
	if v == nil || v.doc.TaskID != doc.TaskID {
		v = &wfView{}
		m.prompts.wf = v
	}
	v.doc, v.busy, v.err = doc, "", ""
	v.selectNext()
	m.tab = tabPrompts
	r := m.tasks.byID[doc.TaskID]
	if r == nil {
		r = m.addRow(doc.TaskID, kindWorkflow, doc.Workflow, originPrompt)
		r.created = m.now()
	}
	r.kind, r.name, r.doc = kindWorkflow, doc.Workflow, doc
	if e, ok := m.remembered[doc.TaskID]; !ok || e.Name != doc.Workflow {
		m.record(doc.TaskID, kindWorkflow, doc.Workflow, r.created)
	}
	if !r.status.Terminal() {
		r.status, r.message = mcptask.Status(doc.Status), doc.PauseReason
	}
	if !r.status.Terminal() {
		m.watch(r)
	}
}

// workflowEnded updates the workflow view when the task's result arrives.
func (m *Model) workflowEnded(r *taskRow, doc *handoff.Document) {
	v := m.prompts.wf
	if v == nil || v.doc.TaskID != r.id {
		return
	}
	if doc != nil {
		v.doc = doc
		v.selectNext()
	} else if r.errText != "" {
		v.err = r.errText
	}
	v.busy = ""
}

func (m *Model) workflowKey(k string) tea.Cmd {
	v := m.prompts.wf
	steps := v.steps()
	switch k {
	case "up", "k":
		v.sel = max(0, v.sel-1)
	case "down", "j":
		v.sel = min(len(steps)-1, v.sel+1)
	case "esc":
		m.prompts.wf = nil
	case "r":
		if v.busy == "" && !mcptask.Status(v.doc.Status).Terminal() {
			return m.resume(v.doc.Workflow, v.doc.TaskID)
		}
	case "enter":
		if mcptask.Status(v.doc.Status).Terminal() {
			m.prompts.wf = nil
			return nil
		}
		if v.busy != "" || v.sel >= len(steps) {
			return nil
		}
		s := steps[v.sel]
		if !s.actionable() {
			m.say(false, "step %s is not yours to perform (%s)", s.name, m.stepWords(s))
			return nil
		}
		m.openStepForm(v.doc, *s.rem)
	}
	return nil
}

func (m *Model) stepWords(s wfStep) string {
	if s.done != nil {
		return "done"
	}
	return stepview.State(*s.rem)
}

// openStepForm asks for a step's arguments: the resolved ones prefilled,
// the placeholders highlighted; a handed-over step shows its error.
func (m *Model) openStepForm(doc *handoff.Document, s handoff.RemainingStep) {
	var intro []string
	if s.HandedToClient {
		msg := "The server gave up on this step"
		if s.Attempts > 0 {
			msg += fmt.Sprintf(" after %d attempt(s)", s.Attempts)
		}
		intro = append(intro, msg+": "+s.Error, "Correct the arguments and submit, or press esc and r to have the server retry.")
	}
	if s.Guidance != "" {
		intro = append(intro, s.Guidance)
	}
	// The call names the record it performs: a child workflow's step is
	// performed on the child (its task id), a for-each's item as
	// "TASK#step[i]"; the answer shows the workflow followed.
	taskID, ref, workflow, step := doc.TaskID, stepview.Ref(doc, s), doc.Workflow, s
	// An argument naming the workflow task (_task_id, host mode) is the
	// task's id: sent, never shown or asked.
	prefill := maps.Clone(s.Arguments)
	_, withID := prefill[mcptask.ArgTaskID]
	delete(prefill, mcptask.ArgTaskID)
	fields := slices.DeleteFunc(slices.Clone(m.schemas[s.Tool]), func(f argschema.Field) bool { return f.Name == mcptask.ArgTaskID })
	m.form = newForm(formSpec{
		title:   fmt.Sprintf("Step %s: call %s (task %s)", s.Name, s.Tool, short(doc.TaskID)),
		intro:   intro,
		fields:  fields,
		prefill: prefill,
		submit: func(args map[string]any) tea.Cmd {
			if withID || slices.ContainsFunc(m.schemas[step.Tool], func(f argschema.Field) bool { return f.Name == mcptask.ArgTaskID }) {
				args[mcptask.ArgTaskID] = ref
			}
			return m.performStep(workflow, taskID, ref, step, args)
		},
	})
}

// performStep calls a step's tool bound to the record ref names
// (_meta._task_id) of workflow task taskID, then reads where the workflow
// stands: its result when the task has ended, else a fresh handoff.
func (m *Model) performStep(workflow, taskID, ref string, s handoff.RemainingStep, args map[string]any) tea.Cmd {
	if v := m.prompts.wf; v != nil {
		v.busy, v.err = "performing "+s.Name+"…", ""
	}
	c, ctx := m.c, m.ui.ctx
	return func() tea.Msg {
		out := stepMsg{taskID: taskID, step: s.Name}
		out.res, out.err = c.CallToolAndWait(ctx, s.Tool, args, &client.CallOptions{
			Meta: map[string]any{mcptask.MetaTaskID: ref}, AllowPlain: true,
		})
		if out.err != nil {
			return out
		}
		out.sum, _ = mcptask.SummaryFromMeta(out.res.Meta) // a malformed one shows no summary
		if out.sum != nil && out.sum.TaskID != "" && out.sum.TaskID != taskID {
			out.sum = nil // a child workflow's, which the step was recorded on
		}
		if out.sum != nil && out.sum.Status == mcptask.StatusCompleted {
			raw, err := c.TaskResult(ctx, taskID)
			if err != nil {
				out.err = err
				return out
			}
			out.doc, _ = handoff.FromResultJSON(raw)
			return out
		}
		// Working, or ended otherwise: the handoff says where it stands (a
		// failed workflow's says what was undone).
		_, out.doc, out.err = c.ResumePrompt(ctx, workflow, taskID)
		return out
	}
}

func (m *Model) stepDone(msg stepMsg) tea.Cmd {
	v := m.prompts.wf
	r := m.tasks.byID[msg.taskID]
	if msg.sum != nil && r != nil {
		if !r.status.Terminal() {
			r.status, r.message = msg.sum.Status, msg.sum.PauseReason
		}
	}
	switch {
	case msg.err != nil:
		m.say(true, "step %s: %v", msg.step, msg.err)
		if v != nil && v.doc.TaskID == msg.taskID {
			v.busy, v.err = "", msg.err.Error()
		}
	case msg.res != nil && msg.res.IsError:
		text := strings.Join(resultLines(msg.res), " ")
		m.say(true, "step %s failed: %s", msg.step, text)
	default:
		m.say(false, "step %s done", msg.step)
	}
	if msg.doc != nil {
		if v != nil && v.doc.TaskID == msg.taskID {
			v.doc, v.busy = msg.doc, ""
			v.selectNext()
		}
		if r != nil {
			r.doc = msg.doc
			if mcptask.Status(msg.doc.Status).Terminal() {
				r.status = mcptask.Status(msg.doc.Status)
			}
		}
	} else if v != nil && v.doc.TaskID == msg.taskID {
		v.busy = ""
	}
	return nil
}
