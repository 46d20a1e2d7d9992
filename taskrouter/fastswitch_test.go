package taskrouter_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// TestDisableFastPath: Options.DisableFastPath (TASKBRIDGE_FAST_PATH=off)
// sends every task method through go-sdk's dispatch, over HTTP and over a
// framed stream alike, and the answers are the same; by default the fast
// path serves them.
func TestDisableFastPath(t *testing.T) {
	for _, k := range []transportKind{overHTTP, inMemory} {
		for _, off := range []bool{false, true} {
			t.Run(k.String(), func(t *testing.T) {
				h := newHarness(t, func(c *taskrouter.Options) { c.DisableFastPath = off })
				p := h.dial(k, core, nil)
				created := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"label": "x", "ms": 1}, "task": map[string]any{}})
				task, _ := created["task"].(map[string]any)
				require.NotNil(t, task, "a task was created: %v", created)
				id, _ := task["taskId"].(string)
				res := p.mustCall("tasks/result", map[string]any{"taskId": id})
				require.Equal(t, "slept x", res["content"].([]any)[0].(map[string]any)["text"])
				got := p.mustCall("tasks/get", map[string]any{"taskId": id})
				require.Equal(t, "completed", got["status"])
				if off {
					require.Zero(t, taskrouter.FastServed(h.r), "the switch is off: nothing takes the fast path")
				} else {
					require.NotZero(t, taskrouter.FastServed(h.r), "by default the fast path serves the task methods")
				}
			})
		}
	}
}

func TestFastPathFromEnv(t *testing.T) {
	t.Setenv(taskrouter.EnvFastPath, "off")
	o, err := taskrouter.OptionsFromEnv(nil)
	require.NoError(t, err)
	require.True(t, o.DisableFastPath)
	t.Setenv(taskrouter.EnvFastPath, "on")
	o, err = taskrouter.OptionsFromEnv(nil)
	require.NoError(t, err)
	require.False(t, o.DisableFastPath)
	t.Setenv(taskrouter.EnvFastPath, "sometimes")
	_, err = taskrouter.OptionsFromEnv(nil)
	require.ErrorContains(t, err, taskrouter.EnvFastPath)
}
