package tui

import (
	"github.com/taskbridge/taskbridge/mcptask"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
)

// A step whose tool takes the workflow task as an argument (_task_id,
// host mode): the form neither shows nor asks it, and the call carries
// the task's id.
func TestStepFormFillsTheTaskIDArgument(t *testing.T) {
	url, seen := clitest.TaskIDArgument(t)
	h := newHarness(t, url, mcptask.Core, true)
	h.keys("2", "enter", "ctrl+s")
	h.see("Workflow bound_flow", "waiting for you · needs note")
	id := h.m.prompts.wf.doc.TaskID
	h.keys("enter")
	v := h.see("Step mark: call bound", "◆note*")
	require.NotContains(t, v, "_task_id", "the task id is not asked")
	h.typ("hello")
	h.keys("ctrl+s")
	h.see("✓ workflow completed: 1 step(s) done")
	require.Equal(t, []string{id}, seen())
}
