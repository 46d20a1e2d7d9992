package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
)

// TestUIAsksNothingAtStart: the terminal UI starts with the task history,
// which holds a workflow waiting for a person's decision; its question
// does not take the screen (nor the first keys): the status line says it
// waits and a opens it. esc closes it without declining (the workflow
// still waits); the form asks the payload's fields in their order; the
// answer completes the workflow.
func TestUIAsksNothingAtStart(t *testing.T) {
	needTmux(t)
	dir := build(t)
	url := startServer(t, filepath.Join(dir, "62_tasks_workflow"), "serve", "-http", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "ask.db"))
	hist := filepath.Join(t.TempDir(), "history")

	// A canary started from the CLI earlier: it soaks a second, then waits
	// for the person's decision.
	cmd := exec.Command(filepath.Join(dir, "taskbridge"), "-url", url, "prompt", "canary_release", "repo=shop", "version=v1.0.0", "soak_seconds=1")
	cmd.Env = append(os.Environ(), history.EnvPath+"="+hist)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	time.Sleep(1500 * time.Millisecond) // past the soak: not an assertion, only so that the question exists when the UI starts

	ui := startUIEnv(t, []string{history.EnvPath + "=" + hist}, filepath.Join(dir, "taskbridge"), "ui", url)
	s := ui.waitFor("[1 Tools]", "◆ 1 need input", "a answer")
	require.Contains(t, s, "asks for input: press a to answer")
	require.NotContains(t, s, "waits for your decision", "no form the user did not ask for")
	// The first keys go where the user meant them: the Prompts tab.
	ui.keys("2")
	ui.waitFor("[2 Prompts]", "canary_release")

	ui.keys("a")
	s = ui.waitFor("asks", "event \"go_live\"", "approved*", "reason*", "esc later", "ctrl+d decline")
	require.Less(t, indexOf(s, "approved*"), indexOf(s, "reason*"), "the payload's fields in their order")
	ui.keys("Escape")
	ui.waitFor("not answered: press a to answer it later", "◆ 1 need input")

	ui.keys("a")
	ui.waitFor("approved*")
	ui.text("true")
	ui.keys("Tab")
	ui.text("error rate flat")
	ui.keys("C-s")
	ui.waitFor("answered (accept)", "◆ 0 need input")
	ui.keys("3")
	ui.waitFor("canary_release", "✓ completed")
	ui.quit()
}

// indexOf is the byte offset of sub in s, or -1.
func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}
