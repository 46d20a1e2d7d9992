// Package argschema turns a tool's input schema (or an elicitation's
// requested schema) into fields a person fills in as text, and turns the
// text back into typed JSON values that the schema accepts.
//
// Both the taskbridge CLI, which asks field by field on the terminal, and
// its terminal UI, which shows a form, use it: an answer that the schema
// refuses (approved=yes for a boolean) is refused with a message that names
// the expected type, and asked again.
package argschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/taskbridge/taskbridge/mcptask"

	"github.com/google/jsonschema-go/jsonschema"
)

// Field is one property of an object schema.
type Field struct {
	// Name is the property name.
	Name string
	// Type is the JSON Schema type: string, boolean, number, integer,
	// object, array, or "" when the schema names none (or several).
	Type string
	// Description is the property's description (or its title).
	Description string
	// Required reports whether the object schema requires the property.
	Required bool
	// Enum lists the allowed values, when the schema restricts them.
	Enum []any
	// Default is the schema's default value, if any.
	Default any

	// check validates a value of this property alone: the root schema
	// (keeping its $defs) with only this property and no required list.
	check *jsonschema.Resolved
}

// Fields returns the properties of an object schema in the order the
// schema's JSON lists them (the order a server declared its arguments in;
// go-sdk lists a typed tool's in its struct's field order), or, when the
// schema is no JSON text that keeps an order (a decoded map), required
// ones first, each group in name order. schema may be anything that
// marshals to a JSON Schema object (raw JSON, a map from a decoded
// tools/list, a *jsonschema.Schema); nil means no arguments. The _task_id argument a taskbridge server
// adds to the tools of workflow steps is left out: nobody types it (a
// workflow step's call fills it from the handoff).
func Fields(schema any) ([]Field, error) {
	root, err := decode(schema)
	if err != nil || root == nil {
		return nil, err
	}
	required := map[string]bool{}
	for _, r := range root.Required {
		required[r] = true
	}
	var out []Field
	for name, prop := range root.Properties {
		if name == mcptask.ArgTaskID {
			continue
		}
		if prop == nil {
			prop = &jsonschema.Schema{}
		}
		f := Field{Name: name, Required: required[name]}
		describe(&f, deref(root, prop))
		one := *root
		one.Properties = map[string]*jsonschema.Schema{name: prop}
		one.Required = nil
		one.AdditionalProperties = nil
		one.ID = ""
		rs, err := one.Resolve(nil)
		if err != nil {
			return nil, fmt.Errorf("argschema: property %q: %w", name, err)
		}
		f.check = rs
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Field) int {
		if a.Required != b.Required {
			if a.Required {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	if order := propertyOrder(schema); len(order) > 0 {
		pos := make(map[string]int, len(order))
		for i, name := range order {
			pos[name] = i
		}
		slices.SortStableFunc(out, func(a, b Field) int { return pos[a.Name] - pos[b.Name] })
	}
	return out, nil
}

// propertyOrder is the order of the top-level "properties" of a schema
// given as JSON text, or nil.
func propertyOrder(schema any) []string {
	var raw []byte
	switch s := schema.(type) {
	case json.RawMessage:
		raw = s
	case []byte:
		raw = s
	default:
		return nil
	}
	var top struct {
		Properties json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(raw, &top) != nil || len(top.Properties) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(top.Properties))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var order []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		name, _ := tok.(string)
		order = append(order, name)
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return nil
		}
	}
	return order
}

// decode reads any schema value into a *jsonschema.Schema.
func decode(schema any) (*jsonschema.Schema, error) {
	var raw []byte
	switch s := schema.(type) {
	case nil:
		return nil, nil
	case *jsonschema.Schema:
		if s == nil {
			return nil, nil
		}
		cp := *s
		return &cp, nil
	case json.RawMessage:
		raw = s
	case []byte:
		raw = s
	default:
		b, err := json.Marshal(s)
		if err != nil {
			return nil, fmt.Errorf("argschema: encoding the schema: %w", err)
		}
		raw = b
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var root jsonschema.Schema
	if err := json.Unmarshal(raw, &root); err != nil {
		return nil, fmt.Errorf("argschema: decoding the schema: %w", err)
	}
	return &root, nil
}

// deref follows a local "#/$defs/NAME" (or "#/definitions/NAME") reference
// one level, for describing the property; validation resolves references
// fully.
func deref(root, s *jsonschema.Schema) *jsonschema.Schema {
	for range 8 {
		if s.Ref == "" {
			return s
		}
		name, ok := strings.CutPrefix(s.Ref, "#/$defs/")
		defs := root.Defs
		if !ok {
			name, ok = strings.CutPrefix(s.Ref, "#/definitions/")
			defs = root.Definitions
		}
		next := defs[name]
		if !ok || next == nil {
			return s
		}
		s = next
	}
	return s
}

func describe(f *Field, s *jsonschema.Schema) {
	f.Description = s.Description
	if f.Description == "" {
		f.Description = s.Title
	}
	f.Type = s.Type
	if f.Type == "" {
		// ["string", "null"] reads as string: null is what leaving it
		// out means.
		var types []string
		for _, t := range s.Types {
			if t != "null" {
				types = append(types, t)
			}
		}
		if len(types) == 1 {
			f.Type = types[0]
		}
	}
	f.Enum = s.Enum
	if len(s.Default) > 0 {
		var v any
		if json.Unmarshal(s.Default, &v) == nil {
			f.Default = v
		}
	}
}

// Hint says what the field expects, for a label or an error message:
// "boolean: true or false", "one of: a, b", "number", "JSON object", ….
func (f Field) Hint() string {
	if len(f.Enum) > 0 {
		vals := make([]string, len(f.Enum))
		for i, v := range f.Enum {
			vals[i] = Format(v)
		}
		return "one of: " + strings.Join(vals, ", ")
	}
	switch f.Type {
	case "boolean":
		return "boolean: true or false"
	case "integer":
		return "integer"
	case "number":
		return "number"
	case "object":
		return "JSON object"
	case "array":
		return "JSON array"
	case "string":
		return "text"
	}
	return "any JSON value or text"
}

// ErrEmpty is returned by Parse for an empty answer to a required field.
var ErrEmpty = errors.New("a value is required")

// Parse reads the text a person typed for the field. An empty text is
// (nil, false, nil) for an optional field, and ErrEmpty for a required
// one. A text the schema refuses is an error that names the expected type
// (see Hint).
//
// How text becomes a value depends on the type: text fields take the text
// as it is (or a JSON string literal, quotes and all, unquoted); booleans
// take true or false; numbers, objects and arrays take JSON; a field of no
// single type takes JSON when the text parses, else the text.
func (f Field) Parse(text string) (any, bool, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		if f.Required {
			return nil, false, fmt.Errorf("%s: %w (%s)", f.Name, ErrEmpty, f.Hint())
		}
		return nil, false, nil
	}
	v, err := f.convert(text)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %q is not valid: want %s", f.Name, text, f.Hint())
	}
	if err := f.Check(v); err != nil {
		return nil, false, err
	}
	return v, true, nil
}

func (f Field) convert(text string) (any, error) {
	var v any
	switch f.Type {
	case "string":
		if strings.HasPrefix(text, `"`) {
			var s string
			if json.Unmarshal([]byte(text), &s) == nil {
				return s, nil
			}
		}
		return text, nil
	case "boolean":
		switch strings.ToLower(text) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, errors.New("not a boolean")
	case "integer", "number":
		n, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, err
		}
		if f.Type == "integer" && n != float64(int64(n)) {
			return nil, errors.New("not an integer")
		}
		return n, nil
	case "object", "array":
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			return nil, err
		}
		return v, nil
	}
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return text, nil
	}
	return v, nil
}

// Check validates a value of the field against its schema (type, enum,
// bounds, patterns, nested shapes). The error names the expected type.
func (f Field) Check(v any) error {
	if f.check == nil {
		return nil
	}
	if err := f.check.Validate(map[string]any{f.Name: normalize(v)}); err != nil {
		msg := fmt.Sprintf("%s: %s is not valid: want %s", f.Name, Format(v), f.Hint())
		if why := f.reason(err); why != "" {
			msg += " (" + why + ")"
		}
		return errors.New(msg)
	}
	return nil
}

// reason says which constraint a value broke, beyond its type or enum
// (which Hint already names): "minimum 0", "maxLength 10", ….
func (f Field) reason(err error) string {
	clause := err.Error()
	// "validating root: validating /properties/NAME: …" is the property
	// itself; a deeper path is a part of it (an item, a member).
	nested := strings.Count(clause, "validating ") > 2
	for {
		rest, ok := strings.CutPrefix(clause, "validating ")
		if !ok {
			break
		}
		_, after, ok := strings.Cut(rest, ": ")
		if !ok {
			break
		}
		clause = after
	}
	keyword, detail, _ := strings.Cut(clause, ": ")
	prop := deref(f.check.Schema(), f.check.Schema().Properties[f.Name])
	num := func(p *float64) string { return strconv.FormatFloat(*p, 'g', -1, 64) }
	switch {
	case nested:
		return clause
	case keyword == "type" || keyword == "enum":
		return ""
	case keyword == "minimum" && prop.Minimum != nil:
		return "minimum " + num(prop.Minimum)
	case keyword == "maximum" && prop.Maximum != nil:
		return "maximum " + num(prop.Maximum)
	case keyword == "exclusiveMinimum" && prop.ExclusiveMinimum != nil:
		return "more than " + num(prop.ExclusiveMinimum)
	case keyword == "exclusiveMaximum" && prop.ExclusiveMaximum != nil:
		return "less than " + num(prop.ExclusiveMaximum)
	case keyword == "minLength" && prop.MinLength != nil:
		return fmt.Sprintf("at least %d characters", *prop.MinLength)
	case keyword == "maxLength" && prop.MaxLength != nil:
		return fmt.Sprintf("at most %d characters", *prop.MaxLength)
	case keyword == "pattern":
		return "matching " + prop.Pattern
	}
	if detail == "" {
		return clause
	}
	return keyword + ": " + detail
}

// normalize round-trips v through JSON, so that values the validator does
// not know (json.RawMessage, typed slices) become plain JSON values.
func normalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}

// Format renders a value as the text a person would type for it: strings
// as they are, everything else as JSON. It is the inverse of Parse for
// prefilling a form.
func Format(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.RawMessage:
		var s string
		if json.Unmarshal(x, &s) == nil {
			return s
		}
		return string(x)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// Lookup returns the field named name, if the schema has it.
func Lookup(fields []Field, name string) (Field, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}
