package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

type tsDraftIn struct {
	Topic string `json:"topic"`
}
type tsDraftOut struct {
	Draft string `json:"draft"`
}
type tsSignIn struct {
	Draft  string `json:"draft"`
	Signer string `json:"signer"`
}
type tsSignOut struct {
	Signed string `json:"signed"`
}
type tsPublishIn struct {
	Text string `json:"text"`
}

// TestTypeScriptWorkflow: the official TypeScript SDK client gets a
// task-aware workflow prompt, follows the handoff with _meta._task_id, and
// sees the workflow task complete through client.experimental.tasks.
func TestTypeScriptWorkflow(t *testing.T) {
	modules := nodeModules(t)
	b := builder.New("ts-workflow", "1").WithDB(filepath.Join(t.TempDir(), "tasks.db")).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: 50 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "draft"}, func(ctx context.Context, _ *mcp.CallToolRequest, in tsDraftIn) (*mcp.CallToolResult, tsDraftOut, error) {
		return nil, tsDraftOut{Draft: "notes about " + in.Topic}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "sign"}, func(ctx context.Context, _ *mcp.CallToolRequest, in tsSignIn) (*mcp.CallToolResult, tsSignOut, error) {
		return nil, tsSignOut{Signed: in.Draft + " — signed by " + in.Signer}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "publish"}, func(ctx context.Context, _ *mcp.CallToolRequest, in tsPublishIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "published: " + in.Text}}}, nil, nil
	}, nil)
	b.TaskWorkflow(workflow.New("sign_off", "draft, sign, publish").Arg("topic", "what", true).Step(
		workflow.Server("draft", "draft").Bind("topic", workflow.PromptArg("topic")),
		workflow.Client("sign", "sign").Bind("draft", workflow.StepOutput("draft", "draft")).Bind("signer", workflow.FromClient("your name")),
		workflow.Server("publish", "publish").Bind("text", workflow.StepOutput("sign", "signed")),
	))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	f := &bridgeFixture{srv: srv}
	url := f.serveHTTP(t)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	script := filepath.Join(modules, "..", "ts-workflow-client.mjs")
	cmd := exec.CommandContext(ctx, "node", nodeArgs(t, script, url, "sign_off", `{"topic":"tasks"}`, `{"signer":"ts"}`)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "stderr:\n%s", stderr.String())

	steps := map[string]map[string]any{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		steps[m["step"].(string)] = m
		require.Equal(t, true, m["ok"], "step %s failed: %v\nall output:\n%s", m["step"], m, out)
	}
	p := steps["getPrompt"]
	require.NotNil(t, p, "output:\n%s", out)
	taskID := p["taskId"].(string)
	require.Equal(t, "working", p["status"])
	require.Equal(t, true, p["proseNamesTask"])
	require.Equal(t, true, p["metaHasHandoff"])
	require.Equal(t, []any{"draft"}, p["completed"])
	require.Equal(t, []any{"sign"}, p["clientSteps"])
	require.Equal(t, "working", steps["taskWhilePaused"]["status"])
	cont := steps["continue:sign"]
	require.Equal(t, false, cont["isError"])
	require.Equal(t, "completed", cont["workflow"].(map[string]any)["status"])
	require.Equal(t, "completed", steps["taskAfter"]["status"])
	res := steps["taskResult"]
	require.Equal(t, "completed", res["status"])
	require.Equal(t, []any{"draft", "sign", "publish"}, res["completed"])
	require.Equal(t, taskID, res["relatedTask"])
	bad := steps["badTaskId"]
	require.Equal(t, true, bad["rejected"])
	require.EqualValues(t, -32602, bad["code"])
	require.True(t, strings.Contains(bad["message"].(string), "unknown workflow task"), bad["message"])
}
