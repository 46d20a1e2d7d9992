package tui

import (
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"slices"
	"strings"

	"github.com/taskbridge/taskbridge/handoff"
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
	listH := min(len(p.list), max(3, h/3))
	start := min(max(0, p.sel-listH/2), len(p.list)-listH)
	for i := start; i < start+listH; i++ {
		pr := p.list[i]
		row := fmt.Sprintf("%-24s %s", clip(pr.Name, 24), oneLine(pr.Description))
		if i == p.sel {
			lines = append(lines, m.st.selected.Render(fit("› "+row, w)))
		} else {
			lines = append(lines, fit("  "+row, w))
		}
	}
	sel := p.list[p.sel]
	lines = append(lines, "", m.st.bold.Render(clip(sel.Name, w)))
	for _, l := range wrap(sel.Description, w-2) {
		lines = append(lines, "  "+l)
	}
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

func (m *Model) workflowView(w, h int) []string {
	v := m.prompts.wf
	d := v.doc
	st := mcptask.Status(d.Status)
	head := fmt.Sprintf("Workflow %s · task %s · ", d.Workflow, short(d.TaskID))
	lines := []string{m.st.title.Render(clip(head, w-18)) + m.st.status(st).Render(statusMark(st)+" "+d.Status)}
	if d.Goal != "" {
		lines = append(lines, m.st.faint.Render(clip(d.Goal, w)))
	}
	switch {
	case st == mcptask.StatusCompleted:
		lines = append(lines, m.st.ok.Render(clip(fmt.Sprintf("✓ workflow completed: %d step(s) done", len(d.CompletedSteps)), w)))
	case st.Terminal() && d.PauseReason != "":
		pr := wrap(d.Status+": "+d.PauseReason, w)
		lines = append(lines, pr[:min(2, len(pr))]...)
	case d.PauseReason != "":
		pr := wrap("paused: "+d.PauseReason, w)
		lines = append(lines, pr[:min(2, len(pr))]...)
	}
	lines = append(lines, "")
	steps := v.steps()
	for i, s := range steps {
		mark, state := "✓", "done"
		style := m.st.ok
		if s.skipped != nil {
			mark, state, style = "⤼", "skipped: "+oneLine(s.skipped.Reason), m.st.faint
		} else if s.rem != nil && st.Terminal() {
			// The workflow ended before this step: nobody performs it.
			mark, state, style = "·", "not done (workflow "+d.Status+")", m.st.faint
		} else if s.rem != nil {
			mark, state = stepMark(*s.rem), stepState(*s.rem)
			style = m.st.faint
			switch {
			case s.rem.HandedToClient || s.rem.Status == handoff.StepFailed:
				style = m.st.bad
			case s.rem.Execution == handoff.ExecClient:
				style = m.st.warn
			case s.rem.Status == handoff.StepRunning:
				style = m.st.busy
			}
			var need []string
			for k, a := range s.rem.Arguments {
				if handoff.IsPlaceholder(a) && k != taskIDArg {
					need = append(need, k)
				}
			}
			slices.Sort(need)
			if len(need) > 0 && s.actionable() {
				state += " · needs " + strings.Join(need, ", ")
			}
		}
		row := fmt.Sprintf("%s %-12s %-16s %s", mark, clip(s.name, 12), clip(s.tool, 16), state)
		if i == v.sel {
			lines = append(lines, m.st.selected.Render(fit("› "+row, w)))
		} else {
			lines = append(lines, style.Render(clip("  "+row, w)))
		}
		if s.rem != nil && s.rem.HandedToClient && s.rem.Error != "" {
			lines = append(lines, m.st.errText.Render(clip("      ✗ "+oneLine(s.rem.Error), w)))
		}
	}
	if r := m.tasks.byID[d.TaskID]; r != nil && len(r.lines) > 0 && !st.Terminal() {
		lines = append(lines, "")
		for _, l := range r.lines[max(0, len(r.lines)-3):] { // the latest, live (events.go)
			lines = append(lines, m.st.faint.Render(clip("  | "+l, w)))
		}
	}
	lines = append(lines, "")
	if v.busy != "" {
		lines = append(lines, m.st.busy.Render(clip(v.busy, w)))
	}
	if v.err != "" {
		lines = append(lines, m.st.errText.Render(clip("✗ "+oneLine(v.err), w)))
	}
	keys := "enter perform step · r resume · ↑↓ select · esc back"
	if st.Terminal() {
		keys = "enter/esc back"
	}
	return append(lines, m.st.faint.Render(clip(keys, w)))
}

// toolOrKind is a step's tool, or its kind in parentheses for a step that
// calls no tool (a sleep, an event).
func toolOrKind(tool, kind string) string {
	if tool == "" && kind != "" {
		return "(" + kind + ")"
	}
	return tool
}
