package taskrouter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
)

// taskNotes returns the statuses notifications/tasks reported for id.
func (p *peer) taskNotes(id string) []string {
	var out []string
	for _, n := range p.notesOf(mcptask.NotificationTasks) {
		if n["taskId"] == id {
			out = append(out, n["status"].(string))
		}
	}
	return out
}

// TestExtListenNotifications: subscriptions/listen with task ids, over
// Streamable HTTP and over a connection wrapped by Router.Transport (what
// stdio uses): the server acknowledges the ids the requestor may see,
// notifies each task's state at once and at every change, and answers the
// listen request once every followed task ended.
func TestExtListenNotifications(t *testing.T) {
	for _, k := range transports {
		t.Run(k.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			p := h.dial(k, ext, nil)
			quick := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 150, "label": "quick"}})["taskId"].(string)
			long := p.mustCall("tools/call", map[string]any{"name": "must", "arguments": map[string]any{"ms": 60000, "label": "long"}})["taskId"].(string)

			type outcome struct {
				res map[string]any
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := p.call(mcptask.MethodSubscriptionsListen, map[string]any{"notifications": map[string]any{"taskIds": []string{quick, long, "no-such-task", quick}}})
				done <- outcome{res, err}
			}()
			require.Eventually(t, func() bool { return len(p.notesOf("notifications/subscriptions/acknowledged")) == 1 }, 30*time.Second, 5*time.Millisecond)
			ack := p.notesOf("notifications/subscriptions/acknowledged")[0]
			require.Equal(t, []any{quick, long}, ack["notifications"].(map[string]any)["taskIds"], "only the tasks the requestor may see, once each")
			subID := ack["_meta"].(map[string]any)["io.modelcontextprotocol/subscriptionId"]
			require.NotNil(t, subID)

			// The quick task's end arrives without polling.
			require.Eventually(t, func() bool {
				s := p.taskNotes(quick)
				return len(s) > 0 && s[len(s)-1] == "completed"
			}, 30*time.Second, 5*time.Millisecond)
			require.Contains(t, p.taskNotes(long), "working")

			// Cancelling the long one ends it, and with it the listen.
			p.mustCall("tasks/cancel", map[string]any{"taskId": long})
			select {
			case o := <-done:
				require.NoError(t, o.err)
				require.Equal(t, "complete", o.res["resultType"])
				require.Equal(t, subID, o.res["_meta"].(map[string]any)["io.modelcontextprotocol/subscriptionId"])
			case <-time.After(30 * time.Second):
				t.Fatal("the listen request did not end when its tasks did")
			}
			s := p.taskNotes(long)
			require.Equal(t, "cancelled", s[len(s)-1])
			for _, n := range p.notesOf(mcptask.NotificationTasks) {
				require.Equal(t, subID, n["_meta"].(map[string]any)["io.modelcontextprotocol/subscriptionId"])
				require.NotContains(t, n, "resultType")
			}

			// The session goes on: the server still answers.
			require.Equal(t, "cancelled", p.mustCall("tasks/get", map[string]any{"taskId": long})["status"])
		})
	}
}

// TestExtListenCancelledOnStdio: on a Router.Transport connection, a
// listen the client cancels (notifications/cancelled) stops notifying;
// a listen without the extension declared is refused with the extension
// dialect's missing-extension error, as over HTTP.
func TestExtListenCancelledOnStdio(t *testing.T) {
	h := newHarness(t, nil)
	p := h.dial(inMemory, ext, nil)
	long := p.mustCall("tools/call", map[string]any{"name": "must", "arguments": map[string]any{"ms": 60000, "label": "l"}})["taskId"].(string)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		var res map[string]any
		errc <- p.c.Call(ctx, mcptask.MethodSubscriptionsListen, p.params(map[string]any{"notifications": map[string]any{"taskIds": []string{long}}}), &res)
	}()
	require.Eventually(t, func() bool { return len(p.taskNotes(long)) == 1 }, 30*time.Second, 5*time.Millisecond)
	cancel() // the peer sends notifications/cancelled for the listen
	require.ErrorIs(t, <-errc, context.Canceled)
	// The server stopped the stream: the task's end is not notified. (A
	// stream left running would send it within milliseconds.)
	time.Sleep(50 * time.Millisecond) // let the cancellation reach the server
	p.mustCall("tasks/cancel", map[string]any{"taskId": long})
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, []string{"working"}, p.taskNotes(long))

	// Without the extension declared.
	u := h.dial(inMemory, extUndeclared, nil)
	_, err := u.call(mcptask.MethodSubscriptionsListen, map[string]any{"notifications": map[string]any{"taskIds": []string{long}}})
	require.Equal(t, int64(mcptask.MissingExtension("x").Code), rpcCode(t, err))
}
