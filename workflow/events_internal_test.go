package workflow

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/store"
)

// TestStepEventsFromLastWrite: the step events of a write compared with
// what this instance wrote last (writtenAttempts, no decode) are the
// events of the same write compared with the task's progress decoded:
// over a sequence of writes of steps, a for-each's items, a queue place
// and undo steps; and a task holding another process's write is decoded.
func TestStepEventsFromLastWrite(t *testing.T) {
	at := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
	p := &Progress{Queue: &QueuePlace{Queue: "q", Since: at}}
	var steps []*Progress
	snap := func() {
		b, err := json.Marshal(p)
		require.NoError(t, err)
		var c Progress
		require.NoError(t, json.Unmarshal(b, &c))
		steps = append(steps, &c)
	}
	snap()
	p.Queue.GrantedAt = &at
	p.Steps = append(p.Steps, StepProgress{Name: "a"})
	p.Steps[0].begin("first", "server", at)
	snap()
	p.Steps[0].end("", "server", at, "")
	p.Steps = append(p.Steps, StepProgress{Name: "each", Queue: &QueuePlace{Queue: "items", Since: at}})
	snap()
	fe := &p.Steps[1]
	fe.Queue.GrantedAt = &at
	fe.begin("first", "server", at)
	for _, name := range []string{"each[0]", "each[1]", "each[2]"} {
		fe.Items = append(fe.Items, StepProgress{Name: name})
		fe.Items[len(fe.Items)-1].begin("first", "server", at)
	}
	snap()
	fe.Items[0].end("", "server", at, "")
	fe.Items[1].end("", "server", at, "boom")
	fe.Items[1].begin("retry", "server", at)
	snap()
	fe.Items[1].end("", "server", at, "")
	fe.Items[2].end("", "server", at, "boom")
	fe.end("", "server", at, "an item failed")
	p.Undo = &Undoing{Steps: []StepProgress{{Name: "undo:a"}}}
	p.Undo.Steps[0].begin("undo", "server", at)
	snap()
	p.Undo.Steps[0].end("", "server", at, "")
	snap()

	var last *writtenAttempts
	var task *store.Task
	for i, next := range steps {
		decoded := stepEvents(task, next, nil)
		require.Equal(t, decoded, stepEvents(task, next, last), "write %d", i)
		raw, err := json.Marshal(next)
		require.NoError(t, err)
		task = &store.Task{Variables: map[string]json.RawMessage{VarProgress: raw}}
		last = attemptsOf(raw, next)
	}
	require.NotEmpty(t, stepEvents(&store.Task{}, steps[len(steps)-1], nil))

	// Another process wrote since: the task's progress is decoded, not
	// compared with this instance's last write.
	other := &store.Task{Variables: map[string]json.RawMessage{VarProgress: json.RawMessage(`{"steps":[]}`)}}
	require.Equal(t, stepEvents(other, steps[3], nil), stepEvents(other, steps[3], attemptsOf(task.Variables[VarProgress], steps[len(steps)-1])))
	require.NotEqual(t, stepEvents(task, steps[3], nil), stepEvents(other, steps[3], nil))
}
