package workflow

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Slots. A step's rules apply to a record: the step's own record in
// Progress.Steps, or a record a container step holds for each run of its
// body (an item of a for-each, an iteration of a loop). A slot is one such
// pair, addressed by a path: the step's name, then "[i]" for each level
// ("deploy[2]", "smoke[1][3]"). Attempts, their outcomes, the client's
// calls and the handoff's entries are all slots'; a container reaches its
// body's records through the contract (kind.sub), so the engine walks any
// nesting without naming a kind.

// slot is one record and the step whose rules apply to it.
type slot struct {
	path   string
	s      *Step           // the step (a container's body, for a record it holds)
	sp     *StepProgress   // its record
	item   json.RawMessage // the item a for-each's record works on (Item sources), inherited below
	parent *slot           // the container's slot; nil for a step of the workflow
}

// slotOf is the slot of step i of the workflow.
func (wf *compiled) slotOf(p *Progress, i int) *slot {
	return &slot{path: wf.steps[i].Name, s: wf.steps[i], sp: &p.Steps[i]}
}

// slotAt returns the slot at path in p, or nil when there is none.
func (wf *compiled) slotAt(p *Progress, path string) *slot {
	if undoRecord(path) {
		return wf.undoSlot(p, path)
	}
	name, rest, _ := strings.Cut(path, "[")
	i, ok := wf.index[name]
	if !ok || i >= len(p.Steps) {
		return nil
	}
	sl := wf.slotOf(p, i)
	if rest == "" {
		return sl
	}
	for _, part := range strings.Split(strings.TrimSuffix(rest, "]"), "][") {
		n, err := strconv.Atoi(part)
		if err != nil {
			return nil
		}
		if sl = sl.child(n); sl == nil {
			return nil
		}
	}
	return sl
}

// child is the slot of record n the container at sl holds, or nil.
func (sl *slot) child(n int) *slot {
	body, rec, item := sl.s.kind.sub(sl.s, sl.sp, n)
	if body == nil || rec == nil {
		return nil
	}
	if item == nil {
		item = sl.item
	}
	return &slot{path: fmt.Sprintf("%s[%d]", sl.path, n), s: body, sp: rec, item: item, parent: sl}
}

// children are the slots of the records the container at sl holds, in
// order (each record's N is its number: an item's index, a run's count).
func (sl *slot) children() []*slot {
	var out []*slot
	for i := range sl.sp.Items {
		if c := sl.child(sl.sp.Items[i].N); c != nil {
			out = append(out, c)
		}
	}
	return out
}

// slots are every slot of p, in order: each step's, and after a
// container's, those of the records it keeps.
func (wf *compiled) slots(p *Progress) []*slot {
	var out []*slot
	var walk func(sl *slot)
	walk = func(sl *slot) {
		out = append(out, sl)
		for _, c := range sl.children() {
			walk(c)
		}
	}
	for i := range wf.steps {
		if i < len(p.Steps) {
			walk(wf.slotOf(p, i))
		}
	}
	return out
}

// root is the slot of the workflow step sl lives in.
func (sl *slot) root() *slot {
	for sl.parent != nil {
		sl = sl.parent
	}
	return sl
}

// output records v as the output of the slot: the workflow's outputs for
// a step of the workflow, the record itself for one a container holds.
func (sl *slot) output(p *Progress, v json.RawMessage) {
	if sl.parent == nil {
		p.Outputs[sl.s.binding()] = v
		return
	}
	sl.sp.Result = v
}

// result is the output recorded for the slot (see output).
func (sl *slot) result(p *Progress) json.RawMessage {
	if sl.parent == nil {
		return p.Outputs[sl.s.binding()]
	}
	return sl.sp.Result
}

// TaskRef is the task id a call that performs the record at path of
// workflow task id sends as the argument _task_id (or _meta._task_id):
// the id itself for a step of the workflow, "id#path" for a record a
// container keeps ("id#review[2]": item 2 of the for-each review). The
// handoff gives it with every entry.
func TaskRef(id, path string) string {
	if path == "" || !strings.Contains(path, "[") {
		return id
	}
	return id + "#" + path
}

// splitTaskRef splits a task ref (see TaskRef) into the task's id and the
// path it names ("" for none).
func splitTaskRef(ref string) (id, path string) {
	id, path, _ = strings.Cut(ref, "#")
	return id, path
}
