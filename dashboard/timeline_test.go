package dashboard

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/workflow"
)

// The timeline draws every step kind: a group's members, a sleep with its
// end, an event waiting, a skipped step with its reason.
func TestTimelineKinds(t *testing.T) {
	until := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	p := &workflow.Progress{Workflow: "canary", Steps: []workflow.StepProgress{
		{Name: "lint", Tool: "run_suite", Execution: "server", Status: mcptask.StepCompleted, Group: "checks", CompletedBy: "server"},
		{Name: "soak", Execution: "server", Status: mcptask.StepSleeping, Kind: "sleep", Until: &until},
		{Name: "approved", Execution: "client", Status: mcptask.StepAwaitingEvent, Kind: "event"},
		{Name: "promote", Tool: "promote_release", Execution: "server", Status: mcptask.StepSkipped, SkipReason: "its condition did not hold: x"},
	}}
	pv := timeline(p, until, "")
	require.Equal(t, "checks", pv.Steps[0].Group)
	require.Equal(t, "sleeping", pv.Steps[1].State)
	require.Contains(t, pv.Steps[1].Note, "until ")
	require.Equal(t, "waiting for its event", pv.Steps[2].StateLabel)
	require.Equal(t, "skipped", pv.Steps[3].State)
	require.Equal(t, "its condition did not hold: x", pv.Steps[3].Note)
	require.Equal(t, 2, pv.Done, "completed and skipped steps have ended")
}

// The timeline nests a container's records: a for-each's items with their
// values and results, a loop's latest runs with how many it ran; past
// maxRecords it draws those still going and says how many it left out.
// Once the task has ended, a step it did not finish reads as stopped; an
// undo step the server gave up on says to take it back by hand.
func TestTimelineRecords(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	items := make([]workflow.StepProgress, maxRecords+20)
	for i := range items {
		items[i] = workflow.StepProgress{Name: "build[" + strconv.Itoa(i) + "]", Tool: "build_service", Execution: "server", Status: mcptask.StepCompleted,
			N: i, Item: json.RawMessage(`"svc` + strconv.Itoa(i) + `"`), Result: json.RawMessage(`{"ok": true}`),
			History: []workflow.Attempt{{N: 1, Outcome: workflow.OutcomeOK, DurationMs: 5}}}
	}
	last := &items[len(items)-1]
	last.Status, last.Result = mcptask.StepRunning, nil
	last.History = []workflow.Attempt{{N: 1, Outcome: workflow.OutcomeError, Error: "timed out after 3s (the step's Timeout)"}, {N: 2, Outcome: workflow.OutcomeError, Error: "lost: no heartbeat within 1s (the step's Heartbeat)"}, {N: 3, Outcome: workflow.OutcomeRunning, At: now.Add(-time.Second)}}
	deadline := now.Add(10 * time.Minute)
	p := &workflow.Progress{Workflow: "train", DeadlineAt: &deadline, Steps: []workflow.StepProgress{
		{Name: "build", Kind: "foreach", Execution: "server", Status: mcptask.StepRunning, Items: items},
		{Name: "smoke", Kind: "loop", Execution: "server", Status: mcptask.StepSleeping, Runs: 7, Until: &deadline, Items: []workflow.StepProgress{
			{Name: "smoke[5]", Tool: "smoke_test", Execution: "server", Status: mcptask.StepCompleted, N: 5, Result: json.RawMessage(`{"healthy":false}`)},
			{Name: "smoke[6]", Tool: "smoke_test", Execution: "server", Status: mcptask.StepCompleted, N: 6, Result: json.RawMessage(`{"healthy":false}`)},
			{Name: "smoke[7]", Tool: "smoke_test", Execution: "server", Status: mcptask.StepCompleted, N: 7, Result: json.RawMessage(`{"healthy":false}`)},
		}},
		{Name: "notes", Kind: "child", Execution: "server", Status: mcptask.StepAwaitingChild, Child: "c0ffee"},
	}}
	pv := timeline(p, now, "")
	build := pv.Steps[0]
	require.Len(t, build.Records, maxRecords)
	require.Equal(t, 20, build.Hidden)
	require.Equal(t, "build[119]", build.Records[len(build.Records)-1].Name, "the item still running is drawn")
	require.Equal(t, "[0]", build.Records[0].Label)
	require.Equal(t, "svc0", build.Records[0].Item)
	require.Equal(t, `{"ok":true}`, build.Records[0].Result)
	require.False(t, build.Records[0].ShowAttempts, "one attempt that went well is said in the title")
	running := build.Records[len(build.Records)-1]
	require.True(t, running.ShowAttempts)
	require.Equal(t, "timed out", running.Attempts[0].Cut)
	require.Equal(t, "lost", running.Attempts[1].Cut)
	require.Equal(t, "running", running.State)
	require.Contains(t, build.Note, "119 of 120 item(s) done, 1 running")
	smoke := pv.Steps[1]
	require.Equal(t, "ran 7 time(s); the latest 3 are kept; the next run starts at "+stamp(deadline), smoke.Note)
	require.Equal(t, "run 7", smoke.Records[2].Label)
	require.Equal(t, "loop", smoke.KindLabel)
	notes := pv.Steps[2]
	require.Equal(t, "c0ffee", notes.Child)
	require.Equal(t, "its child workflow runs", notes.StateLabel)
	require.Equal(t, "child workflow", notes.KindLabel)
	require.Contains(t, pv.DeadlineNote, "10m00s from now")

	// The task failed: what still ran is stopped; the undo says what
	// became of each step it takes back.
	p.Undo = &workflow.Undoing{Reason: "step smoke failed", Listed: true, Steps: []workflow.StepProgress{
		{Name: "undo:deploy[1]", Tool: "rollback_service", Status: mcptask.StepCompleted, Item: json.RawMessage(`"web"`)},
		{Name: "undo:deploy[0]", Tool: "rollback_service", Status: mcptask.StepFailed, GaveUp: true, Error: "registry down"},
	}}
	pv = timeline(p, now, "failed")
	require.Equal(t, "stopped", pv.Steps[0].State)
	require.Equal(t, "stopped: the workflow failed first", pv.Steps[2].StateLabel)
	stopped := pv.Steps[0].Records[len(pv.Steps[0].Records)-1]
	require.Equal(t, "stopped", stopped.State)
	require.True(t, stopped.Attempts[2].Unfinished, "an attempt open when the task ended has no outcome")
	require.Equal(t, "unfinished", stopped.Attempts[2].Outcome)
	require.Equal(t, "the workflow had until then to end", pv.DeadlineNote)
	u := pv.Undo
	require.True(t, u.Ended)
	require.Equal(t, 1, u.Undone)
	require.Equal(t, 1, u.NotUndone)
	require.Equal(t, "deploy[1]", u.Steps[0].Undoes)
	require.Equal(t, "web", u.Steps[0].Item)
	require.Equal(t, "undone", u.Steps[0].StateLabel)
	require.Equal(t, "NOT undone: take it back by hand", u.Steps[1].StateLabel)
	require.Equal(t, "registry down", u.Steps[1].Error)
}
