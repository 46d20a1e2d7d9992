package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// everyKind is a workflow with a step of every kind.
func everyKind() *Definition {
	return New("all", "a step of every kind").Step(
		Parallel("g", Server("a", "a"), Server("b", "b")),
		Sleep("nap", time.Hour),
		Client("review", "review").Bind("approved", FromClient("true to go on")),
		Event("ok", "an outside approval"),
		Server("publish", "publish").When(Truthy(StepOutput("review", "approved"))).Bind("from", StepOutput("a")),
	)
}

// progressMutations are changes to a stored progress that no bridge
// writes, but a stored record may hold (an older or newer server, a
// hand-edited or damaged record): every status on every step, each paired
// with odd counters, times, flags or outputs.
func progressMutations() []func(p map[string]any, steps []any) string {
	statuses := []mcptask.StepStatus{"", "bogus", mcptask.StepPending, mcptask.StepRunning, mcptask.StepAwaitingClient, mcptask.StepAwaitingEvent,
		mcptask.StepSleeping, mcptask.StepCompleted, mcptask.StepFailed, mcptask.StepSkipped}
	far := time.Now().Add(1000 * time.Hour).UTC().Format(time.RFC3339Nano)
	past := time.Unix(0, 0).UTC().Format(time.RFC3339Nano)
	extras := []func(sp map[string]any) string{
		func(sp map[string]any) string {
			sp["attempts"] = -1
			sp["tries"] = 1 << 30
			return "counters out of range"
		},
		func(sp map[string]any) string {
			delete(sp, "until")
			delete(sp, "history")
			return "no times, no history"
		},
		func(sp map[string]any) string { sp["until"] = far; sp["retryAt"] = past; return "odd times" },
		func(sp map[string]any) string {
			sp["deadline"] = past
			sp["reachedAt"] = far
			return "a wait that ran out"
		},
		func(sp map[string]any) string {
			sp["handedToClient"] = true
			sp["serverTakeover"] = true
			return "both sides"
		},
		func(sp map[string]any) string {
			sp["group"] = "nowhere"
			sp["kind"] = "sleep"
			return "wrong group and kind"
		},
		func(sp map[string]any) string { sp["interrupted"] = 99; return "interrupted many times" },
		func(sp map[string]any) string {
			sp["history"] = []any{map[string]any{"attempt": 0}}
			return "a malformed history"
		},
	}
	var out []func(p map[string]any, steps []any) string
	n := 0
	for i, st := range statuses {
		for j, extra := range extras {
			if (i+j)%3 != 0 {
				continue // a spread of pairs, not all of them
			}
			n++
			which := n
			out = append(out, func(p map[string]any, steps []any) string {
				k := which % len(steps) // every step in turn
				sp := steps[k].(map[string]any)
				sp["status"] = st
				what := extra(sp)
				if j%2 == 0 {
					p["outputs"] = map[string]any{"a": "not an object", "review": nil, "ghost": 1}
				}
				return fmt.Sprintf("step %v %q, %s", sp["name"], st, what)
			})
		}
	}
	// Whole records no bridge writes (rawProgress replaces the variable).
	out = append(out,
		func(p map[string]any, _ []any) string {
			clear(p)
			p[rawProgress] = `{"steps":"nope"}`
			return "steps not a list"
		},
		func(p map[string]any, _ []any) string { clear(p); p[rawProgress] = `[]`; return "not an object" },
		func(p map[string]any, steps []any) string { p["steps"] = steps[:2]; return "two of six steps recorded" },
	)
	return out
}

// rawProgress marks a mutation that replaces the whole progress variable.
const rawProgress = "\x00raw"

// TestStoredProgressNeverCrashes: whatever a task's stored progress says
// about its steps, a restart, a wake-up, a continuation, a resume, an
// event delivery, a fork and the handoff neither panic nor hang: each
// call answers (an error is fine), and the task ends or rests.
func TestStoredProgressNeverCrashes(t *testing.T) {
	for n, mutate := range progressMutations() {
		e := newFakeEngine()
		echoTools(e, "a", "b", "publish")
		e.tool("review", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
			return ok(map[string]any{"approved": args["approved"]}), nil
		})
		f := newFixture(t, e, &Options{PromptWait: -1}, everyKind())
		tk, _ := f.start(t, "all", nil)
		tk, _ = f.settled(t, tk.ID)
		f.b.Close()

		var p map[string]any
		require.NoError(t, json.Unmarshal(tk.Variables[VarProgress], &p))
		steps, _ := p["steps"].([]any)
		require.NotEmpty(t, steps)
		what := mutate(p, steps)
		raw, err := json.Marshal(p)
		require.NoError(t, err)
		if r, ok := p[rawProgress].(string); ok {
			raw = json.RawMessage(r)
		}
		_, err = e.st.Update(context.Background(), tk.ID, store.Update{Variables: map[string]json.RawMessage{VarProgress: raw}})
		require.NoError(t, err)

		t.Run(fmt.Sprintf("%d %s", n, what), func(t *testing.T) {
			f := redeploy(t, e, &Options{PromptWait: 50 * time.Millisecond}, everyKind())
			e.advance(2 * time.Hour)
			e.wakeDue(t)
			_, _ = f.call(t, tk.ID, "review", map[string]any{"approved": true})
			_, _ = f.b.Deliver(context.Background(), tk.ID, "ok", json.RawMessage(`{"approved":true}`), "test")
			req := &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: "all", Meta: mcp.Meta{mcptask.MetaTaskID: tk.ID}}}
			_, _ = f.b.workflows["all"].prompt.Handle(context.Background(), req)
			if got, err := e.st.Get(context.Background(), tk.ID); err == nil {
				_ = f.b.ForkPoints(got)
				_, _ = f.b.Fork(context.Background(), tk.ID, nil)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			end, err := e.Await(ctx, tk.ID, func(tk *store.Task) bool {
				p, err := decodeProgress(tk)
				return err != nil || tk.Status.Terminal() || rests(p, e.Now().Add(time.Second))
			})
			require.NoError(t, err, "the task neither ended nor rested")
			t.Logf("%s: %s", end.Status, end.StatusMessage)
			require.NotContains(t, end.StatusMessage, "internal error", "a panic was recovered: %s", end.StatusMessage)
			require.False(t, strings.Contains(end.StatusMessage, "panic"), end.StatusMessage)
		})
	}
}
