package main

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
	"github.com/taskbridge/taskbridge/internal/tokenauth"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// opsServer serves a workflow whose first step holds until its context
// ends, and a daily schedule of a one-step workflow. With tokens, it
// requires one (tokenauth) and the schedule belongs to the user "ops":
// the server's local owner's schedules are for stdio's client only.
func opsServer(t *testing.T, tokens map[string]string) string {
	t.Helper()
	b := builder.New("ops", "1").WithStore(memory.New(nil)).WithoutEnv().WithRouterOptions(taskrouter.Options{PollInterval: 20 * time.Millisecond}).
		WithWorkflowOptions(workflow.Options{PromptWait: 50 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "hold"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "note"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return nil, map[string]any{"noted": true}, nil
	}, nil)
	b.TaskWorkflow(workflow.New("soak", "hold, then note").Step(workflow.Server("hold", "hold"), workflow.Server("note", "note")))
	b.TaskWorkflow(workflow.New("report", "the nightly report").Arg("scheduled_at", "when", true).Step(workflow.Server("note", "note")))
	b.Schedule(workflow.Schedule{Name: "nightly", Workflow: "report", Cron: "0 2 * * *", TimeZone: "Europe/Berlin", Description: "the nightly report", Overlap: taskrouter.OverlapCancelOther, Owner: "user:ops"})
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	if tokens == nil {
		return clitest.Serve(t, srv.HTTPHandler(nil))
	}
	return clitest.Serve(t, tokenauth.Middleware(tokens)(srv.HTTPHandler(nil)))
}

// TestTasksPauseResume: `tasks pause` pauses a workflow task (the task
// stays working, its status says paused and by whom, and why), a second
// pause is refused, `tasks resume` resumes it.
func TestTasksPauseResume(t *testing.T) {
	url := opsServer(t, nil)
	code, out, errOut := cli(t, "", "-url", url, "-json", "prompt", "soak")
	require.Equal(t, 0, code, errOut)
	id := jsonLines(t, out)[0]["handoff"].(map[string]any)["taskId"].(string)

	code, out, errOut = cli(t, "", "-url", url, "tasks", "pause", id, "-reason", "checking the hold", "-cut")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "is paused: no step starts until it is resumed")
	require.Contains(t, out, `The steps that were running ("hold") were stopped`)

	code, out, errOut = cli(t, "", "-url", url, "-json", "tasks", "get", id)
	require.Equal(t, 0, code, errOut)
	got := jsonLines(t, out)[0]
	require.Equal(t, "working", got["status"])
	require.Contains(t, got["statusMessage"], "paused by local since ")
	require.Contains(t, got["statusMessage"], "checking the hold")

	code, _, errOut = cli(t, "", "-url", url, "tasks", "pause", id)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "paused already")

	code, out, errOut = cli(t, "", "-url", url, "-json", "tasks", "resume", id)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, jsonLines(t, out)[0]["text"], "is resumed")

	code, _, errOut = cli(t, "", "-url", url, "tasks", "resume", id)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not paused")
	code, _, errOut = cli(t, "", "-url", url, "tasks", "pause")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "needs one task id")
}

// TestSchedulesCommands: `schedules list`, `pause`, `trigger`, `resume`,
// and their refusals; another user is told of no schedule.
func TestSchedulesCommands(t *testing.T) {
	url := opsServer(t, map[string]string{"tok-ops": "ops", "tok-eve": "eve"})
	code, out, errOut := cli(t, "", "-url", url, "-token", "tok-eve", "schedules", "list")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "There is no schedule you may manage.\n", out)
	code, _, errOut = cli(t, "", "-url", url, "-token", "tok-eve", "schedules", "pause", "nightly")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `no schedule "nightly" that you may manage`)

	t.Setenv(EnvToken, "tok-ops")
	code, out, errOut = cli(t, "", "-url", url, "schedules", "list")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `nightly: "0 2 * * *" (Europe/Berlin), overlap cancel_other, next at `)
	require.Contains(t, out, "the nightly report")

	code, out, errOut = cli(t, "", "-url", url, "schedules", "pause", "nightly", "-reason", "freeze")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `Schedule "nightly" is paused.`)
	require.Contains(t, out, "(freeze)")

	code, out, errOut = cli(t, "", "-url", url, "-json", "schedules", "trigger", "nightly")
	require.Equal(t, 0, code, errOut)
	line := jsonLines(t, out)[0]
	require.Contains(t, line["text"], `Schedule "nightly" fired: task `)
	fires := line["result"].(map[string]any)["fires"].([]any)
	id := fires[0].(map[string]any)["TaskID"].(string)
	code, out, errOut = cli(t, "", "-url", url, "tasks", "result", id)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "noted")

	code, out, errOut = cli(t, "", "-url", url, "schedules", "resume", "nightly")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "is resumed; it fires next at")

	code, _, errOut = cli(t, "", "-url", url, "schedules", "trigger", "weekly")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `no schedule "weekly" that you may manage`)
	code, _, errOut = cli(t, "", "-url", url, "schedules", "rewind")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "unknown schedules subcommand")
	code, _, errOut = cli(t, "", "-url", url, "schedules", "pause")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "needs one schedule name")
}
