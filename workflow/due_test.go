package workflow

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
)

// A process that died mid-undo left its undo record running: the next
// process has work to do on the task (it runs the undo again), as it has
// for a step of the workflow found running.
func TestDueNowAfterAStopMidUndo(t *testing.T) {
	now := time.Now()
	p := &Progress{Steps: []StepProgress{{Name: "deploy", Status: mcptask.StepCompleted}, {Name: "check", Status: mcptask.StepFailed}},
		Undo: &Undoing{Reason: "check failed", Listed: true, Steps: []StepProgress{
			{Name: "undo:deploy", Status: mcptask.StepRunning, Attempts: 1},
		}}}
	require.True(t, dueNow(p, now), "the undo step's process is gone")
	p.Undo.Steps[0].Status = mcptask.StepCompleted
	require.True(t, dueNow(p, now), "every undo ended: the workflow fails now")
	later := now.Add(time.Minute)
	p.Undo.Steps[0] = StepProgress{Name: "undo:deploy", Status: mcptask.StepPending, Attempts: 1, RetryAt: &later}
	require.False(t, dueNow(p, now), "the undo waits for its retry")
	require.True(t, dueNow(p, later))
}
