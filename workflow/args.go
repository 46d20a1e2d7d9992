package workflow

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// Argument is a declared workflow argument: a prompt argument, and a
// property of the workflow's tool.
type Argument struct {
	Name        string
	Description string
	Required    bool
	// Type is the form the value must have; the zero value is ArgString
	// (any text), unless a step reads the argument for a value of a given
	// form (a sleep's length is a duration), which then applies.
	Type ArgType
	// Enum lists the values an ArgEnum argument may take.
	Enum []string
	// Schema is the JSON Schema the (JSON) value of an ArgJSON argument
	// must match.
	Schema any
}

// ArgType is the form of a workflow argument's value. Prompt arguments
// are strings on the wire; the workflow's tool takes JSON values of the
// type (an integer, a boolean) and advertises it in its input schema.
// Either way the value is checked before a task is created, and a tool
// step bound to the argument receives it as JSON of its type.
type ArgType string

// The argument types.
const (
	// ArgString is any text.
	ArgString ArgType = "string"
	// ArgInteger is a whole number, like 3 or -12.
	ArgInteger ArgType = "integer"
	// ArgNumber is a finite number, like 2.5.
	ArgNumber ArgType = "number"
	// ArgBoolean is true or false (a prompt argument may also say yes,
	// no, 1 or 0).
	ArgBoolean ArgType = "boolean"
	// ArgDuration is a length of time: a number of seconds, or a Go
	// duration such as 90s or 1h30m, at most MaxWait.
	ArgDuration ArgType = "duration"
	// ArgTime is a point in time: an RFC 3339 time, or Unix seconds.
	ArgTime ArgType = "time"
	// ArgEnum is one of Argument.Enum.
	ArgEnum ArgType = "enum"
	// ArgJSON is a JSON value matching Argument.Schema.
	ArgJSON ArgType = "json"
)

// argumentsOf returns the declared arguments with their effective types.
func (w *Definition) argumentsOf() []Argument {
	out := make([]Argument, len(w.Arguments))
	for i, a := range w.Arguments {
		out[i] = a
		out[i].Type = w.argType(a)
	}
	return out
}

// argType is a's effective type: declared, or the form a step reading it
// needs, or ArgString.
func (w *Definition) argType(a Argument) ArgType {
	if a.Type != "" && a.Type != ArgString {
		return a.Type
	}
	if t := w.neededType(a.Name); t != "" {
		return t
	}
	return ArgString
}

// neededType is the form a step that reads prompt argument name needs
// (see kind.argType), or "".
func (w *Definition) neededType(name string) ArgType {
	for _, s := range w.flat() {
		if s == nil || s.kind == nil {
			continue
		}
		for _, r := range s.kind.reads() {
			if r.src.Kind == SourcePromptArg && r.src.Name == name {
				if t := s.kind.argType(r.label); t != nil {
					return *t
				}
			}
		}
	}
	return ""
}

// declaredArg returns the declared argument name.
func (w *Definition) declaredArg(name string) (Argument, bool) {
	for _, a := range w.Arguments {
		if a.Name == name {
			return a, true
		}
	}
	return Argument{}, false
}

func (w *Definition) requiredArg(name string) bool {
	a, ok := w.declaredArg(name)
	return ok && a.Required
}

func (w *Definition) declares(name string) bool {
	_, ok := w.declaredArg(name)
	return ok
}

// promptArgs checks the arguments a task starts with: every required one
// given, none unknown, each of its form. It returns them normalized (a
// boolean as true or false). The error names the argument and the form.
func (w *Definition) promptArgs(in map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range w.argumentsOf() {
		v, ok := in[a.Name]
		if !ok {
			if a.Required {
				return nil, fmt.Errorf("missing required argument %q (%s)", a.Name, a.form())
			}
			continue
		}
		nv, err := a.check(v)
		if err != nil {
			return nil, err
		}
		out[a.Name] = nv
	}
	for k := range in {
		if !w.declares(k) {
			return nil, fmt.Errorf("unknown argument %q: the arguments are %s", k, quoteList(w.argNames()))
		}
	}
	return out, nil
}

func (w *Definition) argNames() []string {
	out := make([]string, len(w.Arguments))
	for i, a := range w.Arguments {
		out[i] = a.Name
	}
	return out
}

// check checks value v of a and returns it normalized.
func (a Argument) check(v string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("argument %q must be %s, not %q%s", a.Name, a.form(), truncate(v, 80), why)
	}
	t := strings.TrimSpace(v)
	switch a.Type {
	case ArgInteger:
		if _, err := strconv.ParseInt(t, 10, 64); err != nil {
			return bad("")
		}
		return t, nil
	case ArgNumber:
		f, err := strconv.ParseFloat(t, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return bad("")
		}
		return t, nil
	case ArgBoolean:
		switch strings.ToLower(t) {
		case "true", "yes", "1":
			return "true", nil
		case "false", "no", "0":
			return "false", nil
		}
		return bad("")
	case ArgDuration:
		if _, err := parseLength(marshal(t)); err != nil {
			return bad(": " + err.Error())
		}
		return t, nil
	case ArgTime:
		if _, err := parseTime(marshal(t)); err != nil {
			return bad(": " + err.Error())
		}
		return t, nil
	case ArgEnum:
		for _, e := range a.Enum {
			if strings.EqualFold(e, t) {
				return e, nil
			}
		}
		return bad("")
	case ArgJSON:
		var x any
		if err := json.Unmarshal([]byte(v), &x); err != nil {
			return bad(": it is not JSON")
		}
		if err := matchSchema(a.Schema, x); err != nil {
			return bad(": it does not match its schema: " + err.Error())
		}
		return string(compact(json.RawMessage(v))), nil
	}
	return v, nil
}

// form says what a's value must be, for error messages and hints.
func (a Argument) form() string {
	switch a.Type {
	case ArgInteger:
		return "an integer"
	case ArgNumber:
		return "a number"
	case ArgBoolean:
		return "true or false"
	case ArgDuration:
		return fmt.Sprintf("a duration: seconds (like 30) or a Go duration (like 90s or 1h30m), at most %s", maxWaitText)
	case ArgTime:
		return "a time: RFC 3339 (like 2026-12-01T09:00:00Z) or Unix seconds"
	case ArgEnum:
		return "one of " + quoteList(a.Enum)
	case ArgJSON:
		return "JSON matching its schema"
	}
	return "text"
}

// argHint is a's description with the form its value must have, as the
// prompt advertises it (a prompt argument has no type on the wire).
func (w *Definition) argHint(a Argument) string {
	t := w.argType(a)
	if t == ArgString {
		return a.Description
	}
	a.Type = t
	if a.Description == "" {
		return a.form()
	}
	return strings.TrimRight(a.Description, ". ") + " (" + a.form() + ")"
}

// argJSON is the JSON a tool step bound to prompt argument name receives
// for its value v: a string, or a number, boolean or JSON value for the
// arguments typed so.
func (w *Definition) argJSON(name, v string) json.RawMessage {
	a, ok := w.declaredArg(name)
	if !ok {
		return marshal(v)
	}
	switch a.Type {
	case ArgInteger, ArgNumber, ArgBoolean, ArgJSON:
		if raw := json.RawMessage(strings.TrimSpace(v)); json.Valid(raw) {
			return raw
		}
	}
	return marshal(v)
}

// propertySchema is a's property in the workflow tool's input schema.
func (a Argument) propertySchema() map[string]any {
	desc := a.Description
	switch a.Type {
	case ArgInteger, ArgNumber, ArgBoolean:
		return map[string]any{"type": string(a.Type), "description": desc}
	case ArgEnum:
		return map[string]any{"type": "string", "enum": slices.Clone(a.Enum), "description": desc}
	case ArgJSON:
		if a.Schema != nil {
			var m map[string]any
			if raw, err := json.Marshal(a.Schema); err == nil && json.Unmarshal(raw, &m) == nil {
				if desc != "" && m["description"] == nil {
					m["description"] = desc
				}
				return m
			}
		}
		return map[string]any{"description": desc}
	case ArgDuration, ArgTime:
		if desc != "" {
			desc = strings.TrimRight(desc, ". ") + " "
		}
		return map[string]any{"type": "string", "description": desc + "(" + a.form() + ")"}
	}
	return map[string]any{"type": "string", "description": desc}
}

// matchSchema checks value v (decoded JSON) against JSON Schema schema
// (any value that encodes to one; nil accepts anything).
func matchSchema(schema any, v any) error {
	if schema == nil {
		return nil
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return fmt.Errorf("its schema cannot be encoded: %v", err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("its schema: %v", err)
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		return fmt.Errorf("its schema: %v", err)
	}
	return resolved.Validate(v)
}

// checkArgument checks a declared argument at registration.
func (c *checker) argument(w *Definition, a Argument) {
	switch a.Type {
	case "", ArgString, ArgInteger, ArgNumber, ArgBoolean, ArgDuration, ArgTime:
	case ArgEnum:
		if len(a.Enum) == 0 {
			c.add("argument %q is an enum with no values: list them in Argument.Enum (EnumArg)", a.Name)
		}
	case ArgJSON:
		if a.Schema != nil {
			if _, err := json.Marshal(a.Schema); err != nil {
				c.add("argument %q: its schema cannot be encoded: %v", a.Name, err)
			}
		}
	default:
		c.add("argument %q has unknown type %q: use one of the Arg* types", a.Name, a.Type)
	}
	if a.Type == "" || a.Type == ArgString {
		return
	}
	if need := w.neededType(a.Name); need != "" && !compatible(a.Type, need) {
		c.add("argument %q is declared %s, but a step reads it as %s: declare it %s", a.Name, a.Type, need, need)
	}
}

// compatible reports whether an argument declared t serves a read that
// needs need (seconds may be an integer or a number).
func compatible(t, need ArgType) bool {
	switch {
	case t == need:
		return true
	case need == ArgDuration || need == ArgTime:
		return t == ArgInteger || t == ArgNumber
	}
	return false
}
