package workflow

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/require"
)

// FuzzTaskVars checks the decoder of _meta._task_vars, fed the way the SDK
// hands _meta values over (any JSON value decoded into `any`): it never
// panics; it refuses, with -32602, anything that is not an object and
// every object with an empty or reserved key; it accepts every other
// object, keeping each value unchanged.
func FuzzTaskVars(f *testing.F) {
	for _, s := range []string{
		`{"approver":"ada"}`,
		`{"approver":"ada","count":3,"tags":["a","b"],"nested":{"k":null},"ok":true}`,
		`{"reviewer":{"name":"ada","email":"ada@example.com"}}`,
		`{}`, `null`, `"x"`, `[1,2]`, `42`, `true`,
		`{"_workflow.progress":{}}`,
		`{"_workflow.":1}`,
		`{"_workflow.progress.extra":1,"a":2}`,
		`{"":1}`,
		`{"_workflow":1}`,
		`{"_Workflow.progress":1}`,
		`{" _workflow.progress":1}`,
		`{"\u005fworkflow.progress":1}`,
		`{"a":{"_workflow.progress":1}}`,
		`{"a":1,"a":2}`,
		`{"ключ":"значение","🔑":"🚪"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return // the SDK rejects such _meta before the bridge runs
		}
		got, err := taskVars(v)
		m, isObject := v.(map[string]any)
		if v == nil {
			require.NoError(t, err)
			require.Nil(t, got)
			return
		}
		reserved := false
		for k := range m {
			if k == "" || strings.HasPrefix(k, ReservedPrefix) {
				reserved = true
			}
		}
		if !isObject || reserved {
			require.Error(t, err, "taskVars(%s) must be refused", raw)
			var je *jsonrpc.Error
			require.True(t, errors.As(err, &je), "%T", err)
			require.EqualValues(t, jsonrpc.CodeInvalidParams, je.Code)
			require.Nil(t, got)
			return
		}
		require.NoError(t, err, "taskVars(%s)", raw)
		require.Len(t, got, len(m))
		for k, val := range got {
			require.NotEmpty(t, k)
			require.False(t, strings.HasPrefix(k, ReservedPrefix), "reserved key %q accepted", k)
			require.True(t, json.Valid(val), "value of %q: %q", k, val)
			var back any
			require.NoError(t, json.Unmarshal(val, &back))
			require.Equal(t, m[k], back, "value of %q changed", k)
		}
	})
}

// FuzzSelectPath checks the field-path walk of StepOutput sources against
// a reference walk over the decoded value: it never panics; an empty path
// returns the value as is; otherwise it finds exactly what the reference
// finds (object keys, non-negative array indexes), returns valid JSON,
// and fails exactly where the reference fails.
func FuzzSelectPath(f *testing.F) {
	for _, s := range []struct{ v, path string }{
		{`{"items":[{"text":"a"},{"text":"b"}],"n":3}`, "items.1.text"},
		{`{"items":[{"text":"a"},{"text":"b"}],"n":3}`, "items.9"},
		{`{"items":[{"text":"a"}],"n":3}`, "n.deeper"},
		{`{"commits":[{"hash":"a1f3c9e","kind":"feat"}],"repo":"taskbridge"}`, "commits"},
		{`{"commits":[{"hash":"a1f3c9e","kind":"feat"}]}`, "commits.0.hash"},
		{`{"draft":"# Release notes","sections":["Features","Fixes"]}`, "sections.1"},
		{`{"a":{"b":{"c":null}}}`, "a.b.c"},
		{`{"a":null}`, "a.b"},
		{`[1,2,3]`, "-1"},
		{`[1,2,3]`, "+1"},
		{`[1,2,3]`, "01"},
		{`[1,2,3]`, "99999999999999999999"},
		{`{"":{"":1}}`, "."},
		{`{"a.b":1}`, "a.b"},
		{`{"a":1,"a":2}`, "a"},
		{`"just a string"`, ""},
		{`not json`, ""},
		{`not json`, "a"},
		{`{"x":1`, "x"},
	} {
		f.Add([]byte(s.v), s.path)
	}
	f.Fuzz(func(t *testing.T, raw []byte, path string) {
		var segs []string
		if path != "" {
			segs = strings.Split(path, ".")
		}
		got, err := selectPath(json.RawMessage(raw), segs)
		if len(segs) == 0 {
			require.NoError(t, err)
			require.Equal(t, string(raw), string(got))
			return
		}
		want, ok := referenceSelect(raw, segs)
		if !ok {
			require.Error(t, err, "selectPath(%q, %q) = %q; the reference finds nothing", raw, segs, got)
			return
		}
		require.NoError(t, err, "selectPath(%q, %q); the reference finds %#v", raw, segs, want)
		require.True(t, json.Valid(got), "selectPath(%q, %q) = %q", raw, segs, got)
		var g any
		require.NoError(t, json.Unmarshal(got, &g))
		require.Equal(t, want, g)
	})
}

// referenceSelect walks a decoded JSON value: object keys, and array
// indexes written as non-negative decimal integers (strconv.Atoi, as
// StepOutput paths are documented to use).
func referenceSelect(raw []byte, segs []string) (any, bool) {
	var cur any
	if json.Unmarshal(raw, &cur) != nil {
		return nil, false
	}
	for _, seg := range segs {
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[seg]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(c) {
				return nil, false
			}
			cur = c[n]
		default:
			return nil, false
		}
	}
	return cur, true
}
