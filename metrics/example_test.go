package metrics_test

import (
	"context"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"io"
	"log"
	"net/http/httptest"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/metrics"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

type in struct {
	Text string `json:"text"`
}

// Metrics observe the engine through builder.WithObserver and are served
// at /metrics.
func Example() {
	ctx := context.Background()
	m, err := metrics.New(nil)
	if err != nil {
		panic(err)
	}
	b := builder.New("demo", "1").WithStore(memory.New(nil)).WithoutEnv().WithObserver(m)
	builder.Tool(b, &mcp.Tool{Name: "echo"}, func(ctx context.Context, _ *mcp.CallToolRequest, x in) (*mcp.CallToolResult, in, error) {
		return nil, x, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	srv, err := b.Build(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	tr, _ := srv.Connect(ctx)
	c, err := client.Dial(ctx, tr, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CallToolAndWait(ctx, "echo", map[string]any{"text": "hi"}, nil); err != nil {
		log.Fatal(err)
	}

	web := httptest.NewServer(m.Handler()) // mux.Handle("/metrics", m.Handler())
	defer web.Close()
	resp, err := web.Client().Get(web.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "taskbridge_tasks_finished_total") {
			fmt.Println(line)
		}
	}
	// Output:
	// taskbridge_tasks_finished_total{kind="tool",name="echo",status="completed"} 1
}
