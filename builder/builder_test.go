package builder_test

import (
	"context"
	"github.com/taskbridge/taskbridge/mcptask"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

type echoIn struct {
	Text string `json:"text"`
}

func echo(ctx context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoIn, error) {
	return nil, in, nil
}

func TestBuildReportsEveryWorkflowProblem(t *testing.T) {
	b := builder.New("t", "1").WithStore(memory.New(nil)).WithoutEnv()
	builder.Tool(b, &mcp.Tool{Name: "echo"}, echo, nil)
	b.TaskWorkflow(workflow.New("bad1", "d").Step(workflow.Server("a", "missing_tool")))
	b.PlainWorkflow(workflow.New("bad2", "d").Step(workflow.Server("a", "echo")))
	_, err := b.Build(context.Background())
	require.Error(t, err)
	require.ErrorIs(t, err, workflow.ErrInvalid)
	require.ErrorContains(t, err, `workflow "bad1"`)
	require.ErrorContains(t, err, `unknown tool "missing_tool"`)
	require.ErrorContains(t, err, `workflow "bad2"`)
	require.ErrorContains(t, err, `required argument "text" of tool "echo" is not bound`)
}

func TestBuildRejectsNamelessTool(t *testing.T) {
	b := builder.New("t", "1").WithStore(memory.New(nil))
	builder.Tool(b, &mcp.Tool{}, echo, nil)
	_, err := b.Build(context.Background())
	require.ErrorContains(t, err, "has no name")
}

func TestBuildOpensAndClosesItsStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "tasks.db")
	b := builder.New("t", "1").WithDB(path).WithoutEnv()
	builder.Tool(b, &mcp.Tool{Name: "echo"}, echo, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	require.Equal(t, path, srv.DBPath)
	require.NoError(t, srv.Close())
	// The file lock is released: a second server opens the same file.
	srv2, err := builder.New("t", "1").WithDB(path).WithoutEnv().Build(context.Background())
	require.NoError(t, err)
	require.NoError(t, srv2.Close())
}

func TestBuildReadsEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "env.db")
	t.Setenv(builder.EnvDB, path)
	t.Setenv(taskrouter.EnvPollInterval, "123")
	srv, err := builder.New("t", "1").Build(context.Background())
	require.NoError(t, err)
	defer srv.Close()
	require.Equal(t, path, srv.DBPath)
	require.EqualValues(t, 123e6, srv.Router.Options().PollInterval)

	t.Setenv(builder.EnvDB, "") // it cannot take effect with WithStore (TestEnvDBWithStoreRefused)
	t.Setenv(taskrouter.EnvPollInterval, "later")
	_, err = builder.New("t", "1").WithStore(memory.New(nil)).Build(context.Background())
	require.ErrorContains(t, err, taskrouter.EnvPollInterval)
	t.Setenv(taskrouter.EnvPollInterval, "")

	// The bridge's settings: the builder's value, overridden by the
	// environment; a malformed value is refused with its name.
	t.Setenv(workflow.EnvProgressInterval, "-1")
	t.Setenv(workflow.EnvOrphanTimeout, "2m")
	srv, err = builder.New("t", "1").WithStore(memory.New(nil)).
		WithWorkflowOptions(workflow.Options{ProgressInterval: time.Second, OrphanTimeout: time.Minute}).Build(context.Background())
	require.NoError(t, err)
	defer srv.Close()
	require.Negative(t, srv.Bridge.Options().ProgressInterval)
	require.Equal(t, 2*time.Minute, srv.Bridge.Options().OrphanTimeout)
	srv2, err := builder.New("t", "1").WithStore(memory.New(nil)).WithoutEnv().
		WithWorkflowOptions(workflow.Options{ProgressInterval: time.Second}).Build(context.Background())
	require.NoError(t, err)
	defer srv2.Close()
	require.Equal(t, time.Second, srv2.Bridge.Options().ProgressInterval)
	t.Setenv(workflow.EnvProgressInterval, "often")
	_, err = builder.New("t", "1").WithStore(memory.New(nil)).Build(context.Background())
	require.ErrorContains(t, err, workflow.EnvProgressInterval)
}

// allSeeing is an observer that also watches steps, adds result _meta and
// wants the router.
type allSeeing struct {
	mu       sync.Mutex
	created  int
	steps    []string
	attached *taskrouter.Router
}

func (a *allSeeing) TaskEvent(e taskrouter.TaskEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e.Kind == taskrouter.TaskCreated {
		a.created++
	}
}
func (a *allSeeing) HandlerEvent(taskrouter.HandlerEvent) {}
func (a *allSeeing) StepEvent(e workflow.StepEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.steps = append(a.steps, e.Step)
}
func (a *allSeeing) ResultMeta(t *store.Task) map[string]any { return map[string]any{"seen": t.ID} }
func (a *allSeeing) Attach(r *taskrouter.Router)             { a.attached = r }

// TestWithObserverWiresEverything: one WithObserver reaches the engine
// (with the Config's own observer kept), the workflow steps, the prompt
// results' _meta and the router.
func TestWithObserverWiresEverything(t *testing.T) {
	first, second := &allSeeing{}, &allSeeing{}
	b := builder.New("t", "1").WithStore(memory.New(nil)).WithoutEnv().
		WithRouterOptions(taskrouter.Options{Observer: first}).WithObserver(second)
	builder.Tool(b, &mcp.Tool{Name: "echo"}, echo, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	b.TaskWorkflow(workflow.New("w", "d").Arg("text", "t", true).Step(workflow.Server("say", "echo").Bind("text", workflow.PromptArg("text"))))
	srv, err := b.Build(t.Context())
	require.NoError(t, err)
	defer srv.Close()
	require.Same(t, srv.Router, second.attached)

	tr, err := srv.Connect(t.Context())
	require.NoError(t, err)
	c, err := client.Dial(t.Context(), tr, nil)
	require.NoError(t, err)
	defer c.Close()
	res, doc, err := c.GetPrompt(t.Context(), "w", map[string]string{"text": "hi"})
	require.NoError(t, err)
	require.NotNil(t, doc)
	require.Equal(t, doc.TaskID, res.Meta["seen"])
	second.mu.Lock()
	defer second.mu.Unlock()
	require.Equal(t, []string{"say"}, second.steps)
	require.Equal(t, 1, second.created)
	first.mu.Lock()
	defer first.mu.Unlock()
	require.Equal(t, 1, first.created, "the Config's observer still sees the engine")
	require.Nil(t, first.attached, "only WithObserver's observers are wired beyond the engine")
}

// TestRedactDSN: a DSN in a log line shows no password.
func TestRedactDSN(t *testing.T) {
	require.Equal(t, "postgres://bob:xxxxx@db.internal/tasks", builder.RedactDSN("postgres://bob:pw@db.internal/tasks"))
	require.Equal(t, "postgresql://bob@db/tasks", builder.RedactDSN("postgresql://bob@db/tasks"))
	require.Equal(t, "tasks.db", builder.RedactDSN("tasks.db"))
}

// TestWithMiddlewareSeesSteps: middleware added with WithMiddleware runs
// below the engine and sees a workflow's server step (its tools/call, the
// step in its context), which middleware added above the engine never
// does; either may answer for the tool.
func TestWithMiddlewareSeesSteps(t *testing.T) {
	var mu sync.Mutex
	var below, above []string
	b := builder.New("t", "1").WithStore(memory.New(nil)).WithoutEnv().
		WithMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if info, ok := workflow.StepFrom(ctx); ok && method == "tools/call" {
					mu.Lock()
					below = append(below, info.Step)
					mu.Unlock()
					return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "injected"}}}, nil
				}
				return next(ctx, method, req)
			}
		}).
		Setup(func(s *mcp.Server) {
			s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
				return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
					if method == "tools/call" {
						mu.Lock()
						above = append(above, method)
						mu.Unlock()
					}
					return next(ctx, method, req)
				}
			})
		})
	builder.Tool(b, &mcp.Tool{Name: "echo"}, echo, nil)
	b.TaskWorkflow(workflow.New("w", "d").Step(workflow.Server("say", "echo").Bind("text", workflow.Const("hi"))))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	tr, err := srv.Connect(context.Background())
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "w"})
	require.NoError(t, err)
	text := res.Messages[len(res.Messages)-1].Content.(*mcp.TextContent).Text
	require.Contains(t, text, "injected", "the step's failure is the middleware's answer")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"say"}, below)
	require.Empty(t, above, "middleware above the engine does not see the engine's own calls")
}
