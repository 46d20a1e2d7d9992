package client_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/internal/tests/pushtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// TestWebhooks: in every mode the client registers a webhook (for its
// tasks; stateless and anonymous, for its task), the server pushes a
// signed delivery when the task ends, the client lists the webhook and
// its delivery, and deletes it.
func TestWebhooks(t *testing.T) {
	s := newConfServer(t, nil)
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			ctx := testCtx(t)
			rc := pushtest.New(t)
			c := s.dial(m, nil)
			opts := &client.WebhookOptions{Events: []mcptask.WebhookEvent{mcptask.WebhookTerminal}}
			if m.http && m.dialect == mcptask.Extension {
				// Stateless and anonymous: every such client is one
				// owner, so a webhook watches one task, which it names.
				_, _, err := c.RegisterWebhook(ctx, rc.URL, opts)
				require.ErrorContains(t, err, "needs a requestor the server can tell apart")
				for ev, err := range c.CallTool(ctx, "failing_job", map[string]any{}, nil) {
					require.NoError(t, err)
					if ev.Kind == client.EventCreated {
						opts.TaskID = ev.Task.ID
						break
					}
				}
				require.NotEmpty(t, opts.TaskID)
			}
			wh, secret, err := c.RegisterWebhook(ctx, rc.URL, opts)
			require.NoError(t, err)
			require.Equal(t, []mcptask.WebhookEvent{mcptask.WebhookTerminal}, wh.Events)

			if opts.TaskID == "" {
				res, err := c.CallToolAndWait(ctx, "failing_job", map[string]any{}, nil)
				require.NoError(t, err)
				require.True(t, res.IsError)
			}
			d := pushtest.Verified(t, secret, rc.Wait(t, 1)[0])
			require.Equal(t, mcptask.WebhookTerminal, d.Type)

			hooks, err := c.Webhooks(ctx, opts.TaskID)
			require.NoError(t, err)
			require.Len(t, hooks, 1)
			require.Equal(t, wh.WebhookID, hooks[0].WebhookID)
			var ds []mcptask.WebhookDelivery
			require.Eventually(t, func() bool {
				ds = nil
				for d, err := range c.WebhookDeliveries(ctx, wh.WebhookID) {
					require.NoError(t, err)
					ds = append(ds, d)
				}
				return len(ds) == 1 && ds[0].Status == mcptask.DeliveryDelivered
			}, 30*time.Second, 10*time.Millisecond)
			require.Equal(t, d.ID, ds[0].DeliveryID)

			require.NoError(t, c.DeleteWebhook(ctx, wh.WebhookID))
			hooks, err = c.Webhooks(ctx, opts.TaskID)
			require.NoError(t, err)
			require.Empty(t, hooks)
			var re *client.RPCError
			require.ErrorAs(t, c.DeleteWebhook(ctx, wh.WebhookID), &re)
			require.EqualValues(t, mcptask.CodeInvalidParams, re.Code)
			require.Contains(t, re.Message, "not found")
		})
	}
}

// TestWebhooksUnsupported: a server without push is ErrCapability.
func TestWebhooksUnsupported(t *testing.T) {
	s := newConfServer(t, func(o *taskrouter.Options) { o.Push.Disabled = true })
	c := s.dial(allModes[0], nil)
	_, _, err := c.RegisterWebhook(testCtx(t), "https://example.com/hook", nil)
	require.ErrorIs(t, err, client.ErrCapability)
}
