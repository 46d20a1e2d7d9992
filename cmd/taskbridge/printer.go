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

func (p *printer) handoff(d *handoff.Document) error {
	if p.json {
		return p.line(map[string]any{"event": "handoff", "handoff": d})
	}
	fmt.Fprintf(p.w, "Workflow %q — task %s — %s\n", d.Workflow, d.TaskID, d.Status)
	if d.PauseReason != "" {
		fmt.Fprintf(p.w, "Paused: %s\n", d.PauseReason)
	}
	done := map[string]bool{}
	for _, s := range d.CompletedSteps {
		done[s.Name] = true
		fmt.Fprintf(p.w, "  ✓ %-12s %-16s %s\n", s.Name, s.Tool, oneLine(string(s.Result), 70))
		for _, e := range d.Errors {
			if e.Step == s.Name {
				// A failed attempt of a step that then succeeded: no ✗.
				fmt.Fprintf(p.w, "      retried after: %s\n", oneLine(e.Message, 80))
			}
		}
	}
	for _, s := range d.SkippedSteps {
		fmt.Fprintf(p.w, "  ⤼ %-12s %-16s skipped: %s\n", s.Name, stepTool(s.Tool, s.Kind), oneLine(s.Reason, 80))
	}
	for _, s := range d.RemainingSteps {
		mark, who := "·", "server"
		switch {
		case s.HandedToClient:
			mark, who = "!", "handed to you"
		case s.Status == handoff.StepSleeping && s.Until != nil:
			mark, who = "z", "sleeping until "+s.Until.Local().Format("2006-01-02 15:04:05")
		case s.Status == handoff.StepAwaitingEvent:
			mark, who = "?", "waiting for its event"
		case s.Execution == handoff.ExecClient && s.Status == handoff.StepPending:
			mark, who = "·", "you, after the steps before it"
		case s.Execution == handoff.ExecClient:
			mark, who = "→", "you"
		case s.Status == handoff.StepRunning:
			mark, who = "●", "server, running"
		}
		if s.Group != "" {
			who += ", in group " + s.Group
		}
		fmt.Fprintf(p.w, "  %s %-12s %-16s (%s)", mark, s.Name, stepTool(s.Tool, s.Kind), who)
		var ph []string
		for k, v := range s.Arguments {
			if handoff.IsPlaceholder(v) && k != taskIDArg { // the task id is filled in, never asked
				ph = append(ph, k)
			}
		}
		sort.Strings(ph)
		if len(ph) > 0 {
			fmt.Fprintf(p.w, " needs: %s", strings.Join(ph, ", "))
		}
		fmt.Fprintln(p.w)
		if s.HandedToClient && s.Error != "" {
			fmt.Fprintf(p.w, "      failed: %s\n", oneLine(s.Error, 100))
		}
		if s.Condition != "" {
			fmt.Fprintf(p.w, "      only if %s\n", s.Condition)
		}
		if s.Guidance != "" && s.Execution == handoff.ExecClient {
			fmt.Fprintf(p.w, "      %s\n", s.Guidance)
		}
		if s.Webhook != nil {
			fmt.Fprintf(p.w, "      webhook: POST %s (Authorization: Bearer %s)\n", s.Webhook.URL, s.Webhook.Token)
		}
	}
	for _, e := range d.Errors {
		if !done[e.Step] {
			fmt.Fprintf(p.w, "  ✗ %s: %s\n", e.Step, oneLine(e.Message, 80))
		}
	}
	return nil
}

// completed prints a workflow's final handoff.
func (p *printer) completed(d *handoff.Document) error {
	if p.json {
		return p.line(map[string]any{"event": "completed", "handoff": d})
	}
	fmt.Fprintf(p.w, "\nWorkflow %q (task %s) is %s: %d step(s) completed.\n", d.Workflow, d.TaskID, d.Status, len(d.CompletedSteps))
	for _, s := range d.CompletedSteps {
		fmt.Fprintf(p.w, "  ✓ %s (%s): %s\n", s.Name, s.Tool, oneLine(string(s.Result), 100))
	}
	return nil
}

// stepResult prints the result of one workflow step (call -task-id) and
// where the workflow stands after it.
func (p *printer) stepResult(r *mcp.CallToolResult, sum *mcptask.WorkflowSummary) error {
	if p.json {
		m := map[string]any{"event": "result", "result": r}
		if sum != nil {
			m["workflow"] = sum
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

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}

// stepTool is what the tool column shows: the tool, or the kind of a step
// that calls none (sleep, event).
func stepTool(tool, kind string) string {
	if tool == "" {
		return "(" + kind + ")"
	}
	return tool
}
