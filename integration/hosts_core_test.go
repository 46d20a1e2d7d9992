package integration

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCoreDialectHostRunsTasks: a core-dialect host that runs tasks (the
// TypeScript SDK client calling each task-capable tool as a task, with
// elicitation forms for its user, as VS Code's chat may) gets a workflow
// call's handoff as the task's final result at the next pause for its
// model; a person's decision is the task's elicitation, answered by the
// user, and the canary completes in one call. Its model makes the review
// call the prose asks for, plainly (review_notes takes no task).
func TestCoreDialectHostRunsTasks(t *testing.T) {
	modules := nodeModules(t)
	p := startProc(t, exampleBinary(t, "./examples/62_tasks_workflow"), nil, "serve", "-http", "ADDR", "-db", filepath.Join(t.TempDir(), "tasks.db"))
	steps := runTS(t, filepath.Join(modules, "..", "ts-core-host.mjs"), p.url)
	for _, name := range []string{"canary", "release"} {
		require.Equal(t, true, steps[name]["ok"], "%s: %v", name, steps[name])
	}
	canary := steps["canary"]
	require.Equal(t, true, canary["asTask"])
	require.Equal(t, false, canary["isError"])
	end, ok := readState(canary["text"].(string))
	require.True(t, ok, "%v", canary["text"])
	require.Equal(t, "completed", end.status, end.text)
	require.Contains(t, end.text, `"go_live" (an event): {"approved":true,"reason":"error rate flat during the soak"}`)
	require.Contains(t, end.text, `"promote_release" (tool "promote_release"): {`)
	require.Equal(t, []any{`The workflow waits for your decision (event "go_live"): whether the canary may go to every user.`}, canary["questions"])

	release := steps["release"]
	first, second := release["first"].(map[string]any), release["second"].(map[string]any)
	require.Equal(t, true, first["asTask"])
	require.Contains(t, first["text"], `Next: step "review" is yours to perform now.`, "the task's result is the handoff at the pause for the model")
	require.Equal(t, "review_notes", release["tool"])
	require.Equal(t, false, second["asTask"])
	end, ok = readState(second["text"].(string))
	require.True(t, ok, "%v", second["text"])
	require.Equal(t, "completed", end.status, end.text)
}
