package integration

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Host mode: the official TypeScript SDK client, declaring no capabilities
// and using only getPrompt and callTool({name, arguments}) as an LLM host
// does (no _meta, no params.task, no tasks/*), runs example 62's workflows
// to completion (started as prompts and as tools, a handed-over step
// corrected by the client), gets a long tool's result after the call
// turned into a task within the host deadline, and cancels one.
func TestHostModeTypeScript(t *testing.T) {
	modules := nodeModules(t)
	script := filepath.Join(modules, "..", "ts-host.mjs")
	bin := exampleBinary(t, "./examples/62_tasks_workflow")
	env := []string{"TASKBRIDGE_HOST_DEADLINE=1s"}

	t.Run("http", func(t *testing.T) {
		srv := startProc(t, bin, env, "serve", "-http", "ADDR", "-db", filepath.Join(t.TempDir(), "tasks.db"))
		checkHostRun(t, runTS(t, script, "http", srv.url, "run"))
	})
	t.Run("stdio", func(t *testing.T) {
		// Exactly the command README's desktop-client config runs: the
		// built binary, serve -stdio -db FILE, FILE in a directory that
		// does not exist yet (~/.taskbridge on a fresh machine).
		spec, err := json.Marshal(map[string]any{"command": bin,
			"args": []string{"serve", "-stdio", "-db", filepath.Join(t.TempDir(), "home", ".taskbridge", "example.db")},
			"env":  map[string]string{"TASKBRIDGE_HOST_DEADLINE": "1s"}})
		require.NoError(t, err)
		checkHostRun(t, runTS(t, script, "stdio", string(spec), "run"))
	})
}

func checkHostRun(t *testing.T, steps map[string]map[string]any) {
	t.Helper()
	for _, name := range []string{"listTools", "promptRelease", "toolRelease", "toolShip", "promptShip", "longTool", "cancelTool", "unknownTask"} {
		require.Contains(t, steps, name)
		require.Equal(t, true, steps[name]["ok"], "step %s: %v", name, steps[name])
	}
	lt := steps["listTools"]
	require.Equal(t, []any{"release_notes", "ship_release"}, lt["workflowTools"])
	require.Equal(t, []any{"task_result", "task_cancel"}, lt["taskTools"])
	require.Equal(t, true, lt["reviewTakesTaskID"], "a client step's tool advertises _task_id")
	for _, name := range []string{"promptRelease", "toolRelease"} {
		require.Equal(t, "completed", steps[name]["status"], name)
		require.Equal(t, []any{"fetch", "draft", "review", "publish"}, steps[name]["completed"], name)
		require.Equal(t, []any{"review"}, steps[name]["performed"], name)
	}
	ship := steps["toolShip"]
	require.Equal(t, "completed", ship["status"])
	require.Equal(t, "tag", ship["handedOver"], "the server handed the failed tag step to the client")
	require.Contains(t, ship["handedError"], "not a semantic version")
	require.Equal(t, []any{"tag", "announce"}, ship["performed"], "the client corrected the tag and announced")
	require.Equal(t, "completed", steps["promptShip"]["status"])

	// The 3 s tool answered at the 1 s host deadline: with its task to
	// follow, not with its result (whatever the machine's speed: no time
	// is compared).
	long := steps["longTool"]
	require.Contains(t, long["text"], "task "+long["taskId"].(string))
	require.Contains(t, long["text"], `"task_result"`)
	require.Equal(t, `Report on "q3" is ready.`, long["result"], "task_result returns the tool's own content")
	require.Equal(t, false, long["isError"])

	c := steps["cancelTool"]
	require.Contains(t, c["cancel"], "is cancelled")
	require.Equal(t, true, c["afterIsError"])
	require.Contains(t, c["after"], "was cancelled")
	require.Equal(t, true, steps["unknownTask"]["isError"])
	require.Contains(t, steps["unknownTask"]["text"], `"no-such-task"`)
}

// The id a host holds still works after the server is SIGKILLed and
// restarted: the model calls task_result with it and finishes the
// workflow.
func TestHostModeSurvivesRestart(t *testing.T) {
	modules := nodeModules(t)
	script := filepath.Join(modules, "..", "ts-host.mjs")
	bin := exampleBinary(t, "./examples/62_tasks_workflow")
	db := filepath.Join(t.TempDir(), "tasks.db")
	srv := startProc(t, bin, nil, "serve", "-http", "ADDR", "-db", db)
	started := runTS(t, script, "http", srv.url, "start")["start"]
	require.Equal(t, true, started["ok"], "%v", started)
	require.Equal(t, "review", started["next"])
	srv.kill()
	srv = startProc(t, bin, nil, "serve", "-http", "ADDR", "-db", db)
	done := runTS(t, script, "http", srv.url, "finish", started["taskId"].(string))["finish"]
	require.Equal(t, true, done["ok"], "%v", done)
	require.Equal(t, "completed", done["status"])
	require.Equal(t, started["taskId"], done["taskId"])
}
