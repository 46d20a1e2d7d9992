package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// poll probes until healthy, at most 5 times, 10 s apart, then reports.
func poll() *Definition {
	return New("poll", "").Step(
		Repeat("wait_healthy", Server("probe", "probe")).Until(Truthy(StepOutput("probe", "healthy"))).AtMost(5).Every(10*time.Second),
		Server("report", "report").Bind("health", StepOutput("wait_healthy")),
	)
}

// healthyAfter is a probe that answers healthy from its nth call on (a
// call before fails when failing is set).
func healthyAfter(n int32, failing bool) (func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error), *atomic.Int32) {
	var calls atomic.Int32
	return func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		c := calls.Add(1)
		if c < n && failing {
			return nil, errors.New("connection refused")
		}
		return ok(map[string]any{"healthy": c >= n, "call": c}), nil
	}, &calls
}

func TestLoopPollsUntilItsConditionHolds(t *testing.T) {
	for _, failing := range []bool{false, true} {
		t.Run(map[bool]string{false: "unhealthy answers", true: "failed calls"}[failing], func(t *testing.T) {
			e := newFakeEngine()
			probe, calls := healthyAfter(4, failing)
			e.tool("probe", probe)
			echoTools(e, "report")
			f := newFixture(t, e, &Options{PromptWait: -1}, poll())
			start := e.Now()
			tk, _ := f.start(t, "poll", nil)
			tk, p := f.settled(t, tk.ID)
			sp := p.step("wait_healthy")
			require.Equal(t, mcptask.StepSleeping, sp.Status, tk.StatusMessage)
			require.Equal(t, 1, sp.Runs)
			require.Equal(t, start.Add(10*time.Second), *sp.Until, "the next run is a durable sleep away")
			require.Equal(t, *sp.Until, tk.WakeAt.UTC(), "the scheduler wakes the task for it")
			require.Contains(t, tk.StatusMessage, `step "wait_healthy": run 1 of at most 5 (tool "probe")`)
			require.Contains(t, tk.StatusMessage, "the next run starts at")
			doc := f.b.handoff(tk, p, 0)
			text, err := handoff.Render(doc)
			require.NoError(t, err)
			require.Contains(t, text, "run 1 of at most 5")

			// A restart keeps the loop where it was.
			f.b.Close()
			f = redeploy(t, e, &Options{PromptWait: -1}, poll())
			for run := 2; run <= 4; run++ {
				e.advance(10 * time.Second)
				require.Equal(t, 1, f.e.wakeDue(t))
				tk, p = f.settled(t, tk.ID)
			}
			require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
			require.EqualValues(t, 4, calls.Load())
			sp = p.step("wait_healthy")
			require.Equal(t, 4, sp.Runs, "a count of every run")
			require.Len(t, sp.Items, KeepRuns, "only the latest runs are kept")
			require.Equal(t, "wait_healthy[4]", sp.Items[KeepRuns-1].Name)
			require.JSONEq(t, `{"healthy":true,"call":4}`, string(p.Outputs["wait_healthy"]), "the output of the run that satisfied it")
			var report struct {
				Args map[string]json.RawMessage `json:"args"`
			}
			require.NoError(t, json.Unmarshal(p.Outputs["report"], &report))
			require.JSONEq(t, `{"healthy":true,"call":4}`, string(report.Args["health"]))
		})
	}
}

func TestLoopExhausted(t *testing.T) {
	t.Run("fails the workflow", func(t *testing.T) {
		e := newFakeEngine()
		probe, calls := healthyAfter(100, false)
		e.tool("probe", probe)
		echoTools(e, "report")
		w := New("poll", "").Step(Repeat("wait_healthy", Server("probe", "probe")).Until(Truthy(StepOutput("probe", "healthy"))).AtMost(3), Server("report", "report"))
		f := newFixture(t, e, &Options{PromptWait: -1}, w)
		tk, _ := f.start(t, "poll", nil)
		tk, _ = f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Contains(t, tk.StatusMessage, `step "wait_healthy" ran 3 time(s) without output "probe" at healthy is true`)
		require.EqualValues(t, 3, calls.Load())
		require.Zero(t, e.callsOf("report"))
	})
	t.Run("skips when asked", func(t *testing.T) {
		e := newFakeEngine()
		probe, _ := healthyAfter(100, true)
		e.tool("probe", probe)
		echoTools(e, "report", "after")
		w := New("poll", "").Step(
			Repeat("wait_healthy", Server("probe", "probe")).Until(Truthy(StepOutput("probe", "healthy"))).AtMost(2).SkipsOnExhaust(),
			Server("report", "report").Bind("h", StepOutput("wait_healthy")),
			Server("after", "after"))
		f := newFixture(t, e, &Options{PromptWait: -1}, w)
		tk, _ := f.start(t, "poll", nil)
		tk, p := f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
		require.Equal(t, mcptask.StepSkipped, p.step("wait_healthy").Status)
		require.Contains(t, p.step("wait_healthy").SkipReason, "ran 2 time(s) without")
		require.Equal(t, mcptask.StepSkipped, p.step("report").Status, "what reads its output is skipped too")
		require.Equal(t, 1, e.callsOf("after"))
	})
}

// A loop whose body the client performs: each run is one entry, named by
// its run.
func TestLoopClientBody(t *testing.T) {
	e := newFakeEngine()
	e.tool("answer", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"passed": args["score"] == float64(10)}), nil
	})
	w := New("quiz", "").Step(
		Repeat("ask", Client("answer", "answer").Bind("score", FromClient("your score, 0 to 10"))).Until(Truthy(StepOutput("answer", "passed"))).AtMost(3),
	)
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	tk, _ := f.start(t, "quiz", nil)
	tk, p := f.settled(t, tk.ID)
	doc := f.b.handoff(tk, p, 0)
	require.Equal(t, "ask[1]", doc.RemainingSteps[1].Name)
	require.JSONEq(t, `"`+tk.ID+`#ask[1]"`, string(doc.RemainingSteps[1].Call.Arguments[mcptask.ArgTaskID]))
	_, err := f.call(t, tk.ID+"#ask[1]", "answer", map[string]any{"score": 7})
	require.NoError(t, err)
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, 2, p.step("ask").Runs, "the condition did not hold: a second run")
	require.Equal(t, []string{"ask[2]"}, clientSteps(p))
	_, err = f.call(t, tk.ID, "answer", map[string]any{"score": 10})
	require.NoError(t, err)
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.JSONEq(t, `{"passed":true}`, string(p.Outputs["ask"]))
}

func TestLoopValidation(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "a")
	until := Truthy(StepOutput("a", "ok"))
	cases := map[string]*Step{
		"no bound":         Repeat("r", Server("a", "a")).Until(until),
		"too many":         Repeat("r", Server("a", "a")).Until(until).AtMost(MaxItems + 1),
		"no condition":     Repeat("r", Server("a", "a")).AtMost(3),
		"negative pause":   Repeat("r", Server("a", "a")).Until(until).AtMost(3).Every(-time.Second),
		"until on a tool":  Server("a", "a").Until(until),
		"condition on ...": Repeat("r", Server("a", "a")).Until(Truthy(StepOutput("nope"))).AtMost(3),
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			var ve *ValidationError
			require.ErrorAs(t, New("w", "").Step(s).Validate(e.lookup()), &ve)
		})
	}
	require.NoError(t, New("w", "").Step(Repeat("r", Server("a", "a")).Until(until).AtMost(3)).Validate(e.lookup()))
}

// A loop takes every kind that can run as its body, and registration
// refuses, naming the kind, the ones that cannot: a sleep runs (and wakes
// the task at its end), a child runs (one child per run), a group and an
// event are refused.
func TestLoopBodies(t *testing.T) {
	t.Run("sleep", func(t *testing.T) {
		e := newFakeEngine()
		w := New("naps", "").Step(Repeat("r", Sleep("nap", 300*time.Millisecond)).Until(Falsy(StepOutput("nap", "sleptUntil"))).AtMost(2).SkipsOnExhaust())
		f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, w)
		tk, _ := f.start(t, "naps", nil)
		require.Eventually(t, func() bool {
			e.advance(100 * time.Millisecond)
			e.wakeDue(t)
			tk, _ = f.task(t, tk.ID)
			return tk.Status.Terminal()
		}, 10*time.Second, time.Millisecond, "the loop's sleeps wake the task")
		tk, p := f.task(t, tk.ID)
		require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
		require.Equal(t, 2, p.step("r").Runs)
		require.Equal(t, mcptask.StepSkipped, p.step("r").Status)
	})
	t.Run("child", func(t *testing.T) {
		e := newFakeEngine()
		var n atomic.Int32
		e.tool("probe", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
			return ok(map[string]any{"healthy": n.Add(1) >= 2}), nil
		})
		probe := New("probe_once", "").Step(Server("probe", "probe"))
		w := New("polls", "").Step(Repeat("r", Child("check", "probe_once")).Until(Truthy(StepOutput("check", "probe", "healthy"))).AtMost(3))
		f := newFixture(t, e, &Options{PromptWait: -1}, probe, w)
		tk, _ := f.start(t, "polls", nil)
		tk = f.waitEnded(t, tk.ID)
		require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
		_, p := f.task(t, tk.ID)
		require.Equal(t, 2, p.step("r").Runs)
		require.Len(t, tasksOf(t, e, LabelParent, tk.ID), 2, "one child per run")
	})
	t.Run("refused", func(t *testing.T) {
		e := newFakeEngine()
		echoTools(e, "a")
		for kind, body := range map[string]*Step{
			"event": Event("poll", "the build is green"),
			"group": Parallel("g", Server("a", "a")),
		} {
			for _, container := range []*Step{
				Repeat("r", body).Until(Truthy(StepOutput("poll"))).AtMost(2),
				ForEach("f", Const([]int{1}), body),
			} {
				err := New("w", "").Step(container).Validate(e.lookup())
				require.ErrorContains(t, err, kind, "a %s body of a %s is refused, naming the kind", kind, container.Kind())
			}
		}
	})
}
