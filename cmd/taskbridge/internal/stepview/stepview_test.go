package stepview

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

const (
	trainID = "7421a4fea918e81da867b2cdee0201ec"
	childID = "9d1b489c7e62bb2b2fd825f3fddf37d8"
)

// train is release_train's handoff where it waits for the review of the
// child workflow's notes, with one item of a for-each of client steps
// (checks[1]) for the client too.
func train() *handoff.Document {
	ref := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	return &handoff.Document{
		SchemaVersion: handoff.SchemaVersion, TaskID: trainID, Workflow: "release_train", Status: string(mcptask.StatusWorking),
		CompletedSteps: []handoff.CompletedStep{
			{Name: "build", Kind: string(mcptask.StepKindForEach), Result: json.RawMessage(`[{"service":"api"},{"content":[{"type":"text","text":"built web"}]},null]`)},
		},
		RemainingSteps: []handoff.RemainingStep{
			{Name: "notes", Kind: string(mcptask.StepKindChild), Execution: mcptask.ExecServer, Status: mcptask.StepAwaitingClient,
				Do: `child workflow "release_notes" (task ` + childID + `) waits for the steps listed next`},
			{Name: "notes/review", Tool: "review_notes", Execution: mcptask.ExecClient, Status: mcptask.StepAwaitingClient,
				Arguments: map[string]json.RawMessage{mcptask.ArgTaskID: ref(childID), "approved": ref("<true to approve>")},
				Call:      &handoff.Call{Tool: "review_notes", Arguments: map[string]json.RawMessage{mcptask.ArgTaskID: ref(childID)}}},
			{Name: "checks", Kind: string(mcptask.StepKindForEach), Execution: mcptask.ExecServer, Status: mcptask.StepAwaitingClient},
			{Name: "checks[1]", Tool: "check", Execution: mcptask.ExecClient, Status: mcptask.StepAwaitingClient,
				Arguments: map[string]json.RawMessage{mcptask.ArgTaskID: ref(trainID + "#checks[1]")}},
			{Name: "checksum", Tool: "sum", Execution: mcptask.ExecServer, Status: mcptask.StepPending},
		},
		Undo: []handoff.UndoStep{
			{Undoes: "deploy[1]", Tool: "rollback_service", Status: mcptask.StepCompleted},
			{Undoes: "deploy[0]", Tool: "rollback_service", Status: mcptask.StepFailed, Error: "registry down."},
			{Undoes: "tag", Tool: "untag", Status: mcptask.StepRunning, Error: "timeout"},
			{Undoes: "db", Tool: "restore", Status: mcptask.StepPending},
		},
		Continuation: handoff.NewContinuation(trainID, 0),
	}
}

func TestRowsNestEntriesUnderTheirStep(t *testing.T) {
	d := train()
	rows := Rows(d)
	var got []string
	for _, r := range rows {
		got = append(got, r.Name+"@"+r.Parent)
	}
	require.Equal(t, []string{"build@", "notes@", "notes/review@notes", "checks@", "checks[1]@checks", "checksum@"}, got,
		`"checksum" starts with "checks" but is not nested under it`)
	require.Equal(t, 1, rows[2].Depth)
	require.Equal(t, "(for-each)", rows[0].Tool)
	require.Equal(t, "(child workflow)", rows[1].Tool)
	require.Equal(t, childID, rows[1].Child, "the child's steps name the child task")
	require.Empty(t, rows[3].Child)
	require.Equal(t, []Record{{"build[0]", `{"service":"api"}`}, {"build[1]", "built web"}, {"build[2]", "null"}}, rows[0].Records)
	done, total := TopLevel(d)
	require.Equal(t, 1, done)
	require.Equal(t, 4, total, "build, notes, checks, checksum: not the nested entries")
}

func TestRefIsTheEntrysTask(t *testing.T) {
	d := train()
	require.Equal(t, childID, Ref(d, d.RemainingSteps[1]), "a child's step is performed on the child")
	require.Equal(t, trainID+"#checks[1]", Ref(d, d.RemainingSteps[3]), "a for-each's item names its record")
	require.Equal(t, trainID, Ref(d, d.RemainingSteps[4]))
}

func TestUndoWords(t *testing.T) {
	d := train()
	var got []string
	for _, u := range d.Undo {
		mark, words := Undo(u)
		got = append(got, mark+" "+words)
	}
	require.Equal(t, []string{
		"✓ undone",
		"✗ NOT undone (registry down): take it back by hand",
		"● undoing now (last try failed: timeout)",
		"· to undo",
	}, got)
	require.Equal(t, "being undone by the server, last first:", UndoTitle(d))
	d.Status = string(mcptask.StatusFailed)
	require.Equal(t, "undone after the failure, last first:", UndoTitle(d))
}

func TestStateOfTheNewKinds(t *testing.T) {
	d := train()
	require.Equal(t, "waiting for you, below", State(d.RemainingSteps[0]))
	require.Equal(t, "·", Mark(d.RemainingSteps[0]))
	require.Equal(t, "→", Mark(d.RemainingSteps[1]))
	child := handoff.RemainingStep{Kind: string(mcptask.StepKindChild), Execution: mcptask.ExecServer, Status: mcptask.StepAwaitingChild}
	require.Equal(t, "↓", Mark(child))
	require.Equal(t, "its child workflow runs (server)", State(child))
}

// TestEventStateNamesTheEventTool: a step waiting for its event names the
// tool the handoff gives (which every dialect has) before tasks/update,
// which only the extension has.
func TestEventStateNamesTheEventTool(t *testing.T) {
	s := handoff.RemainingStep{Name: "approve", Kind: string(mcptask.StepKindEvent), Execution: mcptask.ExecClient, Status: mcptask.StepAwaitingEvent,
		Call: &handoff.Call{Tool: "workflow_event"}}
	require.Equal(t, "waiting for its event (tool workflow_event, the webhook, or tasks/update in the extension)", State(s))
	s.Call = nil
	require.Equal(t, "waiting for its event (the webhook, or tasks/update in the extension)", State(s))
}
