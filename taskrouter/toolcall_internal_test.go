package taskrouter

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
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
			with, err := applyArgumentSchema(json.RawMessage(args), rs, true, nil)
			require.NoError(t, err)
			skipped, err := applyArgumentSchema(json.RawMessage(args), rs, hasDefaults(s), flatSchemaOf(s))
			require.NoError(t, err)
			require.JSONEq(t, string(with), string(skipped), "%s with %s", s, args)
		}
	}
}

// BenchmarkArgumentSchema: examples/conformance's slow_compute arguments
// checked against their inferred schema (no defaults): with ApplyDefaults
// run (as before hasDefaults), skipped, and skipped with the flat check
// instead of jsonschema-go's Validate (as a typed tool runs it now).
func BenchmarkArgumentSchema(b *testing.B) {
	type slowIn struct {
		Seconds float64 `json:"seconds,omitempty" jsonschema:"how long to compute, in seconds"`
		Label   string  `json:"label,omitempty" jsonschema:"a label echoed in the result"`
	}
	_, rs, _, err := resolveSchema[slowIn](nil)
	require.NoError(b, err)
	flat := flatSchemaOf(rs.Schema())
	require.NotNil(b, flat)
	args := json.RawMessage(`{"seconds":0,"label":"load"}`)
	for _, c := range []struct {
		name     string
		defaults bool
		flat     *flatSchema
	}{{"applied", true, nil}, {"skipped", false, nil}, {"flat", false, flat}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := applyArgumentSchema(args, rs, c.defaults, c.flat); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestFlatSchemaAgreesWithValidate: the flat check accepts only arguments
// jsonschema-go's Validate accepts, and accepts the common valid ones (so
// it is used); a schema with any other keyword is not flat, and arguments
// it refuses get jsonschema-go's own error.
func TestFlatSchemaAgreesWithValidate(t *testing.T) {
	type inferred struct {
		Seconds float64  `json:"seconds,omitempty"`
		Label   string   `json:"label,omitempty"`
		Count   int      `json:"count"`
		On      bool     `json:"on,omitempty"`
		Maybe   *string  `json:"maybe,omitempty"`
		Anyway  any      `json:"anyway,omitempty"`
		Nums    []int    `json:"nums,omitempty"`
		Ratio   *float64 `json:"ratio,omitempty"`
	}
	_, inferredRS, _, err := resolveSchema[inferred](nil)
	require.NoError(t, err)
	require.Nil(t, flatSchemaOf(inferredRS.Schema()), "an array or an any property is not flat")
	type scalars struct {
		Seconds float64  `json:"seconds,omitempty" jsonschema:"how long"`
		Label   string   `json:"label,omitempty"`
		Count   int      `json:"count"`
		On      bool     `json:"on,omitempty"`
		Maybe   *string  `json:"maybe,omitempty"`
		Ratio   *float64 `json:"ratio,omitempty"`
	}
	_, scalarsRS, _, err := resolveSchema[scalars](nil)
	require.NoError(t, err)
	require.NotNil(t, flatSchemaOf(scalarsRS.Schema()), "an inferred struct of scalars is flat")

	schemas := map[string]*jsonschema.Schema{
		"inferred scalars": scalarsRS.Schema(),
		"open":             {Type: "object", Properties: map[string]*jsonschema.Schema{"n": {Type: "integer"}, "s": {Types: []string{"null", "string"}}}, Required: []string{"n"}},
		"no type":          {Properties: map[string]*jsonschema.Schema{"x": {Type: "number"}}},
		"closed":           {Type: "object", Properties: map[string]*jsonschema.Schema{"b": {Type: "boolean"}}, AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}},
		"empty":            {Type: "object"},
	}
	args := []string{
		`{}`, `null`, `{"seconds":0,"label":"load"}`, `{"seconds":1.5,"count":3}`, `{"count":3}`, `{"count":3.5}`,
		`{"count":1e2}`, `{"count":-0}`, `{"count":"3"}`, `{"count":null}`, `{"count":3,"maybe":null}`, `{"count":3,"maybe":"m"}`,
		`{"count":3,"on":true}`, `{"count":3,"on":"yes"}`, `{"count":3,"extra":1}`, `{"count":3,"ratio":null}`, `{"count":3,"ratio":0.25}`,
		`{"n":1}`, `{"n":1,"s":null}`, `{"n":1,"s":"x"}`, `{"n":1,"s":2}`, `{"n":1.25}`, `{"s":"x"}`, `{"n":1,"z":[1]}`,
		`{"x":1}`, `{"x":"1"}`, `{"x":{}}`, `{"b":false}`, `{"b":false,"c":1}`, `{"b":[]}`, `{"n":{"a":1}}`,
	}
	for name, s := range schemas {
		rs, err := s.Resolve(nil)
		require.NoError(t, err, name)
		flat := flatSchemaOf(s)
		require.NotNil(t, flat, name)
		accepted := 0
		for _, a := range args {
			v := any(map[string]any{})
			m := map[string]any{}
			require.NoError(t, wire.Unmarshal([]byte(a), &m))
			v = m
			verr := rs.Validate(&v)
			if flat.accepts(v) {
				accepted++
				require.NoError(t, verr, "%s: flat accepted %s", name, a)
			}
			_, err := applyArgumentSchema(json.RawMessage(a), rs, false, flat)
			if verr != nil {
				// (a list of extra properties comes in map order)
				require.Error(t, err, "%s %s", name, a)
				require.Equal(t, strings.SplitN(verr.Error(), "[", 2)[0], strings.SplitN(err.Error(), "[", 2)[0], "%s %s", name, a)
			} else {
				require.NoError(t, err, "%s %s", name, a)
			}
		}
		require.NotZero(t, accepted, name)
	}

	notFlat := []*jsonschema.Schema{
		{Type: "array"},
		{Type: "object", Schema: "https://json-schema.org/draft/2020-12/schema"},
		{Type: "object", Properties: map[string]*jsonschema.Schema{"n": {Type: "integer", Minimum: new(float64)}}},
		{Type: "object", Properties: map[string]*jsonschema.Schema{"s": {Type: "string", Enum: []any{"a"}}}},
		{Type: "object", Properties: map[string]*jsonschema.Schema{"s": {Type: "string", Pattern: "^a"}}},
		{Type: "object", Properties: map[string]*jsonschema.Schema{"s": {Type: "string", Format: "email"}}},
		{Type: "object", Properties: map[string]*jsonschema.Schema{"o": {Type: "object"}}},
		{Type: "object", Properties: map[string]*jsonschema.Schema{"s": {}}},
		{Type: "object", Properties: map[string]*jsonschema.Schema{"s": {Type: "string", Types: []string{"number"}}}},
		{Type: "object", AdditionalProperties: &jsonschema.Schema{Type: "string"}},
		{Type: "object", AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{Type: "string"}}},
		{Type: "object", PatternProperties: map[string]*jsonschema.Schema{"^a": {Type: "string"}}},
		{Type: "object", MinProperties: new(int)},
		{Type: "object", AllOf: []*jsonschema.Schema{{Required: []string{"a"}}}},
		{Type: "object", Extra: map[string]any{"x-custom": true}},
	}
	for _, s := range notFlat {
		require.Nil(t, flatSchemaOf(s), "%+v", s)
	}
	require.Nil(t, flatSchemaOf(nil))
}
