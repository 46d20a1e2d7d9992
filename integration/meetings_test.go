package integration

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// Where the kinds meet (issue 38, docs/SEMANTICS.md), on a real engine:
// queues and ended holders, pause and ttl.

type meetIn struct {
	Tag string `json:"tag,omitempty"`
}

type meetOut struct {
	Tag string `json:"tag"`
}

// meetStores are the stores the meetings run on.
var meetStores = []struct {
	name string
	db   func(t *testing.T) string
}{
	{"bbolt", func(t *testing.T) string { return filepath.Join(t.TempDir(), "tasks.db") }},
	{"postgres", func(t *testing.T) string { return pgtest.DSN(t) }},
}

// frozen is a clock that stands still: nothing the engine does by the
// clock (a queue's periodic look, 30 s) can happen while a test runs on
// it; only what is woken does.
func frozen() func() time.Time {
	at := time.Now().UTC()
	return func() time.Time { return at }
}

// started records which tags a tool started with, and lets each run
// block until released or cancelled.
type started struct {
	mu   sync.Mutex
	tags []string
	gate chan struct{}
}

func (s *started) has(tag string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.tags {
		if x == tag {
			return true
		}
	}
	return false
}

// queueServer serves "deploy" (one step on a queue of one place) on db,
// with the router's clock standing still.
func meetQueueServer(t *testing.T, db string, s *started) (*builder.Server, *mcp.ClientSession) {
	t.Helper()
	b := builder.New("meet", "1").WithDB(db).WithoutEnv().
		WithRouterOptions(taskrouter.Options{Now: frozen(), PollInterval: 20 * time.Millisecond, ChangePollInterval: 50 * time.Millisecond}).
		WithWorkflowOptions(workflow.Options{PromptWait: 100 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "work"}, func(ctx context.Context, _ *mcp.CallToolRequest, in meetIn) (*mcp.CallToolResult, meetOut, error) {
		s.mu.Lock()
		s.tags = append(s.tags, in.Tag)
		s.mu.Unlock()
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, meetOut{}, ctx.Err()
		}
		return nil, meetOut{Tag: in.Tag}, nil
	}, nil)
	b.TaskWorkflow(workflow.New("deploy", "one deploy at a time").Arg("tag", "", true).Step(
		workflow.Server("work", "work").Bind("tag", workflow.PromptArg("tag")).OnQueue(&workflow.Queue{Name: "deploys", Concurrency: 1})))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv, versionClient(t, srv)
}

func meetStart(t *testing.T, cs *mcp.ClientSession, tag string) string {
	t.Helper()
	res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "deploy", Arguments: map[string]string{"tag": tag}})
	require.NoError(t, err)
	doc, err := handoff.FromPromptResult(res)
	require.NoError(t, err)
	return doc.TaskID
}

// A cancelled or ended queue holder frees its place at once: the run
// waiting for it starts with the router's clock standing still (its own
// look comes every 30 s of that clock), and no status names the ended
// task as a holder afterwards. Before, the waiting run started ~30 s
// later on bbolt, > 12 s on PostgreSQL, its status naming the cancelled
// holder meanwhile.
func TestQueueHolderEndFreesItsPlaceAtOnce(t *testing.T) {
	for _, st := range meetStores {
		t.Run(st.name, func(t *testing.T) {
			s := &started{gate: make(chan struct{})}
			srv, cs := meetQueueServer(t, st.db(t), s)
			ctx := context.Background()
			a := meetStart(t, cs, "a")
			require.Eventually(t, func() bool { return s.has("a") }, 20*time.Second, 5*time.Millisecond)
			b := meetStart(t, cs, "b")
			require.Eventually(t, func() bool {
				tk, err := srv.Store.Get(ctx, b)
				return err == nil && strings.Contains(tk.StatusMessage, "held by task "+a)
			}, 20*time.Second, 5*time.Millisecond, "b waits, naming a as the holder")

			_, err := srv.Router.CancelTask(ctx, a, "cancelled by the test")
			require.NoError(t, err)
			require.Eventually(t, func() bool { return s.has("b") }, 20*time.Second, 5*time.Millisecond,
				"b starts once a is cancelled, the clock standing still")
			tk, err := srv.Store.Get(ctx, b)
			require.NoError(t, err)
			require.NotContains(t, tk.StatusMessage, a, "no status names the ended holder")

			// An ended holder (b completes): c, waiting behind it, starts.
			c := meetStart(t, cs, "c")
			require.Eventually(t, func() bool {
				tk, err := srv.Store.Get(ctx, c)
				return err == nil && strings.Contains(tk.StatusMessage, "held by task "+b)
			}, 20*time.Second, 5*time.Millisecond)
			s.gate <- struct{}{}
			require.Eventually(t, func() bool { return s.has("c") }, 20*time.Second, 5*time.Millisecond)
			tk = waitEnded(t, srv.Store, b)
			require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
			close(s.gate)
			tk = waitEnded(t, srv.Store, c)
			require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)
		})
	}
}

// A workflow paused by an operator, or by PausesOnFailure, does not
// expire while paused, and its ttl counts again from its resume (1 s
// ttl, paused 2.5 s, on a real clock and sweeper). Before, it expired at
// its ttl and its resume was refused.
func TestPausedWorkflowDoesNotExpire(t *testing.T) {
	var mu sync.Mutex
	fail := true
	b := builder.New("pause-ttl", "1").WithDB(filepath.Join(t.TempDir(), "tasks.db")).WithoutEnv().
		WithRouterOptions(taskrouter.Options{SweepInterval: 100 * time.Millisecond}).WithWorkflowOptions(workflow.Options{PromptWait: 200 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "flaky"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ meetIn) (*mcp.CallToolResult, meetOut, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return nil, meetOut{}, errBroken
		}
		return nil, meetOut{Tag: "ok"}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "ask"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ meetIn) (*mcp.CallToolResult, meetOut, error) {
		return nil, meetOut{Tag: "asked"}, nil
	}, nil)
	b.TaskWorkflow(workflow.New("fragile", "pauses on failure").WithTTL(time.Second).PausesOnFailure().Step(
		workflow.Server("flaky", "flaky").FailsWorkflow()))
	b.TaskWorkflow(workflow.New("asks", "waits for its client").WithTTL(time.Second).Step(
		workflow.Client("ask", "ask")))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	cs := versionClient(t, srv)
	ctx := context.Background()
	start := func(name string) string {
		res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name})
		require.NoError(t, err)
		doc, err := handoff.FromPromptResult(res)
		require.NoError(t, err)
		return doc.TaskID
	}

	// Paused by PausesOnFailure.
	id := start("fragile")
	require.Eventually(t, func() bool {
		tk, err := srv.Store.Get(ctx, id)
		return err == nil && strings.Contains(tk.StatusMessage, "paused by the server")
	}, 20*time.Second, 10*time.Millisecond)
	// Paused by an operator.
	id2 := start("asks")
	_, _, err = srv.Router.Pauses().Pause(ctx, id2, taskrouter.PauseRequest{By: "ops", Reason: "a look"})
	require.NoError(t, err)

	time.Sleep(2500 * time.Millisecond) // more than the ttl, while paused: the condition is that nothing ended
	for _, x := range []string{id, id2} {
		tk, err := srv.Store.Get(ctx, x)
		require.NoError(t, err)
		require.Equal(t, mcptask.StatusWorking, tk.Status, "paused past its ttl, it did not expire: %s", tk.StatusMessage)
		require.Equal(t, workflow.DeadlinePaused, tk.Labels[workflow.LabelDeadline])
	}

	mu.Lock()
	fail = false
	mu.Unlock()
	_, _, err = srv.Router.Pauses().Resume(ctx, id, "ops")
	require.NoError(t, err)
	tk := waitEnded(t, srv.Store, id)
	require.Equal(t, mcptask.StatusCompleted, tk.Status, tk.StatusMessage)

	// Resumed, the task waits for its client again: its ttl counts from
	// the resume, and it expires at it.
	_, _, err = srv.Router.Pauses().Resume(ctx, id2, "ops")
	require.NoError(t, err)
	tk, err = srv.Store.Get(ctx, id2)
	require.NoError(t, err)
	require.Equal(t, workflow.DeadlineIdle, tk.Labels[workflow.LabelDeadline])
	require.WithinDuration(t, time.Now().Add(time.Second), tk.ExpiresAt, 900*time.Millisecond, "its ttl counts from the resume")
	tk = waitEnded(t, srv.Store, id2)
	require.Contains(t, tk.StatusMessage, "rested for its ttl")
}

// errBroken is the failure of a tool that is broken until fixed.
var errBroken = errBrokenT{}

type errBrokenT struct{}

func (errBrokenT) Error() string { return "broken until an operator fixes it" }
