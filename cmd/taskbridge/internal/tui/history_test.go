package tui

import (
	"context"
	"github.com/taskbridge/taskbridge/mcptask"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
)

// The Tasks tab starts with the tasks the history remembers for the
// server (started by the CLI, or by an earlier UI), named and with their
// status now; the tasks this UI starts, follows or opens are recorded.
func TestTasksTabStartsWithTheHistory(t *testing.T) {
	url := clitest.Release(t)
	dialects(t, func(t *testing.T, d mcptask.Dialect) {
		h := history.Open(filepath.Join(t.TempDir(), "history"), 0)
		ctx := context.Background()
		other, err := client.Dial(ctx, client.HTTPTransport(url, nil), &client.Options{Dialect: mcptask.Extension})
		require.NoError(t, err)
		defer other.Close()
		var long string
		for ev, err := range other.CallTool(ctx, "generate_report", map[string]any{"topic": "long", "seconds": 30}, nil) {
			require.NoError(t, err)
			long = ev.Task.ID
			break
		}
		_, doc, err := other.GetPrompt(ctx, "release_notes", map[string]string{"repo": "taskbridge"})
		require.NoError(t, err)
		wf := doc.TaskID
		gone := "0123456789abcdef0123456789abcdef"
		now := time.Now()
		require.NoError(t, h.Record(history.Entry{ID: gone, Server: url, Name: "fetch_changes", Kind: history.KindTool, Created: now.Add(-time.Hour)}))
		require.NoError(t, h.Record(history.Entry{ID: long, Server: url, Name: "generate_report", Kind: history.KindTool, Created: now.Add(-time.Minute)}))
		require.NoError(t, h.Record(history.Entry{ID: wf, Server: url, Name: "release_notes", Kind: history.KindWorkflow, Created: now}))
		require.NoError(t, h.Record(history.Entry{ID: "fedcba9876543210fedcba9876543210", Server: "http://elsewhere/mcp", Name: "x"}))

		u := newHarnessWith(t, url, d, Options{NoColor: true, History: h})
		u.keys("3")
		v := u.see("[3 Tasks (3)]", "● 2 working")
		require.Regexp(t, short(long)+`\s+generate_report\s+● working`, v)
		require.Regexp(t, short(wf)+`\s+release_notes\s+● working`, v)
		v = u.see("? not found")
		require.Regexp(t, short(gone)+`\s+fetch_changes\s+\? not found`, v)
		require.NotContains(t, v, "fedcba98")

		// The remembered workflow opens in Prompts, steps and all.
		u.tasksSelect(wf)
		u.keys("enter")
		u.see("Workflow release_notes", "waiting for you · needs approved, feedback")

		// A task started here is recorded with its tool.
		u.selectTool("generate_report")
		u.keys("enter")
		u.typ("new")
		u.keys("tab")
		u.typ("0")
		u.keys("enter")
		u.see("[3 Tasks (4)]", `Report on "new" is ready.`)
		entries, err := h.List(url)
		require.NoError(t, err)
		require.Len(t, entries, 4)
		last := entries[len(entries)-1]
		require.Equal(t, "generate_report", last.Name)
		require.Equal(t, history.KindTool, last.Kind)

		// The next UI starts with it, completed.
		again := newHarnessWith(t, url, d, Options{NoColor: true, History: h})
		again.keys("3")
		v = again.see("[3 Tasks (4)]", "✓ 1 done")
		require.Regexp(t, short(last.ID)+`\s+generate_report\s+✓ completed`, v)
	})
}

// tasksSelect moves the Tasks tab's selection to task id.
func (h *harness) tasksSelect(id string) {
	h.t.Helper()
	h.keys("3")
	i := slices.IndexFunc(h.m.tasks.rows, func(r *taskRow) bool { return r.id == id })
	require.GreaterOrEqual(h.t, i, 0, "no row for %s", id)
	for h.m.tasks.sel > i {
		h.keys("up")
	}
	for h.m.tasks.sel < i {
		h.keys("down")
	}
}

// After a workflow task is cancelled, none of its steps is shown as
// waiting for the user, in Prompts or in Tasks; 2 brings back the prompt
// list, not the cancelled workflow.
func TestCancelledWorkflowHasNoStepWaiting(t *testing.T) {
	url := clitest.Release(t)
	dialects(t, func(t *testing.T, d mcptask.Dialect) {
		h := newHarness(t, url, d, true)
		h.keys("2", "enter")
		h.typ("taskbridge")
		h.keys("ctrl+s")
		h.see("Workflow release_notes", "waiting for you · needs approved, feedback")
		id := h.m.prompts.wf.doc.TaskID

		h.tasksSelect(id)
		h.see("next: review (waiting for you)")
		h.keys("c", "y")
		v := h.see("⊘ cancelled", "task "+short(id)+": cancelled", "cancelled before: review")
		require.NotContains(t, v, "waiting for you")

		h.keys("2")
		v = h.see("[2 Prompts]", "› release_notes", "arguments: repo*, since")
		require.NotContains(t, v, "Workflow release_notes", "2 shows the prompt list")

		// The cancelled workflow, opened again from Tasks.
		h.tasksSelect(id)
		h.keys("enter")
		v = h.see("Workflow release_notes", "⊘ cancelled", "not done (workflow cancelled)")
		require.NotContains(t, v, "waiting for you")
		require.NotContains(t, v, "enter perform step")
		h.keys("enter")
		h.see("› release_notes", "arguments: repo*, since")

		// 2 on the Prompts tab leaves a running workflow for the list too.
		h.keys("enter")
		h.typ("taskbridge")
		h.keys("ctrl+s")
		h.see("Workflow release_notes", "waiting for you")
		h.keys("2")
		v = h.see("› release_notes", "arguments: repo*, since")
		require.NotContains(t, v, "Workflow release_notes")
	})
}
