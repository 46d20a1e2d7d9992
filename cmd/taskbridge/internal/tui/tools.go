package tui

import (
	"encoding/json"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"strings"

	tea "charm.land/bubbletea/v2"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/argschema"
)

// toolsTab lists the server's tools; enter calls the selected one.
type toolsTab struct {
	list    []client.Tool
	sel     int
	err     string
	loaded  bool
	result  []string // the last result that came without a task
	resultT string
}

type toolsMsg struct {
	tools []client.Tool
	err   error
}

// callMsg is one event of a CallTool run (run numbers the runs).
type callMsg struct {
	run  int
	tool string
	ev   client.Event
	err  error
}

func (m *Model) loadTools() tea.Cmd {
	c, ctx := m.c, m.ui.ctx
	return func() tea.Msg {
		tools, err := c.Tools(ctx)
		return toolsMsg{tools, err}
	}
}

func (m *Model) toolsLoaded(msg toolsMsg) tea.Cmd {
	m.tools.loaded = true
	if msg.err != nil {
		m.tools.err = msg.err.Error()
		return nil
	}
	m.tools.err = ""
	m.tools.list = msg.tools
	m.tools.sel = min(m.tools.sel, max(0, len(msg.tools)-1))
	for _, t := range msg.tools {
		fields, err := argschema.Fields(t.InputSchema)
		if err == nil {
			m.schemas[t.Name] = fields
		}
	}
	return nil
}

func (m *Model) toolsKey(k string) tea.Cmd {
	t := &m.tools
	switch k {
	case "up", "k":
		t.sel = max(0, t.sel-1)
	case "down", "j":
		t.sel = min(len(t.list)-1, t.sel+1)
	case "r":
		t.loaded = false
		return m.loadTools()
	case "enter":
		if t.sel < len(t.list) {
			m.openToolForm(t.list[t.sel])
		}
	}
	return nil
}

// asTask says how a tool will be called.
func asTask(t client.Tool) string {
	if t.TaskSupport == mcptask.TaskForbidden {
		return "plain call"
	}
	return "task"
}

func (m *Model) openToolForm(t client.Tool) {
	fields, ok := m.schemas[t.Name] // parsed when the tools were listed
	if !ok {
		var err error
		if fields, err = argschema.Fields(t.InputSchema); err != nil {
			m.say(true, "tool %s: %v", t.Name, err)
			return
		}
	}
	intro := []string{}
	if t.Description != "" {
		intro = append(intro, t.Description)
	}
	intro = append(intro, fmt.Sprintf("Runs as a %s (taskSupport %s).", asTask(t), t.TaskSupport))
	name := t.Name
	m.form = newForm(formSpec{
		title:  "Call " + name,
		intro:  intro,
		fields: fields,
		submit: func(args map[string]any) tea.Cmd { return m.startCall(name, args) },
	})
}

// startCall runs a tool call (as a task when the tool allows it, else
// plain) and streams its events to the model.
func (m *Model) startCall(tool string, args map[string]any) tea.Cmd {
	m.nextRun++
	run := m.nextRun
	c, u := m.c, m.ui
	u.spawn(func() {
		for ev, err := range c.CallTool(u.ctx, tool, args, &client.CallOptions{AllowPlain: true}) {
			u.send(callMsg{run: run, tool: tool, ev: ev, err: err})
			if err != nil {
				return
			}
		}
	})
	m.say(false, "calling %s…", tool)
	return nil
}

func (m *Model) callEvent(msg callMsg) tea.Cmd {
	id := m.calls[msg.run]
	if msg.err != nil {
		if m.ui.ctx.Err() != nil {
			return nil
		}
		if r := m.tasks.byID[id]; r != nil {
			r.fail(msg.err)
			return nil
		}
		m.tools.resultT = msg.tool + " failed"
		m.tools.result = []string{msg.err.Error()}
		m.say(true, "%s: %v", msg.tool, msg.err)
		return nil
	}
	ev := msg.ev
	if ev.Task != nil {
		r := m.upsertTask(ev.Task, kindTool, msg.tool, originStarted)
		if ev.Kind == client.EventResult {
			r.result = ev.Result
		}
		if id == "" {
			// The task shows at once, selected, in the Tasks tab.
			m.calls[msg.run] = ev.Task.ID
			m.record(ev.Task.ID, kindTool, msg.tool, ev.Task.CreatedAt)
			m.tasks.selectID(ev.Task.ID)
			m.say(false, "%s runs as task %s", msg.tool, short(ev.Task.ID))
			return m.switchTab(tabTasks)
		}
		return nil
	}
	if ev.Kind == client.EventResult {
		m.tools.resultT = msg.tool + " returned (no task)"
		m.tools.result = resultLines(ev.Result)
		m.tab = tabTools
		m.say(false, "%s returned", msg.tool)
	}
	return nil
}

// resultLines renders a tool result as text lines.
func resultLines(r *mcp.CallToolResult) []string {
	if r == nil {
		return nil
	}
	var out []string
	if r.IsError {
		out = append(out, "isError: the tool reported an error")
	}
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			out = append(out, strings.Split(tc.Text, "\n")...)
		} else {
			b, _ := json.Marshal(c)
			out = append(out, string(b))
		}
	}
	if r.StructuredContent != nil && len(r.Content) == 0 {
		b, _ := json.Marshal(r.StructuredContent)
		out = append(out, string(b))
	}
	return out
}

// pickList is the listH lines of a list of n items that show the
// selected one (sel) in their middle where they can, each row(i) fit to
// w, the selected one marked.
func (m *Model) pickList(n, sel, listH, w int, row func(i int) string) []string {
	var lines []string
	start := min(max(0, sel-listH/2), n-listH)
	for i := start; i < start+listH; i++ {
		if i == sel {
			lines = append(lines, m.st.selected.Render(fit("› "+row(i), w)))
		} else {
			lines = append(lines, fit("  "+row(i), w))
		}
	}
	return lines
}

// picked heads the details of a list's selected item: its name, then
// its description wrapped to w.
func (m *Model) picked(name, description string, w int) []string {
	lines := []string{"", m.st.bold.Render(clip(name, w))}
	for _, l := range wrap(description, w-2) {
		lines = append(lines, "  "+l)
	}
	return lines
}

func (m *Model) toolsView(w, h int) []string {
	t := &m.tools
	switch {
	case !t.loaded:
		return []string{"loading tools…"}
	case t.err != "":
		return []string{m.st.errText.Render("tools/list failed: " + t.err), "", "r: try again"}
	case len(t.list) == 0:
		return []string{"the server has no tools"}
	}
	lines := []string{m.st.faint.Render(fit(fmt.Sprintf("  %-22s %-10s %s", "TOOL", "TASKS", "DESCRIPTION"), w))}
	lines = append(lines, m.pickList(len(t.list), t.sel, min(len(t.list), max(3, h/2-1)), w, func(i int) string {
		tool := t.list[i]
		return fmt.Sprintf("%-22s %-10s %s", clip(tool.Name, 22), tool.TaskSupport, oneLine(tool.Description))
	})...)
	sel := t.list[t.sel]
	lines = append(lines, m.picked(sel.Name, sel.Description, w)...)
	lines = append(lines, clip(fmt.Sprintf("  runs as: %s (taskSupport %s)", asTask(sel), sel.TaskSupport), w))
	lines = append(lines, clip("  arguments: "+describeFields(m.schemas[sel.Name]), w))
	lines = append(lines, m.st.faint.Render(clip("  enter call · ↑↓ select · r reload", w)))
	if t.result != nil {
		lines = append(lines, "", m.st.bold.Render(clip(t.resultT+":", w)))
		for _, l := range t.result {
			lines = append(lines, clip("  "+l, w))
		}
	}
	return lines
}
