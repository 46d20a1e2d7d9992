package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/testhooks"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// notesWorkflow drafts the notes of a repo, has the client review them, then
// publishes them.
func notesWorkflow() *Definition {
	return New("release_notes", "").Arg("repo", "the repository", true).Step(
		Server("draft", "draft").Bind("repo", PromptArg("repo")),
		Client("review_notes", "review_notes").Bind("approved", FromClient("true when the notes are right")),
		Server("publish_notes", "publish_notes").Bind("draft", StepOutput("draft")),
	)
}

// train builds, has the notes written by a child workflow, then ships.
func train() *Definition {
	return New("train", "").Arg("repo", "the repository", true).Step(
		Server("build", "build"),
		Child("notes", "release_notes").Bind("repo", PromptArg("repo")),
		Server("ship", "ship").Bind("notes", StepOutput("notes", "publish_notes")),
	)
}

func childTools(e *fakeEngine) {
	echoTools(e, "build", "draft", "publish_notes", "ship")
	e.tool("review_notes", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		return ok(map[string]any{"approved": args["approved"]}), nil
	})
}

// tasksOf lists the store's tasks whose label k is v.
func tasksOf(t *testing.T, e *fakeEngine, k, v string) []*store.Task {
	t.Helper()
	page, err := e.st.List(context.Background(), store.ListOptions{Owner: taskrouter.LocalOwner, Limit: 100})
	require.NoError(t, err)
	var out []*store.Task
	for _, tk := range page.Tasks {
		if tk.Labels[k] == v {
			out = append(out, tk)
		}
	}
	return out
}

func TestChildWorkflow(t *testing.T) {
	e := newFakeEngine()
	childTools(e)
	var mu sync.Mutex
	var points []testhooks.LineagePoint
	seen := func(pt testhooks.LineagePoint, parent, child string) {
		mu.Lock()
		defer mu.Unlock()
		if len(points) == 0 || points[len(points)-1] != pt {
			points = append(points, pt)
		}
	}
	f := newFixture(t, e, &Options{PromptWait: -1, hooks: testhooks.Workflow{AfterLineage: seen}}, notesWorkflow(), train())
	tk, _ := f.start(t, "train", map[string]string{"repo": "acme/api"})
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusWorking, tk.Status, tk.StatusMessage)
	sp := p.step("notes")
	require.Equal(t, mcptask.StepAwaitingClient, sp.Status, "its child waits for the client")
	require.Equal(t, childID(tk.ID, "notes", 1), sp.Child, "the child's id is derived from the parent and the step")
	require.Contains(t, tk.StatusMessage, `child workflow "release_notes" (task `+sp.Child+`) waits for the client`)

	ct, cp := f.task(t, sp.Child)
	require.Equal(t, tk.ID, ct.Labels[LabelParent])
	require.Equal(t, "notes", ct.Labels[LabelParentStep])
	require.Equal(t, "1", ct.Labels[LabelDepth])
	require.Equal(t, tk.Owner, ct.Owner)
	require.Equal(t, "acme/api", cp.Arguments["repo"])

	// The parent's handoff lists the child's client step, called with the
	// child's id.
	doc := f.b.handoff(tk, p, 0)
	var entry *handoff.RemainingStep
	for i := range doc.RemainingSteps {
		if doc.RemainingSteps[i].Name == "notes/review_notes" {
			entry = &doc.RemainingSteps[i]
		}
	}
	require.NotNil(t, entry)
	require.Equal(t, "review_notes", entry.Call.Tool)
	require.JSONEq(t, `"`+sp.Child+`"`, string(entry.Call.Arguments[mcptask.ArgTaskID]))
	text, err := handoff.Render(doc)
	require.NoError(t, err)
	require.Contains(t, text, sp.Child)

	// The call on the child: the answer shows the parent, which completed.
	res, err := f.call(t, sp.Child, "review_notes", map[string]any{"approved": true})
	require.NoError(t, err)
	out := res.(*mcp.CallToolResult)
	text = toolText(out)
	require.Contains(t, text, `Step "review_notes" is recorded on workflow task `+sp.Child+`, a child workflow of task `+tk.ID)
	shown, ok := out.Meta[mcptask.MetaHandoff].(*handoff.Document)
	require.True(t, ok)
	require.Equal(t, tk.ID, shown.TaskID, "the handoff is the parent's")
	require.Equal(t, string(mcptask.StatusCompleted), shown.Status)

	tk, p = f.task(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	var outs map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(p.Outputs["notes"], &outs))
	require.Contains(t, outs, "publish_notes", "the child's outputs are the step's output")
	var ship struct {
		Args map[string]any `json:"args"`
	}
	require.NoError(t, json.Unmarshal(p.Outputs["ship"], &ship))
	require.NotNil(t, ship.Args["notes"])
	require.Len(t, tasksOf(t, e, LabelParent, tk.ID), 1, "one child")
	require.Equal(t, 1, e.callsOf("draft"))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, testhooks.LineageChildCreated, points[0])
	require.Contains(t, points, testhooks.LineageChildEnded)
	// The parent recorded the child's end. (Which hook is told last is
	// not ordered: the child's end may reach its parent by the answer's
	// path, and the parent's write be told, before the child's own write
	// is told on a loaded machine.)
	require.Contains(t, points, testhooks.LineageEndRecorded)
}

func TestChildFailurePolicies(t *testing.T) {
	failingNotes := func() *Definition {
		return New("release_notes", "").Arg("repo", "", true).Step(Server("draft", "draft").FailsWorkflow(), Server("publish_notes", "publish_notes"))
	}
	setup := func(t *testing.T, mod func(s *Step)) (*fixture, *fakeEngine) {
		e := newFakeEngine()
		childTools(e)
		e.tool("draft", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
			return nil, errors.New("the repo has no tags")
		})
		w := train()
		mod(w.Steps[1])
		return newFixture(t, e, &Options{PromptWait: -1}, failingNotes(), w), e
	}
	t.Run("fails the workflow", func(t *testing.T) {
		f, e := setup(t, func(*Step) {})
		tk, _ := f.start(t, "train", map[string]string{"repo": "r"})
		tk, _ = f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Contains(t, tk.StatusMessage, `step "notes" failed: child workflow "release_notes" (task`)
		require.Contains(t, tk.StatusMessage, "the repo has no tags")
		require.Zero(t, e.callsOf("ship"))
	})
	t.Run("skips", func(t *testing.T) {
		f, e := setup(t, func(s *Step) { s.SkipsOnFailure() })
		tk, _ := f.start(t, "train", map[string]string{"repo": "r"})
		tk, p := f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
		require.Equal(t, mcptask.StepSkipped, p.step("notes").Status)
		require.Equal(t, mcptask.StepSkipped, p.step("ship").Status, "what reads its output is skipped")
		require.Zero(t, e.callsOf("ship"))
	})
	t.Run("hands to the client: a resume starts a new child", func(t *testing.T) {
		f, e := setup(t, func(s *Step) { s.HandsToClient() })
		tk, _ := f.start(t, "train", map[string]string{"repo": "r"})
		tk, p := f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusWorking, tk.Status, tk.StatusMessage)
		first := p.step("notes").Child
		require.True(t, p.step("notes").HandedToClient)
		require.Contains(t, tk.StatusMessage, "resume the workflow to start it again")
		e.tool("draft", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
			return ok(map[string]any{"drafted": true}), nil
		})
		_, err := f.b.prompt("train").Handle(context.Background(), &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: "train", Arguments: map[string]string{mcptask.ArgTaskID: tk.ID}}})
		require.NoError(t, err)
		tk, p = f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
		require.Equal(t, childID(tk.ID, "notes", 2), p.step("notes").Child, "a second child, for the second attempt")
		require.NotEqual(t, first, p.step("notes").Child)
		require.Len(t, tasksOf(t, e, LabelParent, tk.ID), 2)
	})
}

// Cancelling the parent cancels its child, which says why.
func TestCancelParentCancelsChild(t *testing.T) {
	e := newFakeEngine()
	childTools(e)
	f := newFixture(t, e, &Options{PromptWait: -1}, notesWorkflow(), train())
	tk, _ := f.start(t, "train", map[string]string{"repo": "r"})
	tk, p := f.settled(t, tk.ID)
	childTask := p.step("notes").Child
	e.cancel(t, tk.ID)
	ct, _ := f.task(t, childTask)
	require.Equal(t, mcptask.StatusCancelled, ct.Status)
	require.Equal(t, "cancelled: its parent workflow task "+tk.ID+" cancelled", ct.StatusMessage)

	// A child cancelled on its own fails its parent's step.
	f2 := newFixture(t, e, &Options{PromptWait: -1}, notesWorkflow(), train())
	tk, _ = f2.start(t, "train", map[string]string{"repo": "r"})
	tk, p = f2.settled(t, tk.ID)
	e.cancel(t, p.step("notes").Child)
	tk, _ = f2.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.Contains(t, tk.StatusMessage, "cancelled: cancelled by request")
}

// A parent's end is written before its child's cancel: a process that
// stops between the two leaves the child running, waiting for a client
// nobody serves. The child is cancelled when it is next recovered, or when
// a client names it.
func TestChildOutlivesItsParentAcrossStops(t *testing.T) {
	// parked starts a train whose child waits for its review, then ends
	// the train in the store alone (the process stopped before the second
	// write): it returns the fixture and the two ids.
	parked := func(t *testing.T) (*fixture, *fakeEngine, string, string) {
		e := newFakeEngine()
		childTools(e)
		f := newFixture(t, e, &Options{PromptWait: -1}, notesWorkflow(), train())
		tk, _ := f.start(t, "train", map[string]string{"repo": "r"})
		tk, p := f.settled(t, tk.ID)
		child := p.step("notes").Child
		require.NotEmpty(t, child)
		msg := "cancelled by request"
		_, err := e.st.Update(context.Background(), tk.ID, store.Update{Status: mcptask.StatusCancelled, StatusMessage: &msg})
		require.NoError(t, err)
		ct, _ := f.task(t, child)
		require.False(t, ct.Status.Terminal(), "the child missed its parent's cancel")
		return f, e, tk.ID, child
	}
	// cancelled checks that child was cancelled for why (its parent and how it ended).
	cancelled := func(t *testing.T, f *fixture, child, why string) {
		ct, _ := f.task(t, child)
		require.Equal(t, mcptask.StatusCancelled, ct.Status)
		require.Equal(t, "cancelled: its parent workflow task "+why, ct.StatusMessage)
	}
	t.Run("a restart cancels it", func(t *testing.T) {
		f, e, parent, child := parked(t)
		f.b.Close()
		f = redeploy(t, e, &Options{PromptWait: -1}, notesWorkflow(), train())
		cancelled(t, f, child, parent+" cancelled")
		require.Zero(t, e.callsOf("review_notes"))
	})
	t.Run("a client naming it cancels it", func(t *testing.T) {
		f, _, parent, child := parked(t)
		ct, _ := f.task(t, child)
		f.b.touched(context.Background(), ct)
		cancelled(t, f, child, parent+" cancelled")
	})
	t.Run("a parent gone from the store", func(t *testing.T) {
		f, e, parent, child := parked(t)
		require.NoError(t, e.st.Delete(context.Background(), parent))
		ct, _ := f.task(t, child)
		f.b.touched(context.Background(), ct)
		cancelled(t, f, child, parent+" is gone")
	})
	t.Run("a running parent keeps its child", func(t *testing.T) {
		e := newFakeEngine()
		childTools(e)
		f := newFixture(t, e, &Options{PromptWait: -1}, notesWorkflow(), train())
		tk, _ := f.start(t, "train", map[string]string{"repo": "r"})
		_, p := f.settled(t, tk.ID)
		ct, _ := f.task(t, p.step("notes").Child)
		f.b.touched(context.Background(), ct)
		f.b.Close()
		redeploy(t, e, &Options{PromptWait: -1}, notesWorkflow(), train())
		ct, _ = f.task(t, ct.ID)
		require.False(t, ct.Status.Terminal(), ct.StatusMessage)
	})
}

// The two writes a child's start and end take: a stop between them
// neither loses the child nor starts a second one, and the child's end is
// recorded once.
func TestChildAcrossStops(t *testing.T) {
	t.Run("the parent's writes fail once the child exists: a new process finds the child", func(t *testing.T) {
		e := newFakeEngine()
		childTools(e)
		var armed atomic.Bool
		e.setFailWrite(func(id string, u store.Update) error {
			if armed.Load() && len(tasksOf(t, e, LabelParent, id)) > 0 {
				return errors.New("the disk is gone")
			}
			return nil
		})
		armed.Store(true)
		f := newFixture(t, e, &Options{PromptWait: 50 * time.Millisecond}, notesWorkflow(), train())
		tk, _ := f.start(t, "train", map[string]string{"repo": "r"})
		require.Eventually(t, func() bool { return len(tasksOf(t, e, LabelParent, tk.ID)) == 1 }, 30*time.Second, 5*time.Millisecond)
		_, p := f.task(t, tk.ID)
		require.Empty(t, p.step("notes").Child, "the parent could not record its child")
		f.b.Close() // the process stops

		armed.Store(false)
		f = redeploy(t, e, &Options{PromptWait: -1}, notesWorkflow(), train())
		tk, p = f.settled(t, tk.ID)
		require.Equal(t, childID(tk.ID, "notes", 1), p.step("notes").Child, "the same child, found again")
		require.Len(t, tasksOf(t, e, LabelParent, tk.ID), 1, "no second child")
		_, err := f.call(t, p.step("notes").Child, "review_notes", map[string]any{"approved": true})
		require.NoError(t, err)
		tk, _ = f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
		require.Equal(t, 1, e.callsOf("ship"))
	})
	t.Run("the child ended while its parent could not hear it", func(t *testing.T) {
		e := newFakeEngine()
		childTools(e)
		f := newFixture(t, e, &Options{PromptWait: -1}, notesWorkflow(), train())
		tk, _ := f.start(t, "train", map[string]string{"repo": "r"})
		tk, p := f.settled(t, tk.ID)
		childTask, parentID := p.step("notes").Child, tk.ID
		e.setFailWrite(func(id string, u store.Update) error {
			if id == parentID {
				return errors.New("the disk is gone")
			}
			return nil
		})
		_, err := f.call(t, childTask, "review_notes", map[string]any{"approved": true})
		require.NoError(t, err, "the child's step is recorded whatever its parent does")
		ct, _ := f.settled(t, childTask)
		require.Equal(t, mcptask.StatusCompleted, ct.Status)
		tk, _ = f.task(t, tk.ID)
		require.False(t, tk.Status.Terminal(), "the parent missed the end")
		f.b.Close()

		e.setFailWrite(nil)
		f = redeploy(t, e, &Options{PromptWait: -1}, notesWorkflow(), train())
		require.Eventually(t, func() bool { tk, _ = f.task(t, tk.ID); return tk.Status.Terminal() }, 30*time.Second, 5*time.Millisecond,
			"a restart looks at the child at once")
		tk, p = f.task(t, tk.ID)
		require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
		require.Equal(t, 1, e.callsOf("ship"), "the end recorded once")
		require.Equal(t, 1, p.step("notes").Attempts)
	})
	t.Run("a lost poke is made up by the step's own look", func(t *testing.T) {
		e := newFakeEngine()
		childTools(e)
		f := newFixture(t, e, &Options{PromptWait: -1}, notesWorkflow(), train())
		tk, _ := f.start(t, "train", map[string]string{"repo": "r"})
		tk, p := f.settled(t, tk.ID)
		require.Equal(t, e.Now().Add(childCheck), *p.step("notes").Until)
		require.Equal(t, e.Now().Add(childCheck), tk.WakeAt.UTC(), "the scheduler wakes the parent to look at its child")
		// The child ends behind the bridge's back (another process whose
		// poke was lost): the parent learns it at its next look.
		childTask := p.step("notes").Child
		msg := "done elsewhere"
		_, err := e.st.Update(context.Background(), childTask, store.Update{Status: mcptask.StatusFailed, StatusMessage: &msg})
		require.NoError(t, err)
		e.advance(childCheck)
		require.Equal(t, 1, f.e.wakeDue(t))
		tk, _ = f.settled(t, tk.ID)
		require.Equal(t, mcptask.StatusFailed, tk.Status)
		require.Contains(t, tk.StatusMessage, "done elsewhere")
	})
}

func TestChildValidation(t *testing.T) {
	e := newFakeEngine()
	childTools(e)
	f := newFixture(t, e, nil, notesWorkflow())
	for name, w := range map[string]*Definition{
		"unregistered":      New("p", "").Step(Child("c", "nope")),
		"itself":            New("p", "").Step(Child("c", "p")),
		"missing required":  New("p", "").Step(Child("c", "release_notes")),
		"unknown argument":  New("p", "").Step(Child("c", "release_notes").Bind("repo", Const("r")).Bind("branch", Const("main"))),
		"client's argument": New("p", "").Step(Child("c", "release_notes").Bind("repo", FromClient("which repo"))),
		"a tool's retry":    New("p", "").Step(Child("c", "release_notes").Bind("repo", Const("r")).WithRetry()),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f.b.Register(f.srv, w, e.lookup())
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
		})
	}
	_, err := f.b.Register(f.srv, New("p", "").Arg("repo", "", true).Step(Child("c", "release_notes").Bind("repo", PromptArg("repo"))), e.lookup())
	require.NoError(t, err)
}
