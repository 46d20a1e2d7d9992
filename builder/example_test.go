package builder_test

import (
	"context"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

type shout struct {
	Text string `json:"text"`
}

// A server with one tool and a task-aware workflow whose second step the
// client performs. Getting the prompt creates a task, runs the server step
// and hands off the rest.
func Example() {
	ctx := context.Background()
	b := builder.New("example", "1.0.0").WithStore(memory.New(nil)).WithoutEnv()
	builder.Tool(b, &mcp.Tool{Name: "upper", Description: "Upper-cases text"},
		func(ctx context.Context, _ *mcp.CallToolRequest, in shout) (*mcp.CallToolResult, shout, error) {
			return nil, shout{Text: fmt.Sprintf("%s!", in.Text)}, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	b.TaskWorkflow(workflow.New("shout_twice", "Shout, then let the client shout back").
		Arg("text", "what to shout", true).
		Step(
			workflow.Server("first", "upper").Bind("text", workflow.PromptArg("text")),
			workflow.Client("second", "upper").Bind("text", workflow.StepOutput("first", "text")),
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
	res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "shout_twice", Arguments: map[string]string{"text": "hello"}})
	if err != nil {
		log.Fatal(err)
	}
	doc, err := handoff.FromPromptResult(res)
	if err != nil {
		log.Fatal(err)
	}
	next := doc.ClientSteps()[0]
	fmt.Println("status:", doc.Status)
	fmt.Println("done:", doc.CompletedSteps[0].Name, string(doc.CompletedSteps[0].Result))
	fmt.Println("client step:", next.Name, "->", next.Tool, string(next.Arguments["text"]))
	// Output:
	// status: working
	// done: first {"text":"hello!"}
	// client step: second -> upper "hello!"
}
