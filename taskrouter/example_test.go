package taskrouter_test

import (
	"context"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

type reportIn struct {
	Topic string `json:"topic"`
}

// Installing the task engine on a go-sdk server: an ordinary typed tool,
// registered as task-optional, runs as a task when a client asks.
func Example() {
	ctx := context.Background()
	router, err := taskrouter.NewRouter(memory.New(nil), nil)
	if err != nil {
		log.Fatal(err)
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "reports", Version: "1.0.0"}, nil)
	if err := router.Install(server); err != nil {
		log.Fatal(err)
	}
	taskrouter.AddTool(router, &mcp.Tool{Name: "report", Description: "Writes a report"},
		func(ctx context.Context, _ *mcp.CallToolRequest, in reportIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "report on " + in.Topic}}}, nil, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional, Retryable: true})
	if err := router.Start(ctx); err != nil { // resolve tasks a previous process left running
		log.Fatal(err)
	}
	defer router.Close()

	// Serve one in-memory connection (use router.HTTPHandler for HTTP, or
	// router.Transport(&mcp.StdioTransport{}) for stdio).
	clientEnd, serverEnd := mcp.NewInMemoryTransports()
	if _, err := server.Connect(ctx, router.Transport(serverEnd), nil); err != nil {
		log.Fatal(err)
	}
	c, err := client.Dial(ctx, clientEnd, &client.Options{Dialect: mcptask.Core})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for ev, err := range c.CallTool(ctx, "report", map[string]any{"topic": "sales"}, nil) {
		if err != nil {
			log.Fatal(err)
		}
		switch ev.Kind {
		case client.EventCreated:
			// An instant handler's task is stored already ended (see
			// Config.InstantWindow); a slower one's starts out working.
			// Which one this is depends on the machine's load, so the
			// example prints neither.
			fmt.Println("created:", ev.Task.ID != "")
		case client.EventResult:
			fmt.Println("result:", ev.Result.Content[0].(*mcp.TextContent).Text)
		}
	}
	// Output:
	// created: true
	// result: report on sales
}
