package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
)

// useHistory gives the test a task history of its own and returns it.
func useHistory(t *testing.T) *history.History {
	t.Helper()
	path := filepath.Join(t.TempDir(), "history")
	t.Setenv(history.EnvPath, path)
	return history.Open(path, 0)
}

// Every CLI run is a new session, and the extension has no tasks/list:
// the tasks taskbridge created (detached calls, workflows) are found
// again through the task history, with their status now and their tool
// or workflow name.
func TestTasksListShowsTheHistory(t *testing.T) {
	h := useHistory(t)
	url := clitest.Release(t)
	code, out, errOut := cli(t, "", "-url", url, "call", "-detach", "generate_report", "topic=long", "seconds=30")
	require.Equal(t, exitOK, code, errOut)
	long := strings.Fields(out)[0]
	code, out, errOut = cli(t, "", "-url", url, "-dialect", "core", "call", "-detach", "generate_report", "topic=short", "seconds=0")
	require.Equal(t, exitOK, code, errOut)
	short := strings.Fields(out)[0]
	wf := startRelease(t, url, "taskbridge")
	// A task the server no longer knows (expired): listed as not found.
	require.NoError(t, h.Record(history.Entry{ID: "0123456789abcdef0123456789abcdef", Server: url, Name: "fetch_changes", Kind: history.KindTool, Created: time.Now().Add(-time.Hour)}))
	// Another server's task is not listed.
	require.NoError(t, h.Record(history.Entry{ID: "fedcba9876543210fedcba9876543210", Server: "http://elsewhere/mcp", Name: "x"}))

	for _, dialect := range []string{"extension", "core"} {
		code, out, errOut = cli(t, "", "-url", url, "-dialect", dialect, "tasks", "list")
		require.Equal(t, exitOK, code, errOut)
		require.Regexp(t, long+`\s+working\s+generate_report\s+created`, out, dialect)
		require.Regexp(t, short+`\s+(working|completed)\s+generate_report`, out, dialect)
		require.Regexp(t, wf+`\s+working\s+release_notes`, out, dialect)
		require.Regexp(t, `0123456789abcdef0123456789abcdef\s+not found\s+fetch_changes.*no longer knows it`, out, dialect)
		require.NotContains(t, out, "fedcba9876543210fedcba9876543210")
		require.Contains(t, out, "4 task(s) on "+url+": 4 from this computer's task history ("+h.Path()+")")
		// Oldest created first.
		require.Less(t, strings.Index(out, "0123456789abcdef"), strings.Index(out, long))
		require.Less(t, strings.Index(out, long), strings.Index(out, wf))
	}
	require.Contains(t, out, "listed by the server (tasks/list")

	// JSON: one object per task, with its name and where it came from.
	code, out, _ = cli(t, "", "-url", url, "-json", "tasks", "list")
	require.Equal(t, exitOK, code)
	byID := map[string]map[string]any{}
	for _, m := range jsonLines(t, out) {
		byID[m["taskId"].(string)] = m
	}
	require.Equal(t, "release_notes", byID[wf]["name"])
	require.Equal(t, "workflow", byID[wf]["kind"])
	require.Equal(t, "working", byID[wf]["status"])
	require.Equal(t, false, byID["0123456789abcdef0123456789abcdef"]["found"])

	// tasks forget drops tasks from the history, not from the server; it
	// needs no server.
	code, out, errOut = cli(t, "", "tasks", "forget", "0123456789abcdef0123456789abcdef")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "forgot 1 task(s)")
	code, out, _ = cli(t, "", "-url", url, "tasks", "list")
	require.Equal(t, exitOK, code)
	require.NotContains(t, out, "0123456789abcdef0123456789abcdef")
	code, out, _ = cli(t, "", "-url", url, "tasks", "forget", "-all")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "forgot 3 task(s)")
	code, out, _ = cli(t, "", "-url", url, "tasks", "get", long)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "working", "forgetting leaves the task alone")
	code, out, _ = cli(t, "", "-url", url, "tasks", "list")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "1 task(s)", "tasks get records the task it opened")
	left, err := h.List("")
	require.NoError(t, err)
	require.Len(t, left, 2, "the task opened again, and the other server's")

	for _, args := range [][]string{{"tasks", "forget"}, {"tasks", "forget", "-all"}, {"tasks", "forget", "-all", "x"}} {
		code, _, errOut := cli(t, "", args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}

	// With the history off, nothing is remembered.
	t.Setenv(history.EnvPath, "off")
	code, out, _ = cli(t, "", "-url", url, "call", "-detach", "generate_report", "topic=off", "seconds=0")
	require.Equal(t, exitOK, code)
	code, list, _ := cli(t, "", "-url", url, "tasks", "list")
	require.Equal(t, exitOK, code)
	require.NotContains(t, list, strings.Fields(out)[0])
	require.Contains(t, list, "off: TASKBRIDGE_HISTORY=off")
}
