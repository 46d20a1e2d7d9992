package taskrouter_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// rawSession connects a raw JSON-RPC client to srv over an in-memory
// stream, initializes it, and returns a function that sends one request
// line and returns its answer line (notifications are skipped).
func rawSession(t *testing.T, srv *mcp.Server, tr func(mcp.Transport) mcp.Transport) func(string) string {
	t.Helper()
	cli, srvEnd := net.Pipe()
	var st mcp.Transport = &mcp.IOTransport{Reader: srvEnd, Writer: srvEnd}
	if tr != nil {
		st = tr(st)
	}
	ss, err := srv.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close(); _ = cli.Close() })
	rd := bufio.NewReaderSize(cli, 1<<20)
	call := func(line string) string {
		t.Helper()
		_ = cli.SetDeadline(time.Now().Add(10 * time.Second))
		_, err := cli.Write([]byte(line + "\n"))
		require.NoError(t, err)
		for {
			out, err := rd.ReadString('\n')
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &m), out)
			if m["id"] != nil {
				return out
			}
		}
	}
	call(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	_, err = cli.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}` + "\n"))
	require.NoError(t, err)
	return call
}

type typedIn struct {
	Name  string   `json:"name"`
	Count int      `json:"count,omitempty"`
	Tags  []string `json:"tags,omitempty"`
}

type typedOut struct {
	Greeting string `json:"greeting"`
	N        int    `json:"n"`
}

// typedTools registers the same typed tools on a server, with add (go-sdk's
// mcp.AddTool or the router's taskrouter.AddTool).
func typedTools(add func(t *mcp.Tool, h any)) {
	greet := func(ctx context.Context, req *mcp.CallToolRequest, in typedIn) (*mcp.CallToolResult, typedOut, error) {
		switch in.Name {
		case "fail":
			return nil, typedOut{}, errors.New("it failed")
		case "rpc":
			return nil, typedOut{}, &jsonrpc.Error{Code: -32050, Message: "custom"}
		case "content":
			return textResult("own content"), typedOut{Greeting: "hi", N: in.Count}, nil
		}
		return nil, typedOut{Greeting: "hello " + in.Name, N: in.Count + len(in.Tags)}, nil
	}
	add(&mcp.Tool{Name: "greet"}, greet)
	// A given input schema with a default and a bound, as a map.
	add(&mcp.Tool{Name: "bounded", InputSchema: map[string]any{
		"type":       "object",
		"required":   []any{"name"},
		"properties": map[string]any{"name": map[string]any{"type": "string"}, "count": map[string]any{"type": "integer", "default": 3, "maximum": 10}},
	}}, greet)
	// A pointer output: nil is the element's zero value.
	add(&mcp.Tool{Name: "ptr"}, func(ctx context.Context, req *mcp.CallToolRequest, in typedIn) (*mcp.CallToolResult, *typedOut, error) {
		if in.Name == "" {
			return nil, nil, nil
		}
		return nil, &typedOut{Greeting: in.Name}, nil
	})
	// A list output: not an object, so it is added to the content.
	add(&mcp.Tool{Name: "list"}, func(ctx context.Context, req *mcp.CallToolRequest, in typedIn) (*mcp.CallToolResult, []string, error) {
		return textResult("listed"), append([]string{in.Name}, in.Tags...), nil
	})
	// Any in and out: no output schema.
	add(&mcp.Tool{Name: "anything"}, func(ctx context.Context, req *mcp.CallToolRequest, in any) (*mcp.CallToolResult, any, error) {
		return textResult(fmt.Sprintf("%v", in)), nil, nil
	})
	// An output schema the output breaks: a JSON-RPC error.
	add(&mcp.Tool{Name: "badout", OutputSchema: &jsonschema.Schema{Type: "object", Required: []string{"missing"}, Properties: map[string]*jsonschema.Schema{"missing": {Type: "string"}}}},
		func(ctx context.Context, req *mcp.CallToolRequest, in typedIn) (*mcp.CallToolResult, map[string]any, error) {
			return nil, map[string]any{"other": 1}, nil
		})
}

// TestTypedToolMatchesSDK: a typed tool added with taskrouter.AddTool (the
// router's own wrapper around the handler, toolcall.go) answers every call
// byte for byte as the same tool added with go-sdk's mcp.AddTool, and is
// advertised with the same schemas.
func TestTypedToolMatchesSDK(t *testing.T) {
	sdk := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	typedTools(func(tool *mcp.Tool, h any) { addSDK(sdk, tool, h) })

	ours := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	r, err := taskrouter.NewRouter(memory.New(nil), nil)
	require.NoError(t, err)
	require.NoError(t, r.Install(ours))
	typedTools(func(tool *mcp.Tool, h any) { addOurs(r, tool, h) })
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() { _ = r.Close() })

	callSDK, callOurs := rawSession(t, sdk, nil), rawSession(t, ours, r.Transport)

	// The same schemas (the router adds execution.taskSupport).
	var lists [2]map[string]any
	for i, call := range []func(string) string{callSDK, callOurs} {
		require.NoError(t, json.Unmarshal([]byte(call(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)), &lists[i]))
		for _, tool := range lists[i]["result"].(map[string]any)["tools"].([]any) {
			delete(tool.(map[string]any), "execution")
		}
	}
	require.Equal(t, lists[0], lists[1])

	calls := []string{
		`{"name":"greet","arguments":{"name":"ann","count":2,"tags":["a","b"]}}`,
		`{"name":"greet","arguments":{"name":"ann"}}`,
		`{"name":"greet","arguments":{}}`,
		`{"name":"greet"}`,
		`{"name":"greet","arguments":null}`,
		`{"name":"greet","arguments":{"name":7}}`,
		`{"name":"greet","arguments":{"Name":"case"}}`,
		`{"name":"greet","arguments":{"name":"dup","name":"last"}}`,
		`{"name":"greet","arguments":{"name":"x","extra":true}}`,
		`{"name":"greet","arguments":{"name":"x","count":1e400}}`,
		`{"name":"greet","arguments":{"name":"x","count":9007199254740993}}`,
		`{"name":"greet","arguments":[1,2]}`,
		`{"name":"greet","arguments":"text"}`,
		`{"name":"greet","arguments":{"name":"fail"}}`,
		`{"name":"greet","arguments":{"name":"rpc"}}`,
		`{"name":"greet","arguments":{"name":"content","count":4}}`,
		`{"name":"greet","arguments":{"name":"<html>&"}}`,
		`{"name":"bounded","arguments":{"name":"d"}}`,
		`{"name":"bounded","arguments":{"name":"d","count":11}}`,
		`{"name":"bounded","arguments":{}}`,
		`{"name":"ptr","arguments":{}}`,
		`{"name":"ptr","arguments":{"name":"p"}}`,
		`{"name":"list","arguments":{"name":"a","tags":["b"]}}`,
		`{"name":"anything","arguments":{"k":[1,{"x":null}]}}`,
		`{"name":"anything"}`,
		`{"name":"badout","arguments":{}}`,
	}
	for i, params := range calls {
		line := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, i+10, params)
		require.Equal(t, callSDK(line), callOurs(line), params)
	}
}

// addSDK adds one of typedTools' handlers with mcp.AddTool.
func addSDK(s *mcp.Server, t *mcp.Tool, h any) {
	switch h := h.(type) {
	case func(context.Context, *mcp.CallToolRequest, typedIn) (*mcp.CallToolResult, typedOut, error):
		mcp.AddTool(s, t, h)
	case func(context.Context, *mcp.CallToolRequest, typedIn) (*mcp.CallToolResult, *typedOut, error):
		mcp.AddTool(s, t, h)
	case func(context.Context, *mcp.CallToolRequest, typedIn) (*mcp.CallToolResult, []string, error):
		mcp.AddTool(s, t, h)
	case func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error):
		mcp.AddTool(s, t, h)
	case func(context.Context, *mcp.CallToolRequest, typedIn) (*mcp.CallToolResult, map[string]any, error):
		mcp.AddTool(s, t, h)
	default:
		panic(fmt.Sprintf("addSDK: %T", h))
	}
}

// addOurs adds one of typedTools' handlers with taskrouter.AddTool.
func addOurs(r *taskrouter.Router, t *mcp.Tool, h any) {
	opts := &taskrouter.ToolOptions{TaskSupport: mcptask.TaskForbidden}
	switch h := h.(type) {
	case func(context.Context, *mcp.CallToolRequest, typedIn) (*mcp.CallToolResult, typedOut, error):
		taskrouter.AddTool(r, t, h, opts)
	case func(context.Context, *mcp.CallToolRequest, typedIn) (*mcp.CallToolResult, *typedOut, error):
		taskrouter.AddTool(r, t, h, opts)
	case func(context.Context, *mcp.CallToolRequest, typedIn) (*mcp.CallToolResult, []string, error):
		taskrouter.AddTool(r, t, h, opts)
	case func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error):
		taskrouter.AddTool(r, t, h, opts)
	case func(context.Context, *mcp.CallToolRequest, typedIn) (*mcp.CallToolResult, map[string]any, error):
		taskrouter.AddTool(r, t, h, opts)
	default:
		panic(fmt.Sprintf("addOurs: %T", h))
	}
}
