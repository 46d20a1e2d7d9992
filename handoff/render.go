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
)

// Limits on how much of a value the prose shows; the JSON block always
// holds the full value.
const (
	maxResultRunes = 200  // completed step results
	maxArgsRunes   = 2000 // client step arguments
)

// Render validates d and returns the handoff text: prose for an LLM, a
// blank line, then one fenced ```json block with d indented by two spaces.
// The output is deterministic. See the package documentation for the
// layout of the prose.
func Render(d *Document) (string, error) {
	if err := d.Validate(); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return "", fmt.Errorf("handoff: encoding the document: %w", err)
	}
	var b strings.Builder
	writeProse(&b, d)
	b.WriteString("\n\n```json\n")
	b.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	b.WriteString("\n```\n")
	return b.String(), nil
}

// statusPhrase completes "Workflow W (task T) ...".
func statusPhrase(status string) string {
	switch status {
	case StatusWorking:
		return "is running on the server"
	case StatusInputRequired:
		return "is paused, waiting for the client"
	case StatusCompleted:
		return "is complete"
	case StatusFailed:
		return "has failed"
	case StatusCancelled:
		return "was cancelled"
	}
	return "is in an unknown state"
}

// waitsForClient reports whether the server runs no step and some step
// waits for the client.
func waitsForClient(d *Document) bool {
	for _, s := range d.RemainingSteps {
		if s.Execution != ExecClient && (s.Status == StepRunning || s.RetryAt != nil) {
			return false
		}
	}
	return len(d.ClientSteps()) > 0
}

func terminal(status string) bool {
	return status == StatusCompleted || status == StatusFailed || status == StatusCancelled
}

func writeProse(b *strings.Builder, d *Document) {
	writeHeader(b, d)
	writeCompleted(b, d)
	writeSkipped(b, d)
	writeRemainingSteps(b, d)
	writeErrors(b, d)
	writeContinuation(b, d)
}

// writeHeader writes what the workflow is and where it stands.
func writeHeader(b *strings.Builder, d *Document) {
	phrase := statusPhrase(d.Status)
	if d.Status == StatusWorking && waitsForClient(d) {
		phrase = "is waiting for the client"
	}
	fmt.Fprintf(b, "Workflow %s (task %s) %s (status: %s).", jsonString(d.Workflow), jsonString(d.TaskID), phrase, d.Status)
	if d.Goal != "" {
		fmt.Fprintf(b, "\nGoal: %s", sentence(oneLine(d.Goal, 0)))
	}
	if d.PauseReason != "" {
		label := "Paused because"
		if terminal(d.Status) {
			label = "Stopped because"
		}
		fmt.Fprintf(b, "\n%s: %s", label, sentence(oneLine(d.PauseReason, 0)))
	}
}

// writeCompleted lists the completed steps with their results.
func writeCompleted(b *strings.Builder, d *Document) {
	if len(d.CompletedSteps) == 0 {
		b.WriteString("\n\nCompleted steps: none yet.")
		return
	}
	b.WriteString("\n\nCompleted steps:")
	for _, s := range d.CompletedSteps {
		res := summarizeResult(s.Result)
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
	b.WriteString("\n\nSkipped steps (they will not run):")
	for _, s := range d.SkippedSteps {
		fmt.Fprintf(b, "\n- %s (%s)", jsonString(s.Name), toolLabel(s.Tool, s.Kind))
		if s.Reason != "" {
			fmt.Fprintf(b, ": %s", sentence(oneLine(s.Reason, maxResultRunes)))
		}
	}
}

// writeRemainingSteps lists the steps still to run, numbered.
func writeRemainingSteps(b *strings.Builder, d *Document) {
	if len(d.RemainingSteps) == 0 {
		if d.Status == StatusFailed || d.Status == StatusCancelled {
			b.WriteString("\n\nRemaining steps: none; the workflow stopped and runs no further steps.")
		} else {
			b.WriteString("\n\nRemaining steps: none; the workflow is complete.")
		}
		return
	}
	b.WriteString("\n\nRemaining steps:")
	for i, s := range d.RemainingSteps {
		writeRemaining(b, i+1, s, jsonString(d.TaskID), d.Continuation.ResultMethod == "")
	}
}

// writeErrors lists the step failures.
func writeErrors(b *strings.Builder, d *Document) {
	if len(d.Errors) == 0 {
		return
	}
	b.WriteString("\n\nErrors:")
	for _, e := range d.Errors {
		fmt.Fprintf(b, "\n- step %s", jsonString(e.Step))
		if e.Tool != "" {
			fmt.Fprintf(b, " (tool %s)", jsonString(e.Tool))
		}
		retry := "not retryable"
		if e.Retryable {
			retry = "a retry may succeed"
		}
		fmt.Fprintf(b, ": %s (%s).", strings.TrimRight(oneLine(e.Message, 0), "."), retry)
	}
}

// writeContinuation says how to continue, in the methods the client has.
func writeContinuation(b *strings.Builder, d *Document) {
	c, id := d.Continuation, jsonString(d.TaskID)
	taskParam := fmt.Sprintf(`{"taskId": %s}`, id)
	follow := fmt.Sprintf("call %s with %s to follow the task", c.StatusMethod, taskParam)
	if c.ResultTool != "" {
		follow = fmt.Sprintf("call tool %s with {\"task_id\": %s} to wait for the task and see where it stands (a program may call %s with %s instead", jsonString(c.ResultTool), id, c.StatusMethod, taskParam)
		if c.ResultMethod != "" {
			follow += fmt.Sprintf(", or %s to wait for its final result", c.ResultMethod)
		}
		follow += ")"
	} else if c.ResultMethod != "" {
		follow += fmt.Sprintf(", or %s with %s to wait for its final result", c.ResultMethod, taskParam)
	}
	tools, events := 0, 0
	for _, s := range d.ClientSteps() {
		if s.Kind == KindEvent {
			events++
		} else {
			tools++
		}
	}
	b.WriteString("\n\n")
	switch {
	case terminal(d.Status):
		fmt.Fprintf(b, "The task has finished: %s with %s returns its final status", c.StatusMethod, taskParam)
		if c.ResultMethod != "" {
			fmt.Fprintf(b, ", and %s with %s returns its result", c.ResultMethod, taskParam)
		}
		b.WriteString(".")
	case tools == 0 && events > 0:
		fmt.Fprintf(b, "How to continue: no tool needs calling; the workflow waits for the event(s) above, which you or an outside system deliver as each says. Then %s.", follow)
	case tools > 0 && c.Argument != "":
		fmt.Fprintf(b, "How to continue: call the tool of each client step above with the arguments shown, replacing the placeholders. The arguments include %s: %s, which records the call on this task; the server then runs the steps that follow. (A program may send the id as \"_meta\": {%s: %s} instead.) Then %s.",
			jsonString(c.Argument), id, jsonString(c.MetaKey), id, follow)
	case tools > 0:
		fmt.Fprintf(b, "How to continue: call the tool of each client step above (tools/call, in order) with \"_meta\": {%s: %s} in the request params, so the server records the result on this task and runs the steps that follow. Then %s.",
			jsonString(c.MetaKey), id, follow)
	default:
		fmt.Fprintf(b, "How to continue: nothing needs to be called now; the server is working on the task. Then %s.", follow)
	}
	fmt.Fprintf(b, "\nThe same handoff follows as JSON (schemaVersion %d) for programs.", d.SchemaVersion)
}

// stepIndent starts a line about the step above it.
const stepIndent = "\n   "

// writeRemaining writes remaining step s, numbered n, of task id (JSON
// quoted); update says the client has tasks/update (the extension
// dialect) to deliver events with.
func writeRemaining(b *strings.Builder, n int, s RemainingStep, id string, update bool) {
	switch {
	case s.Do != "":
		writeDo(b, n, s, id)
	case s.Kind == KindSleep:
		writeSleep(b, n, s)
	case s.Kind == KindEvent:
		writeEvent(b, n, s, id, update)
	case s.Execution != ExecClient:
		writeServerStep(b, n, s)
		writeGuidance(b, s)
	default:
		writeClientStep(b, n, s, id)
		writeGuidance(b, s)
	}
	writeNotes(b, s)
}

// writeDo writes a step whose kind said what to do about it (Do); a
// step the client performs by calling a tool shows its arguments too.
func writeDo(b *strings.Builder, n int, s RemainingStep, id string) {
	fmt.Fprintf(b, "\n%d. %s (%s): %s", n, jsonString(s.Name), toolLabel(s.Tool, s.Kind), s.Do)
	if s.Execution == ExecClient && s.Tool != "" {
		if s.Deadline != nil {
			fmt.Fprintf(b, " The workflow waits for this step until %s.", s.Deadline.UTC().Format(time.RFC3339))
		}
		writeArguments(b, s)
	} else {
		if len(s.Payload) > 0 {
			b.WriteString(stepIndent + "Payload schema: " + string(compactJSON(s.Payload)))
		}
		if s.Deadline != nil {
			fmt.Fprintf(b, stepIndent+"The workflow waits for it until %s.", s.Deadline.UTC().Format(time.RFC3339))
		}
	}
	if s.Tool != "" {
		writeGuidance(b, s)
	}
}

// writeSleep writes a durable sleep.
func writeSleep(b *strings.Builder, n int, s RemainingStep) {
	if s.Until != nil {
		fmt.Fprintf(b, "\n%d. %s (a durable sleep): the server waits until %s, then goes on; nothing to do.", n, jsonString(s.Name), s.Until.UTC().Format(time.RFC3339))
		return
	}
	fmt.Fprintf(b, "\n%d. %s (a durable sleep): the server sleeps here once the steps before it are done; nothing to do.", n, jsonString(s.Name))
}

// writeEvent writes an event step: what it waits for and how to deliver
// it.
func writeEvent(b *strings.Builder, n int, s RemainingStep, id string, update bool) {
	fmt.Fprintf(b, "\n%d. %s (an event): the workflow waits for this event", n, jsonString(s.Name))
	if s.Guidance != "" {
		fmt.Fprintf(b, " (%s)", strings.TrimRight(oneLine(s.Guidance, maxResultRunes), "."))
	}
	switch {
	case update:
		fmt.Fprintf(b, ". Deliver it with tasks/update {\"taskId\": %s, \"inputResponses\": {%s: {\"action\": \"accept\", \"content\": <payload>}}}", id, jsonString(s.Name))
		if s.Webhook != nil {
			b.WriteString(", or through the webhook below")
		}
		b.WriteString(".")
	case s.Webhook != nil:
		b.WriteString(". Deliver it through the webhook below.")
	default:
		b.WriteString("; an outside system delivers it through the server's webhook. Nothing to do.")
	}
	if len(s.Payload) > 0 {
		b.WriteString(stepIndent + "Payload schema: " + string(compactJSON(s.Payload)))
	}
	if s.Deadline != nil {
		fmt.Fprintf(b, stepIndent+"The workflow waits for it until %s.", s.Deadline.UTC().Format(time.RFC3339))
	}
}

// writeServerStep writes a step the server performs: running, waiting
// for its retry, or to come.
func writeServerStep(b *strings.Builder, n int, s RemainingStep) {
	switch {
	case s.Status == StepRunning:
		fmt.Fprintf(b, "\n%d. %s (tool %s): the server is running this step now; do not call it yourself.",
			n, jsonString(s.Name), jsonString(s.Tool))
	case s.RetryAt != nil:
		fmt.Fprintf(b, "\n%d. %s (tool %s): failed", n, jsonString(s.Name), jsonString(s.Tool))
		if s.Error != "" {
			fmt.Fprintf(b, " (%s)", strings.TrimRight(oneLine(s.Error, maxResultRunes), "."))
		}
		fmt.Fprintf(b, "; the server tries it again at %s; do not call it yourself.", s.RetryAt.UTC().Format(time.RFC3339))
	default:
		fmt.Fprintf(b, "\n%d. %s (tool %s): the server runs this step automatically once its inputs exist; do not call it yourself.",
			n, jsonString(s.Name), jsonString(s.Tool))
	}
}

// writeClientStep writes a step the client performs (or may: one the
// server handed over), with its arguments and placeholders.
func writeClientStep(b *strings.Builder, n int, s RemainingStep, id string) {
	switch {
	case s.HandedToClient:
		fmt.Fprintf(b, "\n%d. %s (tool %s): the server could not perform this step", n, jsonString(s.Name), jsonString(s.Tool))
		if s.Attempts > 0 {
			fmt.Fprintf(b, " (%d attempt(s))", s.Attempts)
		}
		if s.Error != "" {
			fmt.Fprintf(b, "; last error: %s", strings.TrimRight(oneLine(s.Error, maxResultRunes), "."))
		}
		fmt.Fprintf(b, ". YOU (the client) may perform it by calling tool %s with the arguments below, correcting any argument that caused the error; or resume the workflow (%s of this prompt with the argument %s: %s) to have the server try again.",
			jsonString(s.Tool), ResumeMethod, jsonString(TaskIDArgument), id)
	case s.Status == StepPending:
		fmt.Fprintf(b, "\n%d. %s (tool %s): YOU (the client) will perform this step by calling tool %s once the steps before it are done; not yet.",
			n, jsonString(s.Name), jsonString(s.Tool), jsonString(s.Tool))
	default:
		fmt.Fprintf(b, "\n%d. %s (tool %s): YOU (the client) must perform this step by calling tool %s.",
			n, jsonString(s.Name), jsonString(s.Tool), jsonString(s.Tool))
		if s.Status == StepFailed && s.Error != "" {
			fmt.Fprintf(b, " Your last call failed: %s; call it again with corrected arguments.", strings.TrimRight(oneLine(s.Error, maxResultRunes), "."))
		}
	}
	if s.Deadline != nil {
		fmt.Fprintf(b, " The workflow waits for this step until %s.", s.Deadline.UTC().Format(time.RFC3339))
	}
	writeArguments(b, s)
}

// writeArguments writes the arguments of a step the client performs, and
// which of them are placeholders to replace.
func writeArguments(b *strings.Builder, s RemainingStep) {
	args, err := marshalNoEscape(normalizedArgs(s.Arguments))
	if err != nil { // cannot happen: Validate checked every value
		args = []byte("{}")
	}
	if a := string(args); utf8.RuneCountInString(a) > maxArgsRunes {
		b.WriteString(stepIndent + "Arguments (truncated; the full arguments are in the JSON block below): " + truncateRunes(a, maxArgsRunes))
	} else {
		b.WriteString(stepIndent + "Arguments: " + a)
	}
	var ph []string
	for _, k := range sortedKeys(s.Arguments) {
		if k != TaskIDArgument && IsPlaceholder(s.Arguments[k]) {
			ph = append(ph, jsonString(k))
		}
	}
	if len(ph) > 0 {
		b.WriteString(stepIndent + "Placeholders you must replace with real values: " + strings.Join(ph, ", ") + ".")
	} else {
		b.WriteString(stepIndent + "All argument values are resolved; send them as shown.")
	}
}

// writeGuidance writes a tool step's guidance and what it depends on.
func writeGuidance(b *strings.Builder, s RemainingStep) {
	if s.Guidance != "" {
		for i, line := range strings.Split(multiLine(s.Guidance), "\n") {
			switch {
			case i == 0:
				b.WriteString(stepIndent + "Guidance: " + line)
			case line == "":
				b.WriteString("\n")
			default:
				b.WriteString(stepIndent + "  " + line)
			}
		}
	}
	if len(s.DependsOn) > 0 {
		deps := make([]string, len(s.DependsOn))
		for i, d := range s.DependsOn {
			deps[i] = jsonString(d)
		}
		b.WriteString(stepIndent + "Needs the output of: " + strings.Join(deps, ", ") + ".")
	}
}

// writeNotes writes what any kind of step may add: its group, its
// condition, its webhook.
func writeNotes(b *strings.Builder, s RemainingStep) {
	if s.Group != "" {
		fmt.Fprintf(b, stepIndent+"Part of the parallel group %s: its steps run together.", jsonString(s.Group))
	}
	if s.Condition != "" {
		b.WriteString(stepIndent + "Runs only if " + sentence(oneLine(s.Condition, maxResultRunes)) + " It is skipped otherwise.")
	}
	if s.Webhook != nil {
		what := "tool's arguments (without _task_id)"
		if s.Kind == KindEvent {
			what = "event's payload"
		}
		fmt.Fprintf(b, stepIndent+"An outside system may perform it instead: POST the %s as a JSON object to %s with the header \"Authorization: Bearer %s\".", what, s.Webhook.URL, s.Webhook.Token)
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

// summarizeResult renders a step result on one line, at most
// maxResultRunes runes plus an ellipsis. A CallToolResult-shaped object
// shows the text of its text content; a JSON string shows the string;
// anything else shows compact JSON. It returns "" for an absent result.
func summarizeResult(raw json.RawMessage) string {
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
	return oneLine(text, maxResultRunes)
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
	case kind == KindSleep:
		return "a durable sleep"
	case kind == KindEvent:
		return "an event"
	case kind != "":
		return "a " + strings.ReplaceAll(kind, "_", " ") + " step"
	}
	return "no tool"
}
