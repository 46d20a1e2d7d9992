package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// notes: fetch -> draft (reads the topic) -> publish; publish fails
// until the test lets it pass.
func notes() *Definition {
	return New("notes", "").Arg("topic", "", true).Step(
		Server("fetch", "fetch"),
		Server("draft", "draft").Bind("topic", PromptArg("topic")).Bind("from", StepOutput("fetch")),
		Server("publish", "publish").Bind("text", StepOutput("draft", "args.topic")).FailsWorkflow(),
	)
}

func TestForkRerunsFromAStep(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "fetch", "draft")
	broken := true
	e.tool("publish", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		if broken {
			return nil, errors.New("the channel is archived")
		}
		return ok(map[string]any{"published": args["text"]}), nil
	})
	f := newFixture(t, e, &Options{PromptWait: -1}, notes())
	orig, _ := f.start(t, "notes", map[string]string{"topic": "tasks"})
	orig, op := f.settled(t, orig.ID)
	require.Equal(t, mcptask.StatusFailed, orig.Status)
	require.Equal(t, []string{"fetch", "draft", "publish"}, f.b.ForkPoints(orig))

	// A rerun of what failed: the steps before publish keep their outputs.
	broken = false
	ctx := context.Background()
	nt, err := f.b.Fork(ctx, orig.ID, nil)
	require.NoError(t, err)
	require.Equal(t, orig.ID, nt.Labels[LabelForkedFrom])
	require.Equal(t, "publish", nt.Labels[LabelForkedAt])
	require.Equal(t, orig.Owner, nt.Owner)
	nt, np := f.settled(t, nt.ID)
	require.Equal(t, mcptask.StatusCompleted, nt.Status, nt.StatusMessage)
	require.Equal(t, 1, e.callsOf("fetch"), "fetch was not run again")
	require.Equal(t, 1, e.callsOf("draft"))
	require.Equal(t, op.Steps[0].History, np.Steps[0].History, "the original's record of fetch is kept")
	require.JSONEq(t, string(op.Outputs["draft"]), string(np.Outputs["draft"]))
	require.Contains(t, string(np.Outputs["publish"]), "tasks")

	// The original, ended, records its fork.
	orig, _ = f.task(t, orig.ID)
	require.Equal(t, mcptask.StatusFailed, orig.Status, "the original's outcome is unchanged")
	require.Equal(t, []Fork{{TaskID: nt.ID, From: "publish"}}, Forks(orig))

	// A fork from draft with an edited argument: draft and publish run
	// again with it; a second fork is appended to the lineage.
	nt2, err := f.b.Fork(ctx, orig.ID, &ForkOptions{From: "draft", Arguments: map[string]string{"topic": "sleeps"}})
	require.NoError(t, err)
	nt2, np2 := f.settled(t, nt2.ID)
	require.Equal(t, mcptask.StatusCompleted, nt2.Status, nt2.StatusMessage)
	require.Equal(t, "sleeps", np2.Arguments["topic"])
	require.Contains(t, string(np2.Outputs["publish"]), "sleeps")
	require.Equal(t, 1, e.callsOf("fetch"))
	require.Equal(t, 2, e.callsOf("draft"))
	orig, _ = f.task(t, orig.ID)
	require.Equal(t, []Fork{{TaskID: nt.ID, From: "publish"}, {TaskID: nt2.ID, From: "draft"}}, Forks(orig))

	// Refusals.
	_, err = f.b.Fork(ctx, orig.ID, &ForkOptions{From: "nope"})
	var je *jsonrpc.Error
	require.ErrorAs(t, err, &je)
	require.EqualValues(t, jsonrpc.CodeInvalidParams, je.Code)
	require.Contains(t, err.Error(), `has no step "nope"`)
	_, err = f.b.Fork(ctx, orig.ID, &ForkOptions{Arguments: map[string]string{"other": "x"}})
	require.ErrorIs(t, err, ErrCannotFork)
	_, err = f.b.Fork(ctx, nt.ID, nil)
	require.ErrorIs(t, err, ErrCannotFork, "every step completed: name one")
	_, err = f.b.Fork(ctx, "no-such-task", nil)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestForkNeedsEveryEarlierStepEnded(t *testing.T) {
	e := newFakeEngine()
	abcTools(e)
	f := newFixture(t, e, &Options{PromptWait: -1}, abc(nil))
	tk, _ := f.start(t, "abc", nil) // paused at the client's step b
	_, err := f.b.Fork(context.Background(), tk.ID, &ForkOptions{From: "c"})
	require.ErrorIs(t, err, ErrCannotFork)
	require.Contains(t, err.Error(), `step "b", before "c", has not ended`)
	nt, err := f.b.Fork(context.Background(), tk.ID, &ForkOptions{From: "b"})
	require.NoError(t, err)
	_, np := f.settled(t, nt.ID)
	require.Equal(t, mcptask.StepAwaitingClient, np.step("b").Status, "the fork waits for the client's b")
	require.Equal(t, 1, e.callsOf("ta"))
}

func TestForkOfAGroupMemberRerunsTheGroup(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "lint", "unit", "integration", "report")
	f := newFixture(t, e, &Options{PromptWait: -1}, checks())
	tk, _ := f.start(t, "ci", nil)
	tk, _ = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status)
	require.Equal(t, []string{"checks", "report"}, f.b.ForkPoints(tk))
	nt, err := f.b.Fork(context.Background(), tk.ID, &ForkOptions{From: "unit"})
	require.NoError(t, err)
	require.Equal(t, "checks", nt.Labels[LabelForkedAt])
	nt, _ = f.settled(t, nt.ID)
	require.Equal(t, mcptask.StatusCompleted, nt.Status)
	for _, n := range []string{"lint", "unit", "integration", "report"} {
		require.Equal(t, 2, e.callsOf(n), n)
	}
}

func TestForkTool(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "fetch", "draft", "publish")
	f := newFixture(t, e, &Options{PromptWait: -1}, notes())
	f.b.AddForkTool(f.srv, "")
	tk, _ := f.start(t, "notes", map[string]string{"topic": "x"})
	tk, _ = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status)

	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := f.srv.Connect(ctx, st, nil)
	require.NoError(t, err)
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: DefaultForkToolName, Arguments: map[string]any{"task_id": tk.ID, "from": "publish"}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%v", res.Content)
	text := res.Content[0].(*mcp.TextContent).Text
	require.Contains(t, text, "runs again from step \"publish\"")
	raw, _ := json.Marshal(res.StructuredContent)
	var doc struct {
		TaskID string `json:"taskId"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.NotEqual(t, tk.ID, doc.TaskID)
	nt, _ := f.settled(t, doc.TaskID)
	require.Equal(t, mcptask.StatusCompleted, nt.Status)
	require.Equal(t, 2, e.callsOf("publish"))

	for _, args := range []map[string]any{{"task_id": "nope"}, {"task_id": tk.ID, "from": "nope"}, {"task_id": tk.ID}} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: DefaultForkToolName, Arguments: args})
		require.NoError(t, err)
		require.True(t, res.IsError, "%v", args)
	}
}

// TestForkAnswersItsTask: Fork returns the fork it made even when its
// instance has no task in memory at that moment (here: every write of
// the fork's touch fails, which drops what the instance read); it
// returned no task and no error. Found by the simulation (issue 39,
// seed 16: a fork's own pass was between two reads of its task).
func TestForkAnswersItsTask(t *testing.T) {
	e := newFakeEngine()
	echoTools(e, "fetch", "draft")
	e.tool("publish", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		return nil, errors.New("the channel is archived")
	})
	f := newFixture(t, e, &Options{PromptWait: -1}, notes())
	orig, _ := f.start(t, "notes", map[string]string{"topic": "tasks"})
	orig, _ = f.settled(t, orig.ID)
	require.Equal(t, mcptask.StatusFailed, orig.Status)
	e.setFailWrite(func(id string, u store.Update) error {
		if u.Labels[LabelTouched] != "" && id != orig.ID {
			return errors.New("the store is briefly unavailable")
		}
		return nil
	})
	nt, err := f.b.Fork(context.Background(), orig.ID, nil)
	require.NoError(t, err)
	require.NotNil(t, nt, "the fork is answered")
	require.Equal(t, orig.ID, nt.Labels[LabelForkedFrom])
}
