package integration

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/workflow"
)

// TestTypeScriptSamplingHandler: the official TypeScript SDK client's
// sampling handler performs a workflow's sampling step, over Streamable
// HTTP in the core dialect: as a task of its own when it declares
// tasks.requests.sampling.createMessage and has a task store (the server
// follows the client's task with tasks/get and tasks/result and records
// its id), plainly otherwise. The client only gets the prompt and waits
// for the workflow task's result; the server's request reaches it on its
// standalone GET stream.
func TestTypeScriptSamplingHandler(t *testing.T) {
	modules := nodeModules(t)
	for _, mode := range []string{"task", "plain"} {
		t.Run(mode, func(t *testing.T) {
			s := newSamplingServer(t, "", nil)
			url := s.serveHTTP(t)
			steps := runTS(t, filepath.Join(modules, "..", "ts-sampling-client.mjs"), url, mode, "notes", `{"repo":"tb"}`)
			for name, m := range steps {
				require.Equal(t, true, m["ok"], "step %s failed: %v\nall steps: %v", name, m, steps)
			}
			taskID := steps["getPrompt"]["taskId"].(string)
			res := steps["taskResult"]
			require.Equal(t, "completed", res["status"])
			require.Equal(t, []any{"collect", "summary", "publish"}, res["completed"])
			require.Equal(t, "TS-MODEL: Write release notes for tb from this log: fix a; add b (tb)", res["summary"].(map[string]any)["text"])
			require.Equal(t, "ts-model", res["summary"].(map[string]any)["model"])
			sampled := steps["sampled"]["sampled"].([]any)
			require.Len(t, sampled, 1)
			got := sampled[0].(map[string]any)
			require.Equal(t, mode == "task", got["task"])
			require.Equal(t, taskID, got["relatedTask"])
			require.EqualValues(t, 200, got["maxTokens"])
			require.Equal(t, "TS-MODEL: Write release notes for tb from this log: fix a; add b (tb)", <-s.published)

			sp := stepOf(s.progressOf(t, taskID), "summary")
			if mode == "task" {
				require.Equal(t, workflow.AskViaTask, sp.Asked.Via)
				require.NotEmpty(t, sp.Asked.ClientTask, "the TypeScript client's task id is recorded")
			} else {
				require.Equal(t, workflow.AskViaRequest, sp.Asked.Via)
			}
		})
	}
}
