package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// twoSteps runs deploy (blocking, on r) then after.
func twoSteps() *Definition {
	return New("two", "deploy then announce").Arg("repo", "the repo", false).Step(
		Server("deploy", "deploy").Bind("repo", PromptArg("repo")),
		Server("after", "after"),
	)
}

// actions are the action events of task id's log: "paused by X: why".
func actions(t *testing.T, e *fakeEngine, id string) []string {
	t.Helper()
	page, err := e.st.Events(context.Background(), id, 0, 0)
	require.NoError(t, err)
	var out []string
	for _, ev := range page.Events {
		if ev.Type != mcptask.EventAction {
			continue
		}
		var a mcptask.ActionEvent
		require.NoError(t, json.Unmarshal(ev.Data, &a))
		out = append(out, a.Action+" by "+a.By+": "+a.Reason)
	}
	return out
}

// TestPauseLetsTheRunningStepFinish: a pause while a step runs lets it
// finish (its outcome is recorded) and starts nothing after it; the task
// stays working while its status, its handoff and its history say
// paused and by whom; a resume goes on.
func TestPauseLetsTheRunningStepFinish(t *testing.T) {
	e := newFakeEngine()
	r := newRuns()
	e.tool("deploy", r.tool)
	echoTools(e, "after")
	f := newFixture(t, e, &Options{PromptWait: 50 * time.Millisecond, ResumeTool: "task_resume"}, twoSteps())
	tk, _ := f.start(t, "two", map[string]string{"repo": "a"})
	r.next(t)

	paused, said, err := f.b.Pause(context.Background(), tk.ID, taskrouter.PauseRequest{By: "alice", Reason: "a bad deploy upstream"})
	require.NoError(t, err)
	require.Contains(t, said, `The steps running now ("deploy") finish`)
	require.Equal(t, mcptask.StatusWorking, paused.Status, "the wire status stays one the spec defines")
	require.Contains(t, paused.StatusMessage, "paused by alice since 2026-11-24T09:00:00Z: a bad deploy upstream")
	require.Contains(t, paused.StatusMessage, `step "deploy" still running`)

	r.release <- struct{}{}
	require.Eventually(t, func() bool {
		_, p := f.task(t, tk.ID)
		return p.step("deploy").Status == mcptask.StepCompleted
	}, 30*time.Second, 5*time.Millisecond, "the running step finished and was recorded")
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusWorking, tk.Status)
	require.Equal(t, mcptask.StepPending, p.step("after").Status, "nothing new starts")
	require.Zero(t, e.callsOf("after"))
	require.True(t, tk.WakeAt.IsZero(), "nothing wakes a paused workflow")
	require.Equal(t, "paused by alice since 2026-11-24T09:00:00Z: a bad deploy upstream", tk.StatusMessage)
	require.Equal(t, "alice", p.Paused.By)

	doc := f.b.handoff(tk, p, mcptask.Extension)
	require.NotNil(t, doc.Paused)
	text, err := handoff.RenderWith(doc, &handoff.RenderOptions{NoJSON: true})
	require.NoError(t, err)
	require.Contains(t, text, `Workflow "two" (task "`+tk.ID+`") is paused by alice (status: working).`)
	require.Contains(t, text, `Next: nothing for you to call now; the workflow is paused: it goes on when someone allowed to resumes it (tool "task_resume" with {"task_id": "`+tk.ID+`"}).`)
	_, err = handoff.Parse(mustRender(t, doc))
	require.NoError(t, err, "the document with its pause parses")

	_, said, err = f.b.Resume(context.Background(), tk.ID, "bob")
	require.NoError(t, err)
	require.Contains(t, said, "it was paused by alice since 2026-11-24T09:00:00Z")
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Nil(t, p.Paused)
	require.Equal(t, []string{"paused by alice: a bad deploy upstream", "resumed by bob: "}, actions(t, e, tk.ID))
}

func mustRender(t *testing.T, d *handoff.Document) string {
	t.Helper()
	s, err := handoff.Render(d)
	require.NoError(t, err)
	return s
}

// TestPauseCutStopsTheRunningStep: a pause that cuts stops the running
// step's tool; its attempt is recorded stopped, and it runs again on
// resume.
func TestPauseCutStopsTheRunningStep(t *testing.T) {
	e := newFakeEngine()
	r := newRuns()
	e.tool("deploy", r.tool)
	echoTools(e, "after")
	f := newFixture(t, e, &Options{PromptWait: 50 * time.Millisecond}, twoSteps())
	tk, _ := f.start(t, "two", nil)
	r.next(t)
	_, said, err := f.b.Pause(context.Background(), tk.ID, taskrouter.PauseRequest{By: "ops", Cut: true})
	require.NoError(t, err)
	require.Contains(t, said, `The steps that were running ("deploy") were stopped; they run again on resume.`)
	require.Eventually(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.total == 0 }, 30*time.Second, 5*time.Millisecond, "its tool was stopped")
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusWorking, tk.Status)
	h := p.step("deploy").History
	require.Equal(t, OutcomeStopped, h[len(h)-1].Outcome)
	require.Contains(t, h[len(h)-1].Error, "cut: the workflow was paused by ops")
	require.Equal(t, mcptask.StepPending, p.step("deploy").Status)

	_, _, err = f.b.Resume(context.Background(), tk.ID, "ops")
	require.NoError(t, err)
	require.Equal(t, "<nil>", r.next(t), "it runs again")
	r.release <- struct{}{}
	tk, _ = f.settled(t, tk.ID)
	require.Eventually(t, func() bool { tk, _ = f.task(t, tk.ID); return tk.Status == mcptask.StatusCompleted }, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, 2, e.callsOf("deploy"))
}

// TestPauseOnFailure: a workflow with PauseOnFailure pauses instead of
// failing when the server gives up on a step that would fail it; once
// fixed, a resume runs the step again and the workflow completes.
func TestPauseOnFailure(t *testing.T) {
	e := newFakeEngine()
	broken := true
	e.tool("migrate", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		if broken {
			return nil, errors.New("the schema is locked")
		}
		return ok(map[string]any{"migrated": true}), nil
	})
	echoTools(e, "after")
	w := New("mig", "migrate").Step(
		Server("migrate", "migrate").FailsWorkflow(),
		Server("after", "after"),
	).PausesOnFailure()
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	tk, p := f.start(t, "mig", nil)
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusWorking, tk.Status, "paused, not failed")
	require.Equal(t, PausedByServer, p.Paused.By)
	require.Equal(t, "migrate", p.Paused.Step)
	require.Contains(t, tk.StatusMessage, `paused by the server since 2026-11-24T09:00:00Z: step "migrate" (tool "migrate") failed after 1 attempt(s): the schema is locked; fix the cause and resume it`)
	require.Equal(t, mcptask.StepFailed, p.step("migrate").Status)

	broken = false
	_, said, err := f.b.Resume(context.Background(), tk.ID, "dba")
	require.NoError(t, err)
	require.Contains(t, said, `Step "migrate", whose failure paused it, runs again.`)
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	require.Equal(t, 2, p.step("migrate").Attempts)
}

// TestPauseRefusals: a second pause, a resume of a task not paused, a
// pause of an ended task: each is refused with an error callers can
// test.
func TestPauseRefusals(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "deploy", "after")
	f := newFixture(t, e, &Options{PromptWait: -1}, twoSteps())
	done, _ := f.start(t, "two", nil)
	done, _ = f.settled(t, done.ID)
	require.Equal(t, mcptask.StatusCompleted, done.Status)
	_, _, err := f.b.Pause(context.Background(), done.ID, taskrouter.PauseRequest{By: "x"})
	require.ErrorIs(t, err, taskrouter.ErrNotPausable)

	w := New("slow", "").Step(Server("deploy", "deploy"), Sleep("soak", time.Hour), Server("after", "after"))
	f2 := newFixture(t, e, &Options{PromptWait: -1}, w)
	tk, _ := f2.start(t, "slow", nil)
	_, _, err = f2.b.Resume(context.Background(), tk.ID, "x")
	require.ErrorIs(t, err, ErrNotPaused)
	_, _, err = f2.b.Pause(context.Background(), tk.ID, taskrouter.PauseRequest{By: "x"})
	require.NoError(t, err)
	_, _, err = f2.b.Pause(context.Background(), tk.ID, taskrouter.PauseRequest{By: "y"})
	require.ErrorIs(t, err, ErrPaused)
	require.ErrorContains(t, err, "by x since")
}

// TestPauseKeepsTimersAndSurvivesARestart: a workflow paused during a
// sleep stays paused across a restart and past the sleep's end (nothing
// wakes it); the sleep keeps its end, so on resume it is over and what
// follows runs at once.
func TestPauseKeepsTimersAndSurvivesARestart(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "deploy", "after")
	w := New("soak", "").Step(Server("deploy", "deploy"), Sleep("soak", time.Hour), Server("after", "after"))
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	tk, p := f.start(t, "soak", nil)
	until := *p.step("soak").Until
	_, _, err := f.b.Pause(context.Background(), tk.ID, taskrouter.PauseRequest{By: "ops"})
	require.NoError(t, err)

	f.b.Close() // the process stops
	f = newFixture(t, e, &Options{PromptWait: -1}, w)
	e.recoverAll(t)
	e.advance(2 * time.Hour)
	require.Zero(t, e.wakeDue(t), "nothing wakes a paused workflow")
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusWorking, tk.Status)
	require.Equal(t, mcptask.StepSleeping, p.step("soak").Status)
	require.Equal(t, until, *p.step("soak").Until, "the sleep keeps its end")
	require.Zero(t, e.callsOf("after"))

	_, _, err = f.b.Resume(context.Background(), tk.ID, "ops")
	require.NoError(t, err)
	tk, _ = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
}

// TestPauseGivesUpAQueuePlace: a paused workflow holds no place it does
// not use: its step waiting on a queue leaves it, and queues again on
// resume.
func TestPauseGivesUpAQueuePlace(t *testing.T) {
	e := newFakeEngine()
	r := newRuns()
	e.tool("deploy", r.tool)
	echoTools(e, "after")
	f := newFixture(t, e, &Options{PromptWait: 50 * time.Millisecond}, deploys(deployQueue))
	first, _ := f.start(t, "deploy", map[string]string{"repo": "a"})
	r.next(t)
	second, _ := f.start(t, "deploy", map[string]string{"repo": "a"})
	_, _, err := f.b.Pause(context.Background(), second.ID, taskrouter.PauseRequest{By: "ops"})
	require.NoError(t, err)
	// The pause lands after Pause returns, in two writes (the queue's
	// entry, the workflow's record): wait for both.
	require.Eventually(t, func() bool {
		es, err := e.st.QueueEntries(context.Background(), "deploys")
		require.NoError(t, err)
		_, p := f.task(t, second.ID)
		return len(es) == 1 && es[0].TaskID == first.ID && p.step("deploy").Queue == nil
	}, 30*time.Second, 5*time.Millisecond, "the paused workflow left the queue, and its record says so")

	r.release <- struct{}{}
	require.Eventually(t, func() bool { tk, _ := f.task(t, first.ID); return tk.Status == mcptask.StatusCompleted }, 30*time.Second, 5*time.Millisecond)
	r.none(t)
	_, _, err = f.b.Resume(context.Background(), second.ID, "ops")
	require.NoError(t, err)
	require.Equal(t, "a", r.next(t), "it queues again and runs")
	r.release <- struct{}{}
	require.Eventually(t, func() bool { tk, _ := f.task(t, second.ID); return tk.Status == mcptask.StatusCompleted }, 30*time.Second, 5*time.Millisecond)
}
