package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/stepview"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// The human and JSON-lines output of every command.

type printer struct {
	w    io.Writer
	json bool
	tty  bool
	mu   sync.Mutex
}

func newPrinter(w io.Writer, jsonOut bool) *printer {
	p := &printer{w: w, json: jsonOut}
	if f, ok := w.(*os.File); ok && !jsonOut {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *printer) line(v any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(p.w, "%s\n", b)
	return err
}

func taskJSON(t *client.Task) map[string]any {
	m := map[string]any{"taskId": t.ID, "status": t.Status, "createdAt": t.CreatedAt, "lastUpdatedAt": t.LastUpdatedAt}
	if t.StatusMessage != "" {
		m["statusMessage"] = t.StatusMessage
	}
	if t.TTL != nil {
		m["ttlMs"] = t.TTL.Milliseconds()
	}
	if t.PollInterval > 0 {
		m["pollIntervalMs"] = t.PollInterval.Milliseconds()
	}
	return m
}

func (p *printer) task(t *client.Task) error {
	if p.json {
		return p.line(taskJSON(t))
	}
	ttl := "unlimited"
	if t.TTL != nil {
		ttl = t.TTL.String()
	}
	msg := ""
	if t.StatusMessage != "" {
		msg = "  " + oneLine(t.StatusMessage, 60)
	}
	fmt.Fprintf(p.w, "%s  %-14s created %s  ttl %s%s\n", t.ID, t.Status, t.CreatedAt.Local().Format("15:04:05"), ttl, msg)
	return nil
}

// listed prints one task of `tasks list`: its status from the server (or
// that the server no longer knows it), the tool or workflow it runs as the
// history remembers it, and when it was created.
func (p *printer) listed(r *listRow) error {
	name, kind := "", ""
	if r.entry != nil {
		name, kind = r.entry.Name, r.entry.Kind
	}
	source := "history"
	switch {
	case r.listed && r.entry != nil:
		source = "history+server"
	case r.listed:
		source = "server"
	}
	if p.json {
		m := map[string]any{"taskId": r.id, "found": !r.missing, "source": source}
		if r.task != nil {
			m = taskJSON(r.task)
			m["found"], m["source"] = true, source
		} else if c := r.created(); !c.IsZero() {
			m["createdAt"] = c
		}
		if name != "" {
			m["name"], m["kind"] = name, kind
		}
		return p.line(m)
	}
	if name == "" {
		name = "-"
	}
	status, msg := "not found", "  the server no longer knows it (expired, or another user's)"
	if r.task != nil {
		status, msg = string(r.task.Status), ""
		if r.task.StatusMessage != "" {
			msg = "  " + oneLine(r.task.StatusMessage, 50)
		}
	}
	fmt.Fprintf(p.w, "%s  %-14s %-20s created %s%s\n", r.id, status, oneLine(name, 20), when(r.created()), msg)
	return nil
}

// when formats a creation time: the time of day for today, with the date
// otherwise.
func when(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	t = t.Local()
	if y, m, d := t.Date(); y == time.Now().Year() && m == time.Now().Month() && d == time.Now().Day() {
		return t.Format("15:04:05")
	}
	return t.Format("2006-01-02 15:04")
}

func (p *printer) result(t *client.Task, r *mcp.CallToolResult) error {
	if p.json {
		m := map[string]any{"event": "result", "result": r}
		if t != nil {
			m["task"] = taskJSON(t)
		}
		return p.line(m)
	}
	label := "result"
	if r.IsError {
		label = "tool error"
	}
	if t != nil {
		fmt.Fprintf(p.w, "%s (task %s, %s):\n", label, t.ID, t.Status)
	} else {
		fmt.Fprintf(p.w, "%s (no task):\n", label)
	}
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			fmt.Fprintf(p.w, "  %s\n", strings.ReplaceAll(tc.Text, "\n", "\n  "))
		} else {
			b, _ := json.Marshal(c)
			fmt.Fprintf(p.w, "  %s\n", b)
		}
	}
	if r.StructuredContent != nil {
		b, _ := json.Marshal(r.StructuredContent)
		fmt.Fprintf(p.w, "  structured: %s\n", b)
	}
	return nil
}

func (p *printer) raw(raw json.RawMessage) error {
	if p.json {
		return p.line(map[string]any{"event": "result", "result": raw})
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		_, err = fmt.Fprintf(p.w, "%s\n", raw)
		return err
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	_, err := fmt.Fprintf(p.w, "%s\n", b)
	return err
}

func (p *printer) prompt(res *mcp.GetPromptResult) error {
	if p.json {
		return p.line(map[string]any{"event": "prompt", "result": res})
	}
	for _, m := range res.Messages {
		if tc, ok := m.Content.(*mcp.TextContent); ok {
			fmt.Fprintf(p.w, "[%s] %s\n", m.Role, tc.Text)
		}
	}
	return nil
}

// reasonLabel labels a handoff's status line: "Paused:" only for a
// workflow paused by an operator (handoff.Document.Paused), "Stopped:"
// for one that failed or was cancelled, "Outcome:" for one completed,
// "Now:" for one at work or waiting.
func reasonLabel(d *handoff.Document) string {
	switch {
	case d.Status == string(mcptask.StatusCompleted):
		return "Outcome:"
	case mcptask.Status(d.Status).Terminal():
		return "Stopped:"
	case d.Paused != nil:
		return "Paused:"
	}
	return "Now:"
}

func (p *printer) handoff(d *handoff.Document) error {
	if p.json {
		return p.line(map[string]any{"event": "handoff", "handoff": d})
	}
	fmt.Fprintf(p.w, "Workflow %q — task %s — %s\n", d.Workflow, d.TaskID, d.Status)
	if d.PauseReason != "" {
		fmt.Fprintf(p.w, "%s %s\n", reasonLabel(d), d.PauseReason)
	}
	done := map[string]bool{}
	for _, r := range stepview.Rows(d) {
		indent := strings.Repeat("  ", r.Depth)
		switch {
		case r.Done != nil:
			s := r.Done
			done[s.Name] = true
			res := oneLine(string(s.Result), 70)
			if r.Records != nil {
				res = fmt.Sprintf("%d item(s)", len(r.Records))
			}
			fmt.Fprintf(p.w, "  ✓ %-12s %-16s %s\n", s.Name, r.Tool, res)
			for _, rec := range r.Records {
				fmt.Fprintf(p.w, "      %-10s %s\n", rec.Label, oneLine(rec.Result, 80))
			}
			for _, e := range d.Errors {
				if e.Step == s.Name {
					// A failed attempt of a step that then succeeded: no ✗.
					fmt.Fprintf(p.w, "      retried after: %s\n", oneLine(e.Message, 80))
				}
			}
		case r.Skipped != nil:
			s := r.Skipped
			fmt.Fprintf(p.w, "  ⤼ %-12s %-16s skipped: %s\n", s.Name, r.Tool, oneLine(s.Reason, 80))
		default:
			p.remaining(d, r, indent)
		}
	}
	for _, e := range d.Errors {
		if !done[e.Step] {
			fmt.Fprintf(p.w, "  ✗ %s: %s\n", e.Step, oneLine(e.Message, 80))
		}
	}
	p.undo(d)
	return nil
}

// remaining prints a step still to do (or an entry nested under one,
// indented): who performs it, the values it needs, and what its kind says
// of it.
func (p *printer) remaining(d *handoff.Document, r stepview.Row, indent string) {
	s := r.Rem
	mark, who := stepview.Mark(*s), "server"
	ended := mcptask.Status(d.Status).Terminal()
	switch {
	case ended:
		mark, who = "·", "not run: the workflow "+d.Status
	case s.HandedToClient:
		who = "handed to you"
	case s.Status == mcptask.StepSleeping && s.Until != nil:
		who = "sleeping until " + s.Until.Local().Format("2006-01-02 15:04:05")
	case s.Status == mcptask.StepAwaitingEvent:
		who = "waiting for its event"
	case s.Status == mcptask.StepAwaitingChild:
		who = "server, its child workflow runs"
	case s.Kind != "" && s.Execution == mcptask.ExecServer && s.Status == mcptask.StepAwaitingClient:
		who = "yours below"
	case s.Execution == mcptask.ExecClient && s.Status == mcptask.StepPending:
		who = "you, after the steps before it"
	case s.Execution == mcptask.ExecClient:
		who = "you"
	case s.Status == mcptask.StepRunning:
		who = "server, running"
	}
	if s.Group != "" {
		who += ", in group " + s.Group
	}
	if r.Child != "" {
		who += ", child task " + r.Child
	}
	fmt.Fprintf(p.w, "  %s%s %-*s %-16s (%s)", indent, mark, max(1, 12-len(indent)), s.Name, r.Tool, who)
	var ph []string
	for k, v := range s.Arguments {
		if handoff.IsPlaceholder(v) && k != mcptask.MetaTaskID { // the task id is filled in, never asked
			ph = append(ph, k)
		}
	}
	sort.Strings(ph)
	if len(ph) > 0 {
		fmt.Fprintf(p.w, " needs: %s", strings.Join(ph, ", "))
	}
	fmt.Fprintln(p.w)
	more := "      " + indent
	if ended {
		return
	}
	if s.Kind != "" && s.Do != "" { // what a for-each, a loop or a child step stands at
		fmt.Fprintf(p.w, "%s%s\n", more, oneLine(s.Do, 200))
	}
	if (s.HandedToClient || s.Status == mcptask.StepFailed) && s.Error != "" {
		fmt.Fprintf(p.w, "%sfailed: %s\n", more, oneLine(s.Error, 100))
	}
	if s.Condition != "" {
		fmt.Fprintf(p.w, "%sonly if %s\n", more, s.Condition)
	}
	if s.Guidance != "" && s.Execution == mcptask.ExecClient {
		fmt.Fprintf(p.w, "%s%s\n", more, s.Guidance)
	}
	if s.Webhook != nil {
		fmt.Fprintf(p.w, "%swebhook: POST %s (Authorization: Bearer %s)\n", more, s.Webhook.URL, s.Webhook.Token)
	}
}

// undo prints what the server undoes (or undid) of a failed workflow.
func (p *printer) undo(d *handoff.Document) {
	if len(d.Undo) == 0 {
		return
	}
	fmt.Fprintf(p.w, "  %s\n", stepview.UndoTitle(d))
	for _, u := range d.Undo {
		mark, words := stepview.Undo(u)
		fmt.Fprintf(p.w, "    %s %-12s %-16s %s\n", mark, u.Undoes, u.Tool, words)
	}
}

// completed prints a workflow's final handoff.
func (p *printer) completed(d *handoff.Document) error {
	if p.json {
		return p.line(map[string]any{"event": "completed", "handoff": d})
	}
	fmt.Fprintf(p.w, "\nWorkflow %q (task %s) is %s: %d step(s) completed.\n", d.Workflow, d.TaskID, d.Status, len(d.CompletedSteps))
	if d.Status != string(mcptask.StatusCompleted) && d.PauseReason != "" {
		fmt.Fprintf(p.w, "  why: %s\n", d.PauseReason)
	}
	for _, r := range stepview.Rows(d) {
		if r.Done == nil {
			continue
		}
		fmt.Fprintf(p.w, "  ✓ %s %s: %s\n", r.Name, inParens(r.Tool), oneLine(string(r.Done.Result), 100))
		for _, rec := range r.Records {
			fmt.Fprintf(p.w, "      %-10s %s\n", rec.Label, oneLine(rec.Result, 100))
		}
	}
	p.undo(d)
	return nil
}

// inParens is a step's tool in parentheses; a kind, which
// stepview.ToolOrKind already puts in them, as it is.
func inParens(tool string) string {
	if strings.HasPrefix(tool, "(") {
		return tool
	}
	return "(" + tool + ")"
}

// stepResult prints the result of one workflow step (call -task-id) and
// where the workflow stands after it; parent, when set, is the workflow
// followed, whose child workflow the step was recorded on (sum is the
// child's).
func (p *printer) stepResult(r *mcp.CallToolResult, sum *mcptask.WorkflowSummary, parent *client.Task) error {
	if p.json {
		m := map[string]any{"event": "result", "result": r}
		if sum != nil {
			m["workflow"] = sum
		}
		if parent != nil {
			m["parent"] = taskJSON(parent)
		}
		return p.line(m)
	}
	if err := p.result(nil, r); err != nil {
		return err
	}
	if sum == nil {
		return nil
	}
	name := sum.Workflow
	if name == "" {
		name = "workflow"
	}
	fmt.Fprintf(p.w, "workflow %s (task %s): %s", name, sum.TaskID, sum.Status)
	if sum.Step != "" {
		fmt.Fprintf(p.w, " after step %q", sum.Step)
	}
	if sum.Replayed {
		fmt.Fprint(p.w, " (replayed: the step was already recorded with these arguments)")
	}
	fmt.Fprintln(p.w)
	if len(sum.RemainingSteps) > 0 {
		fmt.Fprintf(p.w, "  remaining: %s\n", strings.Join(sum.RemainingSteps, ", "))
	}
	if len(sum.ClientSteps) > 0 {
		fmt.Fprintf(p.w, "  yours now: %s\n", strings.Join(sum.ClientSteps, ", "))
	}
	if sum.PauseReason != "" {
		label := "paused"
		if sum.Status.Terminal() {
			label = "outcome"
		}
		fmt.Fprintf(p.w, "  %s: %s\n", label, sum.PauseReason)
	}
	if sum.StatusMessage != "" && sum.StatusMessage != sum.PauseReason {
		fmt.Fprintf(p.w, "  status: %s\n", sum.StatusMessage)
	}
	if parent != nil {
		fmt.Fprintf(p.w, "the step is recorded on that child workflow of task %s, which is %s", parent.ID, parent.Status)
		if parent.StatusMessage != "" {
			fmt.Fprintf(p.w, ": %s", oneLine(parent.StatusMessage, 200))
		}
		fmt.Fprintln(p.w)
	}
	return nil
}

func (p *printer) err(err error) {
	var re *client.RPCError
	if p.json {
		m := map[string]any{"event": "error", "error": err.Error()}
		if errors.As(err, &re) {
			m["code"] = re.Code
		}
		_ = p.line(m)
		return
	}
	fmt.Fprintln(p.w, "error:", err)
}

// statusLine shows a task's progress: on a terminal, one line redrawn with

func oneLine(s string, max int) string { return stepview.OneLine(s, max) }
