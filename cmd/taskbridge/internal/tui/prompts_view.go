package tui

import (
	"fmt"
	"slices"
	"strings"

	"charm.land/lipgloss/v2"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/stepview"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

func (m *Model) promptsView(w, h int) []string {
	p := &m.prompts
	if p.wf != nil {
		return m.workflowView(w, h)
	}
	switch {
	case !p.loaded:
		return []string{"loading prompts…"}
	case p.err != "":
		return []string{m.st.errText.Render(clip("prompts/list failed: "+p.err, w)), "", "r: try again"}
	case len(p.list) == 0:
		return []string{"the server has no prompts"}
	}
	lines := []string{m.st.faint.Render(fit(fmt.Sprintf("  %-24s %s", "PROMPT", "DESCRIPTION"), w))}
	lines = append(lines, m.pickList(len(p.list), p.sel, min(len(p.list), max(3, h/3)), w, func(i int) string {
		return fmt.Sprintf("%-24s %s", clip(p.list[i].Name, 24), oneLine(p.list[i].Description))
	})...)
	sel := p.list[p.sel]
	lines = append(lines, m.picked(sel.Name, sel.Description, w)...)
	var args []string
	for _, a := range sel.Arguments {
		n := a.Name
		if a.Required {
			n += "*"
		}
		args = append(args, n)
	}
	if len(args) == 0 {
		args = []string{"none"}
	}
	lines = append(lines, clip("  arguments: "+strings.Join(args, ", "), w))
	lines = append(lines, m.st.faint.Render(clip("  enter get · ↑↓ select · r reload", w)))
	if p.text != nil {
		var text []string
		for _, t := range p.text {
			for _, l := range wrap(t, w-2) {
				text = append(text, "  "+l)
			}
		}
		room := max(1, h-len(lines)-2)
		p.scroll = min(p.scroll, max(0, len(text)-room))
		title := p.textT + ":"
		if len(text) > room {
			title += fmt.Sprintf(" (lines %d-%d of %d; pgup/pgdn scroll, esc close)", p.scroll+1, min(len(text), p.scroll+room), len(text))
		}
		lines = append(lines, "", m.st.bold.Render(clip(title, w)))
		lines = append(lines, text[p.scroll:min(len(text), p.scroll+room)]...)
	}
	return lines
}

// workflowView is the workflow being followed: its steps, with the
// entries nested under a step (a for-each's items, a loop's run, a child
// workflow's steps) indented below it, what the server undoes of a failed
// workflow, more on the selected step, and the task's latest events. It
// fits h lines: the step list scrolls around the selection.
func (m *Model) workflowView(w, h int) []string {
	v := m.prompts.wf
	d := v.doc
	st := mcptask.Status(d.Status)
	head := fmt.Sprintf("Workflow %s · task %s · ", d.Workflow, short(d.TaskID))
	top := []string{m.st.title.Render(clip(head, w-18)) + m.st.status(st).Render(statusMark(st)+" "+d.Status)}
	if d.Goal != "" {
		top = append(top, m.st.faint.Render(clip(d.Goal, w)))
	}
	switch {
	case st == mcptask.StatusCompleted:
		top = append(top, m.st.ok.Render(clip(fmt.Sprintf("✓ workflow completed: %d step(s) done", len(d.CompletedSteps)), w)))
	case st.Terminal() && d.PauseReason != "":
		pr := wrap(d.Status+": "+d.PauseReason, w)
		top = append(top, pr[:min(2, len(pr))]...)
	case d.PauseReason != "":
		pr := wrap("paused: "+d.PauseReason, w)
		top = append(top, pr[:min(2, len(pr))]...)
	}
	top = append(top, "")

	steps := v.steps()
	nameW := 12
	for _, s := range steps {
		nameW = max(nameW, min(22, 2*s.Depth+len([]rune(s.name))))
	}
	var list []string
	selLine := 0
	for i, s := range steps {
		mark, state, style := m.stepRow(d, s)
		indent := strings.Repeat("  ", s.Depth)
		row := fmt.Sprintf("%s%s %s %s %s", indent, mark, fit(s.name, nameW-len(indent)), fit(s.tool, 16), state)
		if i == v.sel {
			selLine = len(list)
			list = append(list, m.st.selected.Render(fit("› "+row, w)))
		} else {
			list = append(list, style.Render(clip("  "+row, w)))
		}
		if s.rem != nil && s.rem.HandedToClient && s.rem.Error != "" {
			list = append(list, m.st.errText.Render(clip("      ✗ "+oneLine(s.rem.Error), w)))
		}
	}
	if len(d.Undo) > 0 {
		list = append(list, clip("  "+stepview.UndoTitle(d), w))
		for _, u := range d.Undo {
			mark, words := stepview.Undo(u)
			style := m.st.ok
			switch mark {
			case "✗":
				style = m.st.bad
			case "●":
				style = m.st.busy
			case "·":
				style = m.st.faint
			}
			list = append(list, style.Render(clip(fmt.Sprintf("    %s %s %s %s", mark, fit(u.Undoes, nameW), fit(u.Tool, 16), words), w)))
		}
	}

	var bottom []string
	if r := m.tasks.byID[d.TaskID]; r != nil && len(r.lines) > 0 && !st.Terminal() {
		bottom = append(bottom, "")
		for _, l := range r.lines[max(0, len(r.lines)-3):] { // the latest, live (events.go)
			bottom = append(bottom, m.st.faint.Render(clip("  | "+l, w)))
		}
	}
	bottom = append(bottom, "")
	if v.busy != "" {
		bottom = append(bottom, m.st.busy.Render(clip(v.busy, w)))
	}
	if v.err != "" {
		bottom = append(bottom, m.st.errText.Render(clip("✗ "+oneLine(v.err), w)))
	}
	keys := "enter perform step · r resume · ↑↓ select · esc back"
	if st.Terminal() {
		keys = "↑↓ select · enter/esc back"
	}
	bottom = append(bottom, m.st.faint.Render(clip(keys, w)))

	// The step list gets the room left, at least 3 lines; the selected
	// step's detail what the list leaves.
	room := max(3, h-len(top)-len(bottom))
	if len(list) > room {
		start := min(max(0, selLine-room/2), len(list)-room)
		list = list[start : start+room]
	}
	var detail []string
	if v.sel < len(steps) {
		if more := room - len(list) - 1; more > 0 {
			if dl := m.stepDetail(d, steps[v.sel], w, more); len(dl) > 0 {
				detail = append([]string{""}, dl...)
			}
		}
	}
	lines := append(top, list...)
	lines = append(lines, detail...)
	return append(lines, bottom...)
}

// stepRow is a step's mark, state and style in the step list.
func (m *Model) stepRow(d *handoff.Document, s wfStep) (mark, state string, style lipgloss.Style) {
	st := mcptask.Status(d.Status)
	switch {
	case s.done != nil:
		mark, state, style = "✓", "done", m.st.ok
		if s.Records != nil {
			state = fmt.Sprintf("done · %d item(s)", len(s.Records))
		}
		return mark, state, style
	case s.skipped != nil:
		return "⤼", "skipped: " + oneLine(s.skipped.Reason), m.st.faint
	case st.Terminal():
		// The workflow ended before this step: nobody performs it.
		return "·", "not done (workflow " + d.Status + ")", m.st.faint
	}
	mark, state, style = stepview.Mark(*s.rem), stepview.State(*s.rem), m.st.faint
	switch {
	case s.rem.HandedToClient || s.rem.Status == mcptask.StepFailed:
		style = m.st.bad
	case s.rem.Execution == mcptask.ExecClient:
		style = m.st.warn
	case s.rem.Status == mcptask.StepRunning || s.rem.Status == mcptask.StepAwaitingChild:
		style = m.st.busy
	}
	if s.Child != "" {
		state += " · task " + short(s.Child)
	}
	var need []string
	for k, a := range s.rem.Arguments {
		if handoff.IsPlaceholder(a) && k != mcptask.MetaTaskID {
			need = append(need, k)
		}
	}
	slices.Sort(need)
	if len(need) > 0 && s.actionable() {
		state += " · needs " + strings.Join(need, ", ")
	}
	return mark, state, style
}

// stepDetail says more of the selected step, in at most n lines: what a
// for-each, a loop or a child step stands at (its handoff's sentence), the
// child task it started, a completed for-each's results item by item, a
// step's last error.
func (m *Model) stepDetail(d *handoff.Document, s wfStep, w, n int) []string {
	var out []string
	add := func(style lipgloss.Style, text string) {
		for _, l := range wrap(text, w-2) {
			out = append(out, style.Render(clip("  "+l, w)))
		}
	}
	switch {
	case s.done != nil && s.Records != nil:
		out = append(out, clip(fmt.Sprintf("  %s: %d item(s), in order:", s.name, len(s.Records)), w))
		for _, r := range s.Records {
			out = append(out, m.st.faint.Render(clip("    "+r.Label+"  "+r.Result, w)))
		}
	case s.done != nil && s.Kind != "":
		add(m.st.faint, s.name+": "+stepview.Summary(s.done.Result))
	case s.rem != nil:
		if s.Child != "" {
			add(m.st.faint, s.name+" started child workflow task "+s.Child)
		}
		if mcptask.Status(d.Status).Terminal() {
			break // what it said while the workflow ran is past
		}
		if s.rem.Do != "" && (s.Kind != "" || s.Depth > 0) {
			add(m.st.faint, s.name+": "+oneLine(s.rem.Do))
		}
		if s.rem.Status == mcptask.StepFailed && s.rem.Error != "" && !s.rem.HandedToClient {
			add(m.st.errText, "✗ "+oneLine(s.rem.Error))
		}
	}
	if len(out) > n {
		out = append(out[:n-1], m.st.faint.Render(clip(fmt.Sprintf("  … %d more line(s)", len(out)-n+1), w)))
	}
	return out
}
