package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
)

// call TOOL -task-id ID fills every argument the workflow's handoff
// resolved (draft) and asks only for its placeholders, as prompt -follow
// does; arguments given on the command line are not asked.
func TestCallTaskIDFillsFromTheHandoff(t *testing.T) {
	useHistory(t)
	url := clitest.Release(t)
	for _, dialect := range []string{"core", "extension"} {
		t.Run(dialect, func(t *testing.T) {
			id := startRelease(t, url, "taskbridge")
			code, out, errOut := cli(t, "true\nlooks good\n", "-url", url, "-dialect", dialect, "call", "review_notes", "-task-id", id)
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, errOut, `Step "review" of workflow "release_notes" (task `+id+`): draft from the handoff`)
			require.Contains(t, errOut, "approved <true to approve publishing> (boolean: true or false):")
			require.Contains(t, errOut, "feedback <your verdict and any edits> (text):")
			require.NotContains(t, errOut, "draft (", "draft is never asked")
			require.Contains(t, out, `"final_text":"# taskbridge\n- feat: durable tasks`)
			require.Contains(t, out, "workflow release_notes (task "+id+`): completed after step "review"`)

			// Given on the command line: only the rest is asked.
			id = startRelease(t, url, "taskbridge")
			code, out, errOut = cli(t, "true\n", "-url", url, "-dialect", dialect, "call", "review_notes", "-task-id", id, "feedback=fine")
			require.Equal(t, exitOK, code, errOut)
			require.NotContains(t, errOut, "feedback <")
			require.Contains(t, out, "_fine_")
		})
	}

	// A tool that is no step of the workflow that is yours now.
	id := startRelease(t, url, "taskbridge")
	code, _, errOut := cli(t, "", "-url", url, "call", "draft_notes", "-task-id", id)
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, `no remaining step of workflow "release_notes" (task `+id+`) that is yours calls draft_notes; yours now: review (tool review_notes)`)

	// A task the history does not know: the values the user gives are
	// enough, since the server adds the ones it resolved (the draft);
	// -workflow names the workflow for a handoff to fill from.
	t.Setenv(history.EnvPath, "off")
	code, out, errOut := cli(t, "", "-url", url, "call", "review_notes", "-task-id", id, "feedback=x", "approved=true")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "completed after step \"review\"")
	require.Contains(t, out, `"final_text":"# taskbridge`, "the server added the draft")
	id = startRelease(t, url, "taskbridge")
	code, out, errOut = cli(t, "", "-url", url, "call", "review_notes", "-task-id", id, "-workflow", "release_notes", "feedback=x", "approved=true")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "completed after step \"review\"")
}

// A step tool that takes the workflow task as an argument (_task_id, host
// mode) gets the task's id from prompt -follow and call -task-id; the
// user is never asked for it.
func TestTheTaskIDArgumentIsNeverAsked(t *testing.T) {
	useHistory(t)
	url, seen := clitest.TaskIDArgument(t)
	code, out, errOut := cli(t, "hello\n", "-url", url, "prompt", "bound_flow", "-follow")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "needs: note\n")
	require.Contains(t, errOut, "note <a note> (text):")
	require.NotContains(t, errOut, "_task_id")
	require.Contains(t, out, "is completed: 1 step(s) completed")

	code, out, errOut = cli(t, "", "-url", url, "-json", "prompt", "bound_flow")
	require.Equal(t, exitOK, code, errOut)
	id := jsonLines(t, out)[0]["handoff"].(map[string]any)["taskId"].(string)
	code, out, errOut = cli(t, "there\n", "-url", url, "call", "bound", "-task-id", id)
	require.Equal(t, exitOK, code, errOut)
	require.NotContains(t, errOut, "_task_id <")
	require.Contains(t, out, id+": there")
	got := seen()
	require.Len(t, got, 2)
	require.Equal(t, id, got[1])
}
