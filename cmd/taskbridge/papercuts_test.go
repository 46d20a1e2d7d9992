package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
)

// -h, -help and --help print the usage on stdout (exit 0), for the
// commands' flags too; taskbridge alone prints it on stderr (exit 2).
func TestHelpGoesToStdout(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"-help"}, {"help"}, {"-url", "http://127.0.0.1:1/mcp", "call", "-h"}, {"ui", "--help"}} {
		code, out, errOut := cli(t, "", args...)
		require.Equal(t, exitOK, code, "%v", args)
		require.Contains(t, out, "Usage:\n  taskbridge [flags] <command> [arguments]", "%v", args)
		require.Empty(t, errOut, "%v", args)
	}
	code, out, errOut := cli(t, "")
	require.Equal(t, exitUsage, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "Usage:")
	code, out, errOut = cli(t, "", "-nope")
	require.Equal(t, exitUsage, code)
	require.Empty(t, out)
	require.Equal(t, "taskbridge: flag provided but not defined: -nope\nRun 'taskbridge help' for usage.\n", errOut)
}

// A mistake in the command line is a usage error (exit 2) whether or not
// the server is up: nothing connects before the command line is checked.
func TestUsageErrorsBeforeConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := "http://" + ln.Addr().String() + "/mcp"
	require.NoError(t, ln.Close())
	up := clitest.Jobs(t)
	for _, url := range []string{down, up} {
		for _, tc := range []struct {
			args []string
			msg  string
		}{
			{[]string{"frobnicate"}, `unknown command "frobnicate"`},
			{[]string{"tools", "extra-arg"}, `tools takes no arguments, not "extra-arg"`},
			{[]string{"info", "x"}, `info takes no arguments, not "x"`},
			{[]string{"tasks", "list", "x"}, `tasks list takes no arguments, not "x"`},
			{[]string{"tasks", "get"}, "tasks get needs one task id"},
			{[]string{"tasks", "frob"}, `unknown tasks subcommand "frob"`},
			{[]string{"tasks"}, "tasks needs a subcommand"},
			{[]string{"call"}, "call needs a tool name"},
			{[]string{"call", "greet", "oops"}, "not key=value"},
			{[]string{"call", "-nope", "greet"}, "flag provided but not defined: -nope"},
			{[]string{"call", "-workflow", "w", "greet"}, "-workflow names the workflow of -task-id"},
			{[]string{"prompt"}, "prompt needs a prompt name"},
			{[]string{"prompt", "p", "oops"}, "not key=value"},
		} {
			code, out, errOut := cli(t, "", append([]string{"-url", url}, tc.args...)...)
			require.Equal(t, exitUsage, code, "%s %v: %s%s", url, tc.args, out, errOut)
			require.Contains(t, errOut, tc.msg, "%v", tc.args)
		}
	}
}

// tasks result prints a tool result as call does (its text), and a
// workflow's result as its outcome, instead of raw JSON.
func TestTasksResultFormatsLikeCall(t *testing.T) {
	useHistory(t)
	url := clitest.Release(t)
	code, out, errOut := cli(t, "", "-url", url, "call", "-detach", "generate_report", "topic=fmt", "seconds=0.1")
	require.Equal(t, exitOK, code, errOut)
	id := strings.Fields(out)[0]
	for _, dialect := range []string{"core", "extension"} {
		code, out, errOut = cli(t, "", "-url", url, "-dialect", dialect, "tasks", "result", id)
		require.Equal(t, exitOK, code, errOut)
		require.Equal(t, "result (task "+id+", completed):\n  Report on \"fmt\" is ready.\n", out, dialect)
	}
	code, out, _ = cli(t, "", "-url", url, "-json", "tasks", "result", id)
	require.Equal(t, exitOK, code)
	line := jsonLines(t, out)[0]
	require.Equal(t, "result", line["event"])
	require.Equal(t, "completed", line["task"].(map[string]any)["status"])

	wf := startRelease(t, url, "taskbridge")
	code, _, errOut = cli(t, "", "-url", url, "call", "review_notes", "-task-id", wf, "feedback=ok", "approved=true")
	require.Equal(t, exitOK, code, errOut)
	code, out, errOut = cli(t, "", "-url", url, "tasks", "result", wf)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `Workflow "release_notes" (task `+wf+`) is completed: 4 step(s) completed.`)
	require.NotContains(t, out, `"messages"`)
}

// The core dialect's error for a cancelled task says it once.
func TestCancelledTaskErrorSaysItOnce(t *testing.T) {
	useHistory(t)
	url := clitest.Release(t)
	code, out, _ := cli(t, "", "-url", url, "call", "-detach", "generate_report", "topic=c", "seconds=30")
	require.Equal(t, exitOK, code)
	id := strings.Fields(out)[0]
	code, _, _ = cli(t, "", "-url", url, "tasks", "cancel", id)
	require.Equal(t, exitOK, code)
	code, out, _ = cli(t, "", "-url", url, "-dialect", "core", "tasks", "result", id)
	require.Equal(t, exitFailed, code)
	require.Equal(t, "error: client: task was cancelled: task "+id+": cancelled by request\n", out)
}

// A server step that failed once and succeeded when the server retried
// it shows as done (✓) with its failed attempt, never also as failed (✗).
func TestRetriedStepIsNotShownAsFailed(t *testing.T) {
	useHistory(t)
	dir := build(t)
	url := startServer(t, filepath.Join(dir, "62_tasks_workflow"), "serve", "-http", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "retry.db"))
	code, out, errOut := cli(t, "ok\n", "-url", url, "prompt", "ship_release", "repo=x", "version=v1.2.3", "-follow")
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `✓ checks\s+run_checks`, out)
	require.Contains(t, out, "retried after: checks for x: integration test timed out (flaky)")
	require.NotContains(t, out, "✗")
	require.Contains(t, out, `Workflow "ship_release" (task `)
}
