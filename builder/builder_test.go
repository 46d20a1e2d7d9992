package builder_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
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
	b := builder.New("t", "1").WithStore(memory.New()).WithoutEnv()
	builder.Tool(b, &mcp.Tool{Name: "echo"}, echo, taskrouter.ToolOptions{})
	b.TaskWorkflow(workflow.New("bad1", "d").Step(workflow.Server("a", "missing_tool")))
	b.Workflow(workflow.New("bad2", "d").Step(workflow.Server("a", "echo")))
	_, err := b.Build(context.Background())
	require.Error(t, err)
	require.ErrorIs(t, err, workflow.ErrInvalid)
	require.ErrorContains(t, err, `workflow "bad1"`)
	require.ErrorContains(t, err, `unknown tool "missing_tool"`)
	require.ErrorContains(t, err, `workflow "bad2"`)
	require.ErrorContains(t, err, `required argument "text" of tool "echo" is not bound`)
}

func TestBuildRejectsNamelessTool(t *testing.T) {
	b := builder.New("t", "1").WithStore(memory.New())
	builder.Tool(b, &mcp.Tool{}, echo, taskrouter.ToolOptions{})
	_, err := b.Build(context.Background())
	require.ErrorContains(t, err, "has no name")
}

func TestBuildOpensAndClosesItsStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "tasks.db")
	b := builder.New("t", "1").WithDBPath(path).WithoutEnv()
	builder.Tool(b, &mcp.Tool{Name: "echo"}, echo, taskrouter.ToolOptions{TaskSupport: taskrouter.TaskOptional})
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	require.Equal(t, path, srv.DBPath)
	require.NoError(t, srv.Close())
	// The file lock is released: a second server opens the same file.
	srv2, err := builder.New("t", "1").WithDBPath(path).WithoutEnv().Build(context.Background())
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
	require.EqualValues(t, 123e6, srv.Router.Config().PollInterval)

	t.Setenv(taskrouter.EnvPollInterval, "later")
	_, err = builder.New("t", "1").WithStore(memory.New()).Build(context.Background())
	require.ErrorContains(t, err, taskrouter.EnvPollInterval)
}
