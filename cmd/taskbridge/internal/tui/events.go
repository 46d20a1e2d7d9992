package tui

import (
	tea "charm.land/bubbletea/v2"
	"github.com/taskbridge/taskbridge/mcptask"
)

// A task's events, live: the task the user looks at (the selected row of
// the Tasks tab, or the workflow the Prompts tab follows) has its event
// stream read (client.StreamEvents), and while it runs its latest lines
// (progress, log lines, output, step attempts) show in its detail pane as
// they happen. A stream, once started, runs until its task has ended.

// maxEventLines bounds the lines a task row keeps.
const maxEventLines = 6

// taskEventMsg is one line of a task's events.
type taskEventMsg struct {
	id   string
	line string
}

// followSelected starts the event stream of the task the user looks at,
// unless it runs already.
func (m *Model) followSelected() {
	var r *taskRow
	switch m.tab {
	case tabTasks:
		r = m.tasks.selected()
	case tabPrompts:
		if v := m.prompts.wf; v != nil && v.doc != nil {
			r = m.tasks.byID[v.doc.TaskID]
		}
	}
	if r == nil || r.streamed || r.gone {
		return
	}
	r.streamed = true
	id, c, u := r.id, m.c, m.ui
	u.spawn(func() {
		for ev, err := range c.StreamEvents(u.ctx, id, nil) {
			if err != nil {
				return
			}
			if ev.Type == mcptask.EventStatus {
				continue // the row shows the status
			}
			u.send(taskEventMsg{id: id, line: ev.Line()})
		}
	})
}

// taskEvent records a line of a task's events.
func (m *Model) taskEvent(msg taskEventMsg) tea.Cmd {
	r := m.tasks.byID[msg.id]
	if r == nil {
		return nil
	}
	r.lines = append(r.lines, msg.line)
	if n := len(r.lines); n > maxEventLines {
		r.lines = append(r.lines[:0:0], r.lines[n-maxEventLines:]...)
	}
	return nil
}
