package main

import (
	"path/filepath"
	"testing"
)

// TestUIStreamsTaskLines: the Tasks tab shows what a running task
// reports, as it reports it: example 62's generate_report writes a
// progress and a log line per second, and the selected task's detail
// shows them one after the other while it works, then its result.
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
	ui.text("5")
	ui.keys("Enter")
	ui.waitFor("[3 Tasks (1)]", "● working", "| 1/5 (20%) section 1 of 5 written")
	s := ui.waitFor("● working", "| 2/5 (40%) section 2 of 5 written", "| info: wrote a section of the report")
	checkSize(t, s)
	ui.waitFor("✓ completed", `Report on "live" is ready.`)
	ui.quit()
}
