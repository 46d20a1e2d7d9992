package taskrouter_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// The schedule tools: the local client (stdio, in-memory) lists, pauses,
// resumes and triggers the schedules of the local owner; an anonymous
// session and a stateless anonymous client over Streamable HTTP see and
// reach none of them (a session is another owner; a stateless client
// would be anyone: they let any client pause the server's schedules and
// read the tasks they started); another owner's schedule is neither
// listed nor reachable; a trigger starts its task at once.
func TestScheduleTools(t *testing.T) {
	h := newHarness(t, nil)
	h.r.Schedules().AddTools(nil)
	var mu sync.Mutex
	started := map[string]bool{}
	start := func(ctx context.Context, f store.Fire) error {
		_, err := h.r.CreateTask(ctx, nil, store.Request{Method: "scheduled", Name: f.Schedule}, &taskrouter.CreateOptions{ID: f.TaskID, Kind: "report"})
		if errors.Is(err, store.ErrExists) {
			err = nil
		}
		mu.Lock()
		started[f.TaskID] = err == nil
		mu.Unlock()
		return err
	}
	require.NoError(t, h.r.Schedules().Add(taskrouter.Schedule{Name: "nightly", Cron: "0 2 * * *", TimeZone: "Europe/Berlin", Description: "the nightly report", Start: start}))
	require.NoError(t, h.r.Schedules().Add(taskrouter.Schedule{Name: "alices", Cron: "@daily", Owner: "user:alice", Start: start}))
	for _, d := range []dialect{core, ext} {
		other := h.dial(overHTTP, d, nil)
		list := other.mustCall("tools/call", map[string]any{"name": "schedule_list", "arguments": map[string]any{}})
		require.Contains(t, textOf(list), "There is no schedule you may manage.")
		refused := other.mustCall("tools/call", map[string]any{"name": "schedule_trigger", "arguments": map[string]any{"name": "nightly"}})
		require.Equal(t, true, refused["isError"])
		require.Contains(t, textOf(refused), "that you may manage")
	}
	p := h.dial(inMemory, core, nil)

	list := p.mustCall("tools/call", map[string]any{"name": "schedule_list", "arguments": map[string]any{}})
	require.NotEqual(t, true, list["isError"])
	text := textOf(list)
	require.Contains(t, text, `nightly: "0 2 * * *" (Europe/Berlin), overlap skip, next at `)
	require.Contains(t, text, "the nightly report")
	require.NotContains(t, text, "alices", "another owner's schedule is not listed")
	schedules := list["structuredContent"].(map[string]any)["schedules"].([]any)
	require.Len(t, schedules, 1)
	next, err := time.Parse(time.RFC3339, schedules[0].(map[string]any)["next"].(string))
	require.NoError(t, err)
	loc, _ := time.LoadLocation("Europe/Berlin")
	require.Equal(t, 2, next.In(loc).Hour(), "02:00 in Berlin")

	paused := p.mustCall("tools/call", map[string]any{"name": "schedule_pause", "arguments": map[string]any{"name": "nightly", "reason": "maintenance"}})
	require.NotEqual(t, true, paused["isError"])
	require.Contains(t, textOf(paused), "paused by local")
	require.Contains(t, textOf(paused), "(maintenance)")
	require.Equal(t, true, paused["structuredContent"].(map[string]any)["paused"])

	fired := p.mustCall("tools/call", map[string]any{"name": "schedule_trigger", "arguments": map[string]any{"name": "nightly"}})
	require.NotEqual(t, true, fired["isError"], textOf(fired))
	require.Contains(t, textOf(fired), `Schedule "nightly" fired: task `)
	id := strings.Fields(strings.SplitAfter(textOf(fired), "task ")[1])[0]
	mu.Lock()
	require.True(t, started[id], "the trigger started task %s", id)
	mu.Unlock()
	task, err := h.st.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, taskrouter.LocalOwner, task.Owner, "the schedule's owner owns its tasks")

	resumed := p.mustCall("tools/call", map[string]any{"name": "schedule_resume", "arguments": map[string]any{"name": "nightly"}})
	require.Contains(t, textOf(resumed), "is resumed; it fires next at")

	for _, name := range []string{"alices", "unknown"} {
		refused := p.mustCall("tools/call", map[string]any{"name": "schedule_trigger", "arguments": map[string]any{"name": name}})
		require.Equal(t, true, refused["isError"])
		require.Contains(t, textOf(refused), "that you may manage")
	}
	infos, err := h.r.Schedules().List(t.Context())
	require.NoError(t, err)
	require.Len(t, infos, 2)
	require.Len(t, infos[0].Fires, 0, "alices never fired")
	var actions []string
	for _, a := range infos[1].Actions {
		actions = append(actions, a.Action)
	}
	require.Equal(t, []string{"registered", "paused", "triggered", "resumed"}, actions)
}

// task_pause and task_resume reach the kind's Pauser, with the requestor's
// owner as who did it; a tool task cannot be paused, and says so.
func TestPauseTools(t *testing.T) {
	h := hostHarness(t, 50*time.Millisecond)
	listed := func() []string {
		var names []string
		for _, tl := range h.dial(inMemory, core, nil).mustCall("tools/list", map[string]any{})["tools"].([]any) {
			names = append(names, tl.(map[string]any)["name"].(string))
		}
		return names
	}
	require.NotContains(t, listed(), "task_pause", "nothing can be paused yet: no pause tools for a model to read")
	pz := &recordingPauser{}
	h.r.HandleKind("pausable", pz)
	require.Subset(t, listed(), []string{"task_pause", "task_resume"}, "a pausable kind brings them")
	ctx := t.Context()
	task, err := h.r.CreateTask(ctx, nil, store.Request{Method: "x"}, &taskrouter.CreateOptions{Kind: "pausable"})
	require.NoError(t, err)
	p := h.dial(inMemory, core, nil)

	res := p.mustCall("tools/call", map[string]any{"name": "task_pause", "arguments": map[string]any{"task_id": task.ID, "reason": "bad deploy", "cut": true}})
	require.NotEqual(t, true, res["isError"], textOf(res))
	require.Equal(t, "paused by local: bad deploy (cut)", textOf(res))
	res = p.mustCall("tools/call", map[string]any{"name": "task_resume", "arguments": map[string]any{"task_id": task.ID}})
	require.Equal(t, "resumed by local", textOf(res))

	created := p.mustCall("tools/call", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 60000}, "task": map[string]any{}})
	tool := created["task"].(map[string]any)["taskId"].(string)
	res = p.mustCall("tools/call", map[string]any{"name": "task_pause", "arguments": map[string]any{"task_id": tool}})
	require.Equal(t, true, res["isError"])
	require.Contains(t, textOf(res), "only workflow tasks can be paused")
	res = p.mustCall("tools/call", map[string]any{"name": "task_resume", "arguments": map[string]any{"task_id": "0123456789abcdef0123456789abcdef"}})
	require.Equal(t, true, res["isError"])

	_, _, err = h.r.Pauses().Pause(ctx, tool, taskrouter.PauseRequest{By: "ops"})
	require.ErrorIs(t, err, taskrouter.ErrNotPausable)
}

// recordingPauser is a kind whose tasks can be paused: it says what it
// was asked.
type recordingPauser struct{}

func (recordingPauser) Recover(context.Context, *store.Task, string) error { return nil }
func (recordingPauser) Wake(context.Context, *store.Task) error            { return nil }
func (recordingPauser) ExpiryMessage(*store.Task) string                   { return "" }
func (recordingPauser) Touched(context.Context, *store.Task)               {}

func (recordingPauser) Pause(_ context.Context, t *store.Task, p taskrouter.PauseRequest) (*store.Task, string, error) {
	said := "paused by " + p.By + ": " + p.Reason
	if p.Cut {
		said += " (cut)"
	}
	return t, said, nil
}

func (recordingPauser) Resume(_ context.Context, t *store.Task, by string) (*store.Task, string, error) {
	return t, "resumed by " + by, nil
}
