package client_test

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/workflow"
)

// TestFollowComposedWorkflow: Follow performs what a composed workflow
// asks of its client: a for-each's client items (each named by its
// record), and a child workflow's client step (with the child's id),
// in every mode, to the workflow's end.
func TestFollowComposedWorkflow(t *testing.T) {
	s := builtServer{t: t}
	var mu sync.Mutex
	var reviewed []string
	b := builder.New("compose-test", "1").WithStore(memory.New(nil)).WithoutEnv()
	echo := func(ctx context.Context, _ *mcp.CallToolRequest, in map[string]any) (*mcp.CallToolResult, any, error) {
		return nil, in, nil
	}
	builder.Tool(b, &mcp.Tool{Name: "list"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
		return nil, map[string]any{"files": []string{"a.go", "b.go"}}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "review"}, func(ctx context.Context, _ *mcp.CallToolRequest, in map[string]any) (*mcp.CallToolResult, any, error) {
		mu.Lock()
		reviewed = append(reviewed, in["file"].(string))
		mu.Unlock()
		return nil, in, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "sign"}, echo, nil)
	builder.Tool(b, &mcp.Tool{Name: "merge"}, echo, nil)
	b.TaskWorkflow(workflow.New("approve", "a child that asks its client").Arg("what", "", true).Step(
		workflow.Client("sign", "sign").Bind("what", workflow.PromptArg("what")).Bind("ok", workflow.FromClient("true to sign")),
	))
	b.TaskWorkflow(workflow.New("reviews", "review every file, then have the merge approved").Step(
		workflow.Server("list", "list"),
		workflow.ForEach("review", workflow.StepOutput("list", "files"),
			workflow.Client("review_file", "review").Bind("file", workflow.Item()).Bind("verdict", workflow.FromClient("ok or a problem"))),
		workflow.Child("approval", "approve").Bind("what", workflow.Const("the merge")),
		workflow.Server("merge", "merge").Bind("approval", workflow.StepOutput("approval")),
	))
	s.build(b)
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			mu.Lock()
			reviewed = nil
			mu.Unlock()
			c := s.dial(t, m, nil)
			ctx := testCtx(t)
			_, doc, err := c.GetPrompt(ctx, "reviews", nil)
			require.NoError(t, err)
			var asked []string
			raw, err := c.Follow(ctx, doc, &client.FollowOptions{Fill: func(_ context.Context, step handoff.RemainingStep, holes []string) (map[string]any, error) {
				asked = append(asked, step.Name)
				switch step.Call.Tool {
				case "review":
					return map[string]any{"verdict": "ok"}, nil
				case "sign":
					return map[string]any{"ok": true}, nil
				}
				return nil, nil
			}})
			require.NoError(t, err)
			require.Equal(t, []string{"review[0]", "review[1]", "approval/sign"}, asked, "each item by its record, then the child's step")
			mu.Lock()
			got := append([]string(nil), reviewed...)
			mu.Unlock()
			sort.Strings(got)
			require.Equal(t, []string{"a.go", "b.go"}, got, "each item once, with its own value")
			var res mcp.GetPromptResult
			require.NoError(t, json.Unmarshal(raw, &res))
			final, err := handoff.FromPromptResult(&res)
			require.NoError(t, err)
			require.Equal(t, string(mcptask.StatusCompleted), final.Status)
		})
	}
}
