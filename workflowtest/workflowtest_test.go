package workflowtest_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/workflow"
	"github.com/taskbridge/taskbridge/workflowtest"
)

// A small shop: charge a card, wait for a person's approval (for days),
// ship. charge is idempotent by the step's key, as a real payment API is.

type orderIn struct {
	Order string `json:"order"`
}

type shop struct {
	mu      sync.Mutex
	charged map[string]int // idempotency key -> charges
	calls   int
	shipped []string
}

func newShop() *shop { return &shop{charged: map[string]int{}} }

func (s *shop) charge(ctx context.Context, _ *mcp.CallToolRequest, in orderIn) (*mcp.CallToolResult, map[string]any, error) {
	info, _ := workflow.StepFrom(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.charged[info.IdempotencyKey]++
	return nil, map[string]any{"order": in.Order, "receipt": "r-" + in.Order}, nil
}

func (s *shop) ship(ctx context.Context, _ *mcp.CallToolRequest, in orderIn) (*mcp.CallToolResult, map[string]any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shipped = append(s.shipped, in.Order)
	return nil, map[string]any{"shipped": in.Order}, nil
}

// checkout is charge, a three-day cooling-off period, a person's
// approval, then ship when approved.
func checkout(version string) *workflow.Definition {
	order := workflow.PromptArg("order")
	return workflow.New("checkout", "charge, cool off, approve, ship").WithVersion(version).
		Arg("order", "the order", true).
		Step(
			workflow.Server("charge", "charge").Bind("order", order),
			workflow.Sleep("cool_off", 72*time.Hour),
			workflow.Event("approve", "whether to ship").WithPayload(map[string]any{
				"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}, "required": []string{"ok"}}),
			workflow.Server("ship", "ship").Bind("order", order).When(workflow.Truthy(workflow.StepOutput("approve", "ok"))),
		)
}

// register is the server's own setup: its tools and workflows.
func (s *shop) register(versions ...string) func(b *builder.Builder) {
	return func(b *builder.Builder) {
		builder.Tool(b, &mcp.Tool{Name: "charge"}, s.charge, nil)
		builder.Tool(b, &mcp.Tool{Name: "ship"}, s.ship, nil)
		for _, v := range versions {
			b.TaskWorkflow(checkout(v))
		}
	}
}

// TestThreeDayApproval: the cooling-off sleep and the approval pass on the
// Env's clock, which the test skips three days forward.
func TestThreeDayApproval(t *testing.T) {
	s := newShop()
	env := workflowtest.New(t, s.register("v1"), nil)
	start := env.Now()
	run := env.Start("checkout", map[string]string{"order": "42"})
	doc := run.Handoff()
	require.Equal(t, "working", doc.Status)
	require.Equal(t, "charge", doc.CompletedSteps[0].Name)

	env.Advance(72 * time.Hour)
	require.Equal(t, start.Add(72*time.Hour), env.Now(), "the clock skipped three days")
	doc = run.Handoff()
	require.Equal(t, "approve", doc.ClientSteps()[0].Name, "the cooling-off ended; the approval waits")
	p := run.Progress()
	require.Equal(t, mcptask.StepCompleted, p.Steps[1].Status)
	require.Equal(t, start.Add(72*time.Hour), p.Steps[1].History[0].At.Add(72*time.Hour), "the sleep ran three days of the Env's clock")

	doc = run.Send("approve", map[string]any{"ok": true})
	require.Equal(t, "completed", doc.Status)
	require.Equal(t, mcptask.StatusCompleted, run.Status())
	require.Equal(t, []string{"42"}, s.shipped)
	var steps []string
	for _, c := range env.Steps() {
		steps = append(steps, c.Step)
	}
	require.Equal(t, []string{"charge", "ship"}, steps, "the tools the steps ran")
}

// TestFail: an injected failure of a step that is not retried hands it to
// the client, which performs it itself.
func TestFail(t *testing.T) {
	s := newShop()
	env := workflowtest.New(t, s.register("v1"), nil)
	env.Fail("charge", 1)
	run := env.Start("checkout", map[string]string{"order": "7"})
	doc := run.Handoff()
	require.Len(t, doc.RemainingSteps, 4)
	require.True(t, doc.RemainingSteps[0].HandedToClient, "the failed step is the client's")
	require.Contains(t, doc.RemainingSteps[0].Error, "injected failure")
	require.Equal(t, 0, s.calls, "the injected failure ran no tool")
	require.Equal(t, "fail", env.Steps()[0].Injected)

	run.Call("charge", map[string]any{"order": "7"})
	require.Equal(t, 1, s.calls)
	require.Equal(t, mcptask.StepCompleted, run.Progress().Steps[0].Status)
}

// TestCrashAfter: the server crashes after charge's tool returned, before
// its outcome was written; the next process runs the step again with the
// same idempotency key, so the charge is made once.
func TestCrashAfter(t *testing.T) {
	s := newShop()
	env := workflowtest.New(t, s.register("v1"), nil)
	env.CrashAfter("charge")
	run := env.Start("checkout", map[string]string{"order": "9"})
	require.Equal(t, 2, s.calls, "the step ran again after the crash")
	require.Len(t, s.charged, 1, "both runs carried one idempotency key")
	steps := env.Steps()
	require.Equal(t, "crash after", steps[0].Injected)
	require.Equal(t, []int{1, 2}, []int{steps[0].Attempt, steps[1].Attempt})
	require.Equal(t, mcptask.StepCompleted, run.Progress().Steps[0].Status)
}

// TestDeployBefore: a deploy of new code right before ship: the task
// goes on, on its version, in the new process, whose ship tool runs.
func TestDeployBefore(t *testing.T) {
	old, next := newShop(), newShop()
	env := workflowtest.New(t, old.register("v1"), nil)
	env.DeployBefore("ship", next.register("v1", "v2"))
	run := env.Start("checkout", map[string]string{"order": "5"})
	env.Advance(72 * time.Hour)
	run.Send("approve", map[string]any{"ok": true})
	require.Equal(t, mcptask.StatusCompleted, run.Status())
	require.Empty(t, old.shipped, "the old process stopped before it shipped")
	require.Equal(t, []string{"5"}, next.shipped, "the new process shipped")
	require.Equal(t, "v1", run.Task().Labels[workflow.LabelVersion], "the task kept its version")
	require.Equal(t, "v2", env.Start("checkout", map[string]string{"order": "6"}).Task().Labels[workflow.LabelVersion], "new tasks start on the newest")
}

// failures is a TB that records the test errors Replay reports.
type failures struct {
	*testing.T
	mu   sync.Mutex
	errs []string
}

func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

// TestReplay: tasks recorded in a store file are served by a changed
// server that keeps their version, and reported when it does not.
func TestReplay(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tasks.db")
	s := newShop()
	var recorded string
	t.Run("record", func(t *testing.T) { // the Env closes the file when this ends
		rec := workflowtest.New(t, s.register("v1"), &workflowtest.Options{File: file})
		run := rec.Start("checkout", map[string]string{"order": "1"})
		rec.Advance(72 * time.Hour)
		require.Equal(t, "approve", run.Handoff().ClientSteps()[0].Name, "recorded waiting for the approval")
		recorded = run.ID
	})
	t.Run("served", func(t *testing.T) {
		env := workflowtest.Replay(t, file, s.register("v1", "v2"), nil)
		runs := env.Runs()
		require.Len(t, runs, 1)
		require.Equal(t, recorded, runs[0].ID)
		doc := runs[0].Send("approve", map[string]any{"ok": false})
		require.Equal(t, "completed", doc.Status, "the recorded task runs to its end on v1")
	})
	t.Run("dropped", func(t *testing.T) {
		f := &failures{T: t}
		workflowtest.Replay(f, file, s.register("v2"), nil)
		require.Len(t, f.errs, 1)
		require.Contains(t, f.errs[0], recorded)
		require.Contains(t, f.errs[0], `version "v1"`)
		// Reported at once, though the changed server would let the task
		// wait for a process serving v1 (Options.VersionGrace) before it
		// fails it: a replayer flags what the new code does not serve.
		require.Contains(t, f.errs[0], "cannot run task")
		require.Contains(t, f.errs[0], "is not served by this server")
	})
}
