package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

func confServer(t *testing.T) string { return clitest.Jobs(t) }

type up struct {
	Text string `json:"text"`
}

func workflowServer(t *testing.T) string {
	t.Helper()
	b := builder.New("wf", "1").WithStore(memory.New(nil)).WithoutEnv().WithRouterOptions(taskrouter.Options{PollInterval: 20 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "upper"}, func(ctx context.Context, _ *mcp.CallToolRequest, in up) (*mcp.CallToolResult, up, error) {
		return nil, up{Text: strings.ToUpper(in.Text)}, nil
	}, nil)
	b.TaskWorkflow(workflow.New("shout", "shout twice").Arg("text", "t", true).Step(
		workflow.Server("one", "upper").Bind("text", workflow.PromptArg("text")),
		workflow.Client("two", "upper").Bind("text", workflow.FromClient("something to shout")),
	))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return clitest.Serve(t, srv.HTTPHandler(nil))
}

func cli(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		out = append(out, m)
	}
	return out
}

func TestHelpAndUsageErrors(t *testing.T) {
	code, out, _ := cli(t, "", "help")
	require.Equal(t, 0, code)
	for _, cmd := range []string{"info", "tools", "call TOOL", "tasks list", "tasks get ID", "tasks result ID", "tasks cancel ID", "prompt NAME", "-resume ID", "-task-id ID", "ui URL | ui -- COMMAND ARGS", "store check FILE", "Exit status:", "3    cannot reach the server", "124  -timeout", "130  interrupted", "-token TOKEN", "-header K=V", "tasks forget", "Examples:"} {
		require.Contains(t, out, cmd)
	}
	code, _, errOut := cli(t, "", "tools")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "give -url URL")
	url := confServer(t)
	code, _, errOut = cli(t, "", "-url", url, "frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown command "frobnicate"`)
	code, _, errOut = cli(t, "", "-url", url, "-dialect", "klingon", "tools")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "-dialect must be")
}

func TestToolsAndInfo(t *testing.T) {
	url := confServer(t)
	code, out, errOut := cli(t, "", "-url", url, "-json", "tools")
	require.Equal(t, 0, code, errOut)
	support := map[string]any{}
	for _, m := range jsonLines(t, out) {
		support[m["name"].(string)] = m["taskSupport"]
	}
	require.Equal(t, "forbidden", support["greet"])
	require.Equal(t, "optional", support["slow_compute"])
	require.Equal(t, "required", support["failing_job"])
	code, out, _ = cli(t, "", "-url", url, "info")
	require.Equal(t, 0, code)
	require.Contains(t, out, "dialect extension")
	code, out, _ = cli(t, "", "-url", url, "-dialect", "core", "info")
	require.Equal(t, 0, code)
	require.Contains(t, out, "dialect core")
}

func TestCallWatchesTheTask(t *testing.T) {
	url := confServer(t)
	for _, dialect := range []string{"core", "extension"} {
		t.Run(dialect, func(t *testing.T) {
			code, out, errOut := cli(t, "", "-url", url, "-dialect", dialect, "-json", "call", "slow_compute", `{"seconds": 0.2, "label": "cli"}`)
			require.Equal(t, 0, code, errOut)
			lines := jsonLines(t, out)
			require.Equal(t, "created", lines[0]["event"])
			last := lines[len(lines)-1]
			require.Equal(t, "result", last["event"])
			require.Contains(t, last["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"], `Computation "cli" completed`)
			require.Equal(t, "completed", last["task"].(map[string]any)["status"])

			// Human output: a line per change, then the result.
			code, out, _ = cli(t, "", "-url", url, "-dialect", dialect, "call", "slow_compute", "seconds=0", "label=h")
			require.Equal(t, 0, code)
			require.Contains(t, out, "result (task ")
		})
	}
}

func TestCallAnswersElicitationFromStdin(t *testing.T) {
	url := confServer(t)
	for _, dialect := range []string{"core", "extension"} {
		code, out, errOut := cli(t, "yes\n", "-url", url, "-dialect", dialect, "call", "confirm_delete", "filename=a.txt")
		require.Equal(t, 0, code, errOut)
		require.Contains(t, errOut, "The server asks")
		require.Contains(t, out, "deleted 'a.txt'", dialect)
	}
}

func TestCallErrors(t *testing.T) {
	url := confServer(t)
	code, out, _ := cli(t, "", "-url", url, "-json", "call", "protocol_error_job")
	require.Equal(t, 1, code)
	lines := jsonLines(t, out)
	last := lines[len(lines)-1]
	require.Equal(t, "error", last["event"])
	require.EqualValues(t, -32603, last["code"])
	code, out, _ = cli(t, "", "-url", url, "call", "greet", "name=x")
	require.Equal(t, 1, code)
	require.Contains(t, out, "does not support tasks")
	code, out, _ = cli(t, "", "-url", url, "call", "-plain", "greet", "name=x")
	require.Equal(t, 0, code)
	require.Contains(t, out, "Hello, x!")
	code, _, errOut := cli(t, "", "-url", url, "call", "greet", "oops")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "not key=value")
}

func TestTasksCommands(t *testing.T) {
	url := confServer(t)
	code, out, errOut := cli(t, "", "-url", url, "call", "-detach", "slow_compute", "seconds=30")
	require.Equal(t, 0, code, errOut)
	id := strings.Fields(out)[0]
	require.Len(t, id, 32)
	code, out, _ = cli(t, "", "-url", url, "-json", "tasks", "get", id)
	require.Equal(t, 0, code)
	require.Equal(t, "working", jsonLines(t, out)[0]["status"])
	code, out, _ = cli(t, "", "-url", url, "tasks", "cancel", id)
	require.Equal(t, 0, code)
	require.Contains(t, out, "cancelled")
	code, out, _ = cli(t, "", "-url", url, "tasks", "result", id)
	require.Equal(t, 1, code)
	require.Contains(t, out, "cancelled")
	code, out, _ = cli(t, "", "-url", url, "-json", "tasks", "get", "0123456789abcdef0123456789abcdef")
	require.Equal(t, 1, code)
	require.EqualValues(t, -32602, jsonLines(t, out)[0]["code"])
	// tasks list shows the tasks of the history (this one, created with
	// -detach), in either dialect.
	code, out, errOut = cli(t, "", "-url", url, "tasks", "list")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, id+`\s+cancelled\s+slow_compute`, out)
	require.Contains(t, out, "has no tasks/list")
	code, out, _ = cli(t, "", "-url", url, "-dialect", "core", "tasks", "list")
	require.Equal(t, 0, code)
	require.Contains(t, out, "task(s)")
}

func TestPromptFollow(t *testing.T) {
	url := workflowServer(t)
	code, out, errOut := cli(t, "", "-url", url, "prompt", "shout", "text=hi")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `Workflow "shout"`)
	require.Contains(t, out, "needs: text")
	code, out, errOut = cli(t, "again\n", "-url", url, "prompt", "shout", "text=hi", "-follow")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "something to shout")
	require.Contains(t, out, "is completed: 2 step(s) completed")
	require.Contains(t, out, `"text":"AGAIN"`)
	code, out, _ = cli(t, "", "-url", url, "-json", "prompt", "shout", "text=x")
	require.Equal(t, 0, code)
	require.Equal(t, "handoff", jsonLines(t, out)[0]["event"])
}
