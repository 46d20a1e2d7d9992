package argschema

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

const review = `{
  "type": "object",
  "required": ["draft", "approved"],
  "properties": {
    "draft":    {"type": "string", "description": "the draft"},
    "approved": {"type": "boolean", "description": "may it be published"},
    "seconds":  {"type": "number", "minimum": 0},
    "count":    {"type": "integer"},
    "level":    {"type": "string", "enum": ["low", "high"]},
    "tags":     {"type": "array", "items": {"type": "string"}},
    "opt":      {"type": ["string", "null"]},
    "kind":     {"$ref": "#/$defs/kind"},
    "free":     {}
  },
  "$defs": {"kind": {"type": "string", "enum": ["feat", "fix"], "description": "change kind"}}
}`

func fields(t *testing.T) []Field {
	t.Helper()
	fs, err := Fields(json.RawMessage(review))
	require.NoError(t, err)
	return fs
}

func field(t *testing.T, name string) Field {
	t.Helper()
	f, ok := Lookup(fields(t), name)
	require.True(t, ok, name)
	return f
}

func TestFieldsOrderAndShape(t *testing.T) {
	fs := fields(t)
	var names []string
	for _, f := range fs {
		names = append(names, f.Name)
	}
	// Raw JSON keeps its order: the order the server declared.
	require.Equal(t, []string{"draft", "approved", "seconds", "count", "level", "tags", "opt", "kind", "free"}, names)
	require.True(t, fs[1].Required)
	require.Equal(t, "boolean", fs[1].Type)
	require.Equal(t, "string", field(t, "opt").Type)
	kind := field(t, "kind")
	require.Equal(t, "change kind", kind.Description)
	require.Equal(t, "one of: feat, fix", kind.Hint())

	none, err := Fields(nil)
	require.NoError(t, err)
	require.Empty(t, none)
	// A decoded tools/list schema (map) works as well as raw JSON.
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(review), &m))
	fromMap, err := Fields(m)
	require.NoError(t, err)
	require.Len(t, fromMap, len(fs))
	names = nil
	for _, f := range fromMap {
		names = append(names, f.Name)
	}
	require.Equal(t, []string{"approved", "draft", "count", "free", "kind", "level", "opt", "seconds", "tags"}, names,
		"a map keeps no order: required first, then by name")
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		field, text string
		want        any
		set         bool
		err         string
	}{
		{"approved", "true", true, true, ""},
		{"approved", "False", false, true, ""},
		{"approved", "yes", nil, false, "want boolean: true or false"},
		{"approved", "", nil, false, "a value is required"},
		{"draft", "Looks good", "Looks good", true, ""},
		{"draft", `"quoted text"`, "quoted text", true, ""},
		{"draft", "42", "42", true, ""},
		{"seconds", "1.5", 1.5, true, ""},
		{"seconds", "soon", nil, false, "want number"},
		{"seconds", "-1", nil, false, "want number (minimum 0)"},
		{"seconds", "", nil, false, ""},
		{"count", "3", 3.0, true, ""},
		{"count", "3.5", nil, false, "want integer"},
		{"level", "high", "high", true, ""},
		{"level", "medium", nil, false, "one of: low, high"},
		{"kind", "feat", "feat", true, ""},
		{"kind", "docs", nil, false, "one of: feat, fix"},
		{"tags", `["a","b"]`, []any{"a", "b"}, true, ""},
		{"tags", `[1]`, nil, false, `want JSON array (type: 1 has type "integer", want "string")`},
		{"tags", "a,b", nil, false, "want JSON array"},
		{"free", `{"x":1}`, map[string]any{"x": 1.0}, true, ""},
		{"free", "plain words", "plain words", true, ""},
	} {
		t.Run(tc.field+"="+tc.text, func(t *testing.T) {
			v, set, err := field(t, tc.field).Parse(tc.text)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.ErrorContains(t, err, tc.field)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.set, set)
			require.Equal(t, tc.want, v)
		})
	}
}

func TestFormatRoundTrips(t *testing.T) {
	for _, v := range []any{"text", true, 2.5, []any{"a"}, map[string]any{"k": "v"}} {
		f := Field{Name: "x"}
		switch v.(type) {
		case string:
			f.Type = "string"
		case bool:
			f.Type = "boolean"
		case float64:
			f.Type = "number"
		case []any:
			f.Type = "array"
		default:
			f.Type = "object"
		}
		got, set, err := f.Parse(Format(v))
		require.NoError(t, err)
		require.True(t, set)
		require.Equal(t, v, got)
	}
	require.Equal(t, "hi", Format(json.RawMessage(`"hi"`)))
	require.Equal(t, `{"a":1}`, Format(json.RawMessage(`{"a":1}`)))
	require.Equal(t, "", Format(nil))
}
