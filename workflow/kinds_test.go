package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// echoTools registers tools that answer with their name and arguments.
func echoTools(e *fakeEngine, names ...string) {
	for _, name := range names {
		e.tool(name, func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
			return ok(map[string]any{"tool": name, "args": args}), nil
		})
	}
}

// review is release_notes in small: a client review, then publish only
// when it approved; notify needs publish's output; explain runs when the
// review did not approve.
func review() *Definition {
	approved := Truthy(StepOutput("review", "approved"))
	return New("rel", "review then publish").Step(
		Client("review", "review").Bind("approved", FromClient("true to publish")).Bind("feedback", FromClient("why")),
		Server("publish", "publish").When(approved),
		Server("notify", "notify").Bind("where", StepOutput("publish")),
		Server("explain", "explain").Unless(approved).Bind("feedback", StepOutput("review", "args.feedback")),
	)
}

func TestConditionSkipsAStepAndWhatNeedsIt(t *testing.T) {
	for _, approved := range []bool{false, true} {
		t.Run(map[bool]string{false: "rejected", true: "approved"}[approved], func(t *testing.T) {
			e := newFakeEngine()
			e.tool("review", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
				return ok(map[string]any{"approved": args["approved"], "args": args}), nil
			})
			echoTools(e, "publish", "notify", "explain")
			f := newFixture(t, e, &Options{PromptWait: -1}, review())
			tk, _ := f.start(t, "rel", nil)
			_, err := f.call(t, tk.ID, "review", map[string]any{"approved": approved, "feedback": "wrong version"})
			require.NoError(t, err)
			tk, p := f.settled(t, tk.ID)
			require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
			if approved {
				require.Equal(t, []string{"review", "publish", "notify"}, p.CompletedSteps)
				require.Equal(t, 1, e.callsOf("publish"))
				require.Zero(t, e.callsOf("explain"))
				require.Contains(t, p.step("explain").SkipReason, "condition did not hold")
				return
			}
			require.Zero(t, e.callsOf("publish"), "a rejected review publishes nothing")
			require.Zero(t, e.callsOf("notify"))
			require.Equal(t, mcptask.StepSkipped, p.step("publish").Status)
			require.Equal(t, `its condition did not hold: output "review" at approved is true`, p.step("publish").SkipReason)
			require.Equal(t, mcptask.StepSkipped, p.step("notify").Status)
			require.Contains(t, p.step("notify").SkipReason, `needs the output of step "publish", which was skipped`)
			require.Equal(t, []string{"review", "explain"}, p.CompletedSteps)
			require.Contains(t, string(p.Outputs["explain"]), "wrong version", "the feedback reaches the result")
			require.Contains(t, string(tk.Result), "wrong version")
			doc := f.b.handoff(tk, p, 0)
			require.Len(t, doc.SkippedSteps, 2)
			text, err := handoff.Render(doc)
			require.NoError(t, err)
			require.Contains(t, text, "publish")
		})
	}
}

// An event whose condition reads a client step's output just before it
// is refused naming the rule (consecutive client-side steps may be
// performed in any order) and the fixes, not an argument "(condition)".
func TestEventConditionOnClientOutput(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "gate")
	e.tool("review", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"approved": args["approved"]}), nil
	})
	w := New("w", "").Step(
		Client("review", "review").Bind("approved", FromClient("true to go on")),
		Event("go", "decision").When(Truthy(StepOutput("review", "approved"))),
	)
	err := w.Validate(e.lookup())
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, []string{`step "go": its condition reads output "review" of client step "review", but the client may perform both steps at once, so it could not be judged when this step is reached: make "review" a server step, or put a server step between the two`}, ve.Problems)
	require.NotContains(t, err.Error(), "(condition)")
	// The fix it names works.
	fixed := New("w", "").Step(
		Client("review", "review").Bind("approved", FromClient("true to go on")),
		Server("gate", "gate"),
		Event("go", "decision").When(Truthy(StepOutput("review", "approved"))),
		Client("again", "review").Bind("approved", StepOutput("review", "approved")),
	)
	require.NoError(t, fixed.Validate(e.lookup()), "a server step between orders them: both a condition and a client step's argument may read it")
	f := newFixture(t, e, &Options{PromptWait: -1}, fixed)
	tk, _ := f.start(t, "w", nil)
	_, err = f.call(t, tk.ID, "review", map[string]any{"approved": true})
	require.NoError(t, err)
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StepAwaitingEvent, p.step("go").Status, "the condition held: the event waits")
	require.Equal(t, mcptask.StatusWorking, tk.Status, "it waits for the event and the client step after it")
}

func TestConditionValidatedAtRegistration(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "a", "b")
	cases := map[string]*Definition{
		"reads a later output": New("w", "").Step(
			Server("a", "a").When(Truthy(StepOutput("b"))), Server("b", "b")),
		"zero condition":        New("w", "").Step(Server("a", "a").When(Condition{})),
		"undeclared prompt arg": New("w", "").Step(Server("a", "a").When(Equal(PromptArg("nope"), "x"))),
		"empty All":             New("w", "").Step(Server("a", "a").When(All())),
	}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			err := w.Validate(e.lookup())
			var ve *ValidationError
			require.ErrorAs(t, err, &ve, "%v", err)
		})
	}
}

// gate is a tool that blocks until released, counting how many of its
// kind run at once.
type gate struct {
	mu      sync.Mutex
	running int
	peak    int
	release chan struct{}
	started chan string
}

func newGate() *gate { return &gate{release: make(chan struct{}), started: make(chan string, 16)} }

func (g *gate) tool(name string) func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
	return func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		g.mu.Lock()
		g.running++
		g.peak = max(g.peak, g.running)
		g.mu.Unlock()
		defer func() { g.mu.Lock(); g.running--; g.mu.Unlock() }()
		g.started <- name
		select {
		case <-g.release:
			return ok(map[string]any{"check": name, "passed": true}), nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

func (g *gate) waitStarted(t *testing.T, n int) []string {
	t.Helper()
	var names []string
	for range n {
		select {
		case name := <-g.started:
			names = append(names, name)
		case <-time.After(30 * time.Second):
			t.Fatalf("only %v started", names)
		}
	}
	return names
}

func checks() *Definition {
	return New("ci", "checks in parallel").Step(
		Parallel("checks",
			Server("lint", "lint"),
			Server("unit", "unit"),
			Server("integration", "integration"),
		),
		Server("report", "report").Bind("lint", StepOutput("lint")).Bind("unit", StepOutput("unit")),
	)
}

func TestParallelGroupRunsTogether(t *testing.T) {
	e := newFakeEngine()
	g := newGate()
	for _, n := range []string{"lint", "unit", "integration"} {
		e.tool(n, g.tool(n))
	}
	echoTools(e, "report")
	f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, checks())
	tk, _ := f.start(t, "ci", nil)
	require.ElementsMatch(t, []string{"lint", "unit", "integration"}, g.waitStarted(t, 3))
	_, p := f.task(t, tk.ID)
	for _, n := range []string{"lint", "unit", "integration"} {
		require.Equal(t, mcptask.StepRunning, p.step(n).Status)
		require.Equal(t, "checks", p.step(n).Group)
	}
	require.Contains(t, p.PauseReason, "of group \"checks\" together")
	close(g.release)
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Equal(t, 3, g.peak, "the three checks ran at once")
	require.Equal(t, 1, e.callsOf("report"))
	require.Equal(t, "report", p.CompletedSteps[len(p.CompletedSteps)-1])
}

// A crash mid-group: the members that finished keep their outputs; only
// the unfinished one runs again.
func TestParallelGroupCrashRerunsOnlyUnfinished(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "lint", "unit", "report")
	g := newGate()
	e.tool("integration", g.tool("integration"))
	f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, checks())
	tk, _ := f.start(t, "ci", nil)
	g.waitStarted(t, 1)
	require.Eventually(t, func() bool {
		_, p := f.task(t, tk.ID)
		return p.step("lint").Status == mcptask.StepCompleted && p.step("unit").Status == mcptask.StepCompleted
	}, 30*time.Second, 5*time.Millisecond)
	f.b.Close() // the process stops while integration runs

	var runs atomic.Int32
	e.tool("integration", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		runs.Add(1)
		return ok(map[string]any{"passed": true}), nil
	})
	f = redeploy(t, e, &Options{PromptWait: -1}, checks())
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Equal(t, 1, e.callsOf("lint"), "lint finished before the crash: not run again")
	require.Equal(t, 1, e.callsOf("unit"))
	require.EqualValues(t, 1, runs.Load(), "integration ran again")
	require.Equal(t, ReasonRestart, p.step("integration").History[len(p.step("integration").History)-1].Reason)
}

func TestParallelGroupFailure(t *testing.T) {
	failing := func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		return nil, errors.New("lint found 3 problems")
	}
	t.Run("fail fast stops the others", func(t *testing.T) {
		e := newFakeEngine()
		g := newGate()
		e.tool("lint", failing)
		e.tool("unit", g.tool("unit"))
		e.tool("integration", g.tool("integration"))
		echoTools(e, "report")
		w := checks()
		w.Steps[0].StopOnFailure()
		f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, w)
		tk, _ := f.start(t, "ci", nil)
		tk, _ = f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Contains(t, tk.StatusMessage, `group "checks" failed`)
		require.Contains(t, tk.StatusMessage, "lint found 3 problems")
		require.Eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.running == 0 }, 30*time.Second, 5*time.Millisecond, "the other members were stopped")
		require.Zero(t, e.callsOf("report"))
	})
	t.Run("collect lets the others end", func(t *testing.T) {
		e := newFakeEngine()
		g := newGate()
		e.tool("lint", failing)
		e.tool("unit", g.tool("unit"))
		echoTools(e, "integration", "report")
		w := checks()
		w.Steps[0].kind.members()[0].FailsWorkflow()
		f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, w)
		tk, _ := f.start(t, "ci", nil)
		g.waitStarted(t, 1)
		require.Eventually(t, func() bool {
			_, p := f.task(t, tk.ID)
			return p.step("lint").GaveUp && p.step("integration").Status == mcptask.StepCompleted
		}, 30*time.Second, 5*time.Millisecond)
		tk, _ = f.task(t, tk.ID)
		require.False(t, tk.Status.Terminal(), "the group waits for unit")
		close(g.release)
		tk, p := f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Contains(t, tk.StatusMessage, `group "checks" failed: step "lint"`)
		require.Equal(t, mcptask.StepCompleted, p.step("unit").Status, "unit ran to its end")
		require.Zero(t, e.callsOf("report"))
	})
	t.Run("hand to client inside a group", func(t *testing.T) {
		e := newFakeEngine()
		e.tool("lint", failing)
		echoTools(e, "unit", "integration", "report")
		f := newFixture(t, e, &Options{PromptWait: -1}, checks())
		tk, _ := f.start(t, "ci", nil)
		tk, p := f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusWorking, tk.Status)
		require.True(t, p.step("lint").HandedToClient)
		require.Equal(t, mcptask.StepCompleted, p.step("unit").Status)
		require.Zero(t, e.callsOf("report"), "report waits for the whole group")
		echoTools(e, "lint")
		_, err := f.call(t, tk.ID, "lint", map[string]any{})
		require.NoError(t, err)
		tk, _ = f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	})
}

func TestGroupValidation(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "a", "b")
	cases := map[string]*Definition{
		"member reads a sibling": New("w", "").Step(Parallel("g", Server("a", "a"), Server("b", "b").Bind("x", StepOutput("a")))),
		"nested group":           New("w", "").Step(Parallel("g", Server("a", "a"), Parallel("h", Server("b", "b")))),
		"empty group":            New("w", "").Step(Parallel("g")),
		"condition on the group": New("w", "").Step(Parallel("g", Server("a", "a")).When(Truthy(Const(true)))),
	}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			var ve *ValidationError
			require.ErrorAs(t, w.Validate(e.lookup()), &ve)
		})
	}
}

// soak sleeps for the soak prompt argument, then runs done.
func soak() *Definition {
	return New("soak", "").Arg("soak", "seconds", false).Step(
		Server("before", "before"),
		SleepFor("soak", PromptArg("soak").WithDefault(30)),
		Server("after", "after"),
	)
}

func TestSleepIsDurable(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "before", "after")
	f := newFixture(t, e, &Options{PromptWait: -1}, soak())
	start := e.Now()
	tk, _ := f.start(t, "soak", map[string]string{"soak": "90"})
	tk, p := f.settled(t, tk.ID)
	sp := p.step("soak")
	require.Equal(t, mcptask.StepSleeping, sp.Status)
	require.NotNil(t, sp.Until)
	until := *sp.Until
	require.Equal(t, start.Add(90*time.Second), until)
	require.NotNil(t, tk.WakeAt)
	require.Equal(t, until, tk.WakeAt.UTC(), "the engine's scheduler wakes the task when the sleep ends")
	require.Contains(t, tk.StatusMessage, "sleeping until "+until.Format(time.RFC3339))
	doc := f.b.handoff(tk, p, 0)
	text, err := handoff.Render(doc)
	require.NoError(t, err)
	require.Contains(t, text, "sleeping until")

	// The process stops 60 s in; a new one starts: the sleep keeps its end.
	e.advance(60 * time.Second)
	f.b.Close()
	f = redeploy(t, e, &Options{PromptWait: -1}, soak())
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, until, *p.step("soak").Until, "a restart never sleeps from zero")
	require.Zero(t, e.callsOf("after"))
	require.Zero(t, f.e.wakeDue(t), "nothing is due before the end")

	e.advance(30 * time.Second)
	require.Equal(t, 1, f.e.wakeDue(t))
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Equal(t, 1, e.callsOf("after"))
	require.Equal(t, 1, e.callsOf("before"))
	require.JSONEq(t, `{"sleptUntil":"`+until.Format(time.RFC3339Nano)+`"}`, string(p.Outputs["soak"]))
}

func TestSleepUntilAndBadLengths(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "when", "after", "before")
	at := e.Now().Add(time.Hour)
	e.tool("when", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"at": at.Format(time.RFC3339)}), nil
	})
	w := New("until", "").Step(Server("when", "when"), SleepUntil("wait", StepOutput("when", "at")), Server("after", "after"))
	f := newFixture(t, e, &Options{PromptWait: -1}, w, soak())
	tk, _ := f.start(t, "until", nil)
	_, p := f.settled(t, tk.ID)
	require.Equal(t, at, p.step("wait").Until.UTC())

	// A length an argument gives is checked before a task exists.
	before, err := e.st.Counts(context.Background())
	require.NoError(t, err)
	_, err = f.b.prompt("soak").Handle(context.Background(), &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: "soak", Arguments: map[string]string{"soak": "a while"}}})
	var je *jsonrpc.Error
	require.ErrorAs(t, err, &je)
	require.Equal(t, int64(mcptask.CodeInvalidParams), je.Code)
	require.Contains(t, je.Message, `argument "soak" must be a duration`)
	require.Contains(t, je.Message, "neither seconds nor a duration")
	after, err := e.st.Counts(context.Background())
	require.NoError(t, err)
	require.Equal(t, before, after, "no task was created")

	// One a step gives is read when the sleep starts: the workflow fails
	// with the reason.
	e.tool("when", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"at": "a while"}), nil
	})
	g := newFixture(t, e, &Options{PromptWait: -1}, New("later", "").Step(Server("when", "when"), SleepFor("soak", StepOutput("when", "at"))))
	tk, _ = g.start(t, "later", nil)
	tk, _ = g.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.Contains(t, tk.StatusMessage, `step "soak" cannot sleep`)
	require.Contains(t, tk.StatusMessage, "neither seconds nor a duration")
}

// A length a source gives is read as seconds or a Go duration; what is
// neither says so (a day is no unit), and what is too long says that.
func TestParseLength(t *testing.T) {
	for in, want := range map[string]string{
		`"367d"`:         "neither seconds nor a duration such as 90s or 1h30m (units h, m, s, ms; no days)",
		`"soon"`:         "neither seconds nor a duration",
		`"99999999999h"`: "longer than the maximum",
		`"9000h"`:        "longer than the maximum",
		`"-5s"`:          "negative",
		`-1`:             "negative",
		`{"a":1}`:        "neither a number of seconds nor a duration string",
	} {
		_, err := parseLength(json.RawMessage(in))
		require.ErrorContains(t, err, want, in)
	}
	for in, want := range map[string]time.Duration{`"90s"`: 90 * time.Second, `"1h30m"`: 90 * time.Minute, `30`: 30 * time.Second, `"2.5"`: 2500 * time.Millisecond} {
		d, err := parseLength(json.RawMessage(in))
		require.NoError(t, err, in)
		require.Equal(t, want, d, in)
	}
}

func TestSleepValidation(t *testing.T) {
	e := newFakeEngine()
	for name, s := range map[string]*Step{
		"no length":  newStep("s", &sleep{}),
		"two":        newStep("s", &sleep{length: time.Second, forSrc: &Source{Kind: SourceConstant, Value: json.RawMessage("1")}}),
		"too long":   Sleep("s", MaxWait+time.Hour),
		"negative":   Sleep("s", -time.Second),
		"calls tool": Sleep("s", time.Second).Bind("x", Const(1)),
	} {
		t.Run(name, func(t *testing.T) {
			var ve *ValidationError
			require.ErrorAs(t, New("w", "").Step(s).Validate(e.lookup()), &ve)
		})
	}
}

// approval waits for the approved event, then deploys when it approved,
// and rolls back otherwise (declined, or refused).
func approval() *Definition {
	ok := Truthy(StepOutput("approved", "approved"))
	return New("deploy", "").Step(
		Event("approved", "a person approves the deploy").WithPayload(map[string]any{
			"type":       "object",
			"properties": map[string]any{"approved": map[string]any{"type": "boolean"}, "by": map[string]any{"type": "string"}},
			"required":   []string{"approved"},
		}),
		Server("deploy", "deploy").When(ok).Bind("by", StepOutput("approved", "by")),
		Server("rollback", "rollback").Unless(ok),
	)
}

func TestEventDelivered(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "deploy", "rollback")
	f := newFixture(t, e, &Options{PromptWait: -1, WebhookURL: "http://127.0.0.1:1/hooks"}, approval())
	tk, _ := f.start(t, "deploy", nil)
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusInputRequired, tk.Status, "a workflow waiting only for an event needs the client's input")
	require.Equal(t, mcptask.StepAwaitingEvent, p.step("approved").Status)
	reqs := f.e.kind.(interface {
		InputRequests(*store.Task) map[string]json.RawMessage
	}).InputRequests(tk)
	require.Contains(t, reqs, "approved")
	require.Contains(t, string(reqs["approved"]), `"method":"elicitation/create"`)
	require.Contains(t, string(reqs["approved"]), `"requestedSchema"`)
	doc := f.b.handoff(tk, p, 0)
	require.NotNil(t, doc.RemainingSteps[0].Webhook)
	require.Equal(t, "http://127.0.0.1:1/hooks/"+tk.ID+"/approved", doc.RemainingSteps[0].Webhook.URL)

	ctx := context.Background()
	_, err := f.b.Deliver(ctx, tk.ID, "approved", json.RawMessage(`{"approved":"yes"}`), string(mcptask.ExecClient))
	var je *jsonrpc.Error
	require.ErrorAs(t, err, &je)
	require.EqualValues(t, jsonrpc.CodeInvalidParams, je.Code)
	_, err = f.b.Deliver(ctx, tk.ID, "approved", json.RawMessage(`[1]`), string(mcptask.ExecClient))
	require.ErrorAs(t, err, &je)
	_, err = f.b.Deliver(ctx, tk.ID, "nope", json.RawMessage(`{}`), string(mcptask.ExecClient))
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = f.b.Deliver(ctx, tk.ID, "deploy", json.RawMessage(`{}`), string(mcptask.ExecClient))
	require.ErrorIs(t, err, ErrNotWaiting, "a server step takes no delivery")
	_, p = f.task(t, tk.ID)
	require.Equal(t, mcptask.StepAwaitingEvent, p.step("approved").Status, "refusals record nothing")

	payload := json.RawMessage(`{"approved":true,"by":"ana"}`)
	res, err := f.b.Deliver(ctx, tk.ID, "approved", payload, ByWebhook)
	require.NoError(t, err)
	require.False(t, res.IsError)
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Equal(t, ByWebhook, p.step("approved").CompletedBy)
	require.Equal(t, 1, e.callsOf("deploy"))
	require.Zero(t, e.callsOf("rollback"))
	_, err = f.b.Deliver(ctx, tk.ID, "approved", payload, ByWebhook)
	require.NoError(t, err, "the same delivery again is answered as done")
	_, err = f.b.Deliver(ctx, tk.ID, "approved", json.RawMessage(`{"approved":false}`), ByWebhook)
	require.ErrorIs(t, err, ErrNotWaiting)
}

func TestEventAnsweredWithTasksUpdate(t *testing.T) {
	ctx := context.Background()
	for _, action := range []string{"accept", "decline"} {
		t.Run(action, func(t *testing.T) {
			e := newFakeEngine()
			echoTools(e, "deploy", "rollback")
			f := newFixture(t, e, &Options{PromptWait: -1}, approval())
			tk, _ := f.start(t, "deploy", nil)
			tk, _ = f.settled(t, tk.ID)
			ik := f.e.kind.(interface {
				Answer(context.Context, *store.Task, map[string]json.RawMessage) error
			})
			err := ik.Answer(ctx, tk, map[string]json.RawMessage{"approved": json.RawMessage(`{"action":"accept","content":{"approved":"x"}}`)})
			var je *jsonrpc.Error
			require.ErrorAs(t, err, &je, "a payload that does not match its schema")
			require.EqualValues(t, jsonrpc.CodeInvalidParams, je.Code)
			require.ErrorAs(t, ik.Answer(ctx, tk, map[string]json.RawMessage{"approved": json.RawMessage(`{"action":"maybe"}`)}), &je)

			answer := map[string]json.RawMessage{
				"approved": json.RawMessage(`{"action":"` + action + `","content":{"approved":true,"by":"client"}}`),
				"unknown":  json.RawMessage(`{"action":"accept"}`),
			}
			require.NoError(t, ik.Answer(ctx, tk, answer))
			tk, p := f.settled(t, tk.ID)
			require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
			if action == "accept" {
				require.Equal(t, 1, e.callsOf("deploy"))
				require.Equal(t, string(mcptask.ExecClient), p.step("approved").CompletedBy)
			} else {
				require.Equal(t, mcptask.StepSkipped, p.step("approved").Status)
				require.Contains(t, p.step("approved").SkipReason, `"decline"`)
				require.Equal(t, mcptask.StepSkipped, p.step("deploy").Status, "deploy needs the approval's output")
				require.Equal(t, 1, e.callsOf("rollback"), "the declined branch runs")
			}
			require.NoError(t, ik.Answer(ctx, tk, answer), "an answer repeated (another replica's) is ignored")
		})
	}
}

func TestEventTimeoutBranches(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "deploy", "rollback")
	w := approval()
	w.Steps[0].WaitsAtMost(time.Hour, TimeoutSkip)
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	tk, _ := f.start(t, "deploy", nil)
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, e.Now().Add(time.Hour), *p.step("approved").Deadline)
	require.Equal(t, *p.step("approved").Deadline, tk.WakeAt.UTC())
	e.advance(time.Hour)
	require.Equal(t, 1, e.wakeDue(t))
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Equal(t, mcptask.StepSkipped, p.step("approved").Status)
	require.Equal(t, `the event of step "approved" did not arrive within 1h0m0s`, p.step("approved").SkipReason)
	require.Equal(t, 1, e.callsOf("rollback"))
	require.Zero(t, e.callsOf("deploy"))
}

func TestEventValidation(t *testing.T) {
	e := newFakeEngine()
	cases := map[string]*Step{
		"server takes over": Event("e", "").WaitsAtMost(time.Minute, TimeoutServer),
		"binds an argument": Event("e", "").Bind("x", Const(1)),
		"bad schema":        Event("e", "").WithPayload(func() {}),
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			var ve *ValidationError
			require.ErrorAs(t, New("w", "").Step(s).Validate(e.lookup()), &ve)
		})
	}
}

func TestWebhookHandler(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "deploy", "rollback")
	e.tool("approve", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		return ok(args), nil
	})
	byHook := New("hook", "").Step(
		Client("approve", "approve").Bind("approved", FromClient("yes or no")).AcceptsWebhook(),
		Server("deploy", "deploy").When(Truthy(StepOutput("approve", "approved"))),
	)
	f := newFixture(t, e, &Options{PromptWait: -1}, approval(), byHook)
	srv := httptest.NewServer(http.StripPrefix("/hooks", f.b.WebhookHandler()))
	defer srv.Close()
	post := func(path, token, body string) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/hooks/"+path, strings.NewReader(body))
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}
	tk, _ := f.start(t, "deploy", nil)
	var token string
	require.NoError(t, json.Unmarshal(tk.Variables[VarWebhookToken], &token))
	require.Len(t, token, 32)

	code, _ := post(tk.ID+"/approved", "", `{"approved":true}`)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = post(tk.ID+"/approved", strings.Repeat("0", 32), `{"approved":true}`)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = post("nope/approved", token, `{}`)
	require.Equal(t, http.StatusNotFound, code)
	code, _ = post(tk.ID+"/nope", token, `{}`)
	require.Equal(t, http.StatusNotFound, code)
	code, out := post(tk.ID+"/approved", token, `{"approved":1}`)
	require.Equal(t, http.StatusBadRequest, code, "%v", out)
	code, _ = post(tk.ID+"/approved", token, `{not json`)
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = post(tk.ID+"/deploy", token, `{}`)
	require.Equal(t, http.StatusConflict, code)
	resp, err := srv.Client().Get(srv.URL + "/hooks/" + tk.ID + "/approved")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	code, out = post(tk.ID+"/approved", token, `{"approved":true,"by":"ci"}`)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, tk.ID, out["taskId"])
	tk, _ = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status)
	code, _ = post(tk.ID+"/approved", token, `{"approved":false}`)
	require.Equal(t, http.StatusConflict, code, "the task ended")

	// A client step that accepts the webhook: the POST body is its tool's
	// arguments.
	tk2, _ := f.start(t, "hook", nil)
	var token2 string
	require.NoError(t, json.Unmarshal(tk2.Variables[VarWebhookToken], &token2))
	require.NotEqual(t, token, token2, "one token per task")
	code, _ = post(tk2.ID+"/approve", token, `{"approved":true}`)
	require.Equal(t, http.StatusUnauthorized, code, "another task's token")
	code, out = post(tk2.ID+"/approve", token2, `{"approved":true}`)
	require.Equal(t, http.StatusOK, code, "%v", out)
	tk2, p2 := f.settled(t, tk2.ID)
	require.Equal(t, mcptask.StatusCompleted, tk2.Status, tk2.StatusMessage)
	require.Equal(t, ByWebhook, p2.step("approve").CompletedBy)
	require.Equal(t, 2, e.callsOf("deploy"), "once per task")
	require.False(t, bytes.Contains(tk2.Result, []byte(token2)), "the token never reaches a result")
}

func TestPlainRefusesDurableKinds(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "a")
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	_, err := RegisterPlain(srv, New("w", "").Step(Server("a", "a"), Sleep("s", time.Second)), e.lookup(), nil)
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	require.Contains(t, err.Error(), "register it with a Bridge")
}

// A plain workflow judges conditions too: a step whose condition does
// not hold is skipped, and so is what needs its output.
func TestPlainJudgesConditions(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "a", "b", "c", "d")
	w := New("w", "").Arg("go", "", false).Step(
		Server("a", "a").When(Truthy(PromptArg("go"))),
		Server("b", "b").Bind("x", StepOutput("a")),
		Server("c", "c"),
	)
	call := func(ctx context.Context, _ *mcp.ServerSession, tool string, args map[string]json.RawMessage, meta mcp.Meta) (*mcp.CallToolResult, error) {
		raw, _ := json.Marshal(args)
		return e.RunTool(ctx, &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: tool, Arguments: raw}})
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	h, err := RegisterPlain(srv, w, e.lookup(), call)
	require.NoError(t, err)
	res, err := h.Handle(context.Background(), &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: "w", Arguments: map[string]string{"go": "no"}}})
	require.NoError(t, err)
	require.Zero(t, e.callsOf("a")+e.callsOf("b"))
	require.Equal(t, 1, e.callsOf("c"))
	last := res.Messages[len(res.Messages)-1].Content.(*mcp.TextContent).Text
	require.Contains(t, last, "skipped")
}

// TestGroupClientStepTakesTaskIDArgument: a client step inside a parallel
// group, and a server step there that may be handed to the client, take
// the argument _task_id like any other client step (host mode); an event
// step, which calls no tool, registers none.
func TestGroupClientStepTakesTaskIDArgument(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "build", "sign", "notes")
	newFixture(t, e, nil, New("grp", "a group with a client step").Step(
		Parallel("g", Server("build", "build"), Client("sign", "sign")),
		Event("ok", "an approval"),
		Server("notes", "notes"),
	))
	e.mu.Lock()
	defer e.mu.Unlock()
	require.True(t, e.taskIDTools["sign"], "the group's client step takes _task_id")
	require.True(t, e.taskIDTools["build"], "a server step that may be handed to the client takes _task_id")
	require.False(t, e.taskIDTools[""], "an event step registers no tool")
}
