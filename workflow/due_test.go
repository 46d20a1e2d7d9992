package workflow

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A process that died mid-undo left its undo record running: the next
// process has work to do on the task (it runs the undo again), as it has
// for a step of the workflow found running.
func TestDueNowAfterAStopMidUndo(t *testing.T) {
	now := time.Now()
	p := &Progress{Steps: []StepProgress{{Name: "deploy", Status: StepCompleted}, {Name: "check", Status: StepFailed}},
		Undo: &Undoing{Reason: "check failed", Listed: true, Steps: []StepProgress{
			{Name: "undo:deploy", Status: StepRunning, Attempts: 1},
		}}}
	require.True(t, dueNow(p, now), "the undo step's process is gone")
	p.Undo.Steps[0].Status = StepCompleted
	require.True(t, dueNow(p, now), "every undo ended: the workflow fails now")
	later := now.Add(time.Minute)
	p.Undo.Steps[0] = StepProgress{Name: "undo:deploy", Status: StepPending, Attempts: 1, RetryAt: &later}
	require.False(t, dueNow(p, now), "the undo waits for its retry")
	require.True(t, dueNow(p, later))
}
