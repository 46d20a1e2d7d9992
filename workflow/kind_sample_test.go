package workflow

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// summaryNotes collects a log, has the client's model summarize it, and
// publishes the summary.
func summaryNotes(summary func(*Step) *Step) *Definition {
	s := Sample("summary", "Write release notes for {{repo}} from this log: {{log}}").
		Bind("repo", PromptArg("repo")).Bind("log", StepOutput("collect", "log"))
	if summary != nil {
		s = summary(s)
	}
	return New("notes", "").Arg("repo", "the repository", true).Step(
		Server("collect", "collect").Bind("repo", PromptArg("repo")),
		s,
		Server("publish", "publish").Bind("text", StepOutput("summary", "text")),
	)
}

func notesEngine() *fakeEngine {
	e := newFakeEngine()
	e.tool("collect", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"log": "fix a; add b"}), nil
	})
	echoTools(e, "publish")
	return e
}

type inputKinds interface {
	InputRequests(*store.Task) map[string]json.RawMessage
	Answer(context.Context, *store.Task, map[string]json.RawMessage) error
}

// TestSampleValidation: registration refuses what cannot work, naming
// the step and the fix.
func TestSampleValidation(t *testing.T) {
	e := notesEngine()
	form := map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}
	step := func(s *Step) *Definition {
		return New("w", "").Arg("repo", "", true).Step(Server("collect", "collect").Bind("repo", PromptArg("repo")), s)
	}
	for name, tc := range map[string]struct {
		w    *Definition
		want string
	}{
		"unbound":       {step(Sample("s", "Hi {{who}}")), `its text names {{who}}, which is not bound: bind it with Bind("who", ...)`},
		"unused":        {step(Sample("s", "Hi").Bind("who", Const("x"))), `value "who" is bound but its text does not use it`},
		"from client":   {step(Sample("s", "{{x}}").Bind("x", FromClient("y"))), `value "x" is FromClient`},
		"empty":         {step(Sample("s", " ")), "its text is empty"},
		"open brace":    {step(Sample("s", "Hi {{who")), `its text has "{{" without "}}"`},
		"blank name":    {step(Sample("s", "Hi {{ }}")), "its text has the placeholder {{ }}"},
		"stray close":   {step(Sample("s", "Hi }}")), `its text has "}}" without "{{"`},
		"undeclared":    {step(Sample("s", "{{x}}").Bind("x", PromptArg("nope"))), `reads undeclared prompt argument "nope"`},
		"later output":  {New("w", "").Step(Sample("s", "{{x}}").Bind("x", StepOutput("later", "y")), Server("later", "collect").Bind("repo", Const("r"))), `uses output "later" before the step that produces it`},
		"in a group":    {New("w", "").Step(Parallel("g", Sample("s", "Hi"), Server("collect", "collect").Bind("repo", Const("r")))), "must be a step of the workflow itself"},
		"in a for-each": {New("w", "").Step(ForEach("f", Const([]string{"a"}), Sample("s", "Hi {{i}}").Bind("i", Item()))), "must be a step of the workflow itself"},
		"server":        {step(Sample("s", "Hi").WaitsAtMost(time.Minute, TimeoutServer)), "the server cannot perform it itself"},
		"webhook":       {step(Sample("s", "Hi").AcceptsWebhook()), "cannot be performed through the webhook"},
		"max tokens":    {step(Sample("s", "Hi").MaxTokens(-1)), "MaxTokens is negative"},
		"json schema":   {step(Sample("s", "Hi").ReturnsJSON(map[string]any{"type": "string"})), `the schema of ReturnsJSON must be an object schema`},
		"misuse":        {step(Server("x", "collect").Bind("repo", Const("r")).SystemPrompt("no")), "SystemPrompt does not apply to a tool step"},
		"no form":       {step(Ask("a", "Go?", nil)), "it has no form"},
		"form type":     {step(Ask("a", "Go?", map[string]any{"type": "array"})), "its form's schema must be an object schema"},
		"nested field":  {step(Ask("a", "Go?", map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "object"}}})), `field "x" of its form is of type "object"`},
		"ask misuse":    {step(Ask("a", "Go?", form).ReturnsJSON(nil)), "ReturnsJSON does not apply to a question step"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.w.Validate(e.lookup())
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	require.NoError(t, summaryNotes(nil).Validate(e.lookup()))
	require.NoError(t, step(Ask("a", "Go {{repo}}?", form).Bind("repo", PromptArg("repo"))).Validate(e.lookup()))
}

// TestPlainRefusesAsking: a plain workflow runs tool steps only.
func TestPlainRefusesAsking(t *testing.T) {
	e := notesEngine()
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	_, err := RegisterPlain(srv, summaryNotes(nil), e.lookup(), nil)
	require.ErrorContains(t, err, `step "summary" is a sampling step`)
}

// TestSampleFingerprint: what the step asks is in the version; guidance
// and the retry policy are not.
func TestSampleFingerprint(t *testing.T) {
	base := VersionOf(summaryNotes(nil))
	require.Equal(t, base, VersionOf(summaryNotes(func(s *Step) *Step { return s.WithGuidance("be brief").WithRetryPolicy(RetryPolicy{MaxAttempts: 5}) })))
	for name, f := range map[string]func(*Step) *Step{
		"system":     func(s *Step) *Step { return s.SystemPrompt("You write notes.") },
		"max tokens": func(s *Step) *Step { return s.MaxTokens(10) },
		"json":       func(s *Step) *Step { return s.ReturnsJSON(nil) },
	} {
		require.NotEqual(t, base, VersionOf(summaryNotes(f)), name)
	}
	other := New("notes", "").Arg("repo", "the repository", true).Step(
		Server("collect", "collect").Bind("repo", PromptArg("repo")),
		Sample("summary", "Summarize {{log}} for {{repo}}").Bind("repo", PromptArg("repo")).Bind("log", StepOutput("collect", "log")),
		Server("publish", "publish").Bind("text", StepOutput("summary", "text")),
	)
	require.NotEqual(t, base, VersionOf(other), "the prompt is in the version")
}

// TestSampleAnsweredWithTasksUpdate (extension dialect, as the fake
// engine's clients speak): the step is an input request of the workflow
// task, input_required, whose answer is a sampling result; one that is
// not is refused and records nothing.
func TestSampleAnsweredWithTasksUpdate(t *testing.T) {
	ctx := context.Background()
	e := notesEngine()
	f := newFixture(t, e, &Options{PromptWait: -1}, summaryNotes(func(s *Step) *Step { return s.SystemPrompt("You write notes.").MaxTokens(50) }))
	tk, _ := f.start(t, "notes", map[string]string{"repo": "tb"})
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusInputRequired, tk.Status)
	sp := p.step("summary")
	require.Equal(t, mcptask.StepAwaitingEvent, sp.Status)
	require.Equal(t, AskViaInput, sp.Asked.Via)
	require.Equal(t, `waiting for the client's model to answer step "summary" (sampling/createMessage): answer the task's input request "summary" with tasks/update, or perform it as the handoff says`, tk.StatusMessage)

	ik := f.e.kind.(inputKinds)
	var req struct {
		Method string                  `json:"method"`
		Params mcp.CreateMessageParams `json:"params"`
	}
	require.NoError(t, json.Unmarshal(ik.InputRequests(tk)["summary"], &req))
	require.Equal(t, mcptask.MethodSampling, req.Method)
	require.Equal(t, "Write release notes for tb from this log: fix a; add b", req.Params.Messages[0].Content.(*mcp.TextContent).Text)
	require.Equal(t, "You write notes.", req.Params.SystemPrompt)
	require.EqualValues(t, 50, req.Params.MaxTokens)
	require.Equal(t, tk.ID, req.Params.Meta[mcptask.MetaRelatedTask].(map[string]any)["taskId"])

	var je *jsonrpc.Error
	require.ErrorAs(t, ik.Answer(ctx, tk, map[string]json.RawMessage{"summary": json.RawMessage(`{"action":"accept"}`)}), &je)
	require.EqualValues(t, jsonrpc.CodeInvalidParams, je.Code)
	require.Contains(t, je.Message, "holds no content")
	_, p = f.task(t, tk.ID)
	require.Equal(t, mcptask.StepAwaitingEvent, p.step("summary").Status, "a refusal records nothing")

	answer := map[string]json.RawMessage{"summary": json.RawMessage(`{"role":"assistant","model":"m1","stopReason":"endTurn","content":{"type":"text","text":"Notes."}}`)}
	require.NoError(t, ik.Answer(ctx, tk, answer))
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.JSONEq(t, `{"text":"Notes.","model":"m1","stopReason":"endTurn"}`, string(p.Outputs["summary"]))
	require.Equal(t, string(mcptask.ExecClient), p.step("summary").CompletedBy)
	require.Equal(t, 1, e.callsOf("publish"))
	require.NoError(t, ik.Answer(ctx, tk, answer), "an answer repeated is ignored")
}

// TestSampleReturnsJSON: the reply's JSON object is the output, checked
// against the schema; the request asks for it.
func TestSampleReturnsJSON(t *testing.T) {
	ctx := context.Background()
	e := notesEngine()
	schema := map[string]any{"type": "object", "required": []string{"title"}, "properties": map[string]any{"title": map[string]any{"type": "string"}}}
	w := New("notes", "").Arg("repo", "", true).Step(
		Server("collect", "collect").Bind("repo", PromptArg("repo")),
		Sample("summary", "Title {{log}}").Bind("log", StepOutput("collect", "log")).ReturnsJSON(schema),
		Server("publish", "publish").Bind("text", StepOutput("summary", "title")),
	)
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	tk, _ := f.start(t, "notes", map[string]string{"repo": "tb"})
	tk, _ = f.settled(t, tk.ID)
	ik := f.e.kind.(inputKinds)
	require.Contains(t, string(ik.InputRequests(tk)["summary"]), `Answer with one JSON object and nothing else. It must match this JSON Schema:`)
	reply := func(text string) map[string]json.RawMessage {
		return map[string]json.RawMessage{"summary": marshal(map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": text}})}
	}
	var je *jsonrpc.Error
	require.ErrorAs(t, ik.Answer(ctx, tk, reply("no JSON here")), &je)
	require.Contains(t, je.Message, "holds no JSON object")
	require.ErrorAs(t, ik.Answer(ctx, tk, reply(`{"name":"x"}`)), &je)
	require.Contains(t, je.Message, "does not match the schema")
	require.NoError(t, ik.Answer(ctx, tk, reply("Here it is:\n```json\n{\"title\": \"Faster retries\"}\n```")))
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.JSONEq(t, `{"title":"Faster retries"}`, string(p.Outputs["summary"]))
}

// TestSampleDeliveredByTheModel: the event tool's delivery (what a model
// in a host sends) performs the step: the payload is checked against the
// step's payload schema; a step not reached yet takes nothing.
func TestSampleDeliveredByTheModel(t *testing.T) {
	ctx := context.Background()
	e := notesEngine()
	g := newGate()
	e.tool("collect", g.tool("collect"))
	f := newFixture(t, e, &Options{PromptWait: time.Millisecond}, summaryNotes(nil))
	tk, _ := f.start(t, "notes", map[string]string{"repo": "tb"})
	g.waitStarted(t, 1)
	_, err := f.b.Deliver(ctx, tk.ID, "summary", json.RawMessage(`{"text":"early"}`), string(mcptask.ExecClient))
	require.ErrorIs(t, err, ErrNotWaiting, "not reached yet")
	close(g.release)
	tk, _ = f.settled(t, tk.ID)

	var je *jsonrpc.Error
	_, err = f.b.Deliver(ctx, tk.ID, "summary", json.RawMessage(`{"notes":"x"}`), string(mcptask.ExecClient))
	require.ErrorAs(t, err, &je)
	require.Contains(t, je.Message, `the payload for step "summary" (sampling) does not match its schema`)
	res, err := f.b.Deliver(ctx, tk.ID, "summary", json.RawMessage(`{"text":"Notes by the model."}`), string(mcptask.ExecClient))
	require.NoError(t, err)
	require.False(t, res.IsError)
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.JSONEq(t, `{"text":"Notes by the model."}`, string(p.Outputs["summary"]))
	_, err = f.b.Deliver(ctx, tk.ID, "summary", json.RawMessage(`{"text":"Notes by the model."}`), string(mcptask.ExecClient))
	require.NoError(t, err, "the same delivery again is answered as done")
	_, err = f.b.Deliver(ctx, tk.ID, "summary", json.RawMessage(`{"text":"other"}`), string(mcptask.ExecClient))
	require.ErrorIs(t, err, ErrNotWaiting)
}

// TestSampleFork: a fork from the sampling step asks again; one from
// after it keeps its output.
func TestSampleFork(t *testing.T) {
	ctx := context.Background()
	e := notesEngine()
	f := newFixture(t, e, &Options{PromptWait: -1}, summaryNotes(nil))
	tk, _ := f.start(t, "notes", map[string]string{"repo": "tb"})
	tk, _ = f.settled(t, tk.ID)
	require.NoError(t, f.e.kind.(inputKinds).Answer(ctx, tk, map[string]json.RawMessage{
		"summary": json.RawMessage(`{"role":"assistant","model":"m","content":{"type":"text","text":"first"}}`)}))
	tk, _ = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status)

	again, err := f.b.Fork(ctx, tk.ID, &ForkOptions{From: "summary"})
	require.NoError(t, err)
	again, p := f.settled(t, again.ID)
	require.Equal(t, mcptask.StatusInputRequired, again.Status)
	require.Equal(t, mcptask.StepCompleted, p.step("collect").Status, "what came before is kept")
	require.Equal(t, AskViaInput, p.step("summary").Asked.Via)
	require.NotContains(t, p.Outputs, "summary", "the fork asks again")

	kept, err := f.b.Fork(ctx, tk.ID, &ForkOptions{From: "publish"})
	require.NoError(t, err)
	kept, p = f.settled(t, kept.ID)
	require.Equal(t, mcptask.StatusCompleted, kept.Status, kept.StatusMessage)
	require.JSONEq(t, `{"text":"first","model":"m"}`, string(p.Outputs["summary"]))
}

// TestQuestionDeclinedFollowsThePolicy (extension dialect): a declined
// form fails the workflow under FailsWorkflow; by default the step is
// handed to the model, which the handoff tells to ask the user.
func TestQuestionDeclinedFollowsThePolicy(t *testing.T) {
	ctx := context.Background()
	form := map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}
	for _, fails := range []bool{false, true} {
		e := newFakeEngine()
		echoTools(e, "deploy")
		q := Ask("go", "Go?", form)
		if fails {
			q.FailsWorkflow()
		}
		f := newFixture(t, e, &Options{PromptWait: -1}, New("w", "").Step(q, Server("deploy", "deploy")))
		tk, _ := f.start(t, "w", nil)
		tk, _ = f.settled(t, tk.ID)
		require.NoError(t, f.e.kind.(inputKinds).Answer(ctx, tk, map[string]json.RawMessage{"go": json.RawMessage(`{"action":"decline"}`)}))
		tk, p := f.settled(t, tk.ID)
		if fails {
			require.Equal(t, mcptask.StatusFailed, tk.Status)
			require.Equal(t, `step "go" failed: the person declined the form in the client (answered "decline"); the workflow failed`, tk.StatusMessage)
			continue
		}
		require.Equal(t, mcptask.StatusWorking, tk.Status, "the model asks the user now")
		require.Equal(t, AskViaHandoff, p.step("go").Asked.Via)
		doc := f.b.handoff(tk, p, mcptask.Extension)
		rs := doc.RemainingSteps[0]
		require.True(t, rs.Call.Person)
		require.Contains(t, rs.Do, `waits for a person's answer to this question: "Go?"; the person declined the form in the client`)
		_, err := f.b.Deliver(ctx, tk.ID, "go", json.RawMessage(`{"ok":true}`), string(mcptask.ExecClient))
		require.NoError(t, err)
		tk, _ = f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	}
}
