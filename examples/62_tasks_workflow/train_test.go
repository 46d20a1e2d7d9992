package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/workflow"
)

// endOf waits (bounded) for task id to end and returns it with its
// progress.
func endOf(t *testing.T, srv *builder.Server, id string, within time.Duration) (*store.Task, *workflow.Progress) {
	t.Helper()
	var tk *store.Task
	require.Eventually(t, func() bool {
		var err error
		tk, err = srv.Store.Get(context.Background(), id)
		require.NoError(t, err)
		return tk.Status.Terminal()
	}, within, 20*time.Millisecond, "task %s did not end", id)
	var p workflow.Progress
	require.NoError(t, json.Unmarshal(tk.Variables[workflow.VarProgress], &p))
	return tk, &p
}

// reviewTrainNotes performs the review of the notes the train's child
// workflow drafted, as the train's client: the step the train's handoff
// lists, with the child's task id.
func reviewTrainNotes(t *testing.T, cs *mcp.ClientSession, doc *handoff.Document) *mcp.CallToolResult {
	t.Helper()
	var review *handoff.RemainingStep
	for i := range doc.RemainingSteps {
		if doc.RemainingSteps[i].Name == "notes/review" {
			review = &doc.RemainingSteps[i]
		}
	}
	require.NotNil(t, review, "the child's review is the train's client's: %+v", doc.RemainingSteps)
	require.Equal(t, "review_notes", review.Call.Tool)
	var child string
	require.NoError(t, json.Unmarshal(review.Call.Arguments[mcptask.ArgTaskID], &child))
	require.NotEqual(t, doc.TaskID, child)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "review_notes",
		Arguments: map[string]any{mcptask.ArgTaskID: child, "feedback": "ship it", "approved": true}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%v", res.Content)
	return res
}

// TestReleaseTrain runs release_train the three ways the README shows:
// every service healthy; a flaky service (never healthy); a hanging one
// (cut by its smoke test's timeout). A failed train rolls back every
// deployed service, last first.
func TestReleaseTrain(t *testing.T) {
	cs, _, srv := exampleServer(t)
	t.Run("all healthy", func(t *testing.T) {
		doc := promptDoc(t, cs, "release_train", map[string]string{"repo": "acme/shop", "services": "api, web, worker"})
		require.Equal(t, "release_train", doc.Workflow)
		res := reviewTrainNotes(t, cs, doc)
		text := res.Content[len(res.Content)-1].(*mcp.TextContent).Text
		require.Contains(t, text, "a child workflow of task "+doc.TaskID, "the answer shows the train")
		tk, p := endOf(t, srv, doc.TaskID, 30*time.Second)
		require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
		var deploys []deployOut
		require.NoError(t, json.Unmarshal(p.Outputs["deploy"], &deploys))
		require.Len(t, deploys, 3)
		for i := 1; i < len(deploys); i++ {
			require.False(t, deploys[i].Started.Before(deploys[i-1].Ended), "deploys run one at a time")
		}
		var smoke []smokeOut
		require.NoError(t, json.Unmarshal(p.Outputs["smoke"], &smoke))
		require.Len(t, smoke, 3)
		for _, s := range smoke {
			require.True(t, s.Healthy)
		}
		var notes map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(p.Outputs["notes"], &notes))
		require.Contains(t, notes, "publish", "the child's outputs")
		require.Nil(t, p.Undo)
	})
	t.Run("flaky: rolled back", func(t *testing.T) {
		doc := promptDoc(t, cs, "release_train", map[string]string{"repo": "acme/shop", "services": "api,flaky-web"})
		reviewTrainNotes(t, cs, doc)
		tk, p := endOf(t, srv, doc.TaskID, 30*time.Second)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Contains(t, tk.StatusMessage, `step "smoke[1]" ran 3 time(s) without output "smoke_test" at healthy is true`)
		require.Contains(t, tk.StatusMessage, "undone, last first: deploy[1] (rollback_service), deploy[0] (rollback_service)")
		require.Len(t, p.Undo.Steps, 2)
		require.Equal(t, 3, p.Steps[3].Items[1].Runs, "three tries")
	})
	t.Run("hang: cut by the timeout, rolled back", func(t *testing.T) {
		if testing.Short() {
			t.Skip("three 3 s timeouts")
		}
		// As a tool, the way a model in a host that sends no task calls
		// starts it.
		tr, err := srv.Connect(context.Background())
		require.NoError(t, err)
		host, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(context.Background(), tr, nil)
		require.NoError(t, err)
		defer host.Close()
		res, err := host.CallTool(context.Background(), &mcp.CallToolParams{Name: "release_train",
			Arguments: map[string]any{"repo": "acme/shop", "services": "hang-db,api"}})
		require.NoError(t, err)
		require.False(t, res.IsError, "%v", res.Content)
		doc, err := handoff.FromToolResult(res)
		require.NoError(t, err)
		reviewTrainNotes(t, host, doc)
		tk, p := endOf(t, srv, doc.TaskID, time.Minute)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Contains(t, tk.StatusMessage, "undone, last first: deploy[1] (rollback_service), deploy[0] (rollback_service)")
		hung := p.Steps[3].Items[0]
		require.Equal(t, 3, hung.Runs)
		require.Contains(t, hung.Items[len(hung.Items)-1].Error, "timed out after 3s (the step's Timeout)")
		require.True(t, strings.HasPrefix(tk.StatusMessage, `step "smoke[0]"`), tk.StatusMessage)
	})
	// Its tools take the task id for host mode.
	tools, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	for _, tool := range tools.Tools {
		if tool.Name == "release_train" {
			require.Contains(t, tool.InputSchema.(map[string]any)["properties"], "services")
		}
	}
}
