package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"log"
	"net/http/httptest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/examples/conformance/conftools"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// Calling a tool as a task and following it to its result. The server is
// an in-process taskbridge server with the conformance tools.
func ExampleClient_CallTool() {
	ctx := context.Background()
	srv, router, err := conftools.NewServer(memory.New(nil), &taskrouter.Options{PollInterval: 20 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	if err := router.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer router.Close()
	clientEnd, serverEnd := mcp.NewInMemoryTransports()
	session, err := srv.Connect(ctx, router.Transport(serverEnd), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	c, err := client.Dial(ctx, clientEnd, &client.Options{Dialect: mcptask.Core})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println("dialect:", c.Dialect())

	for ev, err := range c.CallTool(ctx, "slow_compute", map[string]any{"seconds": 0.1, "label": "demo"}, &client.CallOptions{TTL: time.Minute}) {
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		switch ev.Kind {
		case client.EventCreated:
			fmt.Println("created:", ev.Task.Status, "ttl", *ev.Task.TTL)
		case client.EventStatus:
			fmt.Println("status:", ev.Task.Status)
		case client.EventResult:
			fmt.Println("result:", ev.Result.Content[0].(*mcp.TextContent).Text)
		}
	}
	// Output:
	// dialect: core
	// created: working ttl 1m0s
	// status: completed
	// result: Computation "demo" completed after 0.1 seconds. Result: 42.
}

// Answering a task's elicitation with an InputHandler, over Streamable
// HTTP. Dial asks server/discover first; taskbridge advertises the tasks
// extension, so the client speaks the 2026-07-28 dialect.
func ExampleHTTPTransport() {
	ctx := context.Background()
	_, router, err := conftools.NewServer(memory.New(nil), &taskrouter.Options{PollInterval: 20 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	if err := router.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer router.Close()
	hs := httptest.NewServer(router.HTTPHandler(nil)) // on 127.0.0.1
	defer hs.Close()

	confirm := func(ctx context.Context, taskID string, req client.InputRequest) (json.RawMessage, error) {
		p, err := req.Elicitation()
		if err != nil {
			return nil, err
		}
		fmt.Println("asked:", p.Message)
		return json.Marshal(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}})
	}
	c, err := client.Dial(ctx, client.HTTPTransport(hs.URL, nil), &client.Options{InputHandler: confirm})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println("dialect:", c.Dialect())

	res, err := c.CallToolAndWait(ctx, "confirm_delete", map[string]any{"filename": "notes.txt"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("result:", res.Content[0].(*mcp.TextContent).Text)
	// Output:
	// dialect: extension
	// asked: Delete 'notes.txt'?
	// result: deleted 'notes.txt'
}

type draftIn struct {
	Topic string `json:"topic"`
}
type draftOut struct {
	Draft string `json:"draft"`
}
type reviewIn struct {
	Draft    string `json:"draft"`
	Reviewer string `json:"reviewer"`
}
type reviewOut struct {
	Approved string `json:"approved"`
}
type publishIn struct {
	Text string `json:"text"`
}

// Starting a task-aware workflow prompt and following its handoff: the
// server drafts, the client reviews (Fill supplies the reviewer's name),
// the server publishes.
func ExampleClient_Follow() {
	ctx := context.Background()
	b := builder.New("docs", "1").WithStore(memory.New(nil)).WithoutEnv()
	builder.Tool(b, &mcp.Tool{Name: "draft"}, func(ctx context.Context, _ *mcp.CallToolRequest, in draftIn) (*mcp.CallToolResult, draftOut, error) {
		return nil, draftOut{Draft: "All about " + in.Topic}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "review"}, func(ctx context.Context, _ *mcp.CallToolRequest, in reviewIn) (*mcp.CallToolResult, reviewOut, error) {
		return nil, reviewOut{Approved: in.Draft + " (reviewed by " + in.Reviewer + ")"}, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "publish"}, func(ctx context.Context, _ *mcp.CallToolRequest, in publishIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "published: " + in.Text}}}, nil, nil
	}, nil)
	b.TaskWorkflow(workflow.New("write-up", "draft, review, publish").
		Arg("topic", "what to write about", true).
		Step(
			workflow.Server("draft", "draft").Bind("topic", workflow.PromptArg("topic")),
			workflow.Client("review", "review").Bind("draft", workflow.StepOutput("draft", "draft")).
				Bind("reviewer", workflow.FromClient("your name")),
			workflow.Server("publish", "publish").Bind("text", workflow.StepOutput("review", "approved")),
		))
	srv, err := b.Build(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	tr, err := srv.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Dial(ctx, tr, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, doc, err := c.GetPrompt(ctx, "write-up", map[string]string{"topic": "tasks"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("handoff:", doc.Status, "- next client step:", doc.ClientSteps()[0].Name)

	fill := func(ctx context.Context, step handoff.RemainingStep, placeholders []string) (map[string]any, error) {
		fmt.Println("fill", step.Name, placeholders)
		return map[string]any{"reviewer": "ada"}, nil
	}
	raw, err := c.Follow(ctx, doc, &client.FollowOptions{Fill: fill})
	if err != nil {
		log.Fatal(err)
	}
	var final mcp.GetPromptResult
	if err := json.Unmarshal(raw, &final); err != nil {
		log.Fatal(err)
	}
	done, err := handoff.FromPromptResult(&final)
	if err != nil {
		log.Fatal(err)
	}
	last := done.CompletedSteps[len(done.CompletedSteps)-1]
	fmt.Println("workflow:", done.Status)
	fmt.Println(last.Name+":", string(last.Result))
	// Output:
	// handoff: working - next client step: review
	// fill review [reviewer]
	// workflow: completed
	// publish: "published: All about tasks (reviewed by ada)"
}
