package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Where the kinds meet (issue 38; docs/SEMANTICS.md): cancel during an
// undo, pause and children, a failure's cause through the ancestors, an
// ended task's records.

// stack deploys s1, s2, s3 (each undone by its rollback), then fails.
func stack() *Definition {
	step := func(n int) *Step {
		return Server(fmt.Sprintf("s%d", n), "deploy").Bind("n", Const(n)).
			Undo(Server(fmt.Sprintf("u%d", n), "rollback").Bind("n", Const(n)))
	}
	return New("stack", "").Step(step(1), step(2), step(3), Server("check", "check").FailsWorkflow())
}

// gated is a tool whose runs for the n its gates name block until the
// test opens their gate (or their context ends); every run is journalled
// with its idempotency key.
type gated struct {
	mu    sync.Mutex
	runs  []string
	keys  []string
	gates map[string]chan struct{}
	start chan string
}

func newGated() *gated {
	return &gated{gates: map[string]chan struct{}{}, start: make(chan string, 64)}
}

func (g *gated) hold(call string) { g.mu.Lock(); g.gates[call] = make(chan struct{}); g.mu.Unlock() }
func (g *gated) open(call string) { g.mu.Lock(); close(g.gates[call]); g.mu.Unlock() }

func (g *gated) tool(name string, fail bool) func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
	return func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		call := fmt.Sprintf("%s(%v)", name, args["n"])
		info, _ := StepFrom(ctx)
		g.mu.Lock()
		g.runs = append(g.runs, call)
		g.keys = append(g.keys, call+" "+info.IdempotencyKey)
		gate := g.gates[call]
		g.mu.Unlock()
		g.start <- call
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		if fail {
			return nil, fmt.Errorf("%s failed", call)
		}
		return ok(map[string]any{"did": call}), nil
	}
}

func (g *gated) started(t *testing.T, call string) {
	t.Helper()
	for {
		select {
		case c := <-g.start:
			if c == call {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never started: %v", call, g.list())
		}
	}
}

func (g *gated) list() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.runs...)
}

func (g *gated) keyList() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.keys...)
}

// waitEnded waits (bounded) until task id has ended.
func (f *fixture) waitEnded(t *testing.T, id string) *store.Task {
	t.Helper()
	var tk *store.Task
	require.Eventually(t, func() bool {
		var err error
		tk, err = f.e.Task(context.Background(), id)
		return err == nil && tk.Status.Terminal()
	}, 10*time.Second, 2*time.Millisecond)
	return tk
}

// A cancel during an undo lets the undos finish (in the undo task, which
// runs the undo the cancel cut again, with its idempotency key, then the
// ones after it), and the cancelled task's message says so; cancelling
// the undo task cuts the undo, and its message says exactly which undo
// steps ran, which failed and which never ran.
func TestCancelDuringUndo(t *testing.T) {
	setup := func(t *testing.T) (*fixture, *gated, *store.Task) {
		e := newFakeEngine()
		g := newGated()
		e.tool("deploy", g.tool("deploy", false))
		e.tool("rollback", g.tool("rollback", false))
		e.tool("check", g.tool("check", true))
		g.hold("rollback(3)")
		f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, stack())
		tk, _ := f.start(t, "stack", nil)
		g.started(t, "rollback(3)") // the workflow failed; its undo runs, last first
		return f, g, tk
	}

	t.Run("the undo finishes", func(t *testing.T) {
		f, g, tk := setup(t)
		f.e.cancel(t, tk.ID)
		undo := undoTaskID(tk.ID)
		ct, _ := f.task(t, tk.ID)
		require.Equal(t, mcptask.StatusCancelled, ct.Status)
		require.Contains(t, ct.StatusMessage, `cancelled by request while it was undoing what it did (step "check" (tool "check") failed: check(<nil>) failed)`)
		require.Contains(t, ct.StatusMessage, "the undo goes on in workflow task "+undo)
		require.True(t, strings.HasSuffix(ct.StatusMessage, "so far undone: none; failed: none; cut while it ran: s3 (rollback); never ran: s2 (rollback), s1 (rollback)"), ct.StatusMessage)
		g.started(t, "rollback(3)") // run again by the undo task
		g.open("rollback(3)")
		ut := f.waitEnded(t, undo)
		require.Equal(t, mcptask.StatusCompleted, ut.Status, ut.StatusMessage)
		require.Contains(t, ut.StatusMessage, "undone, last first: s3 (rollback), s2 (rollback), s1 (rollback)")
		require.Equal(t, []string{"deploy(1)", "deploy(2)", "deploy(3)", "check(<nil>)", "rollback(3)", "rollback(3)", "rollback(2)", "rollback(1)"}, g.list())
		keys := g.keyList()
		require.Equal(t, "rollback(3) "+tk.ID+"/undo:s3", keys[4])
		require.Equal(t, "rollback(3) "+tk.ID+"/undo:s3", keys[5], "the undo keeps its idempotency key across the cancel")
		require.Equal(t, "rollback(2) "+tk.ID+"/undo:s2", keys[6])
		_, up := f.task(t, undo)
		require.Equal(t, tk.ID+"/undo:s3", up.Undo.Steps[0].IdempotencyKey)
	})

	t.Run("cutting the undo says what ran and what did not", func(t *testing.T) {
		f, g, tk := setup(t)
		g.hold("rollback(2)")
		f.e.cancel(t, tk.ID)
		undo := undoTaskID(tk.ID)
		g.started(t, "rollback(3)")
		g.open("rollback(3)")
		g.started(t, "rollback(2)")
		f.e.cancel(t, undo) // the caller cuts the undo
		ut := f.waitEnded(t, undo)
		require.Equal(t, mcptask.StatusCancelled, ut.Status)
		require.Equal(t, "cancelled by request: the undo of workflow task "+tk.ID+" was cut; undone: s3 (rollback); failed: none; cut while it ran: s2 (rollback); never ran: s1 (rollback) (take back by hand what was not undone)", ut.StatusMessage)
		_, err := f.e.Task(context.Background(), undoTaskID(undo))
		require.ErrorIs(t, err, store.ErrNotFound, "the cut is the end of the undo: no undo task of the undo task (simulation seed 5)")
		_, up := f.task(t, undo)
		require.Equal(t, mcptask.StepCancelled, up.Undo.Steps[1].Status, "the cancel's write closed the undo step it cut")
		require.Equal(t, OutcomeCancelled, up.Undo.Steps[1].History[0].Outcome)
		require.NotContains(t, g.list(), "rollback(1)")
	})
}

// trainWithChild starts a train whose notes step runs a child workflow,
// settled, and returns it, its progress and the child's id.
func trainWithChild(t *testing.T) (*fixture, *fakeEngine, *store.Task, *Progress, string) {
	t.Helper()
	e := newFakeEngine()
	childTools(e)
	f := newFixture(t, e, &Options{PromptWait: -1}, notesWorkflow(), train())
	tk, _ := f.start(t, "train", map[string]string{"repo": "r"})
	_, p := f.settled(t, tk.ID)
	child := p.step("notes").Child
	require.NotEmpty(t, child)
	return f, e, tk, p, child
}

// A pause reaches the children as a cancel does: the child stops
// starting steps while its parent is paused, and goes on when the parent
// is resumed; a child paused on its own stays paused.
func TestPauseReachesChildren(t *testing.T) {
	f, e, tk, p, child := trainWithChild(t)
	_, said, err := f.b.Pause(context.Background(), tk.ID, taskrouter.PauseRequest{By: "ops", Reason: "freeze"})
	require.NoError(t, err)
	require.Contains(t, said, "is paused")
	ct, cp := f.task(t, child)
	require.NotNil(t, cp.Paused, "the child is paused with its parent")
	require.Equal(t, "workflow task "+tk.ID+" (its parent)", cp.Paused.By)
	require.Contains(t, ct.StatusMessage, "its parent workflow task "+tk.ID+" was paused by ops")
	// A paused tree starts nothing: the child's own resume is refused
	// while its parent stays paused (simulation seed 18: an operator's
	// resume of the child ran its steps under the paused parent).
	_, _, err = f.b.Resume(context.Background(), child, "ops")
	require.ErrorIs(t, err, taskrouter.ErrNotPausable)
	require.ErrorContains(t, err, "which is still paused: resume the parent")

	// The client performs the child's step: recorded, but nothing after
	// it starts while paused.
	_, err = f.call(t, child, "review_notes", map[string]any{"approved": true})
	require.NoError(t, err)
	_, cp = f.settled(t, child)
	require.Equal(t, mcptask.StepPending, cp.step("publish_notes").Status, "the paused child starts nothing")
	require.Zero(t, e.callsOf("publish_notes"))

	_, _, err = f.b.Resume(context.Background(), tk.ID, "ops")
	require.NoError(t, err)
	tk, _ = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
	ct, _ = f.task(t, child)
	require.Equal(t, mcptask.StatusCompleted, ct.Status)

	// A child paused on its own is not resumed by its parent's resume.
	tk, _ = f.start(t, "train", map[string]string{"repo": "r"})
	_, p = f.settled(t, tk.ID)
	child = p.step("notes").Child
	_, _, err = f.b.Pause(context.Background(), child, taskrouter.PauseRequest{By: "ops"})
	require.NoError(t, err)
	_, _, err = f.b.Pause(context.Background(), tk.ID, taskrouter.PauseRequest{By: "ops"})
	require.NoError(t, err)
	_, _, err = f.b.Resume(context.Background(), tk.ID, "ops")
	require.NoError(t, err)
	_, cp = f.task(t, child)
	require.NotNil(t, cp.Paused)
	require.Equal(t, "ops", cp.Paused.By)

	// Nor is a child paused on its own resumed while its parent is
	// paused (simulation seed 86: the operator's resume of the child ran
	// its steps under the paused parent): resume the parent first.
	_, _, err = f.b.Pause(context.Background(), tk.ID, taskrouter.PauseRequest{By: "ops"})
	require.NoError(t, err)
	_, _, err = f.b.Resume(context.Background(), child, "ops")
	require.ErrorIs(t, err, taskrouter.ErrNotPausable)
	require.ErrorContains(t, err, "is paused: resume the parent first")
	_, cp = f.task(t, child)
	require.Equal(t, "ops", cp.Paused.By, "its own pause stays")
	_, _, err = f.b.Resume(context.Background(), tk.ID, "ops")
	require.NoError(t, err)
	_, _, err = f.b.Resume(context.Background(), child, "ops")
	require.NoError(t, err, "resumed after its parent")
	_, cp = f.task(t, child)
	require.Nil(t, cp.Paused)
}

// A child pauses with its parent even when the parent's pause never
// reached it (the parent's process stopped between its pause's write and
// the child's pause, or the child's decision was under way): the child
// reads its parent's pause before it decides, pauses itself as the
// parent's pause would have, and starts nothing; the parent's resume
// resumes it.
func TestChildPausesWithItsParentByItself(t *testing.T) {
	f, e, tk, p, child := trainWithChild(t)

	// The parent's pause is written; its effects are lost.
	p.Paused = &Pause{By: "ops", At: e.Now(), Reason: "freeze"}
	raw, err := json.Marshal(p)
	require.NoError(t, err)
	_, err = e.Update(context.Background(), tk.ID, store.Update{Variables: map[string]json.RawMessage{VarProgress: raw}})
	require.NoError(t, err)

	// The client performs the child's step: the child's decision pauses
	// it, and nothing after that step starts.
	_, err = f.call(t, child, "review_notes", map[string]any{"approved": true})
	require.NoError(t, err)
	_, cp := f.settled(t, child)
	require.NotNil(t, cp.Paused, "the child paused itself with its parent")
	require.Equal(t, parentBy(tk.ID), cp.Paused.By)
	require.Equal(t, mcptask.StepPending, cp.step("publish_notes").Status)
	require.Zero(t, e.callsOf("publish_notes"))

	_, _, err = f.b.Resume(context.Background(), tk.ID, "ops")
	require.NoError(t, err)
	tk, _ = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
}

// A failure's cause reaches every ancestor's message: eight children
// deep, the top task says "deeper than MaxDepth (8)"; a long chain is
// shortened in the middle, never at its end.
func TestNestedFailureKeepsItsCause(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "x")
	// level9 is a leaf; level8 starts it, ... level0 starts level1: the
	// task of level8 is 8 deep, and may start no child.
	wfs := []*Definition{New("level9", "").Step(Server("x", "x"))}
	for i := 8; i >= 0; i-- {
		wfs = append(wfs, New(fmt.Sprintf("level%d", i), "").Step(Child("down", fmt.Sprintf("level%d", i+1))))
	}
	f := newFixture(t, e, &Options{PromptWait: -1}, wfs...)
	tk, _ := f.start(t, "level0", nil)
	tk = f.waitEnded(t, tk.ID)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.Contains(t, tk.StatusMessage, fmt.Sprintf("deeper than MaxDepth (%d)", MaxDepth), "the cause reaches the top")
	require.True(t, strings.HasSuffix(tk.StatusMessage, "; the workflow failed"), tk.StatusMessage)
	require.True(t, strings.HasPrefix(tk.StatusMessage, `step "down" failed: child workflow "level1"`), tk.StatusMessage)

	long := strings.Repeat(`step "down" failed: child workflow "x" (task T) failed: `, 60) + "the cause"
	short := causeLine(long)
	require.LessOrEqual(t, len(short), maxCause+5)
	require.True(t, strings.HasSuffix(short, "the cause"))
	require.True(t, strings.HasPrefix(short, `step "down" failed`))
	require.Contains(t, short, " … ")
}

// An ended task has no record left running or waiting: a for-each whose
// item's child failed, a group member still running when the group
// failed fast.
func TestEndedTaskHasNoRecordRunning(t *testing.T) {
	e := newFakeEngine()
	childTools(e)
	e.tool("draft", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		if args["repo"] == "b" {
			return nil, fmt.Errorf("no tags in b")
		}
		<-ctx.Done()
		return nil, context.Cause(ctx)
	})
	notes := New("release_notes", "").Arg("repo", "", true).Step(Server("draft", "draft").Bind("repo", PromptArg("repo")).FailsWorkflow())
	w := New("many", "").Step(ForEach("each", Const([]string{"a", "b"}), Child("notes", "release_notes").Bind("repo", Item())).StopOnFailure())
	f := newFixture(t, e, &Options{PromptWait: -1}, notes, w)
	tk, _ := f.start(t, "many", nil)
	tk = f.waitEnded(t, tk.ID)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.Contains(t, tk.StatusMessage, "no tags in b")
	_, p := f.task(t, tk.ID)
	closedRecords(t, p)
	// The child of item "a", whose tool ran, was cancelled by the engine
	// when its parent ended: the cancel's own write closed its records
	// (simulation seed 1: the router wrote the end without them).
	var children []string
	walkRecords(p, func(sp *StepProgress) {
		if sp.Child != "" {
			children = append(children, sp.Child)
		}
	})
	require.Len(t, children, 2)
	for _, id := range children {
		ct := f.waitEnded(t, id)
		_, cp := f.task(t, ct.ID)
		closedRecords(t, cp)
	}
}

// closedRecords fails when a record of p (an ended task's) reads running
// or waiting.
func closedRecords(t *testing.T, p *Progress) {
	t.Helper()
	walkRecords(p, func(sp *StepProgress) {
		switch sp.Status {
		case mcptask.StepRunning, mcptask.StepAwaitingChild, mcptask.StepAwaitingClient, mcptask.StepAwaitingEvent, mcptask.StepSleeping:
			t.Errorf("record %s is %s in an ended task", sp.Name, sp.Status)
		}
		require.Nil(t, sp.open(), "record %s has an open attempt", sp.Name)
	})
}
