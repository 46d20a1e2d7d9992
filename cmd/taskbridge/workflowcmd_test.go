package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWorkflowFork: `workflow fork` runs a workflow task again from a
// step as a new task (through the server's workflow_fork tool), shows its
// handoff, and follows it with -follow; refusals exit 1 with the reason.
func TestWorkflowFork(t *testing.T) {
	url := workflowServer(t)
	code, out, errOut := cli(t, "loud\n", "-url", url, "-json", "prompt", "shout", "text=hi", "-follow")
	require.Equal(t, 0, code, errOut)
	lines := jsonLines(t, out)
	id := lines[0]["handoff"].(map[string]any)["taskId"].(string)

	code, out, errOut = cli(t, "", "-url", url, "-json", "workflow", "fork", id, "-from", "two")
	require.Equal(t, 0, code, errOut)
	doc := jsonLines(t, out)[0]["handoff"].(map[string]any)
	require.NotEqual(t, id, doc["taskId"])
	require.Equal(t, "one", doc["completedSteps"].([]any)[0].(map[string]any)["name"], "the step before two keeps its output")
	require.Equal(t, "two", doc["remainingSteps"].([]any)[0].(map[string]any)["name"])

	code, out, errOut = cli(t, "again\n", "-url", url, "workflow", "fork", id, "-from", "one", "text=bye", "-follow")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `"text":"BYE"`, "the edited argument reached step one")
	require.Contains(t, out, `"text":"AGAIN"`)

	code, _, errOut = cli(t, "", "-url", url, "workflow", "fork", id, "-from", "nope")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `has no step "nope"`)
	code, _, errOut = cli(t, "", "-url", url, "workflow", "fork", "no-such-task")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "no-such-task")
	code, _, errOut = cli(t, "", "-url", url, "workflow", "fork")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "needs the id")
	code, _, errOut = cli(t, "", "-url", url, "workflow", "rerun", id)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "subcommand: fork")
}
