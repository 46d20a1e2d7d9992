package integration

import (
	"context"
	"github.com/taskbridge/taskbridge/mcptask"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/rpcconn"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// timeServer serves "slow": a server step of stepTime, a client step, then
// another server step of stepTime. gate, when set, holds the first step
// until closed.
func timeServer(t *testing.T, stepTime time.Duration, gate chan struct{}, opts workflow.Options, cfg taskrouter.Options) (*builder.Server, string) {
	t.Helper()
	b := builder.New("time", "1").WithDB(filepath.Join(t.TempDir(), "tasks.db")).WithoutEnv().
		WithRouterOptions(cfg).WithWorkflowOptions(opts)
	builder.Tool(b, &mcp.Tool{Name: "work"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ vIn) (*mcp.CallToolResult, vOut, error) {
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, vOut{}, ctx.Err()
			}
		}
		select {
		case <-time.After(stepTime):
			return nil, vOut{By: "work"}, nil
		case <-ctx.Done():
			return nil, vOut{}, ctx.Err()
		}
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "check"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ vIn) (*mcp.CallToolResult, vOut, error) {
		return nil, vOut{By: "check"}, nil
	}, nil)
	b.TaskWorkflow(workflow.New("slow", "slow steps around a client step").Step(
		workflow.Server("first", "work"),
		workflow.Client("check", "check"),
		workflow.Server("last", "work"),
	))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	hs := httptest.NewServer(srv.HTTPHandler(nil))
	t.Cleanup(hs.Close)
	return srv, hs.URL
}

func httpClient(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// onlyTask returns the id of the one task in st once it exists.
func onlyTask(t *testing.T, st store.Store) string {
	t.Helper()
	var id string
	require.Eventually(t, func() bool {
		page, err := st.Query(context.Background(), store.Query{})
		if err != nil || len(page.Tasks) != 1 {
			return false
		}
		id = page.Tasks[0].ID
		return true
	}, 30*time.Second, 10*time.Millisecond)
	return id
}

// A host that gives up on prompts/get after 2 s while a 5 s server step
// runs cancels nothing: the step completes on the engine and the workflow
// pauses at the client step, as tasks/get says. The same for a
// continuation whose following server step outlasts its caller.
func TestHostGivingUpCancelsNoStep(t *testing.T) {
	srv, url := timeServer(t, 5*time.Second, nil, workflow.Options{}, taskrouter.Options{})
	cs := httpClient(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "slow"})
	cancel()
	require.Error(t, err, "the host gave up")
	id := onlyTask(t, srv.Store)

	cs = httpClient(t, url) // the host reconnects
	require.Eventually(t, func() bool {
		tk, err := srv.Router.Task(context.Background(), id)
		return err == nil && tk.StatusMessage == `waiting for the client to call tool "check" for step "check" (with the task id as argument _task_id)`
	}, 15*time.Second, 20*time.Millisecond, "the step completed and the workflow paused at the client step")
	tk, err := srv.Router.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusWorking, tk.Status)

	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "check", Arguments: map[string]any{"_task_id": id}})
	cancel()
	require.Eventually(t, func() bool {
		tk, err := srv.Router.Task(context.Background(), id)
		return err == nil && tk.Status == mcptask.StatusCompleted
	}, 15*time.Second, 20*time.Millisecond, "the following step ran to its end and completed the workflow")
}

// The orphan rule applies only to a task whose handoff never reached a
// client: one delivered is continued three orphan timeouts later and
// completes; one whose prompts/get was cut before the handoff expires as
// an orphan.
func TestOrphanOnlyWithoutDelivery(t *testing.T) {
	const orphan = 300 * time.Millisecond
	cfg := taskrouter.Options{SweepInterval: 50 * time.Millisecond}
	t.Run("delivered", func(t *testing.T) {
		srv, url := timeServer(t, 0, nil, workflow.Options{OrphanTimeout: orphan}, cfg)
		cs := httpClient(t, url)
		res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "slow"})
		require.NoError(t, err)
		doc, err := handoff.FromPromptResult(res)
		require.NoError(t, err)
		time.Sleep(3 * orphan) // a human takes their time
		out, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "check", Arguments: map[string]any{"_task_id": doc.TaskID}})
		require.NoError(t, err)
		require.False(t, out.IsError)
		require.Eventually(t, func() bool {
			tk, err := srv.Router.Task(context.Background(), doc.TaskID)
			return err == nil && tk.Status == mcptask.StatusCompleted
		}, 30*time.Second, 10*time.Millisecond)
	})
	t.Run("cut before the handoff", func(t *testing.T) {
		gate := make(chan struct{})
		srv, _ := timeServer(t, 0, gate, workflow.Options{OrphanTimeout: orphan}, cfg)
		// A client that gives up cancels its request
		// (notifications/cancelled): the handoff is never returned. (Over
		// stdio and in memory the SDK cancels the handler then; over
		// Streamable HTTP go-sdk v1.8 does not, see README "Limits".)
		tr, err := srv.Connect(context.Background())
		require.NoError(t, err)
		c, err := rpcconn.Dial(context.Background(), tr, &rpcconn.Options{SendCancelled: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		require.NoError(t, c.Call(context.Background(), "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": "host", "version": "1"}}, nil))
		require.NoError(t, c.Notify(context.Background(), "notifications/initialized", map[string]any{}))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = c.Call(ctx, "prompts/get", map[string]any{"name": "slow"}, nil)
		}()
		id := onlyTask(t, srv.Store)
		cancel() // the caller is gone before the handoff
		<-done
		close(gate)
		require.Eventually(t, func() bool {
			tk, err := srv.Router.Task(context.Background(), id)
			return err == nil && tk.Status == mcptask.StatusFailed
		}, 30*time.Second, 10*time.Millisecond)
		tk, err := srv.Router.Task(context.Background(), id)
		require.NoError(t, err)
		require.Contains(t, tk.StatusMessage, "orphaned")
	})
}
