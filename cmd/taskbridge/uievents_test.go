package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUIStreamsTaskLines: the Tasks tab shows what a running task
// reports, as it reports it: example 62's generate_report writes a
// progress and a log line per second, and the selected task's detail
// shows them one after the other while it works, then its result.
//
// The report takes 20 seconds, and the test waits for lines by their
// form, not for given ones: a busy machine may draw the screen seconds
// late, past a section's lines (the detail shows the latest four) but not
// past the task's work.
func TestUIStreamsTaskLines(t *testing.T) {
	needTmux(t)
	dir := build(t)
	url := startServer(t, filepath.Join(dir, "62_tasks_workflow"), "serve", "-http", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "lines.db"))
	ui := startUI(t, filepath.Join(dir, "taskbridge"), "ui", url)
	ui.waitFor("[1 Tools]", "generate_report")
	ui.selectRow("generate_report")
	ui.keys("Enter")
	ui.waitFor("Call generate_report", "topic*")
	ui.text("live")
	ui.keys("Tab")
	ui.text("20")
	ui.keys("Enter")
	section := regexp.MustCompile(`\| (\d+)/20 \(\d+%\) section (\d+) of 20 written`)
	_, m := ui.waitForMatch(section, "[3 Tasks (1)]", "● working")
	first, _ := strconv.Atoi(m[1])
	require.Equal(t, m[1], m[2], "the progress says the section it wrote: %q", m[0])
	// A later section, while it still works, with its log line.
	s, _ := ui.waitForMatchFunc(section, func(m []string) bool {
		n, _ := strconv.Atoi(m[1])
		return n > first
	}, "● working", "| info: wrote a section of the report")
	checkSize(t, s)
	ui.waitFor("✓ completed", `Report on "live" is ready.`)
	ui.quit()
}

// waitForMatch polls the screen until it shows every one of texts and
// matches re; it returns the screen and re's submatches.
func (u *tmuxUI) waitForMatch(re *regexp.Regexp, texts ...string) (string, []string) {
	u.t.Helper()
	return u.waitForMatchFunc(re, func([]string) bool { return true }, texts...)
}

// waitForMatchFunc is waitForMatch for a match that ok accepts.
func (u *tmuxUI) waitForMatchFunc(re *regexp.Regexp, ok func([]string) bool, texts ...string) (string, []string) {
	u.t.Helper()
	var match []string
	s := u.until(fmt.Sprintf("%q and %s", texts, re), func(s string) bool {
		if !shows(s, texts) {
			return false
		}
		for _, m := range re.FindAllStringSubmatch(s, -1) {
			if ok(m) {
				match = m
				return true
			}
		}
		return false
	})
	return s, match
}
