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

// A failed step whose retry came while it waits for its place on a queue
// is woken by the grant, or looks again at the queue's next look: its
// past retry time is not the task's wake-up (it was, and the scheduler
// woke the task again at every round, each a queue write, until the
// place freed). Found by the simulation (issue 39, seed 82).
func TestRetryWaitingForAPlaceIsNotDue(t *testing.T) {
	now := time.Now()
	past, next := now.Add(-time.Second), now.Add(30*time.Second)
	p := &Progress{Steps: []StepProgress{{Name: "deploy", Status: mcptask.StepFailed, Attempts: 1, RetryAt: &past,
		Queue: &QueuePlace{Queue: "deploys", Since: past, Next: &next}}}}
	require.Equal(t, next, p.timerWake(), "the queue's next look, not the past retry")
	p.Steps[0].Queue.GrantedAt = &now // granted: the retry is due
	require.Equal(t, past, p.timerWake())
}
