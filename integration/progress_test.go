package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// progressWrites counts the updates each task receives.
type progressWrites struct {
	store.Store
	mu      sync.Mutex
	updates map[string]int
}

func (w *progressWrites) Update(ctx context.Context, id string, u store.Update) (*store.Task, error) {
	t, err := w.Store.Update(ctx, id, u)
	if err == nil {
		w.mu.Lock()
		w.updates[id]++
		w.mu.Unlock()
	}
	return t, err
}

func (w *progressWrites) count(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.updates[id]
}

type incIn struct {
	N int `json:"n"`
}
type incOut struct {
	N int `json:"n"`
}

// progressServer serves "chain": six quick Retryable steps, one that is
// not Retryable, two more Retryable ones of which the first is slow, then
// a client step. The engine's clock stands still but for the slow step,
// which moves it three intervals on: how quick a step is does not depend
// on how busy the machine is.
func progressServer(t *testing.T, interval, coalesce time.Duration) (*builder.Server, *progressWrites) {
	st := &progressWrites{Store: memory.New(nil), updates: map[string]int{}}
	clock := &relClock{now: time.Now()}
	b := builder.New("progress", "1").WithStore(st).WithoutEnv().
		WithRouterOptions(taskrouter.Options{Now: clock.Now}).
		WithWorkflowOptions(workflow.Options{ProgressInterval: coalesce})
	builder.Tool(b, &mcp.Tool{Name: "inc"}, func(ctx context.Context, _ *mcp.CallToolRequest, in incIn) (*mcp.CallToolResult, incOut, error) {
		return nil, incOut{N: in.N + 1}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "slow_inc"}, func(ctx context.Context, _ *mcp.CallToolRequest, in incIn) (*mcp.CallToolResult, incOut, error) {
		clock.add(3 * interval)
		return nil, incOut{N: in.N + 1}, nil
	}, nil)
	wf := workflow.New("chain", "a chain of increments")
	prev := ""
	add := func(name, tool string, retryable bool) {
		s := workflow.Server(name, tool)
		if prev == "" {
			s.Bind("n", workflow.Const(0))
		} else {
			s.Bind("n", workflow.StepOutput(prev, "n"))
		}
		if retryable {
			s.WithRetry()
		}
		wf.Step(s)
		prev = name
	}
	for i := 1; i <= 6; i++ {
		add(fmt.Sprintf("quick%d", i), "inc", true)
	}
	add("once", "inc", false)
	add("slow", "slow_inc", true)
	add("after", "inc", true)
	wf.Step(workflow.Client("check", "inc").Bind("n", workflow.StepOutput("after", "n")))
	b.TaskWorkflow(wf)
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv, st
}

func runChain(t *testing.T, srv *builder.Server) *handoff.Document {
	ctx := context.Background()
	tr, err := srv.Connect(ctx)
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, tr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "chain"})
	require.NoError(t, err)
	doc, err := handoff.Parse(res.Messages[len(res.Messages)-1].Content.(*mcp.TextContent).Text)
	require.NoError(t, err)
	return doc
}

// TestProgressWritesCoalesce: quick Retryable steps share progress writes;
// a step that is not Retryable, a slow step and the handoff are written at
// once; the recorded progress is complete either way.
func TestProgressWritesCoalesce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
		writes   func(t *testing.T, n int)
	}{
		// Every step on its own: the first attempt opened, then one write
		// per step (its outcome and the next step's attempt), the last
		// one being the handoff, and the record that the handoff was
		// delivered (a client holds the id: no orphan deadline).
		{"off", 0, func(t *testing.T, n int) { require.Equal(t, 11, n) }},
		// Coalesced: the first attempt; quick1-5 ride along with quick6's
		// write, which must be written because "once" is not Retryable;
		// once; slow (slower than the interval); after and the handoff;
		// the delivery.
		{"on", 200 * time.Millisecond, func(t *testing.T, n int) { require.Equal(t, 6, n) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			interval := tc.interval
			if interval <= 0 {
				interval = 5 * time.Millisecond // for slow_inc's step of the clock
			}
			srv, st := progressServer(t, interval, tc.interval)
			doc := runChain(t, srv)
			require.Equal(t, "working", doc.Status)
			require.Len(t, doc.CompletedSteps, 9)
			require.Equal(t, "check", doc.RemainingSteps[0].Name)
			tc.writes(t, st.count(doc.TaskID))

			// What is stored is the whole story: every step completed
			// once, with one successful attempt.
			task, err := srv.Router.Task(context.Background(), doc.TaskID)
			require.NoError(t, err)
			raw := task.Variables[workflow.VarProgress]
			require.NotEmpty(t, raw)
			var p workflow.Progress
			err = json.Unmarshal(raw, &p)
			require.NoError(t, err)
			for _, sp := range p.Steps[:9] {
				require.Equal(t, mcptask.StepCompleted, sp.Status, sp.Name)
				require.Len(t, sp.History, 1, sp.Name)
				require.Equal(t, workflow.OutcomeOK, sp.History[0].Outcome, sp.Name)
			}
		})
	}
}
