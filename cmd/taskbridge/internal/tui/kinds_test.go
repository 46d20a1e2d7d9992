package tui

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
	"github.com/taskbridge/taskbridge/mcptask"
)

// kindsDoc is a workflow's handoff with the kinds of issue 29: a
// completed for-each, a child workflow running on the server, a loop, a
// for-each whose n items are the client's, and an undo under way.
func kindsDoc(id string, n int) *handoff.Document {
	ref := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	d := &handoff.Document{
		SchemaVersion: handoff.SchemaVersion, TaskID: id, Workflow: "convoy", Status: string(mcptask.StatusWorking),
		PauseReason: `step "checks": 0 of 3 items done`,
		CompletedSteps: []handoff.CompletedStep{
			{Name: "build", Kind: string(mcptask.StepKindForEach), Result: json.RawMessage(`[{"service":"api"},{"service":"web"}]`)},
		},
		RemainingSteps: []handoff.RemainingStep{
			{Name: "notes", Kind: string(mcptask.StepKindChild), Execution: mcptask.ExecServer, Status: mcptask.StepAwaitingChild,
				Do: `child workflow "release_notes" (task c0ffee) runs its steps on the server; do not call anything for it.`},
			{Name: "poll", Kind: string(mcptask.StepKindLoop), Execution: mcptask.ExecServer, Status: mcptask.StepRunning,
				Do: `step "poll": run 2 of at most 3 (tool "probe"), until healthy.`},
			{Name: "checks", Kind: string(mcptask.StepKindForEach), Execution: mcptask.ExecServer, Status: mcptask.StepAwaitingClient,
				Do: fmt.Sprintf(`step "checks": 0 of %d items done, %d waiting for the client (tool "check" per item).`, n, n)},
		},
		Undo: []handoff.UndoStep{
			{Undoes: "deploy[1]", Tool: "rollback", Status: mcptask.StepCompleted},
			{Undoes: "deploy[0]", Tool: "rollback", Status: mcptask.StepRunning},
		},
		Continuation: handoff.NewContinuation(id, mcptask.Extension),
	}
	for i := range n {
		name := fmt.Sprintf("checks[%d]", i)
		d.RemainingSteps = append(d.RemainingSteps, handoff.RemainingStep{Name: name, Tool: "check", Execution: mcptask.ExecClient, Status: mcptask.StepAwaitingClient,
			Arguments: map[string]json.RawMessage{mcptask.MetaTaskID: ref(id + "#" + name), "ok": ref("<did it pass>")}})
	}
	return d
}

// TestWorkflowViewShowsTheKinds: the followed workflow's step list nests
// a container's entries under it, names each kind as a person does,
// shows the undo under way, and says more on the selected step: a
// completed for-each's results item by item, what a loop or a child step
// stands at. A long list scrolls around the selection and keeps the keys
// on the screen; the Tasks tab counts the workflow's own steps only.
func TestWorkflowViewShowsTheKinds(t *testing.T) {
	h := newHarness(t, clitest.Release(t), mcptask.Extension, true)
	const id = "0123456789abcdef0123456789abcdef"
	h.m.showWorkflow(kindsDoc(id, 3))
	v := h.view()
	require.Regexp(t, `✓ build +\(for-each\) +done · 2 item\(s\)`, v)
	require.Regexp(t, `↓ notes +\(child workflow\) +its child workflow runs \(server\)`, v)
	require.Regexp(t, `● poll +\(loop\) +running`, v)
	require.Regexp(t, `· checks +\(for-each\) +waiting for you, below`, v)
	require.Regexp(t, `›   → checks\[0\] +check +waiting for you · needs ok`, v, "the first item the client may perform is selected, nested")
	require.Regexp(t, `    → checks\[2\] +check`, v)
	require.Contains(t, v, "  being undone by the server, last first:")
	require.Regexp(t, `✓ deploy\[1\] +rollback +undone`, v)
	require.Regexp(t, `● deploy\[0\] +rollback +undoing now`, v)

	for range 4 {
		h.keys("up") // to build
	}
	v = h.see("build: 2 item(s), in order:")
	require.Contains(t, v, `    build[1]  {"service":"web"}`)
	h.keys("down")
	h.see(`notes: child workflow "release_notes" (task c0ffee) runs its steps on the`)
	h.keys("down")
	h.see(`poll: step "poll": run 2 of at most 3 (tool "probe"), until healthy.`)

	// The Tasks tab: 1 of the workflow's 4 steps done; the entries nested
	// are not steps of their own.
	h.keys("3")
	v = h.see("progress: 1/4 steps done")
	require.Contains(t, v, "✓ build  ↓ notes  ● poll  · checks")
	require.Contains(t, v, `build: 2 item(s): {"service":"api"} · {"service":"web"}`)

	// Forty items: the list scrolls, the selection and the keys stay.
	h.keys("2")
	h.m.showWorkflow(kindsDoc(id, 40))
	for range 10 {
		h.keys("down")
	}
	v = h.view()
	require.Contains(t, v, "→ checks[10]", "the selection is on the screen")
	require.Contains(t, v, "enter perform step · r resume")
	require.NotContains(t, v, "checks[39]")
	require.Equal(t, 1, strings.Count(v, "› "))
}
