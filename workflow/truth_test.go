package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// TestSettleReadsAgainWhenTheWaitRunsOut: when the prompt wait runs out,
// the answer is the task as stored then, not as the wait last read it: a
// change whose notification never came (another replica's, on a shared
// store) is in it.
func TestSettleReadsAgainWhenTheWaitRunsOut(t *testing.T) {
	e := newFakeEngine()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	e.tool("slow", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ok(map[string]any{}), nil
	})
	f := newFixture(t, e, &Options{PromptWait: 20 * time.Millisecond}, New("w", "a slow step").Step(Server("slow", "slow")))
	tk, _ := f.start(t, "w", nil)
	msg := "changed by another replica"
	var once sync.Once
	e.awaitBlocks = func(id string) {
		once.Do(func() {
			// A write that wakes no waiter here.
			_, err := e.st.Update(context.Background(), id, store.Update{StatusMessage: &msg})
			require.NoError(t, err)
		})
	}
	got, _ := f.b.settle(context.Background(), tk.ID)
	require.Equal(t, msg, got.StatusMessage, "the task as stored when the wait ran out")
}

// TestWrongToolAtEventNamesTheEventTool: a call of another tool for an
// event step (or one naming it) is refused naming the tool that performs
// it, the event tool, never an empty tool name.
func TestWrongToolAtEventNamesTheEventTool(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "ship")
	f := newFixture(t, e, nil, New("gate", "a decision").Step(Event("approve", "whether to ship"), Server("ship", "ship")))
	tk, _ := f.start(t, "gate", nil)
	for _, ref := range []string{tk.ID, TaskRef(tk.ID, "approve")} {
		_, err := f.call(t, ref, "ship", nil)
		require.Error(t, err)
		require.Contains(t, err.Error(), `"approve" (tool "workflow_event"`)
		require.NotContains(t, err.Error(), `tool ""`)
	}
}

// TestEventStatusNamesTheEventTool: a workflow waiting for an event says
// how any client delivers it, the core dialect's included (which has no
// tasks/update): the bridge's event tool, under the name it was given,
// and the webhook; tasks/update only as the extension's way.
func TestEventStatusNamesTheEventTool(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "ship")
	f := newFixture(t, e, &Options{EventTool: "deliver_decision"}, New("gate", "a decision").Step(Event("approve", "whether to ship"), Server("ship", "ship")))
	tk, _ := f.start(t, "gate", nil)
	got, err := e.st.Get(context.Background(), tk.ID)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusInputRequired, got.Status)
	require.Equal(t, `waiting for event "approve" (whether to ship): deliver it with tool "deliver_decision" or the task's webhook (an extension-dialect client may answer the task's input request with tasks/update)`, got.StatusMessage)
}

// TestTakeoverIsNamed: a step run again because another replica took
// its task over says so in its status line and in its step_started
// event (reason "takeover"), apart from a restart of the process.
func TestTakeoverIsNamed(t *testing.T) {
	s := Server("build", "build")
	for reason, want := range map[string]string{ReasonTakeover: "another replica that ran it stopped (a takeover)", ReasonRestart: "after a server restart"} {
		sp := &StepProgress{Name: "build", Status: mcptask.StepRunning}
		sp.begin(reason, string(mcptask.ExecServer), time.Now())
		require.Contains(t, runningMessage(s, sp), want)
		var ev mcptask.StepEvent
		require.NoError(t, json.Unmarshal(stepEvent(mcptask.EventStepStarted, sp, sp.History[0]).Data, &ev))
		require.Equal(t, reason, ev.Reason)
	}
}

// TestEndedHandoffSaysWhatDidNotFinish: a workflow that failed in the
// loop of a for-each's item names that record ("smoke[0]", as its
// handoff shows it), and its handoff lists the for-each as failed, never
// as running, in the JSON and in the prose.
func TestEndedHandoffSaysWhatDidNotFinish(t *testing.T) {
	e := newFakeEngine()
	probe, _ := healthyAfter(100, false)
	e.tool("probe", probe)
	echoTools(e, "report")
	w := New("train", "").Arg("services", "", true).Step(
		ForEach("smoke", PromptArg("services"),
			Repeat("smoke_service", Server("probe", "probe")).Until(Truthy(StepOutput("probe", "healthy"))).AtMost(2)),
		Server("report", "report"),
	)
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	tk, _ := f.start(t, "train", map[string]string{"services": "api"})
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.True(t, strings.HasPrefix(tk.StatusMessage, `step "smoke[0]" ran 2 time(s)`), tk.StatusMessage)
	doc := f.b.handoff(tk, p, mcptask.Core)
	require.NoError(t, doc.Validate())
	byName := map[string]handoff.RemainingStep{}
	for _, rs := range doc.RemainingSteps {
		byName[rs.Name] = rs
	}
	require.Equal(t, mcptask.StepFailed, byName["smoke"].Status, "not running: the workflow ended")
	require.Equal(t, mcptask.StepPending, byName["report"].Status)
	text, err := renderTool(doc, reader{d: mcptask.Core})
	require.NoError(t, err)
	require.Contains(t, text, `"smoke" (a for-each): did not finish: the workflow failed here.`)
	require.Contains(t, text, `"report" (tool "report"): will not run: the workflow stopped.`)
}

// TestStepEventsOfItemsAndUndo: the task's event log (what tasks/stream
// readers and step webhooks see) tells each item's attempts, with why
// each was made, and the undo steps', as it tells a step's.
func TestStepEventsOfItemsAndUndo(t *testing.T) {
	e := newFakeEngine()
	j := &journal{}
	j.tool(e, "deploy", "service", nil)
	j.tool(e, "rollback", "service", nil)
	j.tool(e, "tag", "", nil)
	j.tool(e, "untag", "", nil)
	j.tool(e, "check", "", func(map[string]any) error { return errors.New("smoke test failed") })
	f := newFixture(t, e, &Options{PromptWait: -1}, release())
	tk, _ := f.start(t, "release", map[string]string{"services": "api,web"})
	tk, _ = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	page, err := e.st.Events(context.Background(), tk.ID, 0, 1000)
	require.NoError(t, err)
	seen := map[string]mcptask.StepEvent{}
	for _, ev := range page.Events {
		if ev.Type != mcptask.EventStepStarted && ev.Type != mcptask.EventStepEnded {
			continue
		}
		var se mcptask.StepEvent
		require.NoError(t, json.Unmarshal(ev.Data, &se))
		seen[string(ev.Type)+" "+se.Step] = se
	}
	for _, rec := range []string{"deploy[0]", "deploy[1]", "undo:tag", "undo:deploy[1]", "undo:deploy[0]"} {
		require.Contains(t, seen, string(mcptask.EventStepStarted)+" "+rec)
		require.Contains(t, seen, string(mcptask.EventStepEnded)+" "+rec)
	}
	require.Equal(t, ReasonFirst, seen[string(mcptask.EventStepStarted)+" deploy[1]"].Reason)
	require.Equal(t, mcptask.StepCompleted, seen[string(mcptask.EventStepEnded)+" undo:deploy[0]"].Status)
	require.Equal(t, "smoke test failed", seen[string(mcptask.EventStepEnded)+" check"].Error)
}

// TestQueuedItemsNameTheirQueue: a for-each's items waiting on a queue are
// in its status line, naming the queue (QUEUES.md: a queued run's status
// names its queue).
func TestQueuedItemsNameTheirQueue(t *testing.T) {
	sp := &StepProgress{Items: []StepProgress{
		{Name: "deploy[0]", Status: mcptask.StepCompleted},
		{Name: "deploy[1]", Status: mcptask.StepPending, Queue: &QueuePlace{Queue: "deploys", Key: "acme"}},
	}}
	line := recordsLine(&Step{Name: "deploy"}, Server("deploy_service", "deploy"), sp, "item")
	require.Equal(t, `step "deploy": 1 of 2 items done, 1 queued on "deploys" (key "acme") (tool "deploy" per item)`, line)
}

// TestQueueWaitIsAnEvent: a workflow that waits for its place on a queue
// says so in its event log (EventStepQueued: a reader of tasks/stream,
// and a webhook told of steps, sees the wait).
func TestQueueWaitIsAnEvent(t *testing.T) {
	e := newFakeEngine()
	r := newRuns()
	e.tool("deploy", r.tool)
	w := New("train", "a release train").Arg("repo", "the repo", true).Step(
		Server("deploy", "deploy").Bind("repo", PromptArg("repo")),
	).OnQueue(&Queue{Name: "trains", PerKey: 1}, QueueKey(PromptArg("repo")))
	f := newFixture(t, e, &Options{PromptWait: 50 * time.Millisecond}, w)
	f.start(t, "train", map[string]string{"repo": "a"})
	require.Equal(t, "a", r.next(t))
	two, _ := f.start(t, "train", map[string]string{"repo": "a"})
	page, err := e.st.Events(context.Background(), two.ID, 0, 1000)
	require.NoError(t, err)
	var lines []string
	for _, ev := range page.Events {
		if ev.Type == mcptask.EventStepQueued {
			var qe mcptask.QueueEvent
			require.NoError(t, json.Unmarshal(ev.Data, &qe))
			require.Equal(t, mcptask.QueueEvent{Queue: "trains", Key: "a", Why: qe.Why}, qe, "the workflow as a whole waits")
			lines = append(lines, mcptask.EventLine(ev.Type, ev.Data))
		}
	}
	require.Len(t, lines, 1, "one event when the wait begins")
	require.True(t, strings.HasPrefix(lines[0], `queued on "trains" (key "a")`), "%q", lines)
	kind, ok := mcptask.WebhookEventOf(mcptask.EventStepQueued, "")
	require.True(t, ok)
	require.Equal(t, mcptask.WebhookStep, kind, "a webhook told of steps is told of the wait")
	r.release <- struct{}{}
}
