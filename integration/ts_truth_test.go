package integration

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTypeScriptEveryPath: the official TypeScript SDK client, which
// checks every tool result against the tool's outputSchema (an isError
// result too), drives every path of every example-62 workflow as a model
// in a tool-only host (ts-truth.mjs): no reply throws, a failed step's
// reply carries no structured content, a failed workflow's last reply is
// isError, and a core-dialect program reads a failed workflow task as
// failed with its tool result (isError) from tasks/result.
func TestTypeScriptEveryPath(t *testing.T) {
	modules := nodeModules(t)
	p := startProc(t, exampleBinary(t, "./examples/62_tasks_workflow"), []string{"TASKBRIDGE_HOST_DEADLINE=1s"},
		"serve", "-http", "ADDR", "-db", filepath.Join(t.TempDir(), "tasks.db"))
	steps := runTS(t, filepath.Join(modules, "..", "ts-truth.mjs"), p.url)
	for _, name := range []string{"listTools", "notesApproved", "notesRejected", "notesWrongType", "shipHandedFailsAgain",
		"canaryApproved", "canaryRejected", "trainHealthy", "trainFlaky", "longToolWithSchema", "trainHealthyTasks", "trainFlakyTasks"} {
		require.Contains(t, steps, name)
		require.Equal(t, true, steps[name]["ok"], "%s: %v", name, steps[name])
	}
	require.Contains(t, steps["listTools"]["withOutputSchema"], "review_notes", "the checks are armed")

	require.Equal(t, "completed", steps["notesApproved"]["status"])
	require.Equal(t, []any{"publish"}, []any{steps["notesApproved"]["completed"].([]any)[3]})
	rejected := steps["notesRejected"]
	require.Equal(t, "completed", rejected["status"])
	require.Equal(t, []any{"publish"}, rejected["skipped"])

	wrong := steps["notesWrongType"]
	require.Equal(t, "completed", wrong["status"])
	failed := wrong["failed"].([]any)
	require.Len(t, failed, 1, "the wrongly typed review failed once, then the corrected one was recorded")
	require.Equal(t, false, failed[0].(map[string]any)["structured"], "a failed call carries no structured content")
	require.Equal(t, []any{"review"}, wrong["performed"])

	ship := steps["shipHandedFailsAgain"]
	require.Equal(t, "completed", ship["status"])
	require.Equal(t, "tag", ship["handedOver"])
	sf := ship["failed"].([]any)
	require.Len(t, sf, 1, "the handed-over tag failed again once")
	require.Equal(t, "create_tag", sf[0].(map[string]any)["tool"])
	require.Contains(t, sf[0].(map[string]any)["text"], "not a semantic version")
	require.Equal(t, []any{"tag", "announce"}, ship["performed"])

	require.Equal(t, "completed", steps["canaryApproved"]["status"])
	require.Contains(t, steps["canaryApproved"]["completed"], "promote_release")
	require.Contains(t, steps["canaryRejected"]["completed"], "rollback_release")

	healthy := steps["trainHealthy"]
	require.Equal(t, "completed", healthy["status"], "%v", healthy["reason"])
	require.Equal(t, []any{"notes/review"}, healthy["performed"], "the child's step, with _meta naming the train")
	flaky := steps["trainFlaky"]
	require.Equal(t, "failed", flaky["status"])
	require.Equal(t, true, flaky["endIsError"], "task_result, which reports the failed end, is isError")
	require.Equal(t, false, healthy["endIsError"])
	require.Contains(t, flaky["reason"], "undone, last first")

	long := steps["longToolWithSchema"]
	require.Equal(t, true, long["isError"], "a tool with an outputSchema cannot answer with the task's state")
	require.Equal(t, false, long["structured"])
	require.Contains(t, long["text"], "Not a failure")
	require.Equal(t, "integration", long["result"].(map[string]any)["suite"], "task_result returns the tool's own output")

	ht := steps["trainHealthyTasks"]
	require.Equal(t, "completed", ht["status"])
	require.Equal(t, false, ht["isError"])
	ft := steps["trainFlakyTasks"]
	require.Equal(t, "failed", ft["status"])
	require.Equal(t, true, ft["isError"], "tasks/result of a failed workflow is its tool result with isError")
	require.Equal(t, "failed", ft["resultStatus"])
}
