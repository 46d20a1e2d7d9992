package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// SourceKind is where an argument's value comes from.
type SourceKind string

// The argument sources.
const (
	SourcePromptArg  SourceKind = "prompt_argument"
	SourceStepOutput SourceKind = "step_output"
	SourceConstant   SourceKind = "constant"
	SourceTaskVar    SourceKind = "task_variable"
	SourceClient     SourceKind = "client"
	SourceItem       SourceKind = "item"
)

// Source is the value bound to one tool argument (or read by a condition,
// or by a sleep for its length).
type Source struct {
	Kind SourceKind
	// Name is the prompt argument, output binding or task variable.
	Name string
	// Path is a field path into a step output: object keys and array
	// indexes, e.g. ["items", "0", "id"].
	Path []string
	// Value is a constant's JSON.
	Value json.RawMessage
	// Description tells the client what to supply (SourceClient).
	Description string
	// Default is the JSON value used when an optional prompt argument was
	// not given (SourcePromptArg); without one, an argument bound to an
	// optional prompt argument that was not given is left out of the tool
	// call. For SourceClient it is the value the server uses when it
	// performs a client step itself (TimeoutServer).
	Default json.RawMessage
}

// PromptArg binds an argument to a prompt argument. If the prompt argument
// is optional and not given, the tool argument is left out (or gets the
// default set with WithDefault).
func PromptArg(name string) Source { return Source{Kind: SourcePromptArg, Name: name} }

// WithDefault returns s with a default value: for an optional prompt
// argument that was not given, or for a FromClient argument the server
// fills in itself (TimeoutServer). It panics if v cannot be encoded as JSON,
// which is a programming error.
func (s Source) WithDefault(v any) Source {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("workflow: Source.WithDefault: %v", err))
	}
	s.Default = b
	return s
}

// StepOutput binds an argument to an earlier step's output binding. A
// path ("items.0.id" or "items", "0", "id") selects a field inside it.
func StepOutput(binding string, path ...string) Source {
	var p []string
	for _, seg := range path {
		p = append(p, strings.Split(seg, ".")...)
	}
	return Source{Kind: SourceStepOutput, Name: binding, Path: p}
}

// Const binds an argument to a constant. It panics if v cannot be encoded
// as JSON, which is a programming error.
func Const(v any) Source {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("workflow.Const: %v", err))
	}
	return Source{Kind: SourceConstant, Value: b}
}

// TaskVar binds an argument to a task variable. Task variables
// are set by tool handlers through the task engine, or by the client with
// _meta._task_vars on a continuation call.
func TaskVar(name string) Source { return Source{Kind: SourceTaskVar, Name: name} }

// FromClient marks an argument of a client-deferred step as one the client
// supplies; the handoff shows the description as a placeholder. A default
// (WithDefault) is what the server uses when it performs the step itself
// after the client's wait ran out (TimeoutServer).
func FromClient(description string) Source {
	return Source{Kind: SourceClient, Description: description}
}

// Item binds an argument of a for-each's body to the item the run works
// on; a path ("id" or "meta.owner") selects a field of it.
func Item(path ...string) Source {
	var p []string
	for _, seg := range path {
		p = append(p, strings.Split(seg, ".")...)
	}
	return Source{Kind: SourceItem, Path: p}
}

func (s Source) String() string {
	switch s.Kind {
	case SourcePromptArg:
		return fmt.Sprintf("prompt argument %q", s.Name)
	case SourceStepOutput:
		if len(s.Path) > 0 {
			return fmt.Sprintf("output %q at %s", s.Name, strings.Join(s.Path, "."))
		}
		return fmt.Sprintf("output %q", s.Name)
	case SourceConstant:
		return "constant " + string(s.Value)
	case SourceTaskVar:
		return fmt.Sprintf("task variable %q", s.Name)
	case SourceClient:
		return "client: " + s.Description
	case SourceItem:
		if len(s.Path) > 0 {
			return "the item's " + strings.Join(s.Path, ".")
		}
		return "the item"
	}
	return string(s.Kind)
}

// resolver reads sources against a progress record: the workflow's
// arguments and outputs, and the task's variables (vars; nil: none).
type resolver struct {
	w    *Definition
	vars func(name string) (json.RawMessage, bool)
	item json.RawMessage // the item of a for-each's record (Item sources)
}

func (r *resolver) value(p *Progress, src Source) (json.RawMessage, error) {
	if src.Kind == SourceItem {
		if r.item == nil {
			return nil, &errUnavailable{what: "the item"}
		}
		return selectPath(r.item, src.Path)
	}
	return value(r.w, p, r.vars, src)
}

// errUnavailable reports an input that does not exist yet: the output of a
// step that has not completed, or a task variable nobody set.
type errUnavailable struct{ what string }

func (e *errUnavailable) Error() string { return e.what + " is not available yet" }

// errNotProvided reports an optional prompt argument the client left out.
var errNotProvided = errors.New("not provided")

// value reads src against progress p: the prompt arguments and outputs
// it records, and the task variables vars reads (nil: none).
func value(w *Definition, p *Progress, vars func(string) (json.RawMessage, bool), src Source) (json.RawMessage, error) {
	switch src.Kind {
	case SourceConstant:
		return src.Value, nil
	case SourcePromptArg:
		v, ok := p.Arguments[src.Name]
		if !ok {
			if w.requiredArg(src.Name) {
				return nil, fmt.Errorf("required prompt argument %q was not provided", src.Name)
			}
			return nil, fmt.Errorf("prompt argument %q: %w", src.Name, errNotProvided)
		}
		return w.argJSON(src.Name, v), nil
	case SourceStepOutput:
		out, ok := p.Outputs[src.Name]
		if !ok {
			return nil, &errUnavailable{what: fmt.Sprintf("output %q", src.Name)}
		}
		return selectPath(out, src.Path)
	case SourceTaskVar:
		if vars != nil {
			if v, ok := vars(src.Name); ok {
				return v, nil
			}
		}
		return nil, &errUnavailable{what: fmt.Sprintf("task variable %q", src.Name)}
	case SourceClient:
		return nil, &errUnavailable{what: "a value the client supplies (" + src.Description + ")"}
	}
	return nil, fmt.Errorf("unknown source kind %q", src.Kind)
}

// selectPath walks object keys and array indexes.
func selectPath(v json.RawMessage, path []string) (json.RawMessage, error) {
	cur := v
	for i, seg := range path {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(cur, &obj); err == nil && obj != nil {
			next, ok := obj[seg]
			if !ok {
				return nil, fmt.Errorf("field path %q: no field %q", strings.Join(path, "."), strings.Join(path[:i+1], "."))
			}
			cur = next
			continue
		}
		var arr []json.RawMessage
		if err := json.Unmarshal(cur, &arr); err == nil {
			n, ok := stepIndex(seg)
			if !ok || n >= len(arr) {
				return nil, fmt.Errorf("field path %q: no element %q", strings.Join(path, "."), strings.Join(path[:i+1], "."))
			}
			cur = arr[n]
			continue
		}
		return nil, fmt.Errorf("field path %q: %q is not an object or array", strings.Join(path, "."), strings.Join(path[:i], "."))
	}
	return cur, nil
}

// stepIndex parses a numeric path segment.
func stepIndex(seg string) (int, bool) {
	n, err := strconv.Atoi(seg)
	return n, err == nil && n >= 0
}

// marshal encodes v without HTML escaping, so "<placeholders>" and code
// stay readable for an LLM. v must be encodable.
func marshal(v any) json.RawMessage {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return json.RawMessage("null")
	}
	return json.RawMessage(strings.TrimSuffix(b.String(), "\n"))
}

// compact is v re-encoded compactly (nil for none).
func compact(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return nil
	}
	return marshal(v)
}
