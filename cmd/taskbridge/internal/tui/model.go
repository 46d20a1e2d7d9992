package tui

import (
	"encoding/json"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/argschema"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
)

// tab is one of the UI's screens.
type tab int

// The tabs, in the order of their number keys.
const (
	tabTools tab = iota
	tabPrompts
	tabTasks
)

var tabNames = []string{"Tools", "Prompts", "Tasks"}

// Model is the UI's bubbletea model. Get one from UI.Model.
type Model struct {
	ui *UI
	c  *client.Client
	st styles

	width, height int
	tab           tab
	help          bool
	form          *form
	confirm       *confirm
	asks          []*inputAsk // input requests waiting for a form
	askOpen       *inputAsk   // the input request whose form is open
	flash         string
	flashBad      bool
	flashAt       time.Time
	lost          bool

	tools   toolsTab
	prompts promptsTab
	tasks   tasksTab
	schemas map[string][]argschema.Field
	calls   map[int]string // CallTool run -> its task id
	nextRun int
	now     func() time.Time
	// remembered is the task history of this server, by task id.
	remembered map[string]history.Entry
	histErr    string // why the history could not be read or written
}

// confirm is a yes/no question (cancel a task?).
type confirm struct {
	text string
	yes  func() tea.Cmd
}

func newModel(u *UI, c *client.Client) *Model {
	m := &Model{
		ui: u, c: c, st: newStyles(u.opts.NoColor),
		width: 80, height: 24,
		schemas:    map[string][]argschema.Field{},
		calls:      map[int]string{},
		tasks:      tasksTab{byID: map[string]*taskRow{}},
		now:        time.Now,
		remembered: map[string]history.Entry{},
	}
	entries, err := u.opts.History.List(u.opts.Target)
	if err != nil {
		m.histErr = err.Error()
	}
	for _, e := range entries {
		m.remembered[e.ID] = e
	}
	return m
}

type tickMsg time.Time

type connLostMsg struct{}

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// Init loads the tools and prompts, fills the Tasks tab from the task
// history, and starts listening.
func (m *Model) Init() tea.Cmd {
	m.loadHistory()
	return tea.Batch(m.ui.listen, m.loadTools(), m.loadPrompts(), tick(), m.watchConn())
}

func (m *Model) watchConn() tea.Cmd {
	done, ctx := m.c.Done(), m.ui.ctx
	return func() tea.Msg {
		select {
		case <-done:
			return connLostMsg{}
		case <-ctx.Done():
			return nil
		}
	}
}

// say shows a message on the line above the status line.
func (m *Model) say(bad bool, format string, args ...any) {
	m.flash, m.flashBad, m.flashAt = fmt.Sprintf(format, args...), bad, m.now()
}

// Update handles a message.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case busMsg:
		cmd := m.handle(msg.msg)
		m.followSelected()
		return m, tea.Batch(cmd, m.ui.listen)
	case tea.WindowSizeMsg:
		m.width, m.height = max(msg.Width, 40), max(msg.Height, 12)
		return m, nil
	case tea.KeyPressMsg:
		cmd := m.key(msg)
		m.followSelected()
		return m, cmd
	case tickMsg:
		if m.flash != "" && !m.flashBad && m.now().Sub(m.flashAt) > 8*time.Second {
			m.flash = ""
		}
		return m, tick()
	case connLostMsg:
		m.lost = true
		m.say(true, "the connection to the server has ended")
		return m, nil
	case nil:
		return m, nil
	}
	if cmd := m.handle(msg); cmd != nil {
		return m, cmd
	}
	if m.form != nil {
		return m, m.form.forward(msg)
	}
	return m, nil
}

// handle dispatches the results of the UI's commands and watchers.
func (m *Model) handle(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case toolsMsg:
		return m.toolsLoaded(msg)
	case promptsMsg:
		return m.promptsLoaded(msg)
	case callMsg:
		return m.callEvent(msg)
	case taskMsg:
		return m.taskPolled(msg)
	case taskResultMsg:
		return m.taskResult(msg)
	case endedDocMsg:
		return m.endedDoc(msg)
	case openedMsg:
		return m.taskOpened(msg)
	case listMsg:
		return m.tasksListed(msg)
	case cancelMsg:
		return m.cancelled(msg)
	case taskEventMsg:
		return m.taskEvent(msg)
	case promptMsg:
		return m.promptLoaded(msg)
	case stepMsg:
		return m.stepDone(msg)
	case *inputAsk:
		m.asks = append(m.asks, msg)
		if m.asksAtOnce(msg) {
			m.nextAsk()
		} else {
			m.say(true, "task %s (%s) asks for input: press a to answer", short(msg.taskID), m.taskName(msg.taskID))
		}
		return nil
	}
	return nil
}

// asksAtOnce reports whether an input request opens its form at once: it
// belongs to a call or workflow the user started or opened in this UI
// (who is watching it), not to a task the UI found on its own (the task
// history, tasks/list), whose question waits until the user presses a:
// a form the user did not ask for would take the keys meant for
// something else.
func (m *Model) asksAtOnce(a *inputAsk) bool {
	r := m.tasks.byID[a.taskID]
	if a.taskID == "" || r == nil {
		return true // a call of the user's, before its task is in the table
	}
	return r.origin == originStarted || r.origin == originPrompt || r.origin == originOpened
}

// key handles a key press: overlays first (help, confirmation, form),
// then the global keys, then the current tab's.
func (m *Model) key(msg tea.KeyPressMsg) tea.Cmd {
	k := msg.String()
	if k == "ctrl+c" {
		return m.quit()
	}
	if m.help {
		m.help = false
		return nil
	}
	if m.confirm != nil {
		c := m.confirm
		switch k {
		case "y", "Y", "enter":
			m.confirm = nil
			return c.yes()
		case "n", "N", "esc", "q":
			m.confirm = nil
			m.say(false, "not cancelled")
		}
		return nil
	}
	if m.form != nil {
		closed, cmd := m.form.update(msg)
		if closed {
			m.form = nil
			m.askOpen = nil
		}
		return cmd
	}
	if m.tasks.opening != nil && m.tab == tabTasks {
		return m.openingKey(msg)
	}
	switch k {
	case "q":
		return m.quit()
	case "?":
		m.help = true
		return nil
	case "a":
		if len(m.asks) == 0 {
			m.say(false, "no question waits for an answer")
			return nil
		}
		m.nextAsk()
		return nil
	case "1", "2", "3":
		return m.switchTab(tab(k[0] - '1'))
	case "tab":
		return m.switchTab((m.tab + 1) % 3)
	case "shift+tab":
		return m.switchTab((m.tab + 2) % 3)
	}
	switch m.tab {
	case tabTools:
		return m.toolsKey(k)
	case tabPrompts:
		return m.promptsKey(k)
	case tabTasks:
		return m.tasksKey(k)
	}
	return nil
}

func (m *Model) quit() tea.Cmd {
	for _, a := range m.asks {
		a.reply <- inputReply{err: ErrClosed}
	}
	m.asks = nil
	m.ui.Close()
	return tea.Quit
}

func (m *Model) switchTab(t tab) tea.Cmd {
	if v := m.prompts.wf; t == tabPrompts && v != nil && (m.tab == tabPrompts || mcptask.Status(v.doc.Status).Terminal()) {
		// 2 on the Prompts tab goes back to the prompt list, and so does
		// coming back to a workflow that has ended (its task is in Tasks).
		m.prompts.wf = nil
	}
	if t == m.tab {
		return nil
	}
	m.tab = t
	if t == tabTasks && !m.tasks.listedOnce {
		m.tasks.listedOnce = true
		return m.listTasks(false)
	}
	return nil
}

// nextAsk opens the form of the oldest waiting input request, when no
// other form is open.
func (m *Model) nextAsk() {
	if m.form != nil || len(m.asks) == 0 {
		return
	}
	ask := m.asks[0]
	m.asks = m.asks[1:]
	p := ask.p
	fields, err := argschema.Fields(p.RequestedSchema)
	if err != nil {
		ask.reply <- inputReply{err: err}
		m.say(true, "an input request has a schema the UI cannot read: %v", err)
		m.nextAsk()
		return
	}
	title := "The server asks"
	if ask.taskID != "" {
		title = fmt.Sprintf("Task %s (%s) asks", short(ask.taskID), m.taskName(ask.taskID))
	}
	reply := func(action string, content map[string]any) tea.Cmd {
		res := map[string]any{"action": action}
		if content != nil {
			res["content"] = content
		}
		b, _ := json.Marshal(res)
		ask.reply <- inputReply{res: b}
		m.say(false, "answered (%s)", action)
		return nil
	}
	m.askOpen = ask
	m.form = newForm(formSpec{
		title:  title,
		intro:  []string{p.Message},
		fields: fields,
		submit: func(v map[string]any) tea.Cmd { return reply("accept", v) },
		// esc closes the form unanswered: the question waits again (a
		// opens it); declining is a choice of its own.
		cancel: func() tea.Cmd {
			m.asks = append([]*inputAsk{ask}, m.asks...)
			m.say(false, "not answered: press a to answer it later")
			return nil
		},
		cancelHint: "later",
		alt:        &formKey{key: "ctrl+d", hint: "decline", do: func() tea.Cmd { return reply("decline", nil) }},
	})
}

// taskName is the tool or workflow of a known task.
func (m *Model) taskName(id string) string {
	if r := m.tasks.byID[id]; r != nil && r.name != "" {
		return r.name
	}
	return "task"
}

// View renders the UI: tab bar, rule with the target, the current screen,
// a message line and the status line, in exactly width×height cells.
func (m *Model) View() tea.View {
	w, h := m.width, m.height
	lines := []string{m.tabBar(w), m.st.faint.Render(m.rule(w))}
	body := h - 4
	var content []string
	switch {
	case m.help:
		content = m.helpView(w)
	case m.form != nil:
		content = m.form.view(m.st, w, body)
	case m.tab == tabTools:
		content = m.toolsView(w, body)
	case m.tab == tabPrompts:
		content = m.promptsView(w, body)
	case m.tab == tabTasks:
		content = m.tasksView(w, body)
	}
	if len(content) > body {
		content = content[:body]
	}
	for len(content) < body {
		content = append(content, "")
	}
	lines = append(lines, content...)
	flash := ""
	if m.flash != "" {
		st := m.st.faint
		if m.flashBad {
			st = m.st.errText
		}
		flash = st.Render(clip(oneLine(m.flash), w))
	}
	if m.confirm != nil {
		// The question takes the message line, so it is never cut off.
		flash = m.st.warn.Render(clip(m.confirm.text+"  y/n", w))
	}
	lines = append(lines, flash, m.statusLine(w))
	for i, l := range lines {
		lines[i] = fit(l, w)
	}
	v := tea.NewView(strings.Join(lines, "\n"))
	v.AltScreen = true
	v.WindowTitle = "taskbridge ui"
	return v
}

func (m *Model) tabBar(w int) string {
	var b strings.Builder
	for i, name := range tabNames {
		label := fmt.Sprintf(" %d %s ", i+1, name)
		if tab(i) == tabTasks && len(m.tasks.rows) > 0 {
			label = fmt.Sprintf(" %d %s (%d) ", i+1, name, len(m.tasks.rows))
		}
		if tab(i) == m.tab {
			b.WriteString(m.st.tabOn.Render("[" + strings.TrimSpace(label) + "]"))
		} else {
			b.WriteString(m.st.tabOff.Render(" " + strings.TrimSpace(label) + " "))
		}
		b.WriteString(" ")
	}
	left := b.String()
	right := m.c.Dialect().String()
	if si := m.c.ServerInfo(); si != nil {
		right = si.Name + " " + si.Version + " · " + right
	}
	gap := w - ansi.StringWidth(left) - ansi.StringWidth(right) - 1
	if gap < 1 {
		return clip(left, w)
	}
	return left + strings.Repeat(" ", gap) + m.st.faint.Render(right)
}

func (m *Model) rule(w int) string {
	t := m.ui.opts.Target
	if t == "" {
		return strings.Repeat("─", w)
	}
	label := "── " + t + " "
	if m.lost {
		label = "── " + t + " (disconnected) "
	}
	n := w - ansi.StringWidth(label)
	if n < 0 {
		return clip(label, w)
	}
	return label + strings.Repeat("─", n)
}

// counts tallies the tasks by status; input requests waiting for the
// user count as needing input.
func (m *Model) counts() (working, input, done, failed, cancelled int) {
	need := map[string]bool{}
	for _, a := range m.asks {
		need[a.taskID] = true
	}
	if m.askOpen != nil {
		need[m.askOpen.taskID] = true
	}
	for _, r := range m.tasks.rows {
		switch {
		case r.status == mcptask.StatusInputRequired || need[r.id]:
			input++
			delete(need, r.id)
		case r.status == mcptask.StatusWorking:
			working++
		case r.status == mcptask.StatusCompleted:
			done++
		case r.status == mcptask.StatusFailed:
			failed++
		case r.status == mcptask.StatusCancelled:
			cancelled++
		}
	}
	input += len(need) // requests of calls that have no task yet
	return
}

// statusLine always shows how many tasks are working and need input.
func (m *Model) statusLine(w int) string {
	working, input, done, failed, cancelled := m.counts()
	s := fmt.Sprintf(" %s %d working  %s %d need input", statusMark(mcptask.StatusWorking), working, statusMark(mcptask.StatusInputRequired), input)
	if input > 0 {
		s = fmt.Sprintf(" %s %d working  ", statusMark(mcptask.StatusWorking), working) +
			m.st.warn.Render(fmt.Sprintf("%s %d need input", statusMark(mcptask.StatusInputRequired), input))
	}
	if done > 0 {
		s += fmt.Sprintf("  %s %d done", statusMark(mcptask.StatusCompleted), done)
	}
	if failed > 0 {
		s += fmt.Sprintf("  %s %d failed", statusMark(mcptask.StatusFailed), failed)
	}
	if cancelled > 0 {
		s += fmt.Sprintf("  %s %d cancelled", statusMark(mcptask.StatusCancelled), cancelled)
	}
	keys := "? help  q quit "
	if len(m.asks) > 0 && m.form == nil {
		keys = "a answer  " + keys
	}
	gap := w - ansi.StringWidth(s) - ansi.StringWidth(keys)
	if gap < 1 {
		return clip(s, w)
	}
	return s + strings.Repeat(" ", gap) + m.st.faint.Render(keys)
}

func (m *Model) helpView(w int) []string {
	lines := []string{
		m.st.title.Render("Keys"),
		"",
		"  1 2 3 / tab     Tools, Prompts, Tasks tab       ?  this help (any key closes)",
		"                  (2 on Prompts: the prompt list)",
		"  ↑ ↓ / k j       select                          q  quit (ctrl+c anywhere)",
		"",
		m.st.bold.Render("  Tools") + "           enter: call the tool (a form from its input schema; a",
		"                  task when the tool allows it)    r: reload the tools",
		m.st.bold.Render("  Prompts") + "         enter: get the prompt (a form for its arguments)",
		"                  pgup/pgdn: scroll a plain prompt's messages   esc: close them",
		"    workflow      enter: perform the selected step (yours or handed to you)",
		"                  r: resume (the server retries failed steps)   esc: back",
		m.st.bold.Render("  Tasks") + "           c: cancel (asks y/n)   o: open a task by id",
		"                  r: refresh (tasks/list in the core dialect)",
		"                  enter: show a workflow task's steps in Prompts",
		m.st.bold.Render("  Forms") + "           enter: next field, submit on the last   ctrl+s: submit",
		"                  tab/↑↓: move   esc: cancel (a question: answer later, a)",
		"                  ctrl+d: decline a question   a: answer the next question",
		"",
		"  Marks: ● working  ◆ needs input  ✓ completed  ✗ failed  ⊘ cancelled",
		"         ◆name in a form: a value the workflow still needs from you",
	}
	for i, l := range lines {
		lines[i] = clip(l, w)
	}
	return lines
}
