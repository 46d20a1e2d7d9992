package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Reading a task's events (tasks/stream): its status changes and what its
// handler logged, each numbered; a reader that stopped resumes after the
// last number it had.
func ExampleClient_StreamEvents() {
	ctx := context.Background()
	b := builder.New("stream-example", "1").WithStore(memory.New(nil)).WithoutEnv()
	builder.Tool(b, &mcp.Tool{Name: "deploy"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		taskrouter.Logger(ctx).Info("pushed the image")
		taskrouter.Logger(ctx).Info("switched the traffic")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deployed"}}}, nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	srv, err := b.Build(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	t, err := srv.Connect(ctx)
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Dial(ctx, t, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CallToolAndWait(ctx, "deploy", nil, nil); err != nil {
		log.Fatal(err)
	}
	id := c.Tracked()[0].ID

	for ev, err := range c.StreamEvents(ctx, id, &client.StreamOptions{After: 1}) { // after the first event
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.Seq, ev.Line())
	}
	// Output:
	// 2 info: pushed the image
	// 3 info: switched the traffic
	// 4 status completed
}
