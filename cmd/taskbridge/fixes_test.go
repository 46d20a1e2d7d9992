package main

import (
	"flag"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
)

// startRelease gets release_notes for repo and returns the workflow's
// task id, read from the JSON handoff.
func startRelease(t *testing.T, url, repo string) string {
	t.Helper()
	code, out, errOut := cli(t, "", "-url", url, "-json", "prompt", "release_notes", "repo="+repo)
	lines := jsonLines(t, out)
	require.NotEmpty(t, lines, errOut)
	require.Equal(t, "handoff", lines[0]["event"])
	doc := lines[0]["handoff"].(map[string]any)
	if repo == "taskbridge" {
		require.Equal(t, 0, code, errOut)
	}
	return doc["taskId"].(string)
}

func TestExitStatus(t *testing.T) {
	conf := clitest.Jobs(t)
	rel := clitest.Release(t)
	// failing_job takes a second: its subtests run in parallel.
	for _, dialect := range []string{"core", "extension"} {
		t.Run("tool error exits 1/"+dialect, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := cli(t, "", "-url", conf, "-dialect", dialect, "call", "failing_job")
			require.Equal(t, exitFailed, code, out)
			require.Contains(t, out, "tool error")
			require.Contains(t, errOut, "failing_job")
		})
	}
	t.Run("task result of a tool error exits 1", func(t *testing.T) {
		t.Parallel()
		code, out, _ := cli(t, "", "-url", conf, "call", "-detach", "failing_job")
		require.Equal(t, exitOK, code)
		id := strings.Fields(out)[0]
		code, out, errOut := cli(t, "", "-url", conf, "tasks", "result", id)
		require.Equal(t, exitFailed, code, out)
		require.Contains(t, errOut, "ended with a tool error")
	})
	t.Run("json failure line", func(t *testing.T) {
		t.Parallel()
		code, out, _ := cli(t, "", "-url", conf, "-json", "-dialect", "core", "call", "failing_job")
		require.Equal(t, exitFailed, code)
		lines := jsonLines(t, out)
		require.Equal(t, "failed", lines[len(lines)-1]["event"])
		require.Equal(t, "result", lines[len(lines)-2]["event"])
	})
	t.Run("a workflow whose step is handed over exits 1", func(t *testing.T) {
		code, out, errOut := cli(t, "", "-url", rel, "prompt", "release_notes", "repo=nope")
		require.Equal(t, exitFailed, code, out)
		require.Contains(t, out, "(handed to you)")
		require.Contains(t, out, `failed: unknown repository "nope"`)
		require.Contains(t, errOut, "-resume")
	})
	t.Run("a workflow that ends failed exits 1", func(t *testing.T) {
		code, out, errOut := cli(t, "false\nno way\n", "-url", rel, "prompt", "release_notes", "repo=taskbridge", "-follow")
		require.Equal(t, exitFailed, code, errOut)
		require.Contains(t, out, "failed")
		require.Contains(t, out, "the notes were not approved")
	})
	t.Run("usage errors exit 2", func(t *testing.T) {
		for _, args := range [][]string{
			{"tools"},
			{"-url", conf, "frobnicate"},
			{"-url", conf, "-dialect", "klingon", "tools"},
			{"-url", conf, "call"},
			{"-url", conf, "prompt", "release_notes", "-resume", "x", "repo=a"},
			{"-url", conf, "call", "-task-id", "x", "-detach", "review_notes"},
		} {
			code, _, errOut := cli(t, "", args...)
			require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
			require.Contains(t, errOut, "taskbridge help", args)
		}
	})
}

func TestUnreachableServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String() + "/mcp"
	require.NoError(t, ln.Close())
	for _, dialect := range []string{"auto", "core", "extension"} {
		code, out, errOut := cli(t, "", "-url", url, "-dialect", dialect, "tools")
		require.Equal(t, exitUnreachable, code, out)
		require.Equal(t, "taskbridge: cannot reach "+url+": connection refused — is the server running?\n", errOut)
		require.NotContains(t, errOut, "-32005")
	}
	code, out, errOut := cli(t, "", "-url", url, "-json", "info")
	require.Equal(t, exitUnreachable, code)
	require.Equal(t, true, jsonLines(t, out)[0]["unreachable"], errOut)

	code, _, errOut = cli(t, "", "-stdio", "/nonexistent/taskbridge-server -stdio", "tools")
	require.Equal(t, exitUnreachable, code)
	require.Contains(t, errOut, "cannot run /nonexistent/taskbridge-server -stdio:")

	// Something that answers HTTP but is not an MCP endpoint.
	srv := clitest.Jobs(t)
	code, _, errOut = cli(t, "", "-url", strings.TrimSuffix(srv, "/mcp")+"/nothing-here", "tools")
	require.Equal(t, exitUnreachable, code)
	require.Contains(t, errOut, "is this the server's MCP endpoint?")
}

func TestPromptResume(t *testing.T) {
	url := clitest.Release(t)
	id := startRelease(t, url, "taskbridge")
	// Without -follow: the handoff of the existing task, not a new one.
	code, out, errOut := cli(t, "", "-url", url, "prompt", "release_notes", "-resume", id)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "task "+id)
	require.Contains(t, out, "needs: approved, feedback")
	// With -follow: the remaining client step, then completion.
	code, out, errOut = cli(t, "true\nship it\n", "-url", url, "prompt", "release_notes", "-resume", id, "-follow")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `Workflow "release_notes" (task `+id+`) is completed: 4 step(s) completed.`)
	// An unknown task is the server's error.
	code, out, _ = cli(t, "", "-url", url, "prompt", "release_notes", "-resume", "0123456789abcdef0123456789abcdef")
	require.Equal(t, exitFailed, code)
	require.Contains(t, out, "error:")
}

func TestCallTaskIDPerformsOneStep(t *testing.T) {
	url := clitest.Release(t)
	for _, dialect := range []string{"core", "extension"} {
		t.Run(dialect, func(t *testing.T) {
			id := startRelease(t, url, "taskbridge")
			code, out, errOut := cli(t, "", "-url", url, "-dialect", dialect, "call", "review_notes", "-task-id", id,
				"draft=the notes", "feedback=fine", "approved=true")
			require.Equal(t, exitOK, code, errOut)
			require.Contains(t, out, `"approved":true`)
			require.Contains(t, out, "workflow release_notes (task "+id+"): completed after step \"review\"")

			// JSON: the summary is its own member.
			id = startRelease(t, url, "taskbridge")
			code, out, errOut = cli(t, "", "-url", url, "-dialect", dialect, "-json", "call", "review_notes",
				`{"draft": "d", "feedback": "no", "approved": false}`, "-task-id", id)
			require.Equal(t, exitFailed, code, errOut)
			lines := jsonLines(t, out)
			sum := lines[0]["workflow"].(map[string]any)
			require.Equal(t, id, sum["taskId"])
			require.Equal(t, "failed", sum["status"])
			require.Equal(t, "failed", lines[1]["event"])
		})
	}
	// A task id that is no workflow task is the server's error.
	code, out, _ := cli(t, "", "-url", url, "call", "review_notes", "-task-id", "0123456789abcdef0123456789abcdef", "draft=x", "feedback=y", "approved=true")
	require.Equal(t, exitFailed, code)
	require.Contains(t, out, "error:")
}

func TestFollowRefusesAnswersTheSchemaRefuses(t *testing.T) {
	url := clitest.Release(t)
	// approved is asked first (placeholders are sorted): "yes" is no
	// boolean, so it is refused and asked again.
	code, out, errOut := cli(t, "yes\ntrue\nlooks good\n", "-url", url, "prompt", "release_notes", "repo=taskbridge", "-follow")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, errOut, "approved <true to approve publishing> (boolean: true or false):")
	require.Contains(t, errOut, `✗ approved: "yes" is not valid: want boolean: true or false — try again`)
	require.Equal(t, 2, strings.Count(errOut, "approved <true to approve publishing>"))
	require.Contains(t, out, "is completed: 4 step(s) completed")
	require.Contains(t, errOut, "feedback <your verdict and any edits> (text):")

	// Running out of answers ends the command instead of looping.
	code, _, errOut = cli(t, "yes\n", "-url", url, "prompt", "release_notes", "repo=taskbridge", "-follow")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, "try again")
}

func TestFollowRepairsAHandedOverStep(t *testing.T) {
	url := clitest.Release(t)
	// fetch fails for repo "nope" and is handed to the client: -follow
	// shows the error and asks for corrected arguments, prefilled (Enter
	// keeps since, empty), then the review step's placeholders.
	code, out, errOut := cli(t, "taskbridge\n\ntrue\nok\n", "-url", url, "prompt", "release_notes", "repo=nope", "-follow")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "(handed to you)")
	require.Contains(t, errOut, `Step "fetch" (tool fetch_changes) failed on the server after 1 attempt(s) and is handed to you.`)
	require.Contains(t, errOut, `error: unknown repository "nope"`)
	require.Contains(t, errOut, "repo (text) [nope]:")
	require.Contains(t, out, "is completed: 4 step(s) completed")
}

func TestTTLWarning(t *testing.T) {
	url := clitest.Jobs(t)
	code, _, errOut := cli(t, "", "-url", url, "call", "-ttl", "1m", "slow_compute", "seconds=0")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, errOut, "warning: -ttl 1m0s is ignored: in the extension dialect the server chooses every task's ttl")
	code, out, errOut := cli(t, "", "-url", url, "-dialect", "core", "-json", "call", "-ttl", "1m", "slow_compute", "seconds=0")
	require.Equal(t, exitOK, code, errOut)
	require.NotContains(t, errOut, "warning")
	require.EqualValues(t, 60000, jsonLines(t, out)[0]["task"].(map[string]any)["ttlMs"])
}

func TestParseInterleaved(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		pos    []string
		follow bool
		resume string
	}{
		{[]string{"p", "a=1", "-follow"}, []string{"p", "a=1"}, true, ""},
		{[]string{"-resume", "id", "p"}, []string{"p"}, false, "id"},
		{[]string{"p", "-resume", "id", "-follow"}, []string{"p"}, true, "id"},
		{[]string{"p", "--", "-follow"}, []string{"p", "-follow"}, false, ""},
	} {
		fs := flag.NewFlagSet("prompt", flag.ContinueOnError)
		follow := fs.Bool("follow", false, "")
		resume := fs.String("resume", "", "")
		pos, err := parseInterleaved(fs, tc.args)
		require.NoError(t, err)
		require.Equal(t, tc.pos, pos, tc.args)
		require.Equal(t, tc.follow, *follow, tc.args)
		require.Equal(t, tc.resume, *resume, tc.args)
	}
}
