package workflow

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/testhooks"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// A continuation whose step is recorded answers with the step's result
// even when the task cannot be read any more by the time it answers (here
// it is deleted right after the record, as the ttl sweep deletes an ended
// task): no error, no panic turned into -32603.
func TestRecordedContinuationAnswersWhenTheTaskIsGone(t *testing.T) {
	e := newFakeEngine()
	abcTools(e)
	var hook func(ctx context.Context, taskID, step string)
	f := newFixture(t, e, &Options{PromptWait: -1, hooks: testhooks.Workflow{AfterRecord: func(ctx context.Context, taskID, step string) { hook(ctx, taskID, step) }}}, abc(nil))
	tk, p := f.start(t, "abc", nil)
	require.Equal(t, mcptask.StepAwaitingClient, p.step("b").Status)
	deleted := false
	hook = func(ctx context.Context, taskID, step string) {
		if taskID != tk.ID {
			return
		}
		got, err := e.st.Get(ctx, taskID)
		require.NoError(t, err)
		gp, err := decodeProgress(got)
		require.NoError(t, err)
		require.Equal(t, mcptask.StepCompleted, gp.step("b").Status, "the hook runs after the record committed")
		require.NoError(t, e.st.Delete(ctx, taskID))
		deleted = true
	}

	res, err := f.call(t, tk.ID, "tb", map[string]any{"x": 1})
	require.NoError(t, err, "a recorded step is never answered with an error")
	require.True(t, deleted)
	ctr, ok := res.(*mcp.CallToolResult)
	require.True(t, ok, "%T", res)
	require.False(t, ctr.IsError)
	require.Equal(t, map[string]any{"by": "tb"}, ctr.StructuredContent, "the answer carries the step's result")
	require.Equal(t, mcptask.RelatedTask{TaskID: tk.ID}, ctr.Meta[mcptask.MetaRelatedTask])
	_, err = e.st.Get(context.Background(), tk.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// A client that retries a continuation (it lost the reply) while the first
// call is held right after its record gets the recorded result, replayed,
// without waiting for the held call, and the tool ran once; the held call,
// resumed, answers as the one that recorded the step.
func TestRetryDuringARecordedCallsAnswerIsReplayed(t *testing.T) {
	e := newFakeEngine()
	abcTools(e)
	// A short PromptWait: the retry answers "still working" while nothing
	// runs c (the fake engine has no scheduler to wake the task).
	var hook func(ctx context.Context, taskID, step string)
	f := newFixture(t, e, &Options{PromptWait: 100 * time.Millisecond, hooks: testhooks.Workflow{AfterRecord: func(ctx context.Context, taskID, step string) { hook(ctx, taskID, step) }}}, abc(nil))
	tk, _ := f.start(t, "abc", nil)
	recorded, resume := make(chan struct{}), make(chan struct{})
	hook = func(ctx context.Context, taskID, step string) {
		if taskID == tk.ID {
			close(recorded)
			<-resume
		}
	}
	type reply struct {
		res mcp.Result
		err error
	}
	call := func() <-chan reply {
		out := make(chan reply, 1)
		go func() {
			req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "tb", Arguments: []byte(`{"x":1}`), Meta: mcp.Meta{mcptask.MetaTaskID: tk.ID}}}
			res, err := e.cont(context.Background(), e.Resolve(context.Background(), req), req)
			out <- reply{res, err}
		}()
		return out
	}
	wait := func(ch <-chan reply, what string) reply {
		select {
		case r := <-ch:
			return r
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no answer within 30s", what)
		}
		return reply{}
	}

	first := call()
	select {
	case <-recorded:
	case <-time.After(30 * time.Second):
		t.Fatal("the first call did not record its step")
	}
	r := wait(call(), "the retry (it must not wait for the held call)")
	require.NoError(t, r.err, "the retry is answered, not refused")
	ctr := r.res.(*mcp.CallToolResult)
	require.Equal(t, map[string]any{"by": "tb"}, ctr.StructuredContent)
	require.True(t, ctr.Meta[mcptask.MetaWorkflow].(mcptask.WorkflowSummary).Replayed)
	require.Equal(t, 1, e.callsOf("tb"), "the tool ran once")

	close(resume)
	r = wait(first, "the held call, resumed")
	require.NoError(t, r.err)
	ctr = r.res.(*mcp.CallToolResult)
	require.Equal(t, map[string]any{"by": "tb"}, ctr.StructuredContent)
	require.False(t, ctr.Meta[mcptask.MetaWorkflow].(mcptask.WorkflowSummary).Replayed)
	done, _ := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, done.Status, "the resumed call set off c")
	require.Equal(t, 1, e.callsOf("tb"))
}
