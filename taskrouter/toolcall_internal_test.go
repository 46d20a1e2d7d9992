package taskrouter

import (
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/stretchr/testify/require"
)

// TestHasDefaults: a typed tool skips ApplyDefaults only when no property,
// at any depth, declares a default; a schema that contains itself ends the
// walk; and the arguments come out the same either way.
func TestHasDefaults(t *testing.T) {
	flat := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"a": {Type: "string"}}}
	require.False(t, hasDefaults(flat))
	require.False(t, hasDefaults(nil))
	require.False(t, hasDefaults(&jsonschema.Schema{Type: "object"}))

	top := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"n": {Type: "integer", Default: json.RawMessage(`3`)}}}
	require.True(t, hasDefaults(top))

	nested := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{
		"outer": {Type: "object", Properties: map[string]*jsonschema.Schema{"inner": {Type: "string", Default: json.RawMessage(`"x"`)}}},
	}}
	require.True(t, hasDefaults(nested))

	self := &jsonschema.Schema{Type: "object"}
	self.Properties = map[string]*jsonschema.Schema{"again": self}
	require.False(t, hasDefaults(self))

	for _, s := range []*jsonschema.Schema{flat, top, nested} {
		rs, err := s.Resolve(nil)
		require.NoError(t, err)
		for _, args := range []string{`{}`, `{"a":"v"}`, `{"outer":{}}`, `{"n":5}`} {
			with, err := applyArgumentSchema(json.RawMessage(args), rs, true)
			require.NoError(t, err)
			skipped, err := applyArgumentSchema(json.RawMessage(args), rs, hasDefaults(s))
			require.NoError(t, err)
			require.JSONEq(t, string(with), string(skipped), "%s with %s", s, args)
		}
	}
}

// BenchmarkArgumentSchema: examples/conformance's slow_compute arguments
// checked against their inferred schema (no defaults), with ApplyDefaults
// run (as before hasDefaults) and skipped.
func BenchmarkArgumentSchema(b *testing.B) {
	type slowIn struct {
		Seconds float64 `json:"seconds,omitempty" jsonschema:"how long to compute, in seconds"`
		Label   string  `json:"label,omitempty" jsonschema:"a label echoed in the result"`
	}
	_, rs, _, err := resolveSchema[slowIn](nil)
	require.NoError(b, err)
	args := json.RawMessage(`{"seconds":0,"label":"load"}`)
	for _, defaults := range []bool{true, hasDefaults(rs.Schema())} {
		b.Run(map[bool]string{true: "applied", false: "skipped"}[defaults], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := applyArgumentSchema(args, rs, defaults); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
