package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The condition gate: any step may carry a Condition (When, Unless),
// judged when the step is reached; a step whose condition does not hold is
// skipped, and so is every step that needs its output. Registration checks
// it, the fingerprint covers it, the handoff and the progress say why a
// step was skipped. The gate is the same for every kind.

// A Condition is a predicate over a workflow's values (earlier steps'
// outputs, prompt arguments, task variables, constants) that decides
// whether a step runs (Step.When). It is declarative, so that registration
// checks it (every output it reads comes from an earlier step) and the
// handoff and the progress can say why a step was skipped.
type Condition struct {
	op   string // eq, ne, truthy, falsy, not, all, any
	src  Source
	val  json.RawMessage
	subs []Condition
}

// Equal holds when src's value equals v (as JSON values).
func Equal(src Source, v any) Condition { return Condition{op: "eq", src: src, val: mustJSON(v)} }

// NotEqual holds when src's value differs from v.
func NotEqual(src Source, v any) Condition { return Condition{op: "ne", src: src, val: mustJSON(v)} }

// Truthy holds when src's value is not false, null, zero, empty, or one of
// the strings "false", "0", "no", "off" (prompt arguments are strings).
func Truthy(src Source) Condition { return Condition{op: "truthy", src: src} }

// Falsy holds when Truthy does not.
func Falsy(src Source) Condition { return Condition{op: "falsy", src: src} }

// Not holds when c does not.
func Not(c Condition) Condition { return Condition{op: "not", subs: []Condition{c}} }

// All holds when every condition holds.
func All(cs ...Condition) Condition { return Condition{op: "all", subs: cs} }

// Any holds when one of the conditions holds.
func Any(cs ...Condition) Condition { return Condition{op: "any", subs: cs} }

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("workflow: condition value: %v", err))
	}
	return b
}

// String says what the condition requires, for a person or a model.
func (c Condition) String() string {
	switch c.op {
	case "eq":
		return fmt.Sprintf("%s is %s", c.src, c.val)
	case "ne":
		return fmt.Sprintf("%s is not %s", c.src, c.val)
	case "truthy":
		return fmt.Sprintf("%s is true", c.src)
	case "falsy":
		return fmt.Sprintf("%s is false", c.src)
	case "not":
		inner := c.subs[0]
		if opp, ok := map[string]string{"truthy": "falsy", "falsy": "truthy", "eq": "ne", "ne": "eq"}[inner.op]; ok {
			inner.op = opp
			return inner.String()
		}
		return "not (" + inner.String() + ")"
	case "all", "any":
		parts := make([]string, len(c.subs))
		for i, s := range c.subs {
			parts[i] = s.String()
		}
		sep := " and "
		if c.op == "any" {
			sep = " or "
		}
		return strings.Join(parts, sep)
	}
	return "(no condition)"
}

// sources returns every source the condition reads.
func (c Condition) sources() []Source {
	if c.op == "not" || c.op == "all" || c.op == "any" {
		var out []Source
		for _, s := range c.subs {
			out = append(out, s.sources()...)
		}
		return out
	}
	if c.op == "" {
		return nil
	}
	return []Source{c.src}
}

// valid reports a malformed condition (the zero value, an empty All).
func (c Condition) valid() error {
	switch c.op {
	case "eq", "ne":
		if !json.Valid(c.val) {
			return fmt.Errorf("condition %s compares with invalid JSON", c)
		}
	case "truthy", "falsy":
	case "not":
		if len(c.subs) != 1 {
			return fmt.Errorf("condition not() needs one condition")
		}
		return c.subs[0].valid()
	case "all", "any":
		if len(c.subs) == 0 {
			return fmt.Errorf("condition %s() needs at least one condition", c.op)
		}
		for _, s := range c.subs {
			if err := s.valid(); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("the zero Condition: build one with Equal, Truthy, Not, All, …")
	}
	return nil
}

// eval evaluates the condition, reading sources with value. A value not
// provided (an optional prompt argument left out) is null.
func (c Condition) eval(value func(Source) (json.RawMessage, error)) (bool, error) {
	switch c.op {
	case "not":
		ok, err := c.subs[0].eval(value)
		return !ok, err
	case "all", "any":
		for _, s := range c.subs {
			ok, err := s.eval(value)
			if err != nil {
				return false, err
			}
			if ok == (c.op == "any") {
				return ok, nil
			}
		}
		return c.op == "all", nil
	}
	v, err := value(c.src)
	if err != nil {
		return false, err
	}
	switch c.op {
	case "eq":
		return sameJSON(v, c.val), nil
	case "ne":
		return !sameJSON(v, c.val), nil
	case "truthy":
		return truthy(v), nil
	case "falsy":
		return !truthy(v), nil
	}
	return false, fmt.Errorf("unknown condition %q", c.op)
}

// truthy reports whether a JSON value counts as true.
func truthy(v json.RawMessage) bool {
	var x any
	if len(v) == 0 || json.Unmarshal(v, &x) != nil {
		return false
	}
	switch x := x.(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "", "false", "0", "no", "off":
			return false
		}
		return true
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// describe renders the condition's canonical form for the version
// fingerprint.
func (c Condition) describe() any {
	m := map[string]any{"op": c.op}
	if c.op == "eq" || c.op == "ne" || c.op == "truthy" || c.op == "falsy" {
		m["src"] = []any{c.src.Kind, c.src.Name, c.src.Path, compact(c.src.Value)}
		if c.val != nil {
			m["val"] = compact(c.val)
		}
	}
	var subs []any
	for _, s := range c.subs {
		subs = append(subs, s.describe())
	}
	if subs != nil {
		m["subs"] = subs
	}
	return m
}

// condition checks step c.step's condition at registration: well formed,
// reading only values that exist when the step is reached.
func (c *checker) condition(cond *Condition) {
	if cond == nil {
		return
	}
	if err := cond.valid(); err != nil {
		c.add("%v", err)
		return
	}
	for _, src := range cond.sources() {
		c.source("(condition)", src, toolSchema{}, false)
	}
}

// skipReason says why step s, reached, does not run: it needs the output
// of a skipped step, or its condition does not hold (or cannot be
// judged); "" when it runs. A condition reads an optional argument not
// given, and the output of a skipped step, as null.
func (r *resolver) skipReason(p *Progress, s *Step) string {
	if why := skipInput(r.w, p, s); why != "" || s.Condition == nil {
		return why
	}
	ok, err := s.Condition.eval(func(src Source) (json.RawMessage, error) {
		v, err := r.value(p, src)
		if errors.Is(err, errNotProvided) || skippedOutput(r.w, p, src) {
			return json.RawMessage("null"), nil
		}
		return v, err
	})
	switch {
	case err != nil:
		return fmt.Sprintf("its condition (%s) cannot be judged: %v", s.Condition, err)
	case !ok:
		return fmt.Sprintf("its condition did not hold: %s", s.Condition)
	}
	return ""
}
