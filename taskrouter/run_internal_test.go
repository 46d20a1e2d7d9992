package taskrouter

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// TestEncodeResultIsJSONMarshal: a task's result is stored with the bytes
// json.Marshal gives, for tool results of every shape (HTML characters,
// line separators, invalid UTF-8, structured content as raw JSON with
// spaces, metadata, an error flag, several kinds of content), for other
// results and for a nil one; and a result that cannot be encoded fails
// with json.Marshal's error.
func TestEncodeResultIsJSONMarshal(t *testing.T) {
	results := []mcp.Result{
		&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `Computation "load" completed instantly. Result: 42.`}}},
		&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "<b>&amp;</b>\u2028\u2029 \xff\x00\t\n"}}},
		&mcp.CallToolResult{Content: []mcp.Content{}},
		&mcp.CallToolResult{},
		&mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "failed", Meta: mcp.Meta{"k": "<v>"}}}},
		&mcp.CallToolResult{StructuredContent: json.RawMessage(`{ "a" : [1, 2,  3], "h": "<&>" }`), Content: []mcp.Content{&mcp.TextContent{Text: "{}"}}},
		&mcp.CallToolResult{StructuredContent: map[string]any{"z": 1, "a": []any{"<", nil, 2.5}}},
		&mcp.CallToolResult{Meta: mcp.Meta{"io.modelcontextprotocol/related-task": map[string]any{"taskId": "x"}},
			Content: []mcp.Content{&mcp.ImageContent{Data: []byte{1, 2, 3}, MIMEType: "image/png"}, &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///a", Text: "t"}}}},
		&CreateTaskResult{},
		nil,
		(*mcp.CallToolResult)(nil),
	}
	for i, res := range results {
		want, werr := json.Marshal(res)
		got, gerr := encodeResult(res)
		require.NoError(t, werr, "%d", i)
		require.NoError(t, gerr, "%d", i)
		require.Equal(t, string(want), string(got), "%d", i)
	}

	bad := &mcp.CallToolResult{StructuredContent: math.Inf(1)}
	_, werr := json.Marshal(bad)
	_, gerr := encodeResult(bad)
	require.Error(t, werr)
	require.EqualError(t, gerr, werr.Error())
	var me *json.MarshalerError
	require.True(t, errors.As(gerr, &me))
}

// BenchmarkOutcome: an instant tool's result turned into the update that
// ends its task (examples/conformance's slow_compute).
func BenchmarkOutcome(b *testing.B) {
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `Computation "load" completed instantly. Result: 42.`}}}
	b.ReportAllocs()
	for b.Loop() {
		if u := outcome(res, nil); len(u.Result) == 0 {
			b.Fatal("no result")
		}
	}
}
