package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"sync"
	"sync/atomic"
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

// flowServer serves a workflow with two client steps:
//
//	prepare (server) -> approve (client) -> stamp (server, needs approve) ->
//	sign (client, needs stamp) -> finish (server, needs sign and the task variable "note")
type flowServer struct {
	builtServer
	failures atomic.Int32 // finish fails while > 0
}

type prepareIn struct {
	Topic string `json:"topic"`
}
type prepareOut struct {
	Items []string `json:"items"`
}
type approveIn struct {
	Text     string `json:"text"`
	Approver string `json:"approver"`
}
type approveOut struct {
	Approved string `json:"approved"`
}
type stampIn struct {
	Approved string `json:"approved"`
}
type stampOut struct {
	Stamped string `json:"stamped"`
}
type signIn struct {
	Approved string `json:"approved"`
	Signer   string `json:"signer"`
}
type signOut struct {
	Signed string `json:"signed"`
}
type finishIn struct {
	Signed string `json:"signed"`
	Note   string `json:"note"`
}

func newFlowServer(t *testing.T) *flowServer {
	t.Helper()
	f := &flowServer{builtServer: builtServer{t: t}}
	b := builder.New("flow-test", "1").WithStore(memory.New(nil)).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: 20 * time.Millisecond}).
		Setup(func(s *mcp.Server) {
			s.AddPrompt(&mcp.Prompt{Name: "hello"}, func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "assistant", Content: &mcp.TextContent{Text: "Hello!\n```json\n{\"not\": \"a handoff\"}\n```"}}}}, nil
			})
		})
	builder.Tool(b, &mcp.Tool{Name: "prepare"}, func(ctx context.Context, _ *mcp.CallToolRequest, in prepareIn) (*mcp.CallToolResult, prepareOut, error) {
		return nil, prepareOut{Items: []string{in.Topic + "-1", in.Topic + "-2"}}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "approve"}, func(ctx context.Context, _ *mcp.CallToolRequest, in approveIn) (*mcp.CallToolResult, approveOut, error) {
		return nil, approveOut{Approved: in.Text + " by " + in.Approver}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "stamp"}, func(ctx context.Context, _ *mcp.CallToolRequest, in stampIn) (*mcp.CallToolResult, stampOut, error) {
		return nil, stampOut{Stamped: "[" + in.Approved + "]"}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "sign"}, func(ctx context.Context, _ *mcp.CallToolRequest, in signIn) (*mcp.CallToolResult, signOut, error) {
		return nil, signOut{Signed: in.Approved + " / signed " + in.Signer}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "finish"}, func(ctx context.Context, _ *mcp.CallToolRequest, in finishIn) (*mcp.CallToolResult, any, error) {
		if f.failures.Load() > 0 {
			f.failures.Add(-1)
			return nil, nil, errors.New("finish: downstream unavailable")
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("finished: %s (note %s)", in.Signed, in.Note)}}}, nil, nil
	}, nil)
	b.TaskWorkflow(workflow.New("flow", "prepare, approve, stamp, sign, finish").
		Arg("topic", "what to work on", true).
		Step(
			workflow.Server("prepare", "prepare").Bind("topic", workflow.PromptArg("topic")).As("prep"),
			workflow.Client("approve", "approve").Bind("text", workflow.StepOutput("prep", "items.0")).
				Bind("approver", workflow.FromClient("your name")).WithGuidance("Approve the text."),
			workflow.Server("stamp", "stamp").Bind("approved", workflow.StepOutput("approve", "approved")),
			workflow.Client("sign", "sign").Bind("approved", workflow.StepOutput("stamp", "stamped")).
				Bind("signer", workflow.FromClient("who signs")),
			workflow.Server("finish", "finish").Bind("signed", workflow.StepOutput("sign", "signed")).
				Bind("note", workflow.TaskVar("note")),
		))
	f.build(b)
	return f
}

// filler answers placeholders and records what it was asked.
type filler struct {
	mu    sync.Mutex
	asked map[string][]string
}

func (f *filler) fill(ctx context.Context, step handoff.RemainingStep, placeholders []string) (map[string]any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked[step.Name] = placeholders
	switch step.Name {
	case "approve":
		return map[string]any{"approver": "ada"}, nil
	case "sign":
		return map[string]any{"signer": "bo"}, nil
	}
	return nil, fmt.Errorf("unexpected step %q", step.Name)
}

func TestFollowWorkflow(t *testing.T) {
	f := newFlowServer(t)
	for _, m := range allModes {
		t.Run(m.String(), func(t *testing.T) {
			c := f.dial(t, m, nil)
			ctx := testCtx(t)
			res, doc, err := c.GetPrompt(ctx, "flow", map[string]string{"topic": "t"})
			require.NoError(t, err)
			require.NotNil(t, doc)
			require.NotEmpty(t, res.Messages)
			require.Equal(t, "working", doc.Status)
			// approve now; sign (after the server's stamp) later: the
			// handoff lists both, ClientSteps only what may be done now.
			require.Len(t, doc.ClientSteps(), 1)
			require.Equal(t, "approve", doc.ClientSteps()[0].Name)
			require.Equal(t, "sign", doc.RemainingSteps[len(doc.RemainingSteps)-2].Name)
			require.Equal(t, mcptask.StepPending, doc.RemainingSteps[len(doc.RemainingSteps)-2].Status)

			fl := &filler{asked: map[string][]string{}}
			raw, err := c.Follow(ctx, doc, &client.FollowOptions{Fill: fl.fill, TaskVars: map[string]any{"note": "n1"}})
			require.NoError(t, err)
			// The sign step's "approved" argument was resolved by the server
			// once stamp ran after approve; only the signer was asked for.
			require.Equal(t, map[string][]string{"approve": {"approver"}, "sign": {"signer"}}, fl.asked)

			var final mcp.GetPromptResult
			require.NoError(t, json.Unmarshal(raw, &final))
			fdoc, err := handoff.FromPromptResult(&final)
			require.NoError(t, err)
			require.Equal(t, "completed", fdoc.Status)
			require.Equal(t, doc.TaskID, fdoc.TaskID)
			require.Empty(t, fdoc.RemainingSteps)
			require.Len(t, fdoc.CompletedSteps, 5)
			require.Contains(t, string(fdoc.CompletedSteps[4].Result), "finished: [t-1 by ada] / signed bo (note n1)")

			task, err := c.GetTask(ctx, doc.TaskID)
			require.NoError(t, err)
			require.Equal(t, mcptask.StatusCompleted, task.Status)

			// A completed handoff just returns the result.
			again, err := c.Follow(ctx, fdoc, nil)
			require.NoError(t, err)
			require.JSONEq(t, string(raw), string(again))
		})
	}
}

func TestFollowReportsFailedStep(t *testing.T) {
	f := newFlowServer(t)
	for _, m := range []mode{{false, mcptask.Core}, {true, mcptask.Extension}} {
		t.Run(m.String(), func(t *testing.T) {
			c := f.dial(t, m, nil)
			ctx := testCtx(t)
			_, doc, err := c.GetPrompt(ctx, "flow", map[string]string{"topic": "f"})
			require.NoError(t, err)
			// The server's attempt after the client's last step fails, and so
			// does the one when Follow re-reads the handoff (a resume).
			f.failures.Store(2)
			fl := &filler{asked: map[string][]string{}}
			_, err = c.Follow(ctx, doc, &client.FollowOptions{Fill: fl.fill, TaskVars: map[string]any{"note": "n"}})
			var we *client.WorkflowError
			require.ErrorAs(t, err, &we)
			require.Equal(t, "finish", we.Step)
			require.Equal(t, doc.TaskID, we.TaskID)
			require.Equal(t, "working", we.Status)
			require.Contains(t, we.Reason, "downstream unavailable")
			require.Contains(t, err.Error(), `stopped at step "finish"`)
			require.Zero(t, f.failures.Load())
		})
	}
}

// TestFollowRepairsHandedOverStep: a server step the server gave up on is
// handed to the client; Follow performs it with the arguments Repair
// returns, and the workflow completes.
func TestFollowRepairsHandedOverStep(t *testing.T) {
	f := newFlowServer(t)
	for _, m := range []mode{{false, mcptask.Core}, {true, mcptask.Extension}} {
		t.Run(m.String(), func(t *testing.T) {
			c := f.dial(t, m, nil)
			ctx := testCtx(t)
			_, doc, err := c.GetPrompt(ctx, "flow", map[string]string{"topic": "f"})
			require.NoError(t, err)
			f.failures.Store(2)
			fl := &filler{asked: map[string][]string{}}
			var repaired []string
			_, err = c.Follow(ctx, doc, &client.FollowOptions{Fill: fl.fill, TaskVars: map[string]any{"note": "n"},
				Repair: func(_ context.Context, step handoff.RemainingStep) (map[string]any, error) {
					repaired = append(repaired, step.Name)
					require.True(t, step.HandedToClient)
					require.Contains(t, step.Error, "downstream unavailable")
					args := map[string]any{}
					for k, v := range step.Arguments {
						args[k] = v
					}
					return args, nil
				}})
			require.NoError(t, err)
			require.Equal(t, []string{"finish"}, repaired)
			tk, err := c.GetTask(ctx, doc.TaskID)
			require.NoError(t, err)
			require.Equal(t, mcptask.StatusCompleted, tk.Status)
		})
	}
}

func TestFollowNeedsFill(t *testing.T) {
	f := newFlowServer(t)
	c := f.dial(t, mode{false, mcptask.Core}, nil)
	ctx := testCtx(t)
	_, doc, err := c.GetPrompt(ctx, "flow", map[string]string{"topic": "x"})
	require.NoError(t, err)
	_, err = c.Follow(ctx, doc, nil)
	require.ErrorContains(t, err, `arguments ["approver"] are placeholders`)
	_, err = c.Follow(ctx, doc, &client.FollowOptions{Fill: func(context.Context, handoff.RemainingStep, []string) (map[string]any, error) {
		return map[string]any{}, nil
	}})
	require.ErrorContains(t, err, `no value for argument "approver"`)
	_, err = c.Follow(ctx, nil, nil)
	require.Error(t, err)
}

func TestGetPromptWithoutHandoff(t *testing.T) {
	f := newFlowServer(t)
	c := f.dial(t, mode{true, mcptask.Extension}, nil)
	res, doc, err := c.GetPrompt(testCtx(t), "hello", nil)
	require.NoError(t, err)
	require.Nil(t, doc)
	require.Len(t, res.Messages, 1)
}
