package workflow

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
)

// hang blocks until its context ends.
func hang(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
	<-ctx.Done()
	return nil, context.Cause(ctx)
}

// A step's Timeout cuts each attempt: the attempt fails, timed out, and
// the retry policy applies; the workflow never waits for the TTL.
func TestStepTimeout(t *testing.T) {
	e := newFakeEngine()
	e.tick()
	var calls atomic.Int32
	e.tool("smoke", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		calls.Add(1)
		return hang(ctx, args)
	})
	w := New("t", "").Step(Server("smoke", "smoke").Timeout(30 * time.Millisecond).
		WithRetryPolicy(RetryPolicy{MaxAttempts: 2, Backoff: time.Millisecond}).FailsWorkflow())
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	tk, _ := f.start(t, "t", nil)
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.Contains(t, tk.StatusMessage, "timed out after 30ms (the step's Timeout)")
	require.EqualValues(t, 2, calls.Load(), "each attempt was cut, then retried")
	sp := p.step("smoke")
	require.Equal(t, 2, sp.Attempts)
	for _, a := range sp.History {
		require.Contains(t, a.Error, "timed out after 30ms")
	}
	require.Equal(t, 2, len(p.Errors))
}

// A step's Heartbeat: an attempt silent longer than it is lost and
// retried; one that beats lives as long as it beats. The engine times a
// heartbeat on the real clock: the beats are 10 ms apart against a 500 ms
// heartbeat, so only a stall of half a second could cut a beating attempt.
func TestStepHeartbeat(t *testing.T) {
	e := newFakeEngine()
	e.tick()
	var calls atomic.Int32
	e.tool("deploy", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		n := calls.Add(1)
		for range 100 { // 100 beats 10 ms apart: twice the heartbeat
			Heartbeat(ctx)
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		if n == 1 {
			return hang(ctx, args) // goes silent
		}
		return ok(map[string]any{"deployed": true}), nil
	})
	w := New("t", "").Step(Server("deploy", "deploy").Heartbeat(500 * time.Millisecond).
		WithRetryPolicy(RetryPolicy{MaxAttempts: 2, Backoff: time.Millisecond}))
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	tk, _ := f.start(t, "t", nil)
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.EqualValues(t, 2, calls.Load())
	sp := p.step("deploy")
	require.Contains(t, sp.History[0].Error, "lost: no heartbeat within 500ms (the step's Heartbeat)")
	require.Empty(t, sp.History[1].Error)

	// Heartbeat outside a step does nothing.
	Heartbeat(context.Background())
}

// A workflow's deadline fails it wherever it stands: asleep, or waiting
// for the client; the scheduler wakes it at the deadline.
func TestWorkflowDeadline(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "before", "after", "review")
	w := New("d", "").WithDeadline(time.Minute).Step(
		Server("before", "before"),
		Sleep("nap", 2*time.Minute),
		Server("after", "after"),
	)
	f := newFixture(t, e, &Options{PromptWait: -1}, w, New("c", "").WithDeadline(time.Hour).Step(Client("review", "review")))
	start := e.Now()
	tk, _ := f.start(t, "d", nil)
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, start.Add(time.Minute), *p.DeadlineAt)
	require.Equal(t, start.Add(time.Minute), tk.WakeAt.UTC(), "the deadline comes before the sleep's end")
	e.advance(time.Minute)
	require.Equal(t, 1, f.e.wakeDue(t))
	tk, _ = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.Contains(t, tk.StatusMessage, "the workflow's deadline of 1m0s passed")
	require.Zero(t, e.callsOf("after"))

	tk, _ = f.start(t, "c", nil)
	e.advance(time.Hour)
	require.Equal(t, 1, f.e.wakeDue(t))
	tk, _ = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.Contains(t, tk.StatusMessage, "the workflow's deadline of 1h0m0s passed")

	var ve *ValidationError
	require.ErrorAs(t, New("x", "").WithDeadline(MaxWait+time.Hour).Step(Server("before", "before")).Validate(e.lookup()), &ve)
	require.ErrorAs(t, New("x", "").Step(Sleep("nap", time.Second).Timeout(time.Second)).Validate(e.lookup()), &ve, "only a tool step's attempts are timed")
}
