package workflowtest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/workflow"
	"github.com/taskbridge/taskbridge/workflowtest"
)

// exampleT stands in for a test's *testing.T in these examples: a
// failure panics, and done runs the cleanups.
type exampleT struct{ cleanups []func() }

func (*exampleT) Helper()                           {}
func (*exampleT) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (*exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) Cleanup(f func())                { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) done() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// A three-day approval in milliseconds: the workflow sleeps three days of
// the Env's clock, which the test skips, then waits for a person's
// decision, which the test sends.
func Example() {
	t := &exampleT{} // in a test: the test's *testing.T
	defer t.done()

	request := func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
		Days int `json:"days"`
	}) (*mcp.CallToolResult, map[string]any, error) {
		return nil, map[string]any{"requested": in.Days}, nil
	}
	leave := workflow.New("leave", "request leave, wait three days for objections, then a manager's approval").
		TypedArg("days", "days of leave", true, workflow.ArgNumber).
		Step(
			workflow.Server("request", "request_leave").Bind("days", workflow.PromptArg("days")),
			workflow.Sleep("objections", 72*time.Hour),
			workflow.Event("manager", "the manager's decision").WithPayload(map[string]any{"type": "object"}),
		)
	env := workflowtest.New(t, func(b *builder.Builder) {
		builder.Tool(b, &mcp.Tool{Name: "request_leave"}, request, nil)
		b.TaskWorkflow(leave)
	}, nil)

	run := env.Start("leave", map[string]string{"days": "5"})
	fmt.Println("after the request:", run.Handoff().Status)
	env.Advance(72 * time.Hour)
	fmt.Println("waits for:", run.Handoff().ClientSteps()[0].Name)
	doc := run.Send("manager", map[string]any{"approved": true})
	fmt.Println("then:", doc.Status)
	for _, c := range env.Steps() {
		fmt.Println("ran:", c.Step, "attempt", c.Attempt, "by", c.By)
	}
	// Output:
	// after the request: working
	// waits for: manager
	// then: completed
	// ran: request attempt 1 by server
}

// A crash right after a step's tool returned, before its outcome was
// written: the restarted server runs the step again with the same
// idempotency key, which the tool uses to make its effect once.
func ExampleEnv_CrashAfter() {
	t := &exampleT{}
	defer t.done()

	charges := map[string]int{} // by idempotency key
	charge := func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]any, error) {
		info, _ := workflow.StepFrom(ctx)
		charges[info.IdempotencyKey]++
		return nil, map[string]any{"charged": charges[info.IdempotencyKey] == 1}, nil
	}
	env := workflowtest.New(t, func(b *builder.Builder) {
		builder.Tool(b, &mcp.Tool{Name: "charge"}, charge, nil)
		b.TaskWorkflow(workflow.New("pay", "charge once").Step(workflow.Server("charge", "charge")))
	}, nil)
	env.CrashAfter("charge")
	run := env.Start("pay", nil)
	for _, c := range env.Steps() {
		fmt.Printf("attempt %d (%s)\n", c.Attempt, c.Injected)
	}
	fmt.Println(run.Status(), "with", len(charges), "key")
	// Output:
	// attempt 1 (crash after)
	// attempt 2 ()
	// completed with 1 key
}

// A step's tool made to fail: a step that is not retried is handed to the
// client, which performs it with a continuation call.
func ExampleEnv_Fail() {
	t := &exampleT{}
	defer t.done()

	label := func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]any, error) {
		return nil, map[string]any{"label": "L-1"}, nil
	}
	env := workflowtest.New(t, func(b *builder.Builder) {
		builder.Tool(b, &mcp.Tool{Name: "print_label"}, label, nil)
		b.TaskWorkflow(workflow.New("ship", "print a label").Step(workflow.Server("label", "print_label")))
	}, nil)
	env.Fail("label", 1)
	run := env.Start("ship", nil)
	step := run.Handoff().RemainingSteps[0]
	fmt.Println(step.Name, "handed to the client:", step.HandedToClient)
	fmt.Println(run.Call("print_label", map[string]any{}).Status)
	// Output:
	// label handed to the client: true
	// completed
}
