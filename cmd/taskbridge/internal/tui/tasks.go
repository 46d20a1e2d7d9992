package tui

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// What a task row runs.
const (
	kindTool     = history.KindTool
	kindWorkflow = history.KindWorkflow
)

// How the UI came to know a task.
const (
	originStarted = "started" // a tool call from the Tools tab (CallTool watches it)
	originOpened  = "opened"  // opened by id
	originListed  = "listed"  // tasks/list (core dialect)
	originPrompt  = "prompt"  // a workflow prompt's task
	originHistory = "history" // remembered by the task history
)

// maxHistoryRows bounds the remembered tasks the Tasks tab starts with.
const maxHistoryRows = 50

// taskRow is one task of the Tasks tab.
type taskRow struct {
	id, kind, name, origin string
	status                 mcptask.Status
	message                string
	created                time.Time
	ttl                    *time.Duration
	poll                   time.Duration
	result                 *mcp.CallToolResult
	errText                string
	doc                    *handoff.Document // a workflow's latest handoff
	watched                bool
	gone                   bool     // the server does not know the task (any more)
	streamed               bool     // its events are read (events.go)
	lines                  []string // its latest event lines
}

// fail records the error a task's call or wait ended with.
func (r *taskRow) fail(err error) {
	switch {
	case errors.Is(err, client.ErrCancelled):
		r.status = mcptask.StatusCancelled
	default:
		var re *client.RPCError
		if errors.As(err, &re) && re.Kind() == nil && re.Method == "" {
			r.status = mcptask.StatusFailed
		}
		r.errText = err.Error()
	}
}

// tasksTab is the live table of the tasks this UI started, opened or
// listed, with a detail pane for the selected one.
type tasksTab struct {
	rows       []*taskRow
	byID       map[string]*taskRow
	sel        int
	opening    *textinput.Model // the "open by id" input, when shown
	listedOnce bool
}

func (t *tasksTab) selectID(id string) {
	for i, r := range t.rows {
		if r.id == id {
			t.sel = i
		}
	}
}

func (t *tasksTab) selected() *taskRow {
	if t.sel < 0 || t.sel >= len(t.rows) {
		return nil
	}
	return t.rows[t.sel]
}

type (
	taskMsg struct {
		id  string
		t   *client.Task
		err error
	}
	taskResultMsg struct {
		id  string
		raw json.RawMessage
		err error
	}
	openedMsg struct {
		id  string
		t   *client.Task
		err error
	}
	listMsg struct {
		tasks  []*client.Task
		err    error
		manual bool
	}
	cancelMsg struct {
		id  string
		t   *client.Task
		err error
	}
)

// addRow adds a row for a task the UI did not know, named from the task
// history when the caller cannot name it.
func (m *Model) addRow(id, kind, name, origin string) *taskRow {
	if kind == "" {
		if e, ok := m.remembered[id]; ok {
			kind, name = e.Kind, e.Name
		}
	}
	r := &taskRow{id: id, kind: kind, name: name, origin: origin}
	m.tasks.byID[id] = r
	m.tasks.rows = append(m.tasks.rows, r)
	return r
}

// record remembers a task the UI created or opened in the task history.
func (m *Model) record(id, kind, name string, created time.Time) {
	h := m.ui.opts.History
	if h == nil {
		return
	}
	if e, ok := m.remembered[id]; ok && e.Name != "" && name == "" {
		kind, name = e.Kind, e.Name
	}
	e := history.Entry{ID: id, Server: m.ui.opts.Target, Name: name, Kind: kind, Created: created}
	if err := h.Record(e); err != nil {
		if m.histErr == "" {
			m.say(true, "the task history is not updated: %v", err)
		}
		m.histErr = err.Error()
		return
	}
	m.remembered[id] = e
}

// loadHistory adds the tasks the history remembers for this server (the
// most recent maxHistoryRows) and watches them.
func (m *Model) loadHistory() {
	entries := make([]history.Entry, 0, len(m.remembered))
	for _, e := range m.remembered {
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b history.Entry) int { return a.Created.Compare(b.Created) })
	if len(entries) > maxHistoryRows {
		entries = entries[len(entries)-maxHistoryRows:]
	}
	for _, e := range entries {
		if m.tasks.byID[e.ID] != nil {
			continue
		}
		r := m.addRow(e.ID, e.Kind, e.Name, originHistory)
		r.created = e.Created
		m.watch(r)
	}
	if len(m.tasks.rows) > 0 {
		m.tasks.sel = len(m.tasks.rows) - 1
	}
}

// upsertTask records an observation of a task, adding a row for a new one.
// A terminal status is never replaced by a non-terminal one.
func (m *Model) upsertTask(t *client.Task, kind, name, origin string) *taskRow {
	r := m.tasks.byID[t.ID]
	if r == nil {
		r = m.addRow(t.ID, kind, name, origin)
	}
	if r.kind == "" {
		r.kind, r.name = kind, name
	}
	r.gone = false
	defer m.syncWorkflow(r)
	if r.status.Terminal() && !t.Status.Terminal() {
		return r
	}
	r.status, r.message = t.Status, t.StatusMessage
	if !t.CreatedAt.IsZero() {
		r.created = t.CreatedAt
	} else if r.created.IsZero() {
		r.created = m.now()
	}
	if t.TTL != nil {
		ttl := *t.TTL
		r.ttl = &ttl
	}
	if t.PollInterval > 0 {
		r.poll = t.PollInterval
	}
	if t.Error != nil {
		r.errText = t.Error.Error()
	}
	return r
}

// pollEvery is how often a watched task is polled: the server's
// pollInterval, within bounds.
func pollEvery(t *client.Task) time.Duration {
	d := time.Second
	if t != nil && t.PollInterval > 0 {
		d = t.PollInterval
	}
	return min(max(d, 50*time.Millisecond), 5*time.Second)
}

// watch follows a task the UI did not start with CallTool: tasks/get at
// the server's pollInterval until it ends. Once the task needs input or
// has ended, one wait for its result runs beside the polling
// (tasks/result in the core dialect, whose stream carries the task's input
// requests; polling in the extension, answering input with tasks/update).
// The wait starts only then so that no request stays open on the server
// for a task that just runs.
func (m *Model) watch(r *taskRow) {
	if r.watched || r.origin == originStarted {
		return
	}
	r.watched = true
	id, c, u := r.id, m.c, m.ui
	u.spawn(func() {
		waiting := false
		for {
			t, err := c.GetTask(u.ctx, id)
			u.send(taskMsg{id: id, t: t, err: err})
			if err != nil {
				return
			}
			if !waiting && (t.Status.Terminal() || t.Status == mcptask.StatusInputRequired) {
				waiting = true
				u.spawn(func() {
					raw, err := c.TaskResult(u.ctx, id)
					u.send(taskResultMsg{id: id, raw: raw, err: err})
				})
			}
			if t.Status.Terminal() {
				return
			}
			select {
			case <-time.After(pollEvery(t)):
			case <-u.ctx.Done():
				return
			}
		}
	})
}

func (m *Model) taskPolled(msg taskMsg) tea.Cmd {
	r := m.tasks.byID[msg.id]
	if r == nil {
		return nil
	}
	if msg.err != nil {
		if m.ui.ctx.Err() == nil {
			r.errText = msg.err.Error()
			if errors.Is(msg.err, client.ErrNotFound) {
				r.gone = true
				r.errText = "the server no longer knows this task (expired, or another user's)"
			}
		}
		return nil
	}
	m.upsertTask(msg.t, r.kind, r.name, r.origin)
	return nil
}

// syncWorkflow shows a workflow task that ended without a final handoff
// (cancelled, failed, expired) as ended wherever its last handoff shows:
// none of its remaining steps is anyone's to perform any more. A
// completed workflow's final handoff comes with its result.
func (m *Model) syncWorkflow(r *taskRow) {
	if r.status != mcptask.StatusCancelled && r.status != mcptask.StatusFailed {
		return
	}
	end := func(d *handoff.Document) *handoff.Document {
		if d == nil || mcptask.Status(d.Status).Terminal() {
			return d
		}
		out := *d
		out.Status = string(r.status)
		if r.message != "" {
			out.PauseReason = r.message
		}
		return &out
	}
	r.doc = end(r.doc)
	if v := m.prompts.wf; v != nil && v.doc.TaskID == r.id {
		v.doc, v.busy = end(v.doc), ""
	}
}

func (m *Model) taskResult(msg taskResultMsg) tea.Cmd {
	r := m.tasks.byID[msg.id]
	if r == nil || m.ui.ctx.Err() != nil {
		return nil
	}
	if msg.err != nil {
		r.fail(msg.err)
		m.syncWorkflow(r)
		if r.kind == kindWorkflow {
			m.workflowEnded(r, nil)
		}
		return nil
	}
	if doc, err := handoff.FromResultJSON(msg.raw); err == nil {
		r.kind = kindWorkflow
		if r.name == "" {
			r.name = doc.Workflow
		}
		r.status = mcptask.Status(doc.Status)
		r.doc = doc
		m.workflowEnded(r, doc)
		return nil
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(msg.raw, &res); err == nil {
		r.result = &res
	}
	return nil
}

func (m *Model) listTasks(manual bool) tea.Cmd {
	if !m.c.Dialect().HasMethod(mcptask.MethodTasksList) || !m.c.ServerTasks().List {
		if manual {
			if !m.c.Dialect().HasMethod(mcptask.MethodTasksList) {
				m.say(false, "the tasks extension has no tasks/list: this table shows the tasks this UI started or opened (o opens one by id)")
			} else {
				m.say(false, "the server does not declare tasks/list: o opens a task by id")
			}
		}
		return nil
	}
	c, ctx := m.c, m.ui.ctx
	return func() tea.Msg {
		var out []*client.Task
		for t, err := range c.ListTasks(ctx) {
			if err != nil {
				return listMsg{err: err, manual: manual}
			}
			out = append(out, t)
		}
		return listMsg{tasks: out, manual: manual}
	}
}

func (m *Model) tasksListed(msg listMsg) tea.Cmd {
	if msg.err != nil {
		m.say(true, "tasks/list: %v", msg.err)
		return nil
	}
	added := 0
	for _, t := range msg.tasks {
		if m.tasks.byID[t.ID] == nil {
			added++
		}
		r := m.upsertTask(t, "", "", originListed)
		if !r.status.Terminal() {
			m.watch(r)
		}
	}
	if msg.manual {
		m.say(false, "tasks/list: %d task(s) of this session, %d new", len(msg.tasks), added)
	}
	return nil
}

func (m *Model) tasksKey(k string) tea.Cmd {
	t := &m.tasks
	switch k {
	case "up", "k":
		t.sel = max(0, t.sel-1)
	case "down", "j":
		t.sel = min(len(t.rows)-1, t.sel+1)
	case "r":
		for _, r := range t.rows {
			if !r.status.Terminal() {
				m.watch(r)
			}
		}
		return m.listTasks(true)
	case "o":
		in := textinput.New()
		in.Prompt = "task id: "
		in.Placeholder = "32 hex digits"
		st := in.Styles()
		st.Cursor.Blink = false
		in.SetStyles(st)
		in.Focus()
		t.opening = &in
	case "c":
		r := t.selected()
		if r == nil {
			return nil
		}
		if r.status.Terminal() {
			m.say(false, "task %s is already %s", short(r.id), r.status)
			return nil
		}
		id := r.id
		m.confirm = &confirm{
			text: fmt.Sprintf("Cancel task %s (%s)?", short(id), r.name),
			yes:  func() tea.Cmd { return m.cancelTask(id) },
		}
	case "enter":
		r := t.selected()
		if r != nil && r.kind == kindWorkflow && r.name != "" {
			m.tab = tabPrompts
			return m.resume(r.name, r.id)
		}
	}
	return nil
}

func (m *Model) openingKey(msg tea.KeyPressMsg) tea.Cmd {
	in := m.tasks.opening
	switch msg.String() {
	case "esc":
		m.tasks.opening = nil
		return nil
	case "enter":
		id := strings.TrimSpace(in.Value())
		m.tasks.opening = nil
		if id == "" {
			return nil
		}
		c, ctx := m.c, m.ui.ctx
		return func() tea.Msg {
			t, err := c.GetTask(ctx, id)
			return openedMsg{id: id, t: t, err: err}
		}
	}
	var cmd tea.Cmd
	*in, cmd = in.Update(msg)
	return cmd
}

func (m *Model) taskOpened(msg openedMsg) tea.Cmd {
	if msg.err != nil {
		m.say(true, "cannot open task %s: %v", msg.id, msg.err)
		return nil
	}
	r := m.upsertTask(msg.t, "", "", originOpened)
	m.record(r.id, r.kind, r.name, msg.t.CreatedAt)
	m.tasks.selectID(r.id)
	m.watch(r)
	m.say(false, "opened task %s (%s)", short(r.id), r.status)
	return nil
}

func (m *Model) cancelTask(id string) tea.Cmd {
	c, ctx := m.c, m.ui.ctx
	m.say(false, "cancelling %s…", short(id))
	return func() tea.Msg {
		t, err := c.CancelTask(ctx, id)
		return cancelMsg{id: id, t: t, err: err}
	}
}

func (m *Model) cancelled(msg cancelMsg) tea.Cmd {
	r := m.tasks.byID[msg.id]
	if msg.err != nil {
		m.say(true, "cancel %s: %v", short(msg.id), msg.err)
		return nil
	}
	if r != nil {
		m.upsertTask(msg.t, r.kind, r.name, r.origin)
		if !msg.t.Status.Terminal() {
			// The extension only acknowledges a cancel: keep watching.
			r.watched = false
			if r.origin == originStarted {
				r.origin = originOpened
			}
			m.watch(r)
		}
	}
	m.say(false, "task %s: %s", short(msg.id), msg.t.Status)
	return nil
}
