package integration

// Push webhooks end to end: a workflow that pauses for its client and
// ends, as its owner's webhook hears of it; and, on PostgreSQL, the
// deliveries of several replicas: one attempt per replica at a time, a
// retry made by another replica after the first stopped, a webhook
// registered on one replica told of a task on another.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/internal/tests/pushtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/store/postgres"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// pushServer builds a server on st with the relay workflow (server step,
// client step, server step) and the note tool.
func pushServer(t *testing.T, st store.Store, opts taskrouter.Options) *builder.Server {
	t.Helper()
	b := builder.New("push-test", "1").WithStore(st).WithoutEnv().WithRouterOptions(opts)
	name := opts.ReplicaID
	builder.Tool(b, &mcp.Tool{Name: "note"}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "noted " + in.Text + " on " + name}}}, nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	b.TaskWorkflow(workflow.New("relay", "note on the server, then the client notes, then the server again").Arg("text", "t", true).Step(
		workflow.Server("first", "note").Bind("text", workflow.PromptArg("text")),
		workflow.Client("middle", "note").Bind("text", workflow.FromClient("anything")),
		workflow.Server("last", "note").Bind("text", workflow.StepOutput("middle")),
	))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func pushClient(t *testing.T, srv *builder.Server) *client.Client {
	t.Helper()
	tr, err := srv.Connect(context.Background())
	require.NoError(t, err)
	c, err := client.Dial(context.Background(), tr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestPushWorkflowPausedThenEnded: the owner's webhook hears that the
// workflow paused for its client (with the step the client may perform),
// then, once the client performed it, that the workflow ended.
func TestPushWorkflowPausedThenEnded(t *testing.T) {
	srv := pushServer(t, memory.New(nil), taskrouter.Options{})
	c := pushClient(t, srv)
	rc := pushtest.New(t)
	ctx := relCtx(t, time.Minute)
	_, secret, err := c.RegisterWebhook(ctx, rc.URL, nil) // terminal, input_required, paused
	require.NoError(t, err)
	_, doc, err := c.GetPrompt(ctx, "relay", map[string]string{"text": "hi"})
	require.NoError(t, err)
	paused := *pushtest.Verified(t, secret, rc.Wait(t, 1)[0])
	require.Equal(t, mcptask.WebhookPaused, paused.Type)
	require.Equal(t, doc.TaskID, paused.Task.TaskID)
	var pe mcptask.PausedEvent
	require.NoError(t, json.Unmarshal(paused.Event.Data, &pe))
	require.Equal(t, []string{"middle"}, pe.ClientSteps)
	require.Contains(t, pe.Reason, "middle")

	_, err = c.Follow(ctx, doc, &client.FollowOptions{Fill: func(context.Context, handoff.RemainingStep, []string) (map[string]any, error) {
		return map[string]any{"text": "from the client"}, nil
	}})
	require.NoError(t, err)
	got := rc.Wait(t, 2)
	end := *pushtest.Verified(t, secret, got[1])
	require.Equal(t, mcptask.WebhookTerminal, end.Type)
	require.Equal(t, mcptask.StatusCompleted, end.Task.Status)
	require.Len(t, rc.Wait(t, 2), 2, "one pause, one end")
}

// pushReplica is a server on the shared PostgreSQL store.
func pushReplica(t *testing.T, dsn, name string, push taskrouter.PushOptions) (*builder.Server, *postgres.Store) {
	t.Helper()
	st, err := postgres.Open(context.Background(), dsn, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	srv := pushServer(t, st, taskrouter.Options{ReplicaID: name, LeaseDuration: time.Second,
		ChangePollInterval: 100 * time.Millisecond, PollInterval: 20 * time.Millisecond, Push: push})
	return srv, st
}

// TestPushReplicas (PostgreSQL): a webhook registered on one replica is
// told of tasks that end on every replica, each delivery once (both
// replicas scan every change; one claims each attempt); a delivery whose
// receiver was down when the replica that made it stopped is retried by
// the other replica, with the same id.
func TestPushReplicas(t *testing.T) {
	dsn := pgtest.DSN(t)
	po := taskrouter.PushOptions{RetryBase: 300 * time.Millisecond, RetryMax: 300 * time.Millisecond}
	a, _ := pushReplica(t, dsn, "r1", po)
	b, _ := pushReplica(t, dsn, "r2", po)
	rc := pushtest.New(t)
	ctx := relCtx(t, 2*time.Minute)
	// Every owner's tasks: the in-memory clients of the two replicas act
	// for the same local owner anyway.
	wh, secret, err := a.Router.Webhooks().Register(ctx, nil, taskrouter.WebhookRegistration{URL: rc.URL, Owner: "*",
		Events: []mcptask.WebhookEvent{mcptask.WebhookTerminal}})
	require.NoError(t, err)
	ca, cb := pushClient(t, a), pushClient(t, b)
	const n = 10
	want := map[string]bool{}
	for i := range n {
		c := ca
		if i%2 == 1 {
			c = cb
		}
		var id string
		for ev, err := range c.CallTool(ctx, "note", map[string]any{"text": fmt.Sprint(i)}, nil) {
			require.NoError(t, err)
			if ev.Task != nil {
				id = ev.Task.ID
			}
		}
		require.NotEmpty(t, id)
		want[id] = true
	}
	got := rc.Wait(t, n)
	ids := map[string]int{}
	for _, g := range got {
		d := *pushtest.Verified(t, secret, g)
		require.True(t, want[d.Task.TaskID], "a task of the test: %s", d.Task.TaskID)
		ids[d.ID]++
	}
	require.Len(t, ids, n)
	// Every delivery is recorded delivered after one attempt: no replica
	// attempted one the other had claimed.
	require.Eventually(t, func() bool {
		ds, _, err := b.Router.Webhooks().Deliveries(ctx, nil, wh.WebhookID, "")
		require.NoError(t, err)
		done := 0
		for _, d := range ds {
			if d.Status == mcptask.DeliveryDelivered {
				require.Equal(t, 1, d.Attempts, d.DeliveryID)
				done++
			}
		}
		return done == n
	}, 30*time.Second, 20*time.Millisecond)
	for id, k := range ids {
		require.Equal(t, 1, k, "delivery %s arrived %d times", id, k)
	}

	// The receiver is down: r1 makes the first attempt of its task's
	// delivery, then stops; r2 makes the second.
	rc.Answer(http.StatusServiceUnavailable)
	var last string
	for ev, err := range ca.CallTool(ctx, "note", map[string]any{"text": "last"}, nil) {
		require.NoError(t, err)
		if ev.Task != nil {
			last = ev.Task.ID
		}
	}
	first := *pushtest.Verified(t, secret, rc.Wait(t, n+1)[n])
	require.Equal(t, last, first.Task.TaskID)
	// r1 stops once it has recorded the failed attempt: an attempt cut
	// short by the stop before its answer was read is made again
	// uncounted (see webhooks.attempt), which is not what this part tests.
	require.Eventually(t, func() bool {
		ds, _, err := b.Router.Webhooks().Deliveries(ctx, nil, wh.WebhookID, "")
		require.NoError(t, err)
		return ds[0].DeliveryID == first.ID && ds[0].Attempts >= 1
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, a.Close())
	retried := *pushtest.Verified(t, secret, rc.Wait(t, n+2)[n+1])
	require.Equal(t, first.ID, retried.ID)
	require.Eventually(t, func() bool {
		ds, _, err := b.Router.Webhooks().Deliveries(ctx, nil, wh.WebhookID, "")
		require.NoError(t, err)
		return ds[0].DeliveryID == first.ID && ds[0].Status == mcptask.DeliveryDelivered && ds[0].Attempts == 2
	}, 30*time.Second, 20*time.Millisecond)
}
