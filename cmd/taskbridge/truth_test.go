package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
)

// startSignOff starts sign_off (a person's decision, then publish) and
// returns its task id.
func startSignOff(t *testing.T, url string, dialect string) string {
	t.Helper()
	code, out, errOut := cli(t, "", "-url", url, "-dialect", dialect, "-json", "prompt", "sign_off", "repo=taskbridge")
	require.Equal(t, exitOK, code, errOut)
	lines := jsonLines(t, out)
	doc := lines[0]["handoff"].(map[string]any)
	require.Equal(t, "input_required", doc["status"], "a wait on a person, in every dialect")
	return doc["taskId"].(string)
}

// TestFollowPerformsEventSteps: prompt -follow performs a person's
// decision (an event step, through the event tool) by asking it on the
// terminal, in both dialects; an approval completes the workflow (exit
// 0), a rejection ends it failed (exit 1) and the CLI says why.
func TestFollowPerformsEventSteps(t *testing.T) {
	url := clitest.Release(t)
	for _, dialect := range []string{"core", "extension"} {
		t.Run(dialect, func(t *testing.T) {
			code, out, errOut := cli(t, "true\nlooks good\n", "-url", url, "-dialect", dialect, "prompt", "sign_off", "repo=taskbridge", "-follow")
			require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
			require.Contains(t, out+errOut, `Step "approve": call workflow_event`)
			require.Contains(t, out, "is completed: 2 step(s) completed.")
			require.NotContains(t, errOut, "Mcp-Name")

			code, out, errOut = cli(t, "false\nnot yet\n", "-url", url, "-dialect", dialect, "prompt", "sign_off", "repo=taskbridge", "-follow")
			require.Equal(t, exitFailed, code, "%s\n%s", out, errOut)
			require.Contains(t, out, "is failed: 1 step(s) completed.")
			require.Contains(t, out, "why: step \"publish\" (tool \"publish_notes\") failed: the notes were not approved")
			require.Contains(t, errOut, "is failed")
		})
	}
}

// TestCallEventToolAnswersAPerson: call workflow_event -task-id ID with
// the payload's fields as key=value delivers a person's decision, also
// for a task the history does not know (a scheduled workflow's, one a
// push named): the server's task_result tool gives its handoff. The
// exit status is the workflow's end.
func TestCallEventToolAnswersAPerson(t *testing.T) {
	url := clitest.Release(t)
	t.Setenv(history.EnvPath, "off")
	for _, dialect := range []string{"core", "extension"} {
		t.Run(dialect, func(t *testing.T) {
			id := startSignOff(t, url, dialect)
			code, out, errOut := cli(t, "", "-url", url, "-dialect", dialect, "call", "workflow_event", "-task-id", id, "approved=true", "reason=ok")
			require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
			require.Contains(t, out, "workflow sign_off (task "+id+"): completed after step \"approve\"")

			id = startSignOff(t, url, dialect)
			code, out, errOut = cli(t, "", "-url", url, "-dialect", dialect, "call", "workflow_event", "-task-id", id, "approved=false", "reason=no")
			require.Equal(t, exitFailed, code, "%s\n%s", out, errOut)
			require.Contains(t, errOut, "is failed")
			code, out, errOut = cli(t, "", "-url", url, "-dialect", dialect, "tasks", "result", id)
			require.Equal(t, exitFailed, code, "%s\n%s", out, errOut)
			require.Contains(t, out, "why: step \"publish\" (tool \"publish_notes\") failed: the notes were not approved")

			// A missing field is asked.
			id = startSignOff(t, url, dialect)
			code, out, errOut = cli(t, "why not\n", "-url", url, "-dialect", dialect, "call", "workflow_event", "-task-id", id, "approved=true")
			require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
			require.Contains(t, out+errOut, "reason <why> (text)")
		})
	}
}

// TestCallWorkflowTool: calling a workflow's tool shows the workflow's
// handoff (the workflow task's id, not the call's) with the workflow's
// exit status, and -detach prints the workflow task.
func TestCallWorkflowTool(t *testing.T) {
	url := clitest.Release(t)
	for _, dialect := range []string{"core", "extension"} {
		t.Run(dialect, func(t *testing.T) {
			code, out, errOut := cli(t, "", "-url", url, "-dialect", dialect, "-json", "call", "-detach", "sign_off", "repo=taskbridge")
			require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
			task := jsonLines(t, out)[0]
			id := task["taskId"].(string)
			require.Equal(t, "input_required", task["status"], "the workflow's own task, waiting for the person")
			code, out, errOut = cli(t, "", "-url", url, "-dialect", dialect, "call", "workflow_event", "-task-id", id, "approved=true", "reason=ok")
			require.Equal(t, exitOK, code, "%s\n%s", out, errOut)

			// The call's task asks the person (its input request) and
			// ends with the workflow: the CLI shows the workflow's end.
			code, out, errOut = cli(t, "false\nno\n", "-url", url, "-dialect", dialect, "call", "sign_off", "repo=taskbridge")
			require.Equal(t, exitFailed, code, "%s\n%s", out, errOut)
			require.Contains(t, out, `Workflow "sign_off" — task `)
			require.Contains(t, out, "Stopped: step \"publish\" (tool \"publish_notes\") failed: the notes were not approved")
			require.NotContains(t, out, "— task "+id, "a new workflow task")
		})
	}
}

// TestTasksSubcommandFlags: -h after a tasks subcommand is help, not a
// task id; another flag is a usage error.
func TestTasksSubcommandFlags(t *testing.T) {
	code, out, _ := cli(t, "", "-url", "http://127.0.0.1:1/mcp", "tasks", "result", "-h")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "tasks result ID")
	code, _, errOut := cli(t, "", "-url", "http://127.0.0.1:1/mcp", "tasks", "get", "-x")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "tasks get takes no flag -x")
	require.False(t, strings.Contains(errOut, "not found"))
}
