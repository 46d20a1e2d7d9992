package workflow_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/workflow"
)

type checkIn struct {
	Suite string `json:"suite"`
}

type decision struct {
	Approved bool   `json:"approved"`
	Reason   string `json:"reason"`
}

// A workflow with every step kind: checks in a parallel group, a durable
// sleep, an approval the client gives (or a webhook), and a branch on it.
// Getting the prompt runs the checks together and the sleep; the handoff
// then waits for the approval; the approval runs the branch it chose and
// skips the other.
func Example() {
	ctx := context.Background()
	b := builder.New("example", "1.0.0").WithStore(memory.New(nil)).WithoutEnv().WithWorkflowOptions(workflow.Options{PromptWait: -1})
	builder.Tool(b, &mcp.Tool{Name: "check"}, func(ctx context.Context, _ *mcp.CallToolRequest, in checkIn) (*mcp.CallToolResult, checkIn, error) {
		return nil, in, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "decide"}, func(ctx context.Context, _ *mcp.CallToolRequest, in decision) (*mcp.CallToolResult, decision, error) {
		return nil, in, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "ship"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "shipped"}}}, nil, nil
	}, nil)
	approved := workflow.Truthy(workflow.StepOutput("approve", "approved"))
	b.TaskWorkflow(workflow.New("release", "check, soak, approve, ship").Step(
		workflow.Parallel("checks",
			workflow.Server("lint", "check").Bind("suite", workflow.Const("lint")),
			workflow.Server("unit", "check").Bind("suite", workflow.Const("unit")),
		),
		workflow.Sleep("soak", time.Second),
		workflow.Client("approve", "decide").
			Bind("approved", workflow.FromClient("true to ship")).
			Bind("reason", workflow.FromClient("why")).
			AcceptsWebhook(),
		workflow.Server("promote", "ship").When(approved),
		workflow.Server("rollback", "ship").Unless(approved),
	))
	srv, err := b.Build(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	transport, err := srv.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, transport, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cs.Close()

	res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "release"})
	if err != nil {
		log.Fatal(err)
	}
	doc, err := handoff.FromPromptResult(res)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first:", doc.PauseReason[:len("sleeping until")])
	// The sleep ends on the engine's scheduler; the handoff, read again
	// (prompts/get with the task id), then asks for the approval.
	for i := 0; i < 1000 && len(doc.ClientSteps()) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
		res, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "release", Meta: mcp.Meta{mcptask.MetaTaskID: doc.TaskID}})
		if err != nil {
			log.Fatal(err)
		}
		if doc, err = handoff.FromPromptResult(res); err != nil {
			log.Fatal(err)
		}
	}
	for _, s := range doc.CompletedSteps {
		fmt.Println("done:", s.Name)
	}
	fmt.Println("next:", doc.ClientSteps()[0].Name)

	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "decide",
		Arguments: map[string]any{"approved": false, "reason": "error rate up", mcptask.ArgTaskID: doc.TaskID}})
	if err != nil {
		log.Fatal(err)
	}
	res, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "release", Meta: mcp.Meta{mcptask.MetaTaskID: doc.TaskID}})
	if err != nil {
		log.Fatal(err)
	}
	if doc, err = handoff.FromPromptResult(res); err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", doc.Status)
	fmt.Println("ran:", doc.CompletedSteps[len(doc.CompletedSteps)-1].Name)
	fmt.Println("skipped:", doc.SkippedSteps[0].Name, "-", doc.SkippedSteps[0].Reason)
	// Output:
	// first: sleeping until
	// done: lint
	// done: unit
	// done: soak
	// next: approve
	// status: completed
	// ran: rollback
	// skipped: promote - its condition did not hold: output "approve" at approved is true
}

// Forking a finished task from a step: the steps before it keep their
// outputs, the rest run again with the edited argument.
func ExampleBridge_Fork() {
	ctx := context.Background()
	b := builder.New("example", "1.0.0").WithStore(memory.New(nil)).WithoutEnv().WithWorkflowOptions(workflow.Options{PromptWait: -1})
	builder.Tool(b, &mcp.Tool{Name: "check"}, func(ctx context.Context, _ *mcp.CallToolRequest, in checkIn) (*mcp.CallToolResult, checkIn, error) {
		return nil, in, nil
	}, nil)
	b.TaskWorkflow(workflow.New("two", "two checks").Arg("suite", "which suite", true).Step(
		workflow.Server("first", "check").Bind("suite", workflow.Const("lint")),
		workflow.Server("second", "check").Bind("suite", workflow.PromptArg("suite")),
	))
	srv, err := b.Build(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	transport, err := srv.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, transport, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "two", Arguments: map[string]string{"suite": "unit"}})
	if err != nil {
		log.Fatal(err)
	}
	doc, err := handoff.FromPromptResult(res)
	if err != nil {
		log.Fatal(err)
	}

	fork, err := srv.Bridge.Fork(ctx, doc.TaskID, &workflow.ForkOptions{From: "second", Arguments: map[string]string{"suite": "integration"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("forked at:", fork.Labels[workflow.LabelForkedAt])
	done, err := srv.Router.Await(ctx, fork.ID, func(t *store.Task) bool { return t.Status.Terminal() })
	if err != nil {
		log.Fatal(err)
	}
	fdoc, err := handoff.FromResultJSON(done.Result)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", fdoc.Status)
	fmt.Println("second:", string(fdoc.CompletedSteps[1].Result))
	orig, err := srv.Router.Task(ctx, doc.TaskID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("forks of the original:", len(workflow.Forks(orig)))
	// Output:
	// forked at: second
	// status: completed
	// second: {"suite":"integration"}
	// forks of the original: 1
}
