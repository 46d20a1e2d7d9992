package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
)

// ttlLeft formats how long the server keeps a task: "∞" without a ttl.
func (m *Model) ttlLeft(r *taskRow) string {
	if r.ttl == nil {
		return "∞"
	}
	if r.created.IsZero() {
		return ago(*r.ttl)
	}
	return ago(time.Until(r.created.Add(*r.ttl)))
}

func (m *Model) tasksView(w, h int) []string {
	t := &m.tasks
	var lines []string
	if t.opening != nil {
		t.opening.SetWidth(max(10, w-12))
		lines = append(lines, m.st.warn.Render("Open a task by id")+"  (enter open · esc cancel)", t.opening.View(), "")
	}
	if len(t.rows) == 0 {
		hint := "No tasks yet: call a tool from Tools, follow a workflow from Prompts, or press o to open a task by id."
		if !m.c.Dialect().HasMethod(mcptask.MethodTasksList) {
			hint += " (The tasks extension has no tasks/list, so only the tasks this UI started or opened show here.)"
		}
		return append(lines, wrap(hint, w)...)
	}
	const idW, nameW, statW, ageW, ttlW = 9, 16, 17, 6, 6
	msgW := max(4, w-2-idW-nameW-statW-ageW-ttlW)
	head := "  " + fit("ID", idW) + fit("NAME", nameW) + fit("STATUS", statW) + fit("AGE", ageW) + fit("TTL", ttlW) + fit("MESSAGE", msgW)
	lines = append(lines, m.st.faint.Render(head))
	detail := m.taskDetail(t.selected(), w)
	if room := h - len(lines) - 4; len(detail) > room && room > 1 {
		// Keep the facts and the keys; drop the middle of a long detail.
		detail = append(detail[:room-1], detail[len(detail)-1])
	}
	tableH := max(3, min(len(t.rows), h-len(lines)-len(detail)-1))
	start := min(max(0, t.sel-tableH/2), max(0, len(t.rows)-tableH))
	for i := start; i < min(len(t.rows), start+tableH); i++ {
		r := t.rows[i]
		name := r.name
		if name == "" {
			name = "-" // opened by id or listed, and not in the task history
		}
		word := string(r.status)
		switch {
		case r.gone:
			word = "not found"
		case word == "":
			word = "checking…"
		}
		status := m.st.status(r.status).Render(fit(statusMark(r.status)+" "+word, statW))
		age := "-"
		if !r.created.IsZero() {
			age = ago(m.now().Sub(r.created))
		}
		msg := r.message
		if msg == "" && r.errText != "" {
			msg = r.errText
		}
		row := fit(short(r.id), idW) + fit(name, nameW) + status + fit(age, ageW) + fit(m.ttlLeft(r), ttlW) + fit(oneLine(msg), msgW)
		if i == t.sel {
			lines = append(lines, m.st.selected.Render("› "+row))
		} else {
			lines = append(lines, "  "+row)
		}
	}
	lines = append(lines, "")
	return append(lines, detail...)
}

// taskDetail is the detail pane of a task: its facts, a workflow's
// progress and outputs, and the result or error.
func (m *Model) taskDetail(r *taskRow, w int) []string {
	if r == nil {
		return nil
	}
	lines := []string{m.st.bold.Render(clip("task "+r.id, w))}
	what := m.st.status(r.status).Render(statusMark(r.status) + " " + string(r.status))
	if r.kind != "" {
		what = r.kind + " " + r.name + " · " + what
	}
	lines = append(lines, clip("  "+what, w))
	var facts []string
	if !r.created.IsZero() {
		facts = append(facts, "created "+r.created.Local().Format("15:04:05"))
	}
	facts = append(facts, "ttl left "+m.ttlLeft(r))
	if r.poll > 0 {
		facts = append(facts, "poll interval "+r.poll.String())
	}
	lines = append(lines, clip("  "+strings.Join(facts, " · "), w))
	if r.message != "" {
		lines = append(lines, clip("  message: "+oneLine(r.message), w))
	}
	if !r.status.Terminal() { // what it does now; an ended task's result says more
		for _, l := range r.lines[max(0, len(r.lines)-4):] {
			lines = append(lines, m.st.faint.Render(clip("  | "+l, w)))
		}
	}
	if d := r.doc; d != nil {
		done := len(d.CompletedSteps)
		total := done + len(d.RemainingSteps)
		p := fmt.Sprintf("  progress: %d/%d steps done", done, total)
		switch {
		case len(d.RemainingSteps) > 0 && mcptask.Status(d.Status).Terminal():
			p += fmt.Sprintf(" · %s before: %s", d.Status, d.RemainingSteps[0].Name)
		case len(d.RemainingSteps) > 0:
			s := d.RemainingSteps[0]
			p += fmt.Sprintf(" · next: %s (%s)", s.Name, stepState(s))
		}
		lines = append(lines, clip(p, w))
		var marks []string
		for _, s := range d.CompletedSteps {
			marks = append(marks, "✓ "+s.Name)
		}
		for _, s := range d.RemainingSteps {
			mark := stepMark(s)
			if mcptask.Status(d.Status).Terminal() {
				mark = "·"
			}
			marks = append(marks, mark+" "+s.Name)
		}
		lines = append(lines, clip("    "+strings.Join(marks, "  "), w))
		if len(d.CompletedSteps) > 0 {
			lines = append(lines, "  outputs:")
			for _, s := range d.CompletedSteps {
				lines = append(lines, clip(fmt.Sprintf("    %s: %s", s.Name, oneLine(string(s.Result))), w))
			}
		}
	}
	if r.result != nil {
		label := "  result:"
		if r.result.IsError {
			label = "  result (isError):"
		}
		lines = append(lines, label)
		for _, l := range resultLines(r.result) {
			if strings.HasPrefix(l, "isError") {
				continue
			}
			lines = append(lines, clip("    "+l, w))
		}
	}
	if r.errText != "" && r.errText != r.message {
		lines = append(lines, m.st.errText.Render(clip("  error: "+oneLine(r.errText), w)))
	}
	keys := "↑↓ select · c cancel · o open by id · r refresh"
	if r.kind == kindWorkflow {
		keys += " · enter steps"
	}
	return append(lines, m.st.faint.Render(clip("  "+keys, w)))
}
