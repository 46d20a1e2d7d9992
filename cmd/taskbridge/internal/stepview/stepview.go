// Package stepview lays a workflow's handoff out for a person, the way
// both the CLI's printer and the terminal UI draw it: the steps in order,
// with the entries a container step lists for its records ("build[2]", a
// for-each's item; "smoke[1][3]", a loop's run) and a child workflow's
// steps ("notes/review") nested under the step they belong to; each kind
// of step by the name a person uses (a for-each, a loop, a child
// workflow); a completed for-each's result item by item; the child task a
// step started, where the handoff names it; and what the server undoes
// of a failed workflow.
//
// It reads the handoff document only (package handoff), as every client
// does: what a server keeps beyond it (the records of items that ran on
// the server, a loop's count of runs, the workflow's deadline) shows on
// the server's dashboard.
package stepview

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// Row is one step of a handoff, or one entry nested under a step.
type Row struct {
	// Name is the step's name, or the entry's path ("build[2]",
	// "notes/review").
	Name string
	// Depth is 0 for a step of the workflow, 1 for an entry nested under
	// one, and so on.
	Depth int
	// Parent is the name of the row this one is nested under ("" at depth
	// 0).
	Parent string
	// Tool is the step's tool, or its kind in parentheses for a step that
	// calls none: "(for-each)", "(child workflow)".
	Tool string
	// Kind is the step's kind ("" for a tool call).
	Kind string
	// Exactly one of Done, Skipped and Rem is set.
	Done    *handoff.CompletedStep
	Skipped *handoff.SkippedStep
	Rem     *handoff.RemainingStep
	// Child is the task a child-workflow step started, when the entries
	// nested under it name it (they are performed on the child).
	Child string
	// Records are a completed for-each's results, one per item, in order.
	Records []Record
}

// Record is one item's result of a completed for-each.
type Record struct {
	// Label is the item's path ("build[0]").
	Label string
	// Result is the item's result on one line ("null" for an item
	// skipped).
	Result string
}

// Rows lays out the steps of d: the completed ones, the skipped ones, then
// those still to do, each followed by the entries nested under it.
func Rows(d *handoff.Document) []Row {
	var out []Row
	for i := range d.CompletedSteps {
		s := &d.CompletedSteps[i]
		r := Row{Name: s.Name, Tool: ToolOrKind(s.Tool, s.Kind), Kind: s.Kind, Done: s}
		if s.Kind == string(mcptask.StepKindForEach) {
			r.Records = records(s.Name, s.Result)
		}
		out = append(out, r)
	}
	for i := range d.SkippedSteps {
		s := &d.SkippedSteps[i]
		out = append(out, Row{Name: s.Name, Tool: ToolOrKind(s.Tool, s.Kind), Kind: s.Kind, Skipped: s})
	}
	var stack []int // indexes into out of the rows the next entry may nest under
	for i := range d.RemainingSteps {
		s := &d.RemainingSteps[i]
		r := Row{Name: s.Name, Tool: ToolOrKind(s.Tool, s.Kind), Kind: s.Kind, Rem: s}
		for len(stack) > 0 && !Nested(s.Name, out[stack[len(stack)-1]].Name) {
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 {
			p := &out[stack[len(stack)-1]]
			r.Depth, r.Parent = p.Depth+1, p.Name
			if p.Kind == string(mcptask.StepKindChild) && p.Child == "" {
				if ref := Ref(d, *s); ref != d.TaskID && !strings.Contains(ref, "#") {
					p.Child = ref
				}
			}
		}
		out = append(out, r)
		stack = append(stack, len(out)-1)
	}
	return out
}

// Nested reports whether the entry named path is nested under the step
// (or entry) named parent: a record of it ("parent[2]") or a step of its
// child workflow ("parent/review").
func Nested(path, parent string) bool {
	rest, ok := strings.CutPrefix(path, parent)
	return ok && (strings.HasPrefix(rest, "[") || strings.HasPrefix(rest, "/"))
}

// TopLevel counts the steps of d that are the workflow's own (not nested
// entries): how many are done (completed or skipped) and how many there
// are.
func TopLevel(d *handoff.Document) (done, total int) {
	for _, r := range Rows(d) {
		if r.Depth > 0 {
			continue
		}
		total++
		if r.Rem == nil {
			done++
		}
	}
	return done, total
}

// records splits a for-each's result (the list of its items' outputs)
// into one record per item.
func records(name string, result json.RawMessage) []Record {
	var items []json.RawMessage
	if json.Unmarshal(result, &items) != nil {
		return nil
	}
	out := make([]Record, len(items))
	for i, it := range items {
		out[i] = Record{Label: name + "[" + strconv.Itoa(i) + "]", Result: Summary(it)}
	}
	return out
}

// Ref is the task reference a call that performs entry s sends as
// _task_id: the one its arguments name (a child's task id for a child's
// step, "TASK#build[2]" for a for-each's item), else d's task id.
func Ref(d *handoff.Document, s handoff.RemainingStep) string {
	for _, args := range []map[string]json.RawMessage{callArgs(s.Call), s.Arguments} {
		var ref string
		if raw, ok := args[mcptask.ArgTaskID]; ok && json.Unmarshal(raw, &ref) == nil && ref != "" && !handoff.IsPlaceholder(raw) {
			return ref
		}
	}
	return d.TaskID
}

func callArgs(c *handoff.Call) map[string]json.RawMessage {
	if c == nil {
		return nil
	}
	return c.Arguments
}

// ToolOrKind is a step's tool, or its kind in parentheses for a step that
// calls none: "(for-each)".
func ToolOrKind(tool, kind string) string {
	if tool == "" && kind != "" {
		return "(" + mcptask.StepKind(kind).Label() + ")"
	}
	return tool
}

// Mark is a remaining step's symbol: ! handed to the client, ● running,
// ✗ failed, z sleeping, ? waiting for an event, ↓ waiting for its child
// workflow, → the client's to perform now, · the rest.
func Mark(s handoff.RemainingStep) string {
	switch {
	case s.HandedToClient:
		return "!"
	case s.Status == mcptask.StepRunning:
		return "●"
	case s.Status == mcptask.StepFailed:
		return "✗"
	case s.Status == mcptask.StepSleeping:
		return "z"
	case s.Status == mcptask.StepAwaitingEvent:
		return "?"
	case s.Status == mcptask.StepAwaitingChild:
		return "↓"
	case s.Execution == mcptask.ExecClient && s.Status != mcptask.StepPending:
		return "→"
	}
	return "·"
}

// State is a remaining step's state in a few words.
func State(s handoff.RemainingStep) string {
	state := "pending (server)"
	switch {
	case s.HandedToClient:
		state = "handed to you"
	case s.Status == mcptask.StepRunning:
		state = "running"
	case s.Status == mcptask.StepFailed:
		state = "failed"
	case s.Status == mcptask.StepSleeping && s.Until != nil:
		state = "sleeping until " + s.Until.Local().Format("15:04:05")
	case s.Status == mcptask.StepAwaitingEvent && s.Call != nil:
		// Every dialect delivers with the tool the handoff names; only
		// the extension has tasks/update.
		state = "waiting for its event (tool " + s.Call.Tool + ", the webhook, or tasks/update in the extension)"
	case s.Status == mcptask.StepAwaitingEvent:
		state = "waiting for its event (the webhook, or tasks/update in the extension)"
	case s.Status == mcptask.StepAwaitingChild:
		state = "its child workflow runs (server)"
	case s.Kind != "" && s.Execution == mcptask.ExecServer && s.Status == mcptask.StepAwaitingClient:
		state = "waiting for you, below" // its records or its child's steps are nested under it
	case s.Execution == mcptask.ExecClient && s.Status == mcptask.StepPending:
		state = "yours, after the steps before it"
	case s.Execution == mcptask.ExecClient:
		state = "waiting for you"
	}
	if s.Group != "" {
		state += " · group " + s.Group
	}
	if s.Condition != "" {
		state += " · only if " + s.Condition
	}
	return state
}

// Undo is one undo step of a failed workflow in words: a mark (✓ undone,
// ✗ not undone, ● undoing, · to do) and what became of it.
func Undo(u handoff.UndoStep) (mark, words string) {
	switch u.Status {
	case mcptask.StepCompleted:
		return "✓", "undone"
	case mcptask.StepFailed:
		w := "NOT undone: take it back by hand"
		if u.Error != "" {
			w = "NOT undone (" + strings.TrimSuffix(OneLine(u.Error, 120), ".") + "): take it back by hand"
		}
		return "✗", w
	case mcptask.StepRunning:
		w := "undoing now"
		if u.Error != "" {
			w += " (last try failed: " + strings.TrimSuffix(OneLine(u.Error, 120), ".") + ")"
		}
		return "●", w
	}
	return "·", "to undo"
}

// UndoTitle introduces the undo list of d.
func UndoTitle(d *handoff.Document) string {
	if mcptask.Status(d.Status).Terminal() {
		return "undone after the failure, last first:"
	}
	return "being undone by the server, last first:"
}

// Summary renders a step's result on one line of at most 160 runes: a
// tool result's text, a JSON string's value, or compact JSON (as the
// handoff's prose does).
func Summary(raw json.RawMessage) string { return handoff.SummarizeResult(raw, 160) }

// OneLine collapses whitespace to single spaces and cuts s to max runes
// and an ellipsis.
func OneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}
