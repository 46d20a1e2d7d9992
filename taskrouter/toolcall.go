package taskrouter

// A typed tool's handler, owned by the router. AddTool registers with the
// server a raw handler that does what go-sdk's typed wrapper (mcp.AddTool)
// does, and keeps the argument check it starts with: so that a tools/call
// the router checked before it ran (a task about to be created, a plain
// call host mode is about to run apart) hands the decoded input on, and
// the arguments are decoded and validated once per call, not once by the
// router and again by the SDK.
//
// What it reproduces of go-sdk v1.8.0's typed wrapper (mcp.AddTool; the
// differential test TestTypedToolMatchesSDK compares them):
//
//   - the input schema: the tool's own, or the one inferred from In ({"type":
//     "object"} for In = any); the output schema likewise from Out, unless
//     Out is any;
//   - the arguments: decoded into a map (absent arguments are {}), the
//     schema's defaults applied, validated, re-encoded and decoded into In
//     with go-sdk's decoder; a failure is a tool result with isError
//     (`validating "arguments": ...`, or the decoder's error), the handler
//     not called;
//   - the handler's error: a *jsonrpc.Error is the call's JSON-RPC error,
//     any other becomes a tool result with isError and its text;
//   - the output: encoded, validated against the output schema with its
//     defaults applied, put in structuredContent, and copied as text into
//     content when the handler left content unset (or added to it when it
//     is not an object); a typed nil pointer output is its element's zero
//     value; no output when the result asks for input (inputRequests).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
)

// argCheck decodes and validates a tools/call's arguments as a typed
// tool's handler does, and returns the handler's input (an In) or the
// reason it would refuse them (an *argumentsError).
type argCheck func(args json.RawMessage) (any, error)

// argumentsError is why a typed tool refuses its arguments.
type argumentsError struct {
	err    error
	schema bool // the schema refused them (not the decoding into In)
}

func (e *argumentsError) Error() string { return e.err.Error() }
func (e *argumentsError) Unwrap() error { return e.err }

// toolResult is the tool result go-sdk answers refused arguments with.
func (e *argumentsError) toolResult() *mcp.CallToolResult {
	res := &mcp.CallToolResult{}
	if e.schema {
		res.SetError(fmt.Errorf("validating \"arguments\": %v", e.err))
	} else {
		res.SetError(e.err)
	}
	return res
}

// checkedKey carries arguments the router checked into the handler of
// the call it checked them for.
type checkedKey struct{}

type checkedArgs struct {
	req  *mcp.CallToolRequest
	args json.RawMessage // the arguments checked
	in   any
}

// withChecked returns ctx carrying in, the input the router decoded from
// req's arguments, for req's typed handler.
func withChecked(ctx context.Context, req *mcp.CallToolRequest, in any) context.Context {
	return context.WithValue(ctx, checkedKey{}, &checkedArgs{req: req, args: req.Params.Arguments, in: in})
}

// checkedInput returns the input the router decoded for req, if it did
// and the arguments have not changed since (middleware between the
// router and the SDK's dispatch may rewrite them).
func checkedInput(ctx context.Context, req *mcp.CallToolRequest) (any, bool) {
	c, ok := ctx.Value(checkedKey{}).(*checkedArgs)
	if !ok || c.req != req || !bytes.Equal(c.args, req.Params.Arguments) {
		return nil, false
	}
	return c.in, true
}

// typedTool returns the tool as go-sdk's mcp.AddTool would advertise it
// (schemas filled in), the raw handler doing what its typed wrapper does
// around h, and the argument check the handler starts with.
func typedTool[In, Out any](t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) (*mcp.Tool, mcp.ToolHandler, argCheck, error) {
	tt := *t
	if reflect.TypeFor[In]() == reflect.TypeFor[any]() && tt.InputSchema == nil {
		tt.InputSchema = &jsonschema.Schema{Type: "object"}
	}
	var (
		inResolved, outResolved *jsonschema.Resolved
		outZero                 any // the element's zero value when Out is a pointer and its schema was inferred
		err                     error
	)
	if tt.InputSchema, inResolved, _, err = resolveSchema[In](tt.InputSchema); err != nil {
		return nil, nil, nil, fmt.Errorf("input schema: %w", err)
	}
	if tt.OutputSchema != nil || reflect.TypeFor[Out]() != reflect.TypeFor[any]() {
		if tt.OutputSchema, outResolved, outZero, err = resolveSchema[Out](tt.OutputSchema); err != nil {
			return nil, nil, nil, fmt.Errorf("output schema: %w", err)
		}
	}
	inDefaults, inFlat := hasDefaults(inResolved.Schema()), flatSchemaOf(inResolved.Schema())
	check := func(args json.RawMessage) (any, error) {
		withDefaults, err := applyArgumentSchema(args, inResolved, inDefaults, inFlat)
		if err != nil {
			return nil, &argumentsError{err: err, schema: true}
		}
		var in In
		if err := wire.Unmarshal(withDefaults, &in); err != nil {
			return nil, &argumentsError{err: err}
		}
		return in, nil
	}
	handler := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		v, ok := checkedInput(ctx, req)
		if !ok {
			var err error
			if v, err = check(req.Params.Arguments); err != nil {
				return err.(*argumentsError).toolResult(), nil
			}
		}
		res, out, err := h(ctx, req, v.(In))
		if err != nil {
			if je, ok := err.(*jsonrpc.Error); ok {
				return nil, je
			}
			failed := &mcp.CallToolResult{}
			failed.SetError(err)
			return failed, nil
		}
		if res == nil {
			res = &mcp.CallToolResult{}
		}
		if res.InputRequests != nil {
			return res, nil // input requests carry no output
		}
		var output any = out
		if outZero != nil {
			var zero Out
			if any(out) == any(zero) {
				output = outZero
			}
		}
		if output == nil {
			return res, nil
		}
		if err := setOutput(res, output, outResolved); err != nil {
			return nil, err
		}
		return res, nil
	}
	return &tt, handler, check, nil
}

// resolveSchema resolves the schema of a tool's input or output of type
// T (its defaults validated): the one given (a *jsonschema.Schema, or any
// value that encodes to one), or else the one inferred from T (from its
// element type when T is a pointer; zero is then that element's zero
// value). advertised is what the tool advertises: the schema as given,
// or the inferred one.
func resolveSchema[T any](given any) (advertised any, resolved *jsonschema.Resolved, zero any, err error) {
	rt := reflect.TypeFor[T]()
	var schema *jsonschema.Schema
	switch s := given.(type) {
	case nil:
		if rt.Kind() == reflect.Pointer {
			rt = rt.Elem()
			zero = reflect.Zero(rt).Interface()
		}
		if schema, err = jsonschema.ForType(rt, &jsonschema.ForOptions{}); err != nil {
			return nil, nil, nil, err
		}
		given = schema
	case *jsonschema.Schema:
		schema = s
	default:
		b, err := json.Marshal(s)
		if err != nil {
			return nil, nil, nil, err
		}
		if err := wire.Unmarshal(b, &schema); err != nil {
			return nil, nil, nil, err
		}
	}
	if schema == nil {
		return nil, nil, nil, fmt.Errorf("schema is nil for type %v", rt)
	}
	if resolved, err = schema.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true}); err != nil {
		return nil, nil, nil, err
	}
	return given, resolved, zero, nil
}

// applyArgumentSchema decodes a tool's arguments into an object (none is
// {}), applies the schema's defaults (when it has any: see hasDefaults),
// validates the result and returns it encoded. flat, when the schema is
// one (see flatSchemaOf), accepts the arguments it can tell are valid
// without jsonschema-go; anything else is validated by jsonschema-go, so
// an error reads the same either way.
func applyArgumentSchema(args json.RawMessage, resolved *jsonschema.Resolved, defaults bool, flat *flatSchema) (json.RawMessage, error) {
	var v any = map[string]any{}
	if len(args) > 0 {
		m := map[string]any{}
		if err := wire.Unmarshal(args, &m); err != nil {
			return nil, fmt.Errorf("unmarshaling arguments: %w", err)
		}
		v = m
	}
	if defaults {
		if err := resolved.ApplyDefaults(&v); err != nil {
			return nil, fmt.Errorf("applying schema defaults:\n%w", err)
		}
	}
	if !flat.accepts(v) {
		if err := resolved.Validate(&v); err != nil {
			return nil, err
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("marshalling with defaults: %v", err)
	}
	return b, nil
}

// hasDefaults reports whether ApplyDefaults could change an object
// against schema s: whether a property, or a property of a property (the
// only places jsonschema-go v0.4.3's ApplyDefaults looks), declares a
// default. Without one it changes nothing and is skipped: it formats the
// schema for an error message on every call (0.7% of a typed tool's task
// round trip in a CPU profile of examples/conformance). A schema that
// contains itself is walked once.
func hasDefaults(s *jsonschema.Schema) bool {
	return hasDefaultsIn(s, map[*jsonschema.Schema]bool{})
}

func hasDefaultsIn(s *jsonschema.Schema, seen map[*jsonschema.Schema]bool) bool {
	if s == nil || seen[s] {
		return false
	}
	seen[s] = true
	for _, p := range s.Properties {
		if p != nil && (p.Default != nil || hasDefaultsIn(p, seen)) {
			return true
		}
	}
	return false
}

// flatSchema is an object schema whose properties each only name their
// JSON types (as a typed tool's inferred schema of a struct of strings,
// numbers and booleans does): the keywords are type, properties,
// required, additionalProperties false, and annotations (title,
// description, a property's default, the inferred property order).
// jsonschema-go's Validate formats the schema it checks into a string
// for a possible error on every call, whether or not one comes: about
// half of a typed tool's argument check (BenchmarkArgumentSchema).
type flatSchema struct {
	props    map[string]jsonTypes
	required []string
	closed   bool // additionalProperties: false
}

// jsonTypes is a set of JSON types, one bit each.
type jsonTypes uint8

const (
	typeNull jsonTypes = 1 << iota
	typeBoolean
	typeString
	typeInteger
	typeNumber // subsumes integer, as in jsonschema-go
)

var jsonTypeBits = map[string]jsonTypes{
	"null": typeNull, "boolean": typeBoolean, "string": typeString,
	"integer": typeInteger, "number": typeNumber | typeInteger,
}

// flatSchemaOf returns s as a flatSchema, or nil when s has any other
// keyword, anywhere (nested objects, arrays, enums, bounds, patterns,
// references, $schema...): those are left to jsonschema-go.
func flatSchemaOf(s *jsonschema.Schema) *flatSchema {
	if s == nil || (s.Type != "" && s.Type != "object") {
		return nil
	}
	rest := *s
	rest.Type, rest.Title, rest.Description, rest.PropertyOrder = "", "", "", nil
	rest.Properties, rest.Required, rest.AdditionalProperties = nil, nil, nil
	if !reflect.ValueOf(rest).IsZero() {
		return nil
	}
	f := &flatSchema{props: make(map[string]jsonTypes, len(s.Properties)), required: s.Required}
	if a := s.AdditionalProperties; a != nil {
		// jsonschema-go reads additionalProperties false as {"not": {}}.
		others := *a
		others.Not = nil
		if a.Not == nil || !reflect.ValueOf(*a.Not).IsZero() || !reflect.ValueOf(others).IsZero() {
			return nil
		}
		f.closed = true
	}
	for name, p := range s.Properties {
		if p == nil {
			return nil
		}
		prop := *p
		types := prop.Types
		if prop.Type != "" {
			if len(types) > 0 {
				return nil // jsonschema-go would read type alone
			}
			types = []string{prop.Type}
		}
		prop.Type, prop.Types, prop.Title, prop.Description, prop.Default = "", nil, "", "", nil
		if len(types) == 0 || !reflect.ValueOf(prop).IsZero() {
			return nil
		}
		var bits jsonTypes
		for _, t := range types {
			b, ok := jsonTypeBits[t]
			if !ok {
				return nil
			}
			bits |= b
		}
		f.props[name] = bits
	}
	return f
}

// accepts reports whether v, decoded JSON arguments, is valid against the
// schema. false means "not known valid": jsonschema-go decides.
func (f *flatSchema) accepts(v any) bool {
	if f == nil {
		return false
	}
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for k, val := range m {
		want, ok := f.props[k]
		if !ok {
			if f.closed {
				return false
			}
			continue
		}
		if want&typeOf(val) == 0 {
			return false
		}
	}
	for _, r := range f.required {
		if _, ok := m[r]; !ok {
			return false
		}
	}
	return true
}

// typeOf is the JSON type of a decoded value as jsonschema-go names it
// (an integral number is an integer), 0 for any type flatSchema does not
// check.
func typeOf(v any) jsonTypes {
	switch x := v.(type) {
	case nil:
		return typeNull
	case bool:
		return typeBoolean
	case string:
		return typeString
	case float64:
		if _, frac := math.Modf(x); frac == 0 {
			return typeInteger
		}
		return typeNumber
	}
	return 0
}

// setOutput puts a typed tool's output into its result: encoded and
// checked against the output schema (its defaults applied), as
// structuredContent, and as text content when the handler set none (or
// beside it, when the output is not an object).
func setOutput(res *mcp.CallToolResult, output any, resolved *jsonschema.Resolved) error {
	b, err := json.Marshal(output)
	if err != nil {
		return fmt.Errorf("marshaling output: %w", err)
	}
	out, err := applyOutputSchema(b, resolved)
	if err != nil {
		return fmt.Errorf("validating tool output: %w", err)
	}
	res.StructuredContent = json.RawMessage(out)
	switch {
	case res.Content == nil:
		res.Content = []mcp.Content{&mcp.TextContent{Text: string(out)}}
	case !isJSONObject(out):
		res.Content = append(res.Content, &mcp.TextContent{Text: string(out)})
	}
	return nil
}

// applyOutputSchema validates a typed tool's encoded output against its
// output schema: an object (or a null output of an object schema, taken
// as {}) gets the schema's defaults and is re-encoded; anything else is
// validated as it is.
func applyOutputSchema(data []byte, resolved *jsonschema.Resolved) ([]byte, error) {
	if resolved == nil {
		return data, nil
	}
	var v any
	if len(data) > 0 {
		if err := wire.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("unmarshaling output: %w", err)
		}
	}
	_, isObject := v.(map[string]any)
	if !isObject && v == nil && resolved.Schema().Type == "object" {
		v, isObject = map[string]any{}, true
	}
	if isObject {
		if err := resolved.ApplyDefaults(&v); err != nil {
			return nil, fmt.Errorf("applying schema defaults:\n%w", err)
		}
	}
	if err := resolved.Validate(&v); err != nil {
		return nil, err
	}
	if !isObject {
		return data, nil
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("marshalling with defaults: %v", err)
	}
	return out, nil
}

// isJSONObject reports whether data, after leading white space, starts
// an object.
func isJSONObject(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}
