package dashboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/workflow"
)

// The timeline draws every step kind: a group's members, a sleep with its
// end, an event waiting, a skipped step with its reason.
func TestTimelineKinds(t *testing.T) {
	until := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	p := &workflow.Progress{Workflow: "canary", Steps: []workflow.StepProgress{
		{Name: "lint", Tool: "run_suite", Execution: "server", Status: workflow.StepCompleted, Group: "checks", CompletedBy: "server"},
		{Name: "soak", Execution: "server", Status: workflow.StepSleeping, Kind: "sleep", Until: &until},
		{Name: "approved", Execution: "client", Status: workflow.StepAwaitingEvent, Kind: "event"},
		{Name: "promote", Tool: "promote_release", Execution: "server", Status: workflow.StepSkipped, SkipReason: "its condition did not hold: x"},
	}}
	pv := timeline(p, until)
	require.Equal(t, "checks", pv.Steps[0].Group)
	require.Equal(t, "sleeping", pv.Steps[1].State)
	require.Contains(t, pv.Steps[1].Note, "until ")
	require.Equal(t, "waiting for its event", pv.Steps[2].StateLabel)
	require.Equal(t, "skipped", pv.Steps[3].State)
	require.Equal(t, "its condition did not hold: x", pv.Steps[3].Note)
	require.Equal(t, 2, pv.Done, "completed and skipped steps have ended")
}
