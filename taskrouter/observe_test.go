package taskrouter_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/taskrouter"
)

type recorder struct {
	mu       sync.Mutex
	tasks    []taskrouter.TaskEvent
	handlers []taskrouter.HandlerEvent
}

func (r *recorder) TaskEvent(e taskrouter.TaskEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tasks = append(r.tasks, e)
}

func (r *recorder) HandlerEvent(e taskrouter.HandlerEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers = append(r.handlers, e)
}

// TestObserverSeesTheLifecycle: an Observer learns of the creation, the
// end (once) and the handler's run of a task.
func TestObserverSeesTheLifecycle(t *testing.T) {
	rec := &recorder{}
	h := newHarness(t, func(c *taskrouter.Options) { c.Observer = rec })
	go func() {
		for range h.started {
		}
	}()
	p := h.dial(inMemory, core, nil)
	id := taskOf(t, p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 5, "label": "o"}, "task": map[string]any{}}))["taskId"].(string)
	p.mustCall("tasks/result", map[string]any{"taskId": id})
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.handlers) == 2
	}, 30*time.Second, 5*time.Millisecond)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Equal(t, taskrouter.TaskCreated, rec.tasks[0].Kind)
	require.Equal(t, id, rec.tasks[0].Task.ID)
	ended := 0
	for _, e := range rec.tasks {
		if e.Ended {
			ended++
			require.Equal(t, "completed", string(e.Task.Status))
		}
	}
	require.Equal(t, 1, ended)
	require.True(t, rec.handlers[0].Running)
	require.Equal(t, "sleepy", rec.handlers[0].Tool)
	require.False(t, rec.handlers[1].Running)
	require.GreaterOrEqual(t, rec.handlers[1].Duration, 5*time.Millisecond)
	require.Zero(t, h.r.Stats().Pending)
}
