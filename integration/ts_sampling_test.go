package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			script := filepath.Join(modules, "..", "ts-sampling-client.mjs")
			cmd := exec.CommandContext(ctx, "node", nodeArgs(t, script, url, mode, "notes", `{"repo":"tb"}`)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			require.NoError(t, err, "stderr:\n%s", stderr.String())

			steps := map[string]map[string]any{}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				var m map[string]any
				require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
				steps[m["step"].(string)] = m
				require.Equal(t, true, m["ok"], "step %s failed: %v\nall output:\n%s\nstderr:\n%s", m["step"], m, out, stderr.String())
			}
			taskID := steps["getPrompt"]["taskId"].(string)
			res := steps["taskResult"]
			require.Equal(t, "completed", res["status"], "output:\n%s", out)
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
