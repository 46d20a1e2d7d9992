package workflow

import (
	"context"
	"testing"

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
	f := newFixture(t, e, &Options{PromptWait: -1}, abc(nil))
	tk, p := f.start(t, "abc", nil)
	require.Equal(t, StepAwaitingClient, p.step("b").Status)
	deleted := false
	restore := testhooks.SetContinuationRecorded(func(ctx context.Context, taskID, step string) {
		if taskID != tk.ID {
			return
		}
		got, err := e.st.Get(ctx, taskID)
		require.NoError(t, err)
		gp, err := decodeProgress(got)
		require.NoError(t, err)
		require.Equal(t, StepCompleted, gp.step("b").Status, "the hook runs after the record committed")
		require.NoError(t, e.st.Delete(ctx, taskID))
		deleted = true
	})
	defer restore()

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
