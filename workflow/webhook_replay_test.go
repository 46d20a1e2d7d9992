package workflow

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
)

// A client step performed through the webhook answers the same delivery
// again (an outside system retrying after its answer was lost) as done,
// with the recorded result and without running its tool again, while the
// workflow runs and after it ended; another payload is refused. Before
// the fix only steps performed by the client were answered so: a repeated
// webhook got ErrNotWaiting (HTTP 409), as if it had never been recorded.
func TestWebhookClientStepRepeatedDelivery(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "approve", "confirm", "deploy")
	w := New("hook", "").Step(
		Client("approve", "approve").Bind("approved", FromClient("yes or no")).AcceptsWebhook(),
		Client("confirm", "confirm"),
		Server("deploy", "deploy"),
	)
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	ctx := context.Background()
	tk, _ := f.start(t, "hook", nil)
	payload := json.RawMessage(`{"approved":true}`)

	first, err := f.b.Deliver(ctx, tk.ID, "approve", payload, ByWebhook)
	require.NoError(t, err)
	require.False(t, first.IsError)
	_, p := f.settled(t, tk.ID)
	require.Equal(t, ByWebhook, p.step("approve").CompletedBy)
	require.Equal(t, mcptask.StepAwaitingClient, p.step("confirm").Status)

	again, err := f.b.Deliver(ctx, tk.ID, "approve", json.RawMessage(`{ "approved": true }`), ByWebhook)
	require.NoError(t, err, "the same delivery again, while the workflow runs")
	require.False(t, again.IsError)
	require.Equal(t, 1, e.callsOf("approve"), "a repeated delivery does not run the tool again")
	_, err = f.b.Deliver(ctx, tk.ID, "approve", json.RawMessage(`{"approved":false}`), ByWebhook)
	require.ErrorIs(t, err, ErrNotWaiting, "another payload")

	_, err = f.call(t, tk.ID, "confirm", map[string]any{})
	require.NoError(t, err)
	tk, _ = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	_, err = f.b.Deliver(ctx, tk.ID, "approve", payload, ByWebhook)
	require.NoError(t, err, "the same delivery again, after the workflow ended")
	_, err = f.b.Deliver(ctx, tk.ID, "approve", json.RawMessage(`{"approved":false}`), ByWebhook)
	require.ErrorIs(t, err, ErrNotWaiting, "another payload, after the workflow ended")
	require.Equal(t, 1, e.callsOf("approve"))
	require.Equal(t, 1, e.callsOf("deploy"))
}
