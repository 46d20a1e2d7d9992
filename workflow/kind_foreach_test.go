package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// builds runs build once per service of the services argument, at most
// two at once, then report reads the list of the builds' outputs.
func builds() *Definition {
	return New("builds", "").Arg("services", "comma-separated services", true).Step(
		ForEach("build", PromptArg("services"), Server("build_service", "build").Bind("service", Item())).Limit(2),
		Server("report", "report").Bind("builds", StepOutput("build")),
	)
}

func TestForEachRunsItemsAtMostLimitAtOnce(t *testing.T) {
	e := newFakeEngine()
	g := newGate()
	e.tool("build", g.tool("build"))
	echoTools(e, "report")
	f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, builds())
	tk, _ := f.start(t, "builds", map[string]string{"services": "api, web,worker ,, db,cron"})
	g.waitStarted(t, 2)
	_, p := f.task(t, tk.ID)
	sp := p.step("build")
	require.Len(t, sp.Items, 5, "blank entries are dropped")
	require.Equal(t, "build[3]", sp.Items[3].Name)
	require.JSONEq(t, `"db"`, string(sp.Items[3].Item))
	require.Contains(t, p.PauseReason, `step "build": 0 of 5 items done, 2 running (tool "build" per item)`)
	close(g.release)
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Equal(t, 2, g.peak, "never more than the limit at once")
	require.Equal(t, 5, e.callsOf("build"))
	var out []map[string]any
	require.NoError(t, json.Unmarshal(p.Outputs["build"], &out))
	require.Len(t, out, 5, "one output per item, in order")
	var report struct {
		Args struct {
			Builds []map[string]any `json:"builds"`
		} `json:"args"`
	}
	require.NoError(t, json.Unmarshal(p.Outputs["report"], &report))
	require.Len(t, report.Args.Builds, 5, "the next step reads the list")

	// Each item's attempt knew its item and its place.
	e2 := newFakeEngine()
	var seen []string
	e2.tool("build", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		info, _ := StepFrom(ctx)
		seen = append(seen, fmt.Sprintf("%s=%v", info.Step, args["service"]))
		return ok(map[string]any{"built": args["service"]}), nil
	})
	echoTools(e2, "report")
	w := builds()
	w.Steps[0].InSequence()
	f2 := newFixture(t, e2, &Options{PromptWait: -1}, w)
	tk, _ = f2.start(t, "builds", map[string]string{"services": `["api","web"]`})
	tk, p = f2.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Equal(t, []string{"build[0]=api", "build[1]=web"}, seen, "in sequence, in order, each under its path")
	require.JSONEq(t, `[{"built":"api"},{"built":"web"}]`, string(p.Outputs["build"]))
}

// A crash mid-fan-out: the items that finished keep their results; only
// the unfinished ones run again.
func TestForEachCrashRerunsOnlyUnfinishedItems(t *testing.T) {
	e := newFakeEngine()
	g := newGate()
	e.tool("build", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		if args["service"] == "slow" {
			return g.tool("build")(ctx, args)
		}
		return ok(map[string]any{"built": args["service"]}), nil
	})
	echoTools(e, "report")
	f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, builds())
	tk, _ := f.start(t, "builds", map[string]string{"services": "api,slow,web"})
	g.waitStarted(t, 1)
	require.Eventually(t, func() bool {
		_, p := f.task(t, tk.ID)
		return p.step("build").Items[0].Status == mcptask.StepCompleted && p.step("build").Items[2].Status == mcptask.StepCompleted
	}, 30*time.Second, 5*time.Millisecond)
	f.b.Close() // the process stops while "slow" builds

	var reruns atomic.Int32
	e.tool("build", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		reruns.Add(1)
		require.Equal(t, "slow", args["service"], "only the unfinished item runs again")
		return ok(map[string]any{"built": args["service"]}), nil
	})
	f = redeploy(t, e, &Options{PromptWait: -1}, builds())
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.EqualValues(t, 1, reruns.Load())
	slow := p.step("build").Items[1]
	require.Equal(t, ReasonRestart, slow.History[len(slow.History)-1].Reason)
	require.JSONEq(t, `[{"built":"api"},{"built":"slow"},{"built":"web"}]`, string(p.Outputs["build"]))
}

func TestForEachFailures(t *testing.T) {
	flaky := func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		if strings.Contains(fmt.Sprint(args["service"]), "flaky") {
			return nil, errors.New("build broke")
		}
		return ok(map[string]any{"built": args["service"]}), nil
	}
	t.Run("collect: every item ends, then the workflow fails", func(t *testing.T) {
		e := newFakeEngine()
		e.tool("build", flaky)
		echoTools(e, "report")
		w := builds()
		w.Steps[0].kind.body().FailsWorkflow()
		f := newFixture(t, e, &Options{PromptWait: -1}, w)
		tk, _ := f.start(t, "builds", map[string]string{"services": "api,flaky,web"})
		tk, p := f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Contains(t, tk.StatusMessage, `step "build" failed: build[1]: build broke`)
		require.Equal(t, mcptask.StepCompleted, p.step("build").Items[2].Status, "the other items ran to their end")
		require.Zero(t, e.callsOf("report"))
	})
	t.Run("stop on failure stops the others", func(t *testing.T) {
		e := newFakeEngine()
		g := newGate()
		e.tool("build", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
			if args["service"] == "slow" {
				return g.tool("build")(ctx, args)
			}
			return flaky(ctx, args)
		})
		echoTools(e, "report")
		w := builds()
		w.Steps[0].StopOnFailure()
		f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, w)
		tk, _ := f.start(t, "builds", map[string]string{"services": "slow,flaky"})
		tk, p := f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Contains(t, tk.StatusMessage, `an item of step "build" (tool "build") failed: build broke`)
		require.Eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.running == 0 }, 30*time.Second, 5*time.Millisecond, "the slow item was stopped")
		require.NotEqual(t, mcptask.StepCompleted, p.step("build").Items[0].Status)
	})
	t.Run("hand to client: the item is the client's, named", func(t *testing.T) {
		e := newFakeEngine()
		e.tool("build", flaky)
		echoTools(e, "report")
		f := newFixture(t, e, &Options{PromptWait: -1}, builds())
		tk, _ := f.start(t, "builds", map[string]string{"services": "api,flaky"})
		tk, p := f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusWorking, tk.Status, tk.StatusMessage)
		require.True(t, p.step("build").Items[1].HandedToClient)
		doc := f.b.handoff(tk, p, 0)
		var entry *handoff.RemainingStep
		for i := range doc.RemainingSteps {
			if doc.RemainingSteps[i].Name == "build[1]" {
				entry = &doc.RemainingSteps[i]
			}
		}
		require.NotNil(t, entry, "the item has its own entry")
		require.JSONEq(t, `"`+tk.ID+`#build[1]"`, string(entry.Call.Arguments[mcptask.ArgTaskID]))
		e.tool("build", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
			return ok(map[string]any{"built": args["service"], "by": "client"}), nil
		})
		_, err := f.call(t, tk.ID+"#build[1]", "build", map[string]any{})
		require.NoError(t, err)
		tk, p = f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
		require.JSONEq(t, `[{"built":"api"},{"built":"flaky","by":"client"}]`, string(p.Outputs["build"]), "the server added the item's argument")
	})
	t.Run("too many items", func(t *testing.T) {
		e := newFakeEngine()
		echoTools(e, "build", "report")
		f := newFixture(t, e, &Options{PromptWait: -1}, builds())
		tk, _ := f.start(t, "builds", map[string]string{"services": strings.Repeat("s,", MaxItems+1)})
		tk, _ = f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Contains(t, tk.StatusMessage, fmt.Sprintf(`step "build" has %d items, more than the most a for-each takes (%d)`, MaxItems+1, MaxItems))
		require.Zero(t, e.callsOf("build"))
	})
	t.Run("an empty list completes with no items", func(t *testing.T) {
		e := newFakeEngine()
		echoTools(e, "build", "report")
		f := newFixture(t, e, &Options{PromptWait: -1}, builds())
		tk, _ := f.start(t, "builds", map[string]string{"services": " , "})
		tk, p := f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
		require.JSONEq(t, `[]`, string(p.Outputs["build"]))
	})
}

// reviews asks the client to review every file the list step returns.
func reviews() *Definition {
	return New("reviews", "").Step(
		Server("list", "list"),
		ForEach("review", StepOutput("list", "files"), Client("review_file", "review").
			Bind("file", Item()).Bind("verdict", FromClient("ok or a problem found"))),
		Server("merge", "merge").Bind("reviews", StepOutput("review")),
	)
}

// A client step as the body: one handoff entry per item, each performed
// with its item named; a call that could perform several is refused,
// naming them; a retry is answered with the recorded result.
func TestForEachClientBody(t *testing.T) {
	e := newFakeEngine()
	e.tool("list", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"files": []string{"a.go", "b.go"}}), nil
	})
	e.tool("review", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"file": args["file"], "verdict": args["verdict"]}), nil
	})
	echoTools(e, "merge")
	f := newFixture(t, e, &Options{PromptWait: -1}, reviews())
	tk, _ := f.start(t, "reviews", nil)
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusWorking, tk.Status, tk.StatusMessage)
	require.Equal(t, []string{"review[0]", "review[1]"}, clientSteps(p))

	doc := f.b.handoff(tk, p, 0)
	var names []string
	for _, rs := range doc.RemainingSteps {
		names = append(names, rs.Name)
	}
	require.Equal(t, []string{"review", "review[0]", "review[1]", "merge"}, names)
	item := doc.RemainingSteps[2]
	require.Equal(t, mcptask.ExecClient, item.Execution)
	require.Equal(t, "review", item.Call.Tool)
	require.JSONEq(t, `"`+tk.ID+`#review[1]"`, string(item.Call.Arguments[mcptask.ArgTaskID]))
	require.JSONEq(t, `"b.go"`, string(item.Call.Server["file"]), "the item's own value, which the server adds")
	text, err := handoff.Render(doc)
	require.NoError(t, err)
	require.Contains(t, text, tk.ID+"#review[0]")
	require.Contains(t, text, "0 of 2 items done, 2 waiting for the client")

	// Without an item named, the call is ambiguous.
	_, err = f.call(t, tk.ID, "review", map[string]any{"verdict": "ok"})
	var je *jsonrpc.Error
	require.ErrorAs(t, err, &je)
	require.Equal(t, int64(mcptask.CodeInvalidParams), je.Code)
	require.Contains(t, je.Message, `2 records of workflow task `+tk.ID+` wait for tool "review"`)
	require.Contains(t, je.Message, tk.ID+`#review[0]`)
	require.Zero(t, e.callsOf("review"), "nothing ran")

	// A path that names nothing.
	_, err = f.call(t, tk.ID+"#review[7]", "review", map[string]any{"verdict": "ok"})
	require.ErrorAs(t, err, &je)
	require.Contains(t, je.Message, `no step or record "review[7]"`)

	res, err := f.call(t, tk.ID+"#review[1]", "review", map[string]any{"verdict": "ok"})
	require.NoError(t, err)
	text = toolText(res.(*mcp.CallToolResult))
	require.Contains(t, text, `Step "review[1]" is recorded`)
	require.Contains(t, text, tk.ID+"#review[0]", "the next entry names the remaining item")
	// A retry of the same call is answered with the recorded result.
	_, err = f.call(t, tk.ID+"#review[1]", "review", map[string]any{"verdict": "ok"})
	require.NoError(t, err)
	require.Equal(t, 1, e.callsOf("review"))
	// With one item left, naming it is not needed.
	_, err = f.call(t, tk.ID, "review", map[string]any{"verdict": "a problem"})
	require.NoError(t, err)
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.JSONEq(t, `[{"file":"a.go","verdict":"a problem"},{"file":"b.go","verdict":"ok"}]`, string(p.Outputs["review"]))
	require.Equal(t, 1, e.callsOf("merge"))
}

func TestForEachValidation(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "a", "b")
	cases := map[string]*Definition{
		"no body":          New("w", "").Step(ForEach("f", Const([]int{1}), nil)),
		"negative limit":   New("w", "").Step(ForEach("f", Const([]int{1}), Server("a", "a")).Limit(-1)),
		"limit on a tool":  New("w", "").Step(Server("a", "a").Limit(2)),
		"item outside":     New("w", "").Step(Server("a", "a").Bind("x", Item())),
		"undeclared items": New("w", "").Step(ForEach("f", PromptArg("nope"), Server("a", "a"))),
		"body reads later": New("w", "").Step(ForEach("f", Const([]int{1}), Server("a", "a").Bind("x", StepOutput("b"))), Server("b", "b")),
	}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			var ve *ValidationError
			require.ErrorAs(t, w.Validate(e.lookup()), &ve)
		})
	}
	require.NoError(t, New("w", "").Step(ForEach("f", Const([]int{1}), Server("a", "a").Bind("x", Item()))).Validate(e.lookup()))
}
