package workflow

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// TestSettleReadsAgainWhenTheWaitRunsOut: when the prompt wait runs out,
// the answer is the task as stored then, not as the wait last read it: a
// change whose notification never came (another replica's, on a shared
// store) is in it.
func TestSettleReadsAgainWhenTheWaitRunsOut(t *testing.T) {
	e := newFakeEngine()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	e.tool("slow", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ok(map[string]any{}), nil
	})
	f := newFixture(t, e, &Options{PromptWait: 20 * time.Millisecond}, New("w", "a slow step").Step(Server("slow", "slow")))
	tk, _ := f.start(t, "w", nil)
	msg := "changed by another replica"
	var once sync.Once
	e.awaitBlocks = func(id string) {
		once.Do(func() {
			// A write that wakes no waiter here.
			_, err := e.st.Update(context.Background(), id, store.Update{StatusMessage: &msg})
			require.NoError(t, err)
		})
	}
	got, _ := f.b.settle(context.Background(), tk.ID)
	require.Equal(t, msg, got.StatusMessage, "the task as stored when the wait ran out")
}

// TestWrongToolAtEventNamesTheEventTool: a call of another tool for an
// event step (or one naming it) is refused naming the tool that performs
// it, the event tool, never an empty tool name.
func TestWrongToolAtEventNamesTheEventTool(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "ship")
	f := newFixture(t, e, nil, New("gate", "a decision").Step(Event("approve", "whether to ship"), Server("ship", "ship")))
	tk, _ := f.start(t, "gate", nil)
	for _, ref := range []string{tk.ID, TaskRef(tk.ID, "approve")} {
		_, err := f.call(t, ref, "ship", nil)
		require.Error(t, err)
		require.Contains(t, err.Error(), `"approve" (tool "workflow_event"`)
		require.NotContains(t, err.Error(), `tool ""`)
	}
}

// TestEndedHandoffSaysWhatDidNotFinish: a workflow that failed in the
// loop of a for-each's item names that record ("smoke[0]", as its
// handoff shows it), and its handoff lists the for-each as failed, never
// as running, in the JSON and in the prose.
func TestEndedHandoffSaysWhatDidNotFinish(t *testing.T) {
	e := newFakeEngine()
	probe, _ := healthyAfter(100, false)
	e.tool("probe", probe)
	echoTools(e, "report")
	w := New("train", "").Arg("services", "", true).Step(
		ForEach("smoke", PromptArg("services"),
			Repeat("smoke_service", Server("probe", "probe")).Until(Truthy(StepOutput("probe", "healthy"))).AtMost(2)),
		Server("report", "report"),
	)
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	tk, _ := f.start(t, "train", map[string]string{"services": "api"})
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.True(t, strings.HasPrefix(tk.StatusMessage, `step "smoke[0]" ran 2 time(s)`), tk.StatusMessage)
	doc := f.b.handoff(tk, p, mcptask.Core)
	require.NoError(t, doc.Validate())
	byName := map[string]handoff.RemainingStep{}
	for _, rs := range doc.RemainingSteps {
		byName[rs.Name] = rs
	}
	require.Equal(t, mcptask.StepFailed, byName["smoke"].Status, "not running: the workflow ended")
	require.Equal(t, mcptask.StepPending, byName["report"].Status)
	text, err := renderTool(doc, reader{d: mcptask.Core})
	require.NoError(t, err)
	require.Contains(t, text, `"smoke" (a for-each): did not finish: the workflow failed here.`)
	require.Contains(t, text, `"report" (tool "report"): will not run: the workflow stopped.`)
}
