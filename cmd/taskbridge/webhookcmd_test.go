package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/tests/pushtest"
)

// TestWebhookCommands: `webhook add` registers a webhook for a task and
// prints its secret, the server pushes the task's end to it, signed;
// `webhook list`, `webhook deliveries` and `webhook rm` from later runs
// (other sessions: the webhook's id is the capability, as a task's is)
// show and delete it.
func TestWebhookCommands(t *testing.T) {
	url := confServer(t)
	rc := pushtest.New(t)

	code, out, errOut := cli(t, "", "-url", url, "-json", "call", "-detach", "slow_compute", "seconds=1")
	require.Equal(t, 0, code, errOut)
	id := jsonLines(t, out)[0]["taskId"].(string)

	code, out, errOut = cli(t, "", "-url", url, "-json", "webhook", "add", rc.URL, "-task", id, "-events", "terminal")
	require.Equal(t, 0, code, errOut)
	added := jsonLines(t, out)[0]
	secret := added["secret"].(string)
	hook := added["webhook"].(map[string]any)["webhookId"].(string)

	d := pushtest.Verified(t, secret, rc.Wait(t, 1)[0])
	require.Equal(t, id, d.Task.TaskID)

	code, out, errOut = cli(t, "", "-url", url, "webhook", "list", "-task", id)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, hook)
	require.Contains(t, out, "task "+id+"  (terminal)")
	require.Eventually(t, func() bool {
		code, out, errOut = cli(t, "", "-url", url, "webhook", "deliveries", hook)
		require.Equal(t, 0, code, errOut)
		return strings.Contains(out, "delivered") && strings.Contains(out, d.ID)
	}, 30*time.Second, 50*time.Millisecond)

	code, out, errOut = cli(t, "", "-url", url, "webhook", "rm", hook)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "deleted webhook "+hook)
	code, out, errOut = cli(t, "", "-url", url, "webhook", "rm", hook)
	require.Equal(t, 1, code)
	require.Contains(t, out+errOut, "not found")

	code, out, errOut = cli(t, "", "-url", url, "webhook", "add", "https://10.0.0.1/x")
	require.Equal(t, 1, code)
	require.Contains(t, out+errOut, "private range")
	code, _, errOut = cli(t, "", "-url", url, "webhook", "add", rc.URL, "-events", "sometimes")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown event "sometimes"`)
	code, _, _ = cli(t, "", "-url", url, "webhook")
	require.Equal(t, 2, code)
}
