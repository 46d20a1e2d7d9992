package client_test

import (
	"context"
	"github.com/taskbridge/taskbridge/mcptask"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

type boundIn struct {
	Note string `json:"note"`
}

type boundOut struct {
	Seen string `json:"seen"`
}

// The handoff lists the task id among a client step's arguments
// (_task_id, for a model that cannot set _meta); Follow sends it, the
// engine takes it out before the tool runs, and Fill is asked only for the
// other placeholders.
func TestFollowFillsTheTaskIDArgument(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	b := builder.New("bound", "1").WithStore(memory.New(nil)).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: 20 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "bound"}, func(ctx context.Context, req *mcp.CallToolRequest, in boundIn) (*mcp.CallToolResult, boundOut, error) {
		mu.Lock()
		seen = append(seen, string(req.Params.Arguments))
		mu.Unlock()
		return nil, boundOut{Seen: in.Note}, nil
	}, nil)
	b.TaskWorkflow(workflow.New("bound_flow", "a client step").Step(
		workflow.Client("mark", "bound").Bind("note", workflow.FromClient("a note")),
	))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	hs := httptest.NewServer(srv.HTTPHandler(nil))
	t.Cleanup(hs.Close)

	for _, d := range []mcptask.Dialect{mcptask.Core, mcptask.Extension} {
		t.Run(d.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := client.Dial(ctx, client.HTTPTransport(hs.URL, nil), &client.Options{Dialect: d})
			require.NoError(t, err)
			defer c.Close()
			_, doc, err := c.GetPrompt(ctx, "bound_flow", nil)
			require.NoError(t, err)
			require.NotNil(t, doc)
			require.JSONEq(t, `"`+doc.TaskID+`"`, string(doc.RemainingSteps[0].Arguments["_task_id"]), "the handoff carries the id")
			var asked []string
			final, err := c.Follow(ctx, doc, &client.FollowOptions{Fill: func(_ context.Context, _ handoff.RemainingStep, ph []string) (map[string]any, error) {
				asked = append(asked, ph...)
				return map[string]any{"note": "hi"}, nil
			}})
			require.NoError(t, err)
			fdoc, err := handoff.FromResultJSON(final)
			require.NoError(t, err)
			require.Equal(t, string(mcptask.StatusCompleted), fdoc.Status)
			require.Equal(t, []string{"note"}, asked, "_task_id is never asked")
			mu.Lock()
			defer mu.Unlock()
			require.JSONEq(t, `{"note":"hi"}`, seen[len(seen)-1], "the tool never sees _task_id")
		})
	}
}

// A task cancelled while tasks/result waits ends with one message that
// says so once (the server's error restated the status message).
func TestCancelledTaskErrorSaysItOnce(t *testing.T) {
	s := newConfServer(t, nil)
	c := s.dial(mode{true, mcptask.Core}, nil)
	ctx := testCtx(t)
	var id string
	for ev, err := range c.CallTool(ctx, "slow_compute", map[string]any{"seconds": 60}, nil) {
		require.NoError(t, err)
		id = ev.Task.ID
		break
	}
	_, err := c.CancelTask(ctx, id)
	require.NoError(t, err)
	_, err = c.TaskResult(ctx, id)
	require.ErrorIs(t, err, client.ErrCancelled)
	require.Equal(t, 1, strings.Count(err.Error(), "cancel"+"led by request"), err.Error())
	require.Equal(t, 1, strings.Count(err.Error(), id), err.Error())
}
