package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// journal records the tool calls of a test in order, with an argument.
type journal struct {
	mu    sync.Mutex
	calls []string
	keys  map[string]string // call -> idempotency key
}

func (j *journal) tool(e *fakeEngine, name, arg string, fail func(args map[string]any) error) {
	e.tool(name, func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		info, _ := StepFrom(ctx)
		call := name
		if arg != "" {
			call = fmt.Sprintf("%s(%v)", name, args[arg])
		}
		j.mu.Lock()
		j.calls = append(j.calls, call)
		if j.keys == nil {
			j.keys = map[string]string{}
		}
		j.keys[call] = info.IdempotencyKey
		j.mu.Unlock()
		if fail != nil {
			if err := fail(args); err != nil {
				return nil, err
			}
		}
		return ok(map[string]any{"did": call}), nil
	})
}

func (j *journal) list() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.calls...)
}

// release deploys the services one at a time (each undone by a rollback
// of the same service), tags the release (undone by untag), then checks
// it, which fails when check fails.
func release() *Definition {
	return New("release", "").Arg("services", "", true).Step(
		ForEach("deploy", PromptArg("services"),
			Server("deploy_service", "deploy").Bind("service", Item()).
				Undo(Server("rollback_service", "rollback").Bind("service", Item()))).InSequence(),
		Server("tag", "tag").Undo(Server("untag", "untag")),
		Server("check", "check").FailsWorkflow(),
	)
}

func TestUndoInReverseOrderWhenTheWorkflowFails(t *testing.T) {
	e := newFakeEngine()
	j := &journal{}
	j.tool(e, "deploy", "service", nil)
	j.tool(e, "rollback", "service", nil)
	j.tool(e, "tag", "", nil)
	j.tool(e, "untag", "", nil)
	j.tool(e, "check", "", func(map[string]any) error { return errors.New("smoke test failed") })
	f := newFixture(t, e, &Options{PromptWait: -1}, release())
	tk, _ := f.start(t, "release", map[string]string{"services": "api,web"})
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.Equal(t, []string{"deploy(api)", "deploy(web)", "tag", "check", "untag", "rollback(web)", "rollback(api)"}, j.list())
	require.Equal(t, `step "check" (tool "check") failed: smoke test failed; undone, last first: tag (untag), deploy[1] (rollback), deploy[0] (rollback); the workflow failed`, tk.StatusMessage)
	require.Equal(t, tk.ID+"/undo:deploy[1]", j.keys["rollback(web)"], "each undo has its own idempotency key")
	require.NotNil(t, p.Undo)
	require.Len(t, p.Undo.Steps, 3)
	for _, sp := range p.Undo.Steps {
		require.Equal(t, mcptask.StepCompleted, sp.Status)
	}

	doc := f.b.handoff(tk, p, 0)
	require.Equal(t, []handoff.UndoStep{
		{Undoes: "tag", Tool: "untag", Status: mcptask.StepCompleted},
		{Undoes: "deploy[1]", Tool: "rollback", Status: mcptask.StepCompleted},
		{Undoes: "deploy[0]", Tool: "rollback", Status: mcptask.StepCompleted},
	}, doc.Undo)
	text, err := handoff.Render(doc)
	require.NoError(t, err)
	require.Contains(t, text, "Undone by the server after the failure (last first):\n- \"tag\", by tool \"untag\": undone.")
}

// An undo that keeps failing is retried by its policy, then reported; the
// next one still runs. A crash mid-undo runs the undo again (at least once)
// and goes on.
func TestUndoFailuresAndStops(t *testing.T) {
	t.Run("a failing undo is reported, the next runs", func(t *testing.T) {
		e := newFakeEngine()
		e.tick()
		j := &journal{}
		j.tool(e, "deploy", "service", nil)
		j.tool(e, "rollback", "service", func(args map[string]any) error {
			if args["service"] == "web" {
				return errors.New("the old version is gone")
			}
			return nil
		})
		j.tool(e, "tag", "", nil)
		j.tool(e, "untag", "", nil)
		j.tool(e, "check", "", func(map[string]any) error { return errors.New("smoke test failed") })
		w := release()
		w.Steps[0].kind.body().undo.WithRetryPolicy(RetryPolicy{MaxAttempts: 2, Backoff: time.Millisecond})
		f := newFixture(t, e, &Options{PromptWait: -1}, w)
		tk, _ := f.start(t, "release", map[string]string{"services": "api,web"})
		tk, p := f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Equal(t, []string{"deploy(api)", "deploy(web)", "tag", "check", "untag", "rollback(web)", "rollback(web)", "rollback(api)"}, j.list())
		require.Contains(t, tk.StatusMessage, "undone, last first: tag (untag), deploy[0] (rollback)")
		require.Contains(t, tk.StatusMessage, "NOT undone (the undo failed; take it back by hand): deploy[1] (rollback: the old version is gone)")
		doc := f.b.handoff(tk, p, 0)
		require.Equal(t, mcptask.StepFailed, doc.Undo[1].Status)
		text, err := handoff.Render(doc)
		require.NoError(t, err)
		require.Contains(t, text, `- "deploy[1]", by tool "rollback": NOT undone (the old version is gone); take it back by hand.`)
	})
	t.Run("a stop mid-undo", func(t *testing.T) {
		e := newFakeEngine()
		j := &journal{}
		g := newGate()
		j.tool(e, "deploy", "service", nil)
		j.tool(e, "tag", "", nil)
		j.tool(e, "check", "", func(map[string]any) error { return errors.New("smoke test failed") })
		e.tool("untag", g.tool("untag"))
		j.tool(e, "rollback", "service", nil)
		f := newFixture(t, e, &Options{PromptWait: 20 * time.Millisecond}, release())
		tk, _ := f.start(t, "release", map[string]string{"services": "api"})
		g.waitStarted(t, 1)
		tk, p := f.task(t, tk.ID)
		require.False(t, tk.Status.Terminal(), "the workflow is undone before it fails")
		require.Contains(t, tk.StatusMessage, "undoing what it did, last first: untag for tag (1 of 2)")
		require.Equal(t, mcptask.StepRunning, p.Undo.Steps[0].Status)
		f.b.Close() // the process stops mid-undo

		j.tool(e, "untag", "", nil)
		f = redeploy(t, e, &Options{PromptWait: -1}, release())
		require.Eventually(t, func() bool { tk, _ = f.task(t, tk.ID); return tk.Status.Terminal() }, 30*time.Second, 5*time.Millisecond, "%s", func() string { tk, _ = f.task(t, tk.ID); return tk.StatusMessage }())
		tk, p = f.task(t, tk.ID)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Contains(t, tk.StatusMessage, "undone, last first: tag (untag), deploy[0] (rollback)")
		require.Equal(t, []string{"deploy(api)", "tag", "check", "untag", "rollback(api)"}, j.list(), "the untag cut short ran again; the rest once")
		require.Equal(t, 2, p.Undo.Steps[0].Attempts)
	})
}

// What was running when the workflow failed is stopped and waited for;
// what completed anyway is undone too. A failure before anything with an
// undo completed fails at once.
func TestUndoWaitsForWhatRuns(t *testing.T) {
	t.Run("a fail-fast sibling that completed anyway", func(t *testing.T) {
		e := newFakeEngine()
		j := &journal{}
		release := make(chan struct{})
		e.tool("slow", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
			<-release // it ignores being stopped
			return ok(map[string]any{"slow": true}), nil
		})
		j.tool(e, "unslow", "", nil)
		j.tool(e, "bad", "", func(map[string]any) error { return errors.New("bad") })
		w := New("w", "").Step(Parallel("both", Server("slow", "slow").Undo(Server("unslow", "unslow")), Server("bad", "bad")).StopOnFailure())
		f := newFixture(t, e, &Options{PromptWait: 20 * time.Millisecond}, w)
		tk, _ := f.start(t, "w", nil)
		require.Eventually(t, func() bool {
			tk, _ = f.task(t, tk.ID)
			return strings.Contains(tk.StatusMessage, "waiting for the steps that were running to stop")
		},
			30*time.Second, 5*time.Millisecond)
		close(release)
		require.Eventually(t, func() bool { tk, _ = f.task(t, tk.ID); return tk.Status.Terminal() }, 30*time.Second, 5*time.Millisecond)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Contains(t, tk.StatusMessage, "undone, last first: slow (unslow)")
		require.Contains(t, j.list(), "unslow")
	})
	t.Run("nothing to undo", func(t *testing.T) {
		e := newFakeEngine()
		j := &journal{}
		j.tool(e, "deploy", "service", func(map[string]any) error { return errors.New("no capacity") })
		j.tool(e, "rollback", "service", nil)
		echoTools(e, "tag", "untag", "check")
		w := release()
		w.Steps[0].kind.body().FailsWorkflow()
		f := newFixture(t, e, &Options{PromptWait: -1}, w)
		tk, _ := f.start(t, "release", map[string]string{"services": "api"})
		tk, p := f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Nil(t, p.Undo)
		require.NotContains(t, j.list(), "rollback(api)")
	})
}

func TestUndoValidation(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "a", "b")
	for name, s := range map[string]*Step{
		"a client undo":       Server("a", "a").Undo(Client("b", "b")),
		"an undo's condition": Server("a", "a").Undo(Server("b", "b").When(Truthy(Const(true)))),
		"an unknown tool":     Server("a", "a").Undo(Server("b", "nope")),
		"an item outside":     Server("a", "a").Undo(Server("b", "b").Bind("x", Item())),
		"a group's undo":      Parallel("g", Server("a", "a")).Undo(Server("b", "b")),
	} {
		t.Run(name, func(t *testing.T) {
			var ve *ValidationError
			require.ErrorAs(t, New("w", "").Step(s).Validate(e.lookup()), &ve)
		})
	}
	// The undo is in the version's fingerprint.
	a := New("w", "").Step(Server("a", "a"))
	b := New("w", "").Step(Server("a", "a").Undo(Server("b", "b")))
	require.NotEqual(t, fingerprint(a), fingerprint(b))
}

// startHeldRelease starts release (def: it, or a variant) for services
// on a fake engine of its own whose tag step holds: the deploys have run
// (journaled, as a rollback would be), untag and check answer.
func startHeldRelease(t *testing.T, def *Definition, services string) (*fakeEngine, *journal, *fixture, *store.Task) {
	t.Helper()
	e := newFakeEngine()
	j := &journal{}
	g := newGate()
	j.tool(e, "deploy", "service", nil)
	j.tool(e, "rollback", "service", nil)
	e.tool("tag", g.tool("tag"))
	echoTools(e, "untag", "check")
	f := newFixture(t, e, &Options{PromptWait: 20 * time.Millisecond}, def)
	tk, _ := f.start(t, "release", map[string]string{"services": services})
	g.waitStarted(t, 1)
	return e, j, f, tk
}

// A cancelled workflow that asks for it is undone by a task of its own:
// what completed is taken back, last first; what the cancel cut short is
// not (its tool was stopped).
func TestUndoOnCancel(t *testing.T) {
	e, j, f, tk := startHeldRelease(t, release().WithUndoOnCancel(), "api,web")
	e.cancel(t, tk.ID)

	undo := undoTaskID(tk.ID)
	var ut *store.Task
	require.Eventually(t, func() bool {
		var err error
		ut, err = e.Task(context.Background(), undo)
		return err == nil && ut.Status.Terminal()
	}, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, mcptask.StatusCompleted, ut.Status, ut.StatusMessage)
	require.Equal(t, tk.ID, ut.Labels[LabelUndoOf])
	require.Equal(t, "the workflow was cancelled (cancelled by request); undone, last first: deploy[1] (rollback), deploy[0] (rollback)", ut.StatusMessage)
	require.Equal(t, []string{"deploy(api)", "deploy(web)", "rollback(web)", "rollback(api)"}, j.list(), "the tag the cancel cut short is not undone")

	tk, p := f.task(t, tk.ID)
	require.Equal(t, mcptask.StatusCancelled, tk.Status)
	doc := f.b.handoff(tk, p, 0)
	require.Contains(t, doc.PauseReason, "what it did is undone by workflow task "+undo+" (completed)")

	// A paused task that is cancelled is undone all the same: the cancel
	// ends the pause, and its undo task runs unpaused (simulation seed 5:
	// the undo task was paused, and ran its undo steps anyway).
	e3, j3, f3, tk3 := startHeldRelease(t, release().WithUndoOnCancel(), "api")
	_, _, err := f3.b.Pause(context.Background(), tk3.ID, taskrouter.PauseRequest{By: "ops", Cut: true})
	require.NoError(t, err)
	e3.cancel(t, tk3.ID)
	ut3 := f3.waitEnded(t, undoTaskID(tk3.ID))
	require.Equal(t, mcptask.StatusCompleted, ut3.Status, ut3.StatusMessage)
	_, up3 := f3.task(t, ut3.ID)
	require.Nil(t, up3.Paused, "the cancel ended the pause")
	require.Equal(t, []string{"deploy(api)", "rollback(api)"}, j3.list())

	// The store refuses the undo task's creation for a while: the
	// cancel promised the undo, so it is tried again until it is made
	// (simulation seed 349: the undo never ran).
	e4, j4, f4, tk4 := startHeldRelease(t, release().WithUndoOnCancel(), "api")
	refusals := 2
	e4.mu.Lock()
	e4.failCreate = func(id string) error {
		if id == undoTaskID(tk4.ID) && refusals > 0 {
			refusals--
			return errors.New("the store is down")
		}
		return nil
	}
	e4.mu.Unlock()
	e4.cancel(t, tk4.ID)
	ut4 := f4.waitEnded(t, undoTaskID(tk4.ID))
	require.Equal(t, mcptask.StatusCompleted, ut4.Status, ut4.StatusMessage)
	require.Equal(t, []string{"deploy(api)", "rollback(api)"}, j4.list())

	// The process stops between the cancel's write and the undo task's
	// creation (here: the store refuses it until the process is gone):
	// the cancel's write marked the task, and the next start creates its
	// undo task, once, and the undo runs once (simulation seed 935: the
	// undo was lost, the cancelled task being terminal).
	e5, j5, f5, tk5 := startHeldRelease(t, release().WithUndoOnCancel(), "api")
	e5.mu.Lock()
	e5.failCreate = func(id string) error {
		if id == undoTaskID(tk5.ID) {
			return errors.New("the store is down")
		}
		return nil
	}
	e5.mu.Unlock()
	e5.cancel(t, tk5.ID)
	f5.b.Close() // the crash: the undo task was never created
	_, err = e5.Task(context.Background(), undoTaskID(tk5.ID))
	require.ErrorIs(t, err, store.ErrNotFound)
	ct5, err := e5.Task(context.Background(), tk5.ID)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusCancelled, ct5.Status)
	require.NotEmpty(t, ct5.Labels[labelUndoOwed], "the cancel's write says the undo task is owed")
	e5.mu.Lock()
	e5.failCreate = nil
	e5.mu.Unlock()
	f6 := redeploy(t, e5, &Options{PromptWait: 20 * time.Millisecond}, release().WithUndoOnCancel())
	ut5 := f6.waitEnded(t, undoTaskID(tk5.ID))
	require.Equal(t, mcptask.StatusCompleted, ut5.Status, ut5.StatusMessage)
	require.Equal(t, tk5.ID, ut5.Labels[LabelUndoOf])
	require.Empty(t, ut5.Labels[labelUndoOwed])
	ct5, err = e5.Task(context.Background(), tk5.ID)
	require.NoError(t, err)
	require.Empty(t, ct5.Labels[labelUndoOwed], "the undo task made, the mark is cleared")
	require.Equal(t, []string{"deploy(api)", "rollback(api)"}, j5.list())
	f6.b.Close()
	f7 := redeploy(t, e5, &Options{PromptWait: 20 * time.Millisecond}, release().WithUndoOnCancel()) // a start finds it kept
	ut5b, err := e5.Task(context.Background(), undoTaskID(tk5.ID))
	require.NoError(t, err)
	require.Equal(t, ut5.Version, ut5b.Version, "the undo task is made once")
	require.Equal(t, []string{"deploy(api)", "rollback(api)"}, j5.list(), "the undo ran once")
	f7.b.Close()

	// Without UndoOnCancel, a cancel undoes nothing.
	e2, j2, _, tk2 := startHeldRelease(t, release(), "api")
	e2.cancel(t, tk2.ID)
	_, err = e2.Task(context.Background(), undoTaskID(tk2.ID))
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Equal(t, []string{"deploy(api)"}, j2.list())
}
