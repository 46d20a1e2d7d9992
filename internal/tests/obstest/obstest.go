// Package obstest builds the small server the observability packages
// (metrics, tracing, dashboard) test against: real tools, a workflow with
// server and client steps, a real store and real clients, so their tests
// observe genuine task activity.
//
// It is a test harness: import it from _test.go files only. It is a
// package of its own so that three packages' tests share one copy, and
// TestOnlyTestsImportHarnesses checks the import graph (go list -deps of
// every package of the module) so that no build other than a test ever
// links it, or testify with it.
package obstest

import (
	"context"
	"errors"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// Workflow is the name of the fixture's task-aware workflow: server steps
// "fetch" and "draft", client step "review", server step "publish".
const Workflow = "release"

// Steps are the fixture workflow's steps in order.
var Steps = []string{"fetch", "draft", "review", "publish"}

// Fixture is a built server plus what its tools saw.
type Fixture struct {
	Srv *builder.Server
	// Cancelled receives the text argument of every slow call whose
	// context was cancelled.
	Cancelled chan string
}

type textIn struct {
	Text string `json:"text"`
}

type textOut struct {
	Text string `json:"text"`
}

type slowIn struct {
	Text string  `json:"text"`
	Ms   float64 `json:"ms"`
}

type reviewIn struct {
	Draft   string `json:"draft"`
	Verdict string `json:"verdict"`
}

// New builds the fixture on a store (memory when st is nil); configure
// adds options (observers) before Build.
func New(t testing.TB, st store.Store, configure func(*builder.Builder)) *Fixture {
	t.Helper()
	f := &Fixture{Cancelled: make(chan string, 16)}
	b := builder.New("obstest", "1").WithoutEnv()
	if st != nil {
		b.WithStore(st)
	} else {
		b.WithDB(t.TempDir() + "/tasks.db")
	}
	opt := &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional}
	builder.Tool(b, &mcp.Tool{Name: "echo", Description: "Echo text."}, func(ctx context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, textOut, error) {
		return nil, textOut{Text: in.Text}, nil
	}, opt)
	builder.Tool(b, &mcp.Tool{Name: "fail", Description: "Always fails."}, func(ctx context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, textOut, error) {
		return nil, textOut{}, errors.New("fail: " + in.Text)
	}, opt)
	builder.Tool(b, &mcp.Tool{Name: "slow", Description: "Waits ms milliseconds, or until cancelled."}, func(ctx context.Context, _ *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, textOut, error) {
		select {
		case <-time.After(time.Duration(in.Ms * float64(time.Millisecond))):
			return nil, textOut{Text: in.Text}, nil
		case <-ctx.Done():
			select {
			case f.Cancelled <- in.Text:
			default:
			}
			return nil, textOut{}, ctx.Err()
		}
	}, opt)
	builder.Tool(b, &mcp.Tool{Name: "draft", Description: "Drafts notes."}, func(ctx context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, textOut, error) {
		return nil, textOut{Text: "notes on " + in.Text}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "review", Description: "Records a review."}, func(ctx context.Context, _ *mcp.CallToolRequest, in reviewIn) (*mcp.CallToolResult, textOut, error) {
		return nil, textOut{Text: in.Draft + " (" + in.Verdict + ")"}, nil
	}, nil)
	b.TaskWorkflow(workflow.New(Workflow, "Draft, review and publish notes").
		Arg("topic", "what the notes are about", true).
		Step(
			workflow.Server("fetch", "echo").Bind("text", workflow.PromptArg("topic")).As("fetched"),
			workflow.Server("draft", "draft").Bind("text", workflow.StepOutput("fetched", "text")),
			workflow.Client("review", "review").
				Bind("draft", workflow.StepOutput("draft", "text")).
				Bind("verdict", workflow.FromClient("your verdict")),
			workflow.Server("publish", "echo").Bind("text", workflow.StepOutput("review", "text")),
		))
	if configure != nil {
		configure(b)
	}
	srv, err := b.Build(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	f.Srv = srv
	return f
}

// Client connects a client over an in-memory transport (core dialect).
func (f *Fixture) Client(t testing.TB) *client.Client {
	t.Helper()
	tr, err := f.Srv.Connect(t.Context())
	require.NoError(t, err)
	c, err := client.Dial(t.Context(), tr, &client.Options{Dialect: mcptask.Core})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Start calls tool as a task and returns the task id once it exists,
// leaving it running.
func Start(t testing.TB, c *client.Client, tool string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for ev, err := range c.CallTool(ctx, tool, args, nil) {
		require.NoError(t, err)
		if ev.Kind == client.EventCreated {
			return ev.Task.ID
		}
	}
	t.Fatalf("calling %s: no task was created", tool)
	return ""
}

// Handoff starts the fixture workflow and returns its prompt result and
// handoff (the workflow waits for the client's review step).
func Handoff(t testing.TB, c *client.Client, topic string) (*mcp.GetPromptResult, *handoff.Document) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, doc, err := c.GetPrompt(ctx, Workflow, map[string]string{"topic": topic})
	require.NoError(t, err)
	require.NotNil(t, doc, "the workflow hands off")
	return res, doc
}

// Finish performs the client step of a handed-off fixture workflow and
// waits for the task to complete.
func Finish(t testing.TB, c *client.Client, doc *handoff.Document, opts *client.FollowOptions) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var o client.FollowOptions
	if opts != nil {
		o = *opts
	}
	if o.Fill == nil {
		o.Fill = func(context.Context, handoff.RemainingStep, []string) (map[string]any, error) {
			return map[string]any{"verdict": "approved"}, nil
		}
	}
	_, err := c.Follow(ctx, doc, &o)
	require.NoError(t, err, "following %s", doc.TaskID)
}

// Wait polls the store until task id is in status want (bounded).
func (f *Fixture) Wait(t testing.TB, id string, want mcptask.Status) *store.Task {
	t.Helper()
	var last *store.Task
	require.Eventually(t, func() bool {
		task, err := f.Srv.Store.Get(t.Context(), id)
		if err != nil {
			return false
		}
		last = task
		return task.Status == want
	}, 10*time.Second, 5*time.Millisecond, "task %s never reached %s (last %v)", id, want, statusOf(last))
	return last
}

func statusOf(t *store.Task) string {
	if t == nil {
		return "none"
	}
	return fmt.Sprintf("%s: %s", t.Status, t.StatusMessage)
}
