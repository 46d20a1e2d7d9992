package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
)

func testTools() ToolLookup {
	obj := func(required []string, props ...string) map[string]any {
		p := map[string]any{}
		for _, n := range props {
			p[n] = map[string]any{"type": "string"}
		}
		return map[string]any{"type": "object", "properties": p, "required": required, "additionalProperties": false}
	}
	return ToolsLookup([]*mcp.Tool{
		{Name: "fetch", InputSchema: obj([]string{"q"}, "q", "limit")},
		{Name: "summarize", InputSchema: obj([]string{"text"}, "text", "style")},
		{Name: "review", InputSchema: obj([]string{"text", "notes"}, "text", "notes")},
		{Name: "publish", InputSchema: obj([]string{"body"}, "body", "channel")},
		{Name: "open", InputSchema: map[string]any{"type": "object"}},
	})
}

func validWorkflow() *Definition {
	return New("wf", "a workflow").Arg("topic", "t", true).Step(
		Server("fetch", "fetch").Bind("q", PromptArg("topic")).As("hits"),
		Server("sum", "summarize").Bind("text", StepOutput("hits", "items.0.text")),
		Client("review", "review").Bind("text", StepOutput("sum")).Bind("notes", FromClient("your notes")),
		Server("publish", "publish").Bind("body", StepOutput("review", "final")).Bind("channel", Const("#c")),
	)
}

func TestValidateAcceptsAGoodWorkflow(t *testing.T) {
	require.NoError(t, validWorkflow().Validate(testTools()))
}

func TestValidateRejections(t *testing.T) {
	cases := []struct {
		name string
		wf   *Definition
		want []string // substrings of the problem, naming step and fix
	}{
		{"no name", New("", "d").Step(Server("a", "open")), []string{"no name: set Definition.Name"}},
		{"no steps", New("w", "d"), []string{"no steps"}},
		{"unknown tool", New("w", "d").Step(Server("a", "nope")), []string{`step "a": unknown tool "nope"`, "register the tool"}},
		{"duplicate step", New("w", "d").Step(Server("a", "open"), Server("a", "open").As("other")), []string{`step "a": the name is used by an earlier step`}},
		{"duplicate output", New("w", "d").Step(Server("a", "open").As("x"), Server("b", "open").As("x")), []string{`step "b": output binding "x" is already produced by step "a"`}},
		{"duplicate prompt arg", New("w", "d").Arg("a", "", false).Arg("a", "", false).Step(Server("s", "open")), []string{`prompt argument "a" is declared twice`}},
		{"undeclared prompt arg", New("w", "d").Step(Server("a", "fetch").Bind("q", PromptArg("missing"))), []string{`step "a": argument "q" reads undeclared prompt argument "missing": declare it with Arg`}},
		{"used before produced", New("w", "d").Step(
			Server("a", "summarize").Bind("text", StepOutput("b")),
			Server("b", "open"),
		), []string{`step "a": argument "text" uses output "b" before the step that produces it: move that step earlier`}},
		{"never produced", New("w", "d").Step(Server("a", "summarize").Bind("text", StepOutput("ghost"))), []string{`reads output "ghost", which no step produces`}},
		{"required argument unbound", New("w", "d").Step(Server("a", "fetch")), []string{`step "a": required argument "q" of tool "fetch" is not bound: bind it with Bind("q", ...)`}},
		{"argument the tool lacks", New("w", "d").Step(Server("a", "fetch").Bind("q", Const("x")).Bind("qq", Const(1))), []string{`tool "fetch" has no argument "qq"`}},
		{"client step depends on client step", New("w", "d").Step(
			Client("c1", "open"),
			Client("c2", "review").Bind("text", StepOutput("c1")).Bind("notes", FromClient("n")),
		), []string{`step "c2": argument "text" depends on output "c1" of client step "c1"`, "cannot consume another client-deferred step", `make "c1" a server step`}},
		{"FromClient on a server step", New("w", "d").Step(Server("a", "fetch").Bind("q", FromClient("x"))), []string{`argument "q" is FromClient, but the step runs on the server`}},
		{"reserved task variable", New("w", "d").Step(Server("a", "fetch").Bind("q", TaskVar("_workflow.progress"))), []string{`reads reserved task variable "_workflow.progress"`}},
		{"empty path segment", New("w", "d").Step(Server("a", "open"), Server("b", "summarize").Bind("text", StepOutput("a", "x..y"))), []string{`empty segment in field path`}},
		{"no kind", New("w", "d").Step(&Step{Name: "a"}), []string{`step "a": it has no kind: build steps with Server, Client`}},
		{"builder method of another kind", New("w", "d").Step(Server("a", "open").WithPayload(map[string]any{})), []string{`step "a": WithPayload does not apply to a tool step`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.wf.Validate(testTools())
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrInvalid))
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
			if c.wf.Name != "" {
				require.Contains(t, err.Error(), `workflow "`+c.wf.Name+`"`)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	wf := New("w", "d").Step(Server("a", "nope"), Server("a", "fetch"))
	var ve *ValidationError
	require.ErrorAs(t, wf.Validate(testTools()), &ve)
	require.Len(t, ve.Problems, 3) // unknown tool, duplicate name, unbound q
}

func TestSelectPath(t *testing.T) {
	v := json.RawMessage(`{"items":[{"text":"a"},{"text":"b"}],"n":3}`)
	got, err := selectPath(v, []string{"items", "1", "text"})
	require.NoError(t, err)
	require.JSONEq(t, `"b"`, string(got))
	got, err = selectPath(v, nil)
	require.NoError(t, err)
	require.JSONEq(t, string(v), string(got))
	for _, bad := range [][]string{{"missing"}, {"items", "9"}, {"items", "x"}, {"n", "deeper"}} {
		_, err := selectPath(v, bad)
		require.Error(t, err, bad)
	}
}

func TestOutputOf(t *testing.T) {
	structured := &mcp.CallToolResult{StructuredContent: map[string]any{"a": 1}, Content: []mcp.Content{&mcp.TextContent{Text: "ignored"}}}
	require.JSONEq(t, `{"a":1}`, string(OutputOf(structured)))
	jsonText := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: ` {"b": [1,2]} `}}}
	require.JSONEq(t, `{"b":[1,2]}`, string(OutputOf(jsonText)))
	plain := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello <world>"}}}
	require.Equal(t, `"hello \u003cworld\u003e"`, string(OutputOf(plain)))
	require.Equal(t, `null`, string(OutputOf(nil)))
}

func TestProgressSchemaPublished(t *testing.T) {
	var s map[string]any
	require.NoError(t, json.Unmarshal(ProgressSchemaJSON(), &s))
	props := s["properties"].(map[string]any)
	for _, k := range []string{"goal", "workflow", "steps", "completedSteps", "remainingSteps", "outputs", "pauseReason", "errors", "schemaVersion"} {
		require.Contains(t, props, k)
	}
}

// TestPlainHandlerRunsServerStepsWithoutTask exercises the plain handler
// directly with a fake tool caller.
func TestPlainHandlerRunsServerStepsWithoutTask(t *testing.T) {
	var calls []string
	call := func(ctx context.Context, _ *mcp.ServerSession, tool string, args map[string]json.RawMessage, _ mcp.Meta) (*mcp.CallToolResult, error) {
		calls = append(calls, tool)
		switch tool {
		case "fetch":
			return &mcp.CallToolResult{StructuredContent: map[string]any{"items": []any{map[string]any{"text": "first"}}}}, nil
		case "summarize":
			require.JSONEq(t, `"first"`, string(args["text"]))
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "summary"}}}, nil
		}
		t.Fatalf("unexpected tool %s", tool)
		return nil, nil
	}
	h := NewPromptHandler(validWorkflow(), call)
	res, err := h.Handle(context.Background(), &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: "wf", Arguments: map[string]string{"topic": "go"}}})
	require.NoError(t, err)
	require.Equal(t, []string{"fetch", "summarize"}, calls)
	last := res.Messages[len(res.Messages)-1].Content.(*mcp.TextContent).Text
	require.Contains(t, last, `review (performed by you): call tool "review" with {"notes":"<your notes>","text":"summary"}`)
	_, err = h.Handle(context.Background(), &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: "wf", Arguments: map[string]string{"topic": "go", "extra": "x"}}})
	require.ErrorContains(t, err, `unknown argument "extra"`)
}

// TestPlainRunnerRecordsEachStep checks that a plain workflow records
// every step before the next one runs, and hands a failed step over.
func TestPlainRunnerRecordsEachStep(t *testing.T) {
	var snaps []*Progress
	rec := RecorderFunc(func(_ context.Context, p *Progress) error {
		snaps = append(snaps, p.clone())
		return nil
	})
	call := func(ctx context.Context, _ *mcp.ServerSession, tool string, args map[string]json.RawMessage, _ mcp.Meta) (*mcp.CallToolResult, error) {
		if tool == "summarize" {
			require.NotEmpty(t, snaps)
			require.Equal(t, []string{"fetch"}, snaps[0].CompletedSteps)
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "model overloaded"}}}, nil
		}
		return &mcp.CallToolResult{StructuredContent: map[string]any{"items": []any{map[string]any{"text": "x"}}}}, nil
	}
	h := NewPromptHandler(validWorkflow(), call)
	p, err := h.Start(map[string]string{"topic": "t"})
	require.NoError(t, err)
	r := &runner{wf: h.Workflow, call: call, now: h.now}
	require.NoError(t, r.advance(context.Background(), p, rec))
	last := snaps[len(snaps)-1]
	require.Equal(t, mcptask.StepFailed, last.Steps[1].Status)
	require.True(t, last.Steps[1].HandedToClient)
	require.Equal(t, "model overloaded", last.Errors[0].Message)
	require.Contains(t, last.RemainingSteps, "sum")
	require.Contains(t, last.PauseReason, `step "sum" (tool "summarize") failed after 1 attempt(s): model overloaded; the client may perform it`)
}

func TestProgressSchemaListsTheVersionsRead(t *testing.T) {
	var s struct {
		Properties map[string]struct {
			Enum []any `json:"enum"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(ProgressSchemaJSON(), &s))
	require.Equal(t, []any{1.0, 2.0, 3.0, 4.0}, s.Properties["schemaVersion"].Enum, "the versions this package reads")
}

// clone copies p (through JSON), for tests that keep what a progress was.
func (p *Progress) clone() *Progress {
	b, _ := json.Marshal(p)
	var c Progress
	_ = json.Unmarshal(b, &c)
	return &c
}
