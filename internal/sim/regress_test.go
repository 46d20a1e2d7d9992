package sim

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/workflow"
)

// Scenario tests of the bugs the simulation found, each on the World's
// machinery with a real go-sdk client (the seed that found it is named).

// TestLegEndsWithItsWorkflow: a leg that asks a person for a workflow's
// decision (input_required) ends when the workflow ends meanwhile; it
// waited for the person's answer forever (seed 24: the workflow was
// cancelled while its leg asked).
func TestLegEndsWithItsWorkflow(t *testing.T) {
	clock := NewClock(Epoch)
	disk := NewDisk(memory.New(&store.Options{Now: clock.Now}))
	w := NewWorld(clock, disk, WorldOptions{
		Workflow: workflow.Options{PromptWait: time.Millisecond},
		Setup: func(b *builder.Builder, _ *Process) error {
			b.TaskWorkflow(workflow.New("decide", "a person's decision").AsTool().Step(
				workflow.Event("go", "whether to go on").WithPayload(map[string]any{"type": "object"})))
			return nil
		},
	})
	t.Cleanup(func() { _ = w.Close() })
	ctx := t.Context()
	p, err := w.Start(ctx)
	require.NoError(t, err)
	_, err = p.Session.CallTool(ctx, &mcp.CallToolParams{Name: "decide"})
	require.NoError(t, err)
	var leg, wf *store.Task
	require.Eventually(t, func() bool {
		active, err := disk.Store().Active(ctx)
		require.NoError(t, err)
		for _, a := range active {
			switch {
			case a.Labels[workflow.LabelWorkflow] != "":
				wf = a
			case a.Status == "input_required":
				leg = a // the call's task, asking the person
			}
		}
		return leg != nil && wf != nil
	}, 10*time.Second, time.Millisecond, "the call's task asks the person")
	_, err = p.Server.Router.CancelTask(ctx, wf.ID, "no longer needed")
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := p.Server.Router.Await(wctx, leg.ID, func(t *store.Task) bool { return t.Status.Terminal() })
	require.NoError(t, err, "the leg ended with its workflow")
	require.True(t, got.Status.Terminal())
}
