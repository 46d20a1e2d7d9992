package taskrouter_test

import (
	"context"
	"fmt"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

type buildIn struct {
	Packages []string `json:"packages"`
}

// A handler that reports as it works: progress, log lines and partial
// output become events of its task, which a client reads as they happen
// (here with CallOptions.OnEvent, which reads tasks/stream).
func ExampleProgress() {
	ctx := context.Background()
	router, err := taskrouter.NewRouter(memory.New(nil), nil)
	if err != nil {
		log.Fatal(err)
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "builds", Version: "1.0.0"}, nil)
	if err := router.Install(server); err != nil {
		log.Fatal(err)
	}
	taskrouter.AddTool(router, &mcp.Tool{Name: "build"},
		func(ctx context.Context, _ *mcp.CallToolRequest, in buildIn) (*mcp.CallToolResult, any, error) {
			log := taskrouter.Logger(ctx)
			for i, pkg := range in.Packages {
				_ = taskrouter.Progress(ctx, float64(i+1), float64(len(in.Packages)), "compiled "+pkg)
				log.Info("compiled", "package", pkg)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "built"}}}, nil, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	if err := router.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer router.Close()
	clientEnd, serverEnd := mcp.NewInMemoryTransports()
	if _, err := server.Connect(ctx, router.Transport(serverEnd), nil); err != nil {
		log.Fatal(err)
	}
	c, err := client.Dial(ctx, clientEnd, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	var logs []string
	_, err = c.CallToolAndWait(ctx, "build", map[string]any{"packages": []string{"net", "http"}}, &client.CallOptions{
		OnEvent: func(ev client.TaskEvent) {
			if ev.Type == mcptask.EventLog { // progress reports close together are coalesced; log lines never
				logs = append(logs, ev.Line())
			}
		}})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range logs {
		fmt.Println(l)
	}
	// Output:
	// info: compiled {"package":"net"}
	// info: compiled {"package":"http"}
}
