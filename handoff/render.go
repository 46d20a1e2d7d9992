package handoff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/taskbridge/taskbridge/mcptask"
)

// Limits on how much of a value the prose shows; the JSON block always
// holds the full value.
const (
	maxResultRunes = 200  // completed step results
	maxArgsRunes   = 2000 // client step arguments
)

// RenderOptions say how RenderWith writes a handoff.
type RenderOptions struct {
	// NoJSON leaves the fenced json block out: for a tool result, whose
	// structuredContent (and _meta) carry the document, read by a model
	// that needs only the prose.
	NoJSON bool
}

// Render validates d and returns the handoff text: prose for an LLM, a
// blank line, then one fenced ```json block with d indented by two spaces
// (see RenderWith). The output is deterministic. See the package
// documentation for the layout of the prose.
func Render(d *Document) (string, error) { return RenderWith(d, nil) }

// RenderWith is Render with options (nil: Render's): without the json
// block when NoJSON is set.
func RenderWith(d *Document, opts *RenderOptions) (string, error) {
	var o RenderOptions
	if opts != nil {
		o = *opts
	}
	if err := d.Validate(); err != nil {
		return "", err
	}
	var b strings.Builder
	writeProse(&b, d)
	if o.NoJSON {
		return b.String(), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return "", fmt.Errorf("handoff: encoding the document: %w", err)
	}
	fmt.Fprintf(&b, "\nThe same handoff follows as JSON (schemaVersion %d) for programs.\n\n```json\n", d.SchemaVersion)
	b.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	b.WriteString("\n```\n")
	return b.String(), nil
}

// statusPhrase completes "Workflow W (task T) ...".
func statusPhrase(status string) string {
	switch status {
	case string(mcptask.StatusWorking):
		return "is running on the server"
	case string(mcptask.StatusInputRequired):
		return "is waiting for input"
	case string(mcptask.StatusCompleted):
		return "is complete"
	case string(mcptask.StatusFailed):
		return "has failed"
	case string(mcptask.StatusCancelled):
		return "was cancelled"
	}
	return "is in an unknown state"
}

// actionable returns the remaining steps the client may perform now: the
// ones whose kind gave a Call (or, in a document without calls, the
// client steps not pending).
func actionable(d *Document) []RemainingStep {
	var out []RemainingStep
	for _, s := range d.RemainingSteps {
		if s.Call != nil || s.Do == "" && s.Execution == mcptask.ExecClient && s.Status != mcptask.StepPending {
			out = append(out, s)
		}
	}
	return out
}

func terminal(status string) bool {
	return status == string(mcptask.StatusCompleted) || status == string(mcptask.StatusFailed) || status == string(mcptask.StatusCancelled)
}

// writeProse writes what a model reads: where the workflow stands, the
// one thing to do next, what was done, what comes later, how to go on.
func writeProse(b *strings.Builder, d *Document) {
	next := actionable(d)
	writeHeader(b, d, len(next) > 0)
	if !terminal(d.Status) {
		writeNext(b, d, next)
	}
	writeCompleted(b, d)
	writeSkipped(b, d)
	writeUndo(b, d)
	writeLater(b, d, next)
	writeContinuation(b, d, len(next) > 0)
}

// writeHeader writes what the workflow is and where it stands.
func writeHeader(b *strings.Builder, d *Document, yours bool) {
	phrase := statusPhrase(d.Status)
	switch {
	case d.Paused != nil && !terminal(d.Status):
		phrase = "is paused by " + d.Paused.By
	case !terminal(d.Status) && yours:
		phrase = "is waiting for you"
	}
	fmt.Fprintf(b, "Workflow %s (task %s) %s (status: %s).", jsonString(d.Workflow), jsonString(d.TaskID), phrase, d.Status)
	if d.Goal != "" {
		fmt.Fprintf(b, "\nGoal: %s", sentence(oneLine(d.Goal, 0)))
	}
	switch {
	case d.PauseReason == "":
	case d.Status == string(mcptask.StatusCompleted):
		fmt.Fprintf(b, "\nOutcome: %s", sentence(oneLine(d.PauseReason, 0)))
	case terminal(d.Status):
		fmt.Fprintf(b, "\nStopped because: %s", sentence(oneLine(d.PauseReason, 0)))
	case !yours:
		fmt.Fprintf(b, "\nNow: %s", sentence(oneLine(d.PauseReason, 0)))
	}
}

// writeNext writes the one thing to do now: each step the client may
// perform, with the call that performs it; or that nothing is to be done
// while the server works.
func writeNext(b *strings.Builder, d *Document, next []RemainingStep) {
	if d.Paused != nil {
		fmt.Fprintf(b, "\n\nNext: nothing for you to call now; the workflow is paused")
		if d.Paused.Do != "" {
			fmt.Fprintf(b, ": %s", strings.TrimRight(d.Paused.Do, "."))
		}
		b.WriteString(".")
		return
	}
	if len(next) == 0 {
		fmt.Fprintf(b, "\n\nNext: nothing for you to call now; the server is working.")
		return
	}
	if len(next) == 1 {
		b.WriteString("\n\nNext: ")
	} else {
		b.WriteString("\n\nNext, in any order:")
	}
	for i, s := range next {
		if len(next) > 1 {
			fmt.Fprintf(b, "\n%d. ", i+1)
		}
		writeAction(b, d, s)
	}
}

// writeAction writes how to perform step s now.
func writeAction(b *strings.Builder, d *Document, s RemainingStep) {
	fmt.Fprintf(b, "step %s", jsonString(s.Name))
	if s.Do != "" {
		fmt.Fprintf(b, " %s", strings.TrimRight(s.Do, "."))
	}
	c := s.Call
	if c == nil { // a document without calls: the step's own tool and arguments
		c = &Call{Tool: s.Tool, Arguments: map[string]json.RawMessage{}}
		for k, v := range s.Arguments {
			if IsPlaceholder(v) {
				c.Fill = append(c.Fill, Fill{Name: k, Description: placeholderText(v)})
			} else {
				c.Arguments[k] = v
			}
		}
		sortFill(c.Fill)
	}
	if c.Fix != "" {
		fmt.Fprintf(b, ". Its last error: %s", strings.TrimRight(oneLine(c.Fix, maxResultRunes), "."))
		c = toCorrect(c)
	}
	who := "C"
	if c.Person {
		who = "Ask the user, then c"
	}
	fmt.Fprintf(b, ". %sall tool %s with %s", who, jsonString(c.Tool), callShape(c))
	if s.Deadline != nil {
		fmt.Fprintf(b, " before %s", s.Deadline.UTC().Format(time.RFC3339))
	}
	if len(c.Fill) > 0 {
		b.WriteString(", where:")
		for _, f := range c.Fill {
			name := f.Name
			if f.Under != "" {
				name = f.Under + "." + f.Name
			}
			fmt.Fprintf(b, "\n- %s (%s)", jsonString(name), fillType(f))
			if f.Description != "" {
				fmt.Fprintf(b, ": %s", oneLine(f.Description, maxResultRunes))
			}
		}
	} else {
		b.WriteString(".")
	}
	writeServerValues(b, c)
	if s.Guidance != "" && s.Kind == "" {
		b.WriteString("\nGuidance: " + strings.ReplaceAll(multiLine(s.Guidance), "\n", "\n  "))
	}
}

// toCorrect is call c (one to correct: Call.Fix) as the prose shows it:
// each argument whose value the error quotes is a value to fill in, not a
// value to send again (a model copying the call would repeat the
// failure); the document keeps the values as they were.
func toCorrect(c *Call) *Call {
	out := *c
	out.Arguments = map[string]json.RawMessage{}
	out.Fill = slices.Clone(c.Fill)
	for k, raw := range c.Arguments {
		v := string(compactJSON(raw))
		if !failedWith(c, k, v) {
			out.Arguments[k] = raw
			continue
		}
		out.Fill = append(out.Fill, Fill{Name: k, Type: "string", Description: fmt.Sprintf("a corrected value: %s failed", v)})
	}
	sortFill(out.Fill)
	return &out
}

// failedWith reports whether argument k of a call to correct (Call.Fix)
// holds v, a string its error quotes as JSON does ("next"): the value
// that failed.
func failedWith(c *Call, k, v string) bool {
	if c.Fix == "" || k == mcptask.ArgTaskID || len(v) < 3 || v[0] != '"' {
		return false
	}
	return strings.Contains(c.Fix, v)
}

// callShape is the call's arguments as the client sends them: the values
// to send as they are, and each value to fill in as <type>; a value the
// error of a call to correct quotes is shown as one to correct.
func callShape(c *Call) string {
	var parts []string
	for _, k := range sortedKeys(c.Arguments) {
		parts = append(parts, jsonString(k)+":"+string(compactJSON(c.Arguments[k])))
	}
	under := map[string][]string{}
	var order []string
	for _, f := range c.Fill {
		if f.Under == "" {
			parts = append(parts, jsonString(f.Name)+":"+f.Placeholder())
			continue
		}
		if _, ok := under[f.Under]; !ok {
			order = append(order, f.Under)
		}
		under[f.Under] = append(under[f.Under], jsonString(f.Name)+":"+f.Placeholder())
	}
	for _, u := range order {
		parts = append(parts, jsonString(u)+":{"+strings.Join(under[u], ",")+"}")
	}
	out := "{" + strings.Join(parts, ",") + "}"
	if utf8.RuneCountInString(out) > maxArgsRunes {
		out = truncateRunes(out, maxArgsRunes) + " (truncated: the full arguments are in the structured content)"
	}
	return out
}

// writeServerValues says which arguments the server adds itself, with
// their values (a model may need them: the draft it reviews).
func writeServerValues(b *strings.Builder, c *Call) {
	if len(c.Server) == 0 {
		return
	}
	b.WriteString("\nThe server adds the other arguments itself (send one only to change it): ")
	for i, k := range sortedKeys(c.Server) {
		if i > 0 {
			b.WriteString(", ")
		}
		v := string(compactJSON(c.Server[k]))
		if utf8.RuneCountInString(v) > maxArgsRunes {
			v = truncateRunes(v, maxArgsRunes)
		}
		fmt.Fprintf(b, "%s = %s", jsonString(k), v)
	}
	b.WriteString(".")
}

// Placeholder is how the prose shows the value to fill in within a call's
// arguments: "<" + its type (and allowed values, "optional") + ">", such
// as <boolean> or <string, optional>. A call that sends it back as a
// string is an echo the server refuses.
func (f Fill) Placeholder() string { return "<" + fillType(f) + ">" }

// fillType names what a value to fill in must be.
func fillType(f Fill) string {
	t := f.Type
	if t == "" {
		t = "value"
	}
	if len(f.Enum) > 0 {
		vals := make([]string, len(f.Enum))
		for i, e := range f.Enum {
			vals[i] = string(compactJSON(e))
		}
		t += ", one of " + strings.Join(vals, ", ")
	}
	if f.Optional {
		t += ", optional"
	}
	return t
}

// placeholderText is the description inside a "<...>" placeholder.
func placeholderText(v json.RawMessage) string {
	var s string
	_ = json.Unmarshal(v, &s)
	return strings.TrimSuffix(strings.TrimPrefix(s, "<"), ">")
}

func sortFill(f []Fill) {
	slices.SortFunc(f, func(a, b Fill) int { return strings.Compare(a.Name, b.Name) })
}

// writeCompleted lists the completed steps with their results.
func writeCompleted(b *strings.Builder, d *Document) {
	if len(d.CompletedSteps) == 0 {
		return
	}
	b.WriteString("\n\nDone:")
	for _, s := range d.CompletedSteps {
		res := SummarizeResult(s.Result, maxResultRunes)
		if res == "" {
			res = "(no result recorded)"
		}
		fmt.Fprintf(b, "\n- %s (%s): %s", jsonString(s.Name), toolLabel(s.Tool, s.Kind), res)
	}
}

// writeSkipped lists the steps that will not run, with the reason.
func writeSkipped(b *strings.Builder, d *Document) {
	if len(d.SkippedSteps) == 0 {
		return
	}
	b.WriteString("\n\nSkipped (they will not run):")
	for _, s := range d.SkippedSteps {
		fmt.Fprintf(b, "\n- %s (%s)", jsonString(s.Name), toolLabel(s.Tool, s.Kind))
		if s.Reason != "" {
			fmt.Fprintf(b, ": %s", sentence(oneLine(s.Reason, maxResultRunes)))
		}
	}
}

// undoDone is the status of an undo step that completed.
const undoDone = "completed"

// writeUndo lists what the server undoes (or undid) of a failed
// workflow.
func writeUndo(b *strings.Builder, d *Document) {
	if len(d.Undo) == 0 {
		return
	}
	if terminal(d.Status) {
		b.WriteString("\n\nUndone by the server after the failure (last first):")
	} else {
		b.WriteString("\n\nThe server is undoing what the workflow did (last first); do not call these yourself:")
	}
	for _, u := range d.Undo {
		fmt.Fprintf(b, "\n- %s, by tool %s: ", jsonString(u.Undoes), jsonString(u.Tool))
		switch u.Status {
		case undoDone:
			b.WriteString("undone.")
		case mcptask.StepFailed:
			fmt.Fprintf(b, "NOT undone (%s); take it back by hand.", strings.TrimSuffix(oneLine(u.Error, maxResultRunes), "."))
		case mcptask.StepRunning:
			b.WriteString("running now.")
		default:
			b.WriteString("to do.")
		}
	}
}

// writeLater lists the remaining steps that are not for the client now,
// each with what happens to it.
func writeLater(b *strings.Builder, d *Document, next []RemainingStep) {
	now := map[string]bool{}
	for _, s := range next {
		now[s.Name] = true
	}
	header := false
	for _, s := range d.RemainingSteps {
		if now[s.Name] {
			continue
		}
		if !header {
			b.WriteString("\n\nThen:")
			header = true
		}
		fmt.Fprintf(b, "\n- %s (%s): %s", jsonString(s.Name), toolLabel(s.Tool, s.Kind), laterDo(d, s))
		if s.Condition != "" {
			b.WriteString(" Only if " + strings.TrimRight(oneLine(s.Condition, maxResultRunes), ".") + ".")
		}
	}
}

// laterDo is what happens to a step that is not the client's now.
func laterDo(d *Document, s RemainingStep) string {
	switch {
	case terminal(d.Status) && s.Status == mcptask.StepFailed:
		return "did not finish: the workflow failed here."
	case terminal(d.Status) && s.Status == mcptask.StepCancelled:
		return "did not finish: the workflow ended before it did."
	case terminal(d.Status):
		return "will not run: the workflow stopped."
	case s.Do != "":
		return sentence(s.Do)
	case s.Execution == mcptask.ExecClient:
		return "yours to perform once the steps before it are done."
	case s.Status == mcptask.StepRunning:
		return "running on the server now."
	}
	return "the server runs it by itself."
}

// writeContinuation says how to go on, in the calls the reader has.
func writeContinuation(b *strings.Builder, d *Document, yours bool) {
	c, id := d.Continuation, jsonString(d.TaskID)
	taskParam := fmt.Sprintf(`{"taskId": %s}`, id)
	b.WriteString("\n\n")
	switch {
	case terminal(d.Status):
		b.WriteString("The workflow has finished; there is nothing more to do.")
	case yours:
		b.WriteString("After your call the server runs the steps that follow and answers with where the workflow stands.")
		if c.ResultTool == "" {
			fmt.Fprintf(b, " (A program may send the task id as \"_meta\": {%s: %s} instead of the argument %s.)", jsonString(c.MetaKey), id, jsonString(mcptask.ArgTaskID))
		}
	case c.ResultTool != "":
		fmt.Fprintf(b, "To wait for it, call tool %s with {\"task_id\": %s}: it answers when there is something for you to do, or the workflow has ended.", jsonString(c.ResultTool), id)
	case c.ResultMethod != "":
		fmt.Fprintf(b, "Follow it with %s %s, or wait for its result with %s %s.", c.StatusMethod, taskParam, c.ResultMethod, taskParam)
	default:
		fmt.Fprintf(b, "Follow it with %s %s.", c.StatusMethod, taskParam)
	}
}

// normalizedArgs returns args with every value compacted, for the prose.
func normalizedArgs(args map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(args))
	for k, v := range args {
		out[k] = compactJSON(v)
	}
	return out
}

// SummarizeResult renders a step's result on one line of at most max
// runes plus an ellipsis, as the handoff's prose shows it: a
// CallToolResult-shaped object shows the text of its text content
// ("tool error: …" when it is an error); a JSON string shows the string;
// anything else shows compact JSON. It returns "" for an absent result.
func SummarizeResult(raw json.RawMessage, max int) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	text := string(compactJSON(raw))
	switch raw[0] {
	case '{':
		var r struct {
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
			IsError bool `json:"isError"`
		}
		if json.Unmarshal(raw, &r) == nil {
			var parts []string
			for _, c := range r.Content {
				if c.Type == "text" && strings.TrimSpace(c.Text) != "" {
					parts = append(parts, c.Text)
				}
			}
			if len(parts) > 0 {
				text = strings.Join(parts, " ")
				if r.IsError {
					text = "tool error: " + text
				}
			}
		}
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			text = s
		}
	}
	return oneLine(text, max)
}

// compactJSON returns v compacted, or v unchanged if it is not valid JSON.
func compactJSON(v json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		return v
	}
	return buf.Bytes()
}

// oneLine collapses whitespace and control characters in s to single
// spaces, trims it, and, if max > 0, truncates it to max runes followed by
// an ellipsis.
func oneLine(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	out := b.String()
	if max > 0 && utf8.RuneCountInString(out) > max {
		out = truncateRunes(out, max)
	}
	return out
}

// multiLine keeps the line structure of s (for guidance) but removes other
// control characters, carriage returns and trailing blanks.
func multiLine(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\n' {
			return r
		}
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRightFunc(l, unicode.IsSpace)
	}
	return strings.Join(lines, "\n")
}

// sentence ends s with a period unless it already ends with . ! or ?.
func sentence(s string) string {
	if s == "" || strings.HasSuffix(s, ".") || strings.HasSuffix(s, "!") || strings.HasSuffix(s, "?") {
		return s
	}
	return s + "."
}

// truncateRunes returns the first max runes of s followed by "…".
func truncateRunes(s string, max int) string {
	n := 0
	for i := range s {
		if n == max {
			return strings.TrimRightFunc(s[:i], unicode.IsSpace) + "…"
		}
		n++
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// toolLabel names what a step calls in the prose: its tool, or what it is
// when it calls none.
func toolLabel(tool, kind string) string {
	switch {
	case tool != "":
		return "tool " + jsonString(tool)
	case kindLabels[kind] != "":
		return kindLabels[kind]
	case kind != "":
		return "a " + strings.ReplaceAll(kind, "_", " ") + " step"
	}
	return "no tool"
}

// kindLabels name the kinds of step that call no tool of their own, as
// a person says them.
var kindLabels = map[string]string{
	string(mcptask.StepKindSleep):   "a durable sleep",
	string(mcptask.StepKindEvent):   "an event",
	string(mcptask.StepKindForEach): "a for-each",
	string(mcptask.StepKindLoop):    "a loop",
	string(mcptask.StepKindChild):   "a child workflow",
	string(mcptask.StepKindGroup):   "a parallel group",
}
