package workflow

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// A for-each runs its body once per item of a list: a JSON array (a
// step's output, an argument holding JSON, a task variable, a constant)
// or a comma-separated string (an argument like "api, web"). Each run is
// a record the for-each keeps (its item, attempts, status, result), so a
// restart runs again only the items that had not finished. At most Limit
// items run at once (InSequence: one at a time; zero: all). The body
// reads its item with the Item source. The for-each's output is the list
// of the items' outputs, in order (null for an item skipped). A failure:
// the body's own policy per item (handed to the client, whose call names
// the item; or failing the workflow once every item has ended), unless
// StopOnFailure, which fails the workflow at the first item the server
// gives up on and stops the others. A client step as the body is one
// handoff entry per item, each performable with its item named (the task
// id as "TASK#step[i]"). A for-each holds at most MaxItems items; a longer
// list fails the step, naming the count. A fork from it runs every item
// again.

// MaxItems bounds the items of one for-each.
const MaxItems = 1000

// labelItems labels the source of a for-each's list in its reads.
const labelItems = "(items)"

// forEach is the kind of ForEach steps.
type forEach struct {
	base
	items    Source
	do       *Step
	limit    int
	failFast bool
}

// ForEach returns a step that runs body once per item of the list items
// reads (see forEach); the body reads its item with Item.
func ForEach(name string, items Source, body *Step) *Step {
	return newStep(name, &forEach{items: items, do: body})
}

// Limit runs at most n records of a for-each at once (1: in sequence).
func (s *Step) Limit(n int) *Step {
	return on(s, "Limit", "only a for-each runs records at once", func(k limiter) { k.setLimit(n) })
}

// InSequence runs a for-each's items one at a time, in order.
func (s *Step) InSequence() *Step { return s.Limit(1) }

type limiter interface{ setLimit(n int) }

func (k *forEach) setLimit(n int)            { k.limit = n }
func (k *forEach) body() *Step               { return k.do }
func (k *forEach) stopOnFailure()            { k.failFast = true }
func (k *forEach) name() mcptask.StepKind    { return mcptask.StepKindForEach }
func (k *forEach) tools(o *Options) []string { return k.do.kind.tools(o) }
func (k *forEach) argType(label string) *ArgType {
	if label != labelItems {
		return nil
	}
	t := ArgString // a comma-separated list, or JSON
	return &t
}

// reads: the list, and what the body reads besides its item (a skipped
// step's output skips the whole for-each).
func (k *forEach) reads() []read {
	out := []read{{label: labelItems, src: k.items}}
	if k.do != nil && k.do.kind != nil {
		for _, r := range k.do.kind.reads() {
			if r.src.Kind != SourceItem {
				out = append(out, r)
			}
		}
	}
	return out
}

func (k *forEach) check(c *checker) {
	c.source(labelItems, k.items, toolSchema{}, false)
	c.body(k.do, true)
	if k.limit < 0 {
		c.add("its limit is negative (%d): use 0 for all items at once, 1 for one at a time", k.limit)
	}
}

func (k *forEach) print() any {
	return printed{Extra: map[string]any{"foreach": printSource(k.items), "body": printOf(k.do, nil), "limit": k.limit, "failFast": k.failFast}}
}

func (k *forEach) sub(self *Step, sp *StepProgress, n int) (*Step, *StepProgress, json.RawMessage) {
	if n < 0 || n >= len(sp.Items) {
		return nil, nil, nil
	}
	return k.do, &sp.Items[n], sp.Items[n].Item
}

// serve starts the for-each (reading its list into item records), runs
// its items' turns (at most limit at once), and ends it when every item
// has.
func (k *forEach) serve(x *turn) string {
	sp := x.sp
	if sp.Items == nil {
		list, err := k.list(x)
		if err != nil {
			return fmt.Sprintf("step %q cannot read its items: %v; the workflow failed", x.s.Name, err)
		}
		if len(list) > MaxItems {
			return fmt.Sprintf("step %q has %d items, more than the most a for-each takes (%d); the workflow failed", x.s.Name, len(list), MaxItems)
		}
		sp.begin(ReasonFirst, string(mcptask.ExecServer), x.now)
		sp.Items = make([]StepProgress, len(list))
		for i, v := range list {
			sp.Items[i] = StepProgress{Name: fmt.Sprintf("%s[%d]", x.sl.path, i), Tool: toolOf(k.do), Execution: string(k.do.Execution()),
				Status: mcptask.StepPending, Output: k.do.binding(), N: i, Item: v}
			if c := k.do.Kind(); callOf(k.do) == nil {
				sp.Items[i].Kind = string(c)
			}
		}
	}
	if failure := runRecords(x, k.limit); failure != "" {
		return failure
	}
	return settleContainer(x, func(recs []*slot) json.RawMessage {
		out := make([]json.RawMessage, len(recs))
		for i, r := range recs {
			out[i] = r.sp.Result
			if out[i] == nil {
				out[i] = json.RawMessage("null")
			}
		}
		return marshal(out)
	})
}

// list reads the for-each's list: a JSON array, or a comma-separated
// string.
func (k *forEach) list(x *turn) ([]json.RawMessage, error) {
	raw, err := x.value(k.items)
	if err != nil {
		return nil, err
	}
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) == nil {
		return arr, nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil, fmt.Errorf("%s is neither a list nor a comma-separated string", truncate(string(raw), 80))
	}
	if t := strings.TrimSpace(s); strings.HasPrefix(t, "[") && json.Unmarshal([]byte(t), &arr) == nil {
		return arr, nil
	}
	out := []json.RawMessage{}
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, marshal(part))
		}
	}
	return out, nil
}

// memberGaveUp: an item the server gave up on follows the body's policy,
// or, when the for-each stops on failure, fails the workflow and stops the
// other items.
func (k *forEach) memberGaveUp(self, m *Step, msg string, fails bool) (string, bool, bool) {
	if k.failFast {
		return fmt.Sprintf("an item of step %q (tool %q) failed: %s; the for-each stops on failure, so the workflow failed", self.Name, toolOf(m), oneLine(msg)), true, false
	}
	return "", false, fails
}

func (k *forEach) stageFailed(self *Step, gaveUp []string) string {
	return fmt.Sprintf("step %q failed: %s; the workflow failed", self.Name, strings.Join(gaveUp, "; "))
}

func (k *forEach) stopped(self *Step) string {
	return fmt.Sprintf("stopped: another item of step %q failed and it stops on failure", self.Name)
}

func (k *forEach) status(s *Step, sp *StepProgress) (string, rank) {
	if sp.Items == nil || sp.ended() {
		return "", rankNone
	}
	return recordsLine(s, k.do, sp, "item"), rankOf(sp)
}

func (k *forEach) entry(v *view, s *Step, sp *StepProgress, rs *handoff.RemainingStep) {
	rs.Tool = ""
	if sp.Items == nil {
		rs.Do = fmt.Sprintf("runs %s once per item of %s, once the steps before it are done.", bodyLine(k.do), k.items)
		return
	}
	rs.Do = recordsLine(s, k.do, sp, "item") + "."
}

// entries: one entry per item the client may act on, named "step[i]".
func (k *forEach) entries(v *view, sl *slot) []handoff.RemainingStep {
	return clientRecords(v, sl)
}
