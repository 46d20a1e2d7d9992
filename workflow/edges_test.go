package workflow

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The edges where kinds met before the step-kind contract (issue 27's
// table), on the fake engine; integration/timerules_test.go and
// integration/deploys_test.go run the rows that need a real clock or a
// real process.

// early is a workflow whose event comes after a server step the test
// holds (gate), so that the event is delivered before it is awaited.
func early(g *gate) (*Definition, func(e *fakeEngine)) {
	w := New("early", "an event after a slow step").Step(
		Server("build", "build"),
		Event("go", "go ahead").WithPayload(map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}, "required": []any{"ok"}}),
		Server("ship", "ship").When(Truthy(StepOutput("go", "ok"))),
	)
	return w, func(e *fakeEngine) {
		e.tool("build", g.tool("build"))
		echoTools(e, "ship")
	}
}

// An event delivered while the step before it still runs is kept in the
// task and delivered when the workflow reaches it, on every path (the Go
// API, tasks/update, the webhook); a second, different delivery is refused
// clearly; the same one again is accepted. Never a success that drops the
// payload.
func TestEventKeptUntilAwaited(t *testing.T) {
	ctx := context.Background()
	paths := map[string]func(t *testing.T, f *fixture, id string, payload string) (kept bool){
		"go api": func(t *testing.T, f *fixture, id, payload string) bool {
			res, err := f.b.Deliver(ctx, id, "go", json.RawMessage(payload), string(mcptask.ExecClient))
			require.NoError(t, err)
			return strings.Contains(res.Content[0].(*mcp.TextContent).Text, "it is kept")
		},
		"tasks/update": func(t *testing.T, f *fixture, id, payload string) bool {
			tk, _ := f.task(t, id)
			err := f.e.kind.(interface {
				Answer(context.Context, *store.Task, map[string]json.RawMessage) error
			}).Answer(ctx, tk, map[string]json.RawMessage{"go": json.RawMessage(`{"action":"accept","content":` + payload + `}`)})
			require.NoError(t, err)
			_, p := f.task(t, id)
			return p.step("go").Early != nil
		},
		"webhook": func(t *testing.T, f *fixture, id, payload string) bool {
			srv := httptest.NewServer(http.StripPrefix("/hooks", f.b.WebhookHandler()))
			defer srv.Close()
			tk, _ := f.task(t, id)
			var token string
			require.NoError(t, json.Unmarshal(tk.Variables[VarWebhookToken], &token))
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/hooks/"+id+"/go", strings.NewReader(payload))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var out map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, resp.StatusCode, "%v", out)
			return resp.StatusCode == http.StatusAccepted && out["kept"] == true
		},
	}
	for name, deliver := range paths {
		t.Run(name, func(t *testing.T) {
			e := newFakeEngine()
			g := newGate()
			w, tools := early(g)
			tools(e)
			f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, w)
			tk, _ := f.start(t, "early", nil)
			g.waitStarted(t, 1)

			require.True(t, deliver(t, f, tk.ID, `{"ok":true}`), "kept for later")
			_, p := f.task(t, tk.ID)
			require.Equal(t, mcptask.StepPending, p.step("go").Status)
			require.NotNil(t, p.step("go").Early)

			// Once: another payload is refused, the same one accepted.
			_, err := f.b.Deliver(ctx, tk.ID, "go", json.RawMessage(`{"ok":false}`), string(mcptask.ExecClient))
			require.ErrorIs(t, err, ErrNotWaiting)
			require.Contains(t, err.Error(), "an event is delivered once")
			_, err = f.b.Deliver(ctx, tk.ID, "go", json.RawMessage(`{"ok":true}`), string(mcptask.ExecClient))
			require.NoError(t, err)
			// A payload that does not match is refused, kept or not.
			_, err = f.b.Deliver(ctx, tk.ID, "go", json.RawMessage(`{"ok":"yes"}`), string(mcptask.ExecClient))
			var je *jsonrpc.Error
			require.ErrorAs(t, err, &je)
			require.EqualValues(t, mcptask.CodeInvalidParams, je.Code)

			close(g.release)
			tk, p = f.settled(t, tk.ID)
			require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
			require.Equal(t, mcptask.StepCompleted, p.step("go").Status)
			require.Nil(t, p.step("go").Early)
			require.JSONEq(t, `{"ok":true}`, string(p.Outputs["go"]))
			require.Equal(t, 1, e.callsOf("ship"), "the kept payload reached the step after")
		})
	}
}

// A declined input request before the event is awaited skips it when
// reached.
func TestEarlyDeclineSkips(t *testing.T) {
	e := newFakeEngine()
	g := newGate()
	w, tools := early(g)
	tools(e)
	f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, w)
	tk, _ := f.start(t, "early", nil)
	g.waitStarted(t, 1)
	require.NoError(t, f.e.kind.(interface {
		Answer(context.Context, *store.Task, map[string]json.RawMessage) error
	}).Answer(context.Background(), tk, map[string]json.RawMessage{"go": json.RawMessage(`{"action":"decline"}`)}))
	close(g.release)
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status)
	require.Equal(t, mcptask.StepSkipped, p.step("go").Status)
	require.Contains(t, p.step("go").SkipReason, `answered "decline"`)
	require.Zero(t, e.callsOf("ship"))
}

// A declared version redeployed with a flipped condition, or a changed
// binding, is not the version the waiting task started on: the task fails
// naming the step and what changed, and never runs the changed step.
func TestDeclaredVersionCannotSwitchSilently(t *testing.T) {
	rows := map[string]struct {
		change func(w *Definition)
		says   string
	}{
		"condition flipped": {func(w *Definition) { w.Steps[2].Unless(Truthy(StepOutput("b", "x"))) }, `step "c": its condition changed`},
		"binding changed":   {func(w *Definition) { w.Steps[2].Bind("in", StepOutput("a")) }, `step "c": its argument bindings changed`},
		"tool changed": {func(w *Definition) {
			w.Steps[2] = Server("c", "tx").Bind("in", StepOutput("b")).When(Truthy(StepOutput("b", "x")))
		}, `step "c": its kind, tool or output changed`},
	}
	for name, row := range rows {
		t.Run(name, func(t *testing.T) {
			v1 := abc(nil).WithVersion("1")
			v1.Steps[2].When(Truthy(StepOutput("b", "x")))
			e, id := pausedAtB(t, v1)
			again := abc(nil).WithVersion("1")
			again.Steps[2].When(Truthy(StepOutput("b", "x")))
			row.change(again)
			require.Equal(t, VersionOf(v1), VersionOf(again), "the same declared version")
			f := redeploy(t, e, &Options{VersionGrace: -1}, again) // fail at once: no process serves the old definition
			tk, _ := f.task(t, id)
			require.Equal(t, mcptask.StatusFailed, tk.Status)
			require.Contains(t, tk.StatusMessage, row.says)
			require.Contains(t, tk.StatusMessage, "never switches definitions silently")
			require.Zero(t, e.callsOf("tc")+e.callsOf("tx"))
		})
	}
}

// An operator moves a task whose version is gone onto a served version:
// the steps before the fork point keep what the original recorded.
func TestForkOntoServedVersion(t *testing.T) {
	e, id := pausedAtB(t, abc(nil).WithVersion("1"))
	ctx := context.Background()
	_, err := e.st.Update(ctx, id, store.Update{Status: mcptask.StatusFailed, StatusMessage: ptr("gone")})
	require.NoError(t, err)
	v2 := abc(func(w *Definition) { w.Step(Server("d", "td")) }).WithVersion("2")
	f := redeploy(t, e, &Options{PromptWait: -1}, v2)
	orig, _ := f.task(t, id)

	_, err = f.b.Fork(ctx, id, &ForkOptions{From: "b"})
	require.ErrorIs(t, err, ErrCannotFork, "the original's version is not served")
	require.Contains(t, err.Error(), "ForkOptions.Version")
	_, err = f.b.Fork(ctx, id, &ForkOptions{From: "b", Version: "3"})
	require.ErrorContains(t, err, `no served version "3"`)

	nt, err := f.b.Fork(ctx, id, &ForkOptions{From: "b", Version: "2"})
	require.NoError(t, err)
	require.Equal(t, "2", nt.Labels[LabelVersion])
	_, p := f.task(t, nt.ID)
	require.Equal(t, mcptask.StepCompleted, p.step("a").Status, "a keeps the original's record")
	_, op := decodeProgressOf(t, orig)
	require.Equal(t, op.Outputs["a"], p.Outputs["a"])
	_, err = f.call(t, nt.ID, "tb", map[string]any{"x": 1})
	require.NoError(t, err)
	tk, _ := f.settled(t, nt.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Equal(t, 1, e.callsOf("td"), "the fork ran the served version's new step")
}

func decodeProgressOf(t *testing.T, tk *store.Task) (*store.Task, *Progress) {
	t.Helper()
	p, err := decodeProgress(tk)
	require.NoError(t, err)
	return tk, p
}

func ptr[T any](v T) *T { return &v }

// Arguments declare a type, checked before anything starts: prompts/get
// answers -32602 naming the argument and its form, the workflow's tool
// answers a tool error, a fork refuses, and no task is created. The
// tool's input schema carries the types.
func TestTypedArguments(t *testing.T) {
	cases := []struct {
		a    Argument
		good []string
		want []string // normalized good values
		bad  []string
	}{
		{Argument{Name: "n", Type: ArgInteger}, []string{"3", " -12 "}, []string{"3", "-12"}, []string{"3.5", "x", ""}},
		{Argument{Name: "f", Type: ArgNumber}, []string{"2.5", "1e3"}, []string{"2.5", "1e3"}, []string{"NaN", "Inf", "abc"}},
		{Argument{Name: "b", Type: ArgBoolean}, []string{"true", "No", "1"}, []string{"true", "false", "true"}, []string{"maybe"}},
		{Argument{Name: "d", Type: ArgDuration}, []string{"30", "90s", "1h30m"}, []string{"30", "90s", "1h30m"}, []string{"abc", "-5", "NaN", "1e308", "9223372036854775807", "100000h"}},
		{Argument{Name: "t", Type: ArgTime}, []string{"2026-12-01T09:00:00Z", "1764579600"}, []string{"2026-12-01T09:00:00Z", "1764579600"}, []string{"tomorrow", "1e300"}},
		{Argument{Name: "e", Type: ArgEnum, Enum: []string{"blue", "green"}}, []string{"Blue"}, []string{"blue"}, []string{"red"}},
		{Argument{Name: "j", Type: ArgJSON, Schema: map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}, []string{`["a", "b"]`}, []string{`["a","b"]`}, []string{`[1]`, `{`}},
	}
	for _, c := range cases {
		for i, v := range c.good {
			got, err := c.a.check(v)
			require.NoError(t, err, "%s=%q", c.a.Name, v)
			require.Equal(t, c.want[i], got)
		}
		for _, v := range c.bad {
			_, err := c.a.check(v)
			require.Error(t, err, "%s=%q", c.a.Name, v)
			require.Contains(t, err.Error(), `argument "`+c.a.Name+`" must be `+c.a.form())
		}
	}
	_, err := Argument{Name: "d", Type: ArgDuration}.check("1e308")
	require.ErrorContains(t, err, "longer than the maximum", "1e308 is not called negative")
	_, err = Argument{Name: "d", Type: ArgDuration}.check("NaN")
	require.ErrorContains(t, err, "not a finite number")

	e := newFakeEngine()
	echoTools(e, "deploy")
	w := New("typed", "typed arguments").AsTool().
		TypedArg("replicas", "how many", true, ArgInteger).
		EnumArg("color", "which side", false, "blue", "green").
		Arg("soak", "how long", false).
		Step(
			Server("deploy", "deploy").Bind("replicas", PromptArg("replicas")).Bind("color", PromptArg("color").WithDefault("blue")),
			SleepFor("soak", PromptArg("soak").WithDefault(0)),
		)
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	before, err := e.st.Counts(context.Background())
	require.NoError(t, err)

	_, err = f.b.prompt("typed").Handle(context.Background(), &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: "typed", Arguments: map[string]string{"replicas": "three"}}})
	var je *jsonrpc.Error
	require.ErrorAs(t, err, &je)
	require.EqualValues(t, mcptask.CodeInvalidParams, je.Code)
	require.Contains(t, je.Message, `argument "replicas" must be an integer, not "three"`)

	res, err := f.b.toolHandler("typed")(context.Background(), &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "typed", Arguments: json.RawMessage(`{"replicas": 2, "soak": "abc"}`)}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, res.Content[0].(*mcp.TextContent).Text, `argument "soak" must be a duration`, "an untyped argument a sleep reads is a duration")
	require.Contains(t, res.Content[0].(*mcp.TextContent).Text, "nothing was started")

	after, err := e.st.Counts(context.Background())
	require.NoError(t, err)
	require.Equal(t, before, after, "no task was created")

	// The tool advertises the types; a typed argument reaches the tool as
	// JSON of its type.
	var schema map[string]any
	raw, _ := json.Marshal(workflowTool(w).InputSchema)
	require.NoError(t, json.Unmarshal(raw, &schema))
	props := schema["properties"].(map[string]any)
	require.Equal(t, "integer", props["replicas"].(map[string]any)["type"])
	require.Equal(t, []any{"blue", "green"}, props["color"].(map[string]any)["enum"])
	require.Equal(t, "string", props["soak"].(map[string]any)["type"])
	require.Contains(t, props["soak"].(map[string]any)["description"], "a duration")
	require.Contains(t, w.Prompt().Arguments[2].Description, "a duration", "a prompt argument says its form")

	tk, _ := f.start(t, "typed", map[string]string{"replicas": "3", "color": "GREEN"})
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.JSONEq(t, `{"replicas":3,"color":"green"}`, string(p.step("deploy").Arguments))

	_, err = f.b.Fork(context.Background(), tk.ID, &ForkOptions{From: "deploy", Arguments: map[string]string{"replicas": "many"}})
	require.ErrorIs(t, err, ErrCannotFork)
	require.ErrorAs(t, err, &je)
	require.EqualValues(t, mcptask.CodeInvalidParams, je.Code)
}

// A graceful stop hands the running step back: its attempt ends
// "stopped", the step runs again without counting as a crash, as many
// stops in a row as a rolling deploy makes. Crashes (a process gone
// without Close) count, up to MaxInterruptions.
func TestGracefulStopIsNotACrash(t *testing.T) {
	e := newFakeEngine()
	g := newGate()
	e.tool("long", g.tool("long"))
	w := New("deploys", "").Step(Server("long", "long"))
	opts := &Options{PromptWait: 10 * time.Millisecond, MaxInterruptions: 1}
	b, err := NewBridge(e, opts)
	require.NoError(t, err)
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	b.Install(srv)
	_, err = b.Register(srv, w, e.lookup())
	require.NoError(t, err)
	f := &fixture{e: e, b: b, srv: srv}
	tk, _ := f.start(t, "deploys", nil)
	g.waitStarted(t, 1)
	for stop := 1; stop <= 4; stop++ {
		b.Close() // graceful: the running step is handed back
		tk, p := f.task(t, tk.ID)
		sp := p.step("long")
		require.Equal(t, mcptask.StepPending, sp.Status, "stop %d", stop)
		require.Equal(t, OutcomeStopped, sp.History[len(sp.History)-1].Outcome)
		require.Zero(t, sp.Interrupted)
		require.False(t, tk.WakeAt.IsZero(), "due at once on whichever process picks it up")
		f = redeploy(t, e, opts, w) // recovers the task: the step runs again
		b = f.b
		g.waitStarted(t, 1)
		_, p = f.task(t, tk.ID)
		last := p.step("long").History[len(p.step("long").History)-1]
		require.Equal(t, ReasonRestart, last.Reason)
	}
	close(g.release)
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Equal(t, 5, p.step("long").Attempts)

	// Crashes: the process ends without Close, twice with MaxInterruptions
	// 1: the server gives up on the step (handed to the client).
	g = newGate()
	e.tool("long", g.tool("long"))
	tk, _ = f.start(t, "deploys", nil)
	g.waitStarted(t, 1)
	for crash := 1; crash <= 2; crash++ {
		// The process ends without Close: its bridge is abandoned, its
		// attempt left open in the store, as after a SIGKILL.
		f = redeploy(t, e, opts, w)
		if crash == 1 {
			g.waitStarted(t, 1)
		}
	}
	tk, p = f.settled(t, tk.ID)
	sp := p.step("long")
	require.True(t, sp.HandedToClient, tk.StatusMessage)
	require.Contains(t, sp.Error, "stopped 2 times in a row")
	require.Contains(t, sp.Error, "crashes, not graceful stops")
}
