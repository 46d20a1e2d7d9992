package tracing_test

import (
	"context"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/tracing"
)

type textIn struct {
	Text string `json:"text"`
}

// A Tracer installed with builder.WithObserver: every task becomes a trace
// whose id is the task id. Use an OTLP or stdout exporter in place of the
// in-memory one.
func Example() {
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.WithSyncer(exp)) // sdktrace.WithBatcher(otlpExporter) in production
	defer tp.Shutdown(ctx)

	b := builder.New("demo", "1").WithStore(memory.New(nil)).WithoutEnv().
		WithObserver(tracing.New(tp, nil))
	builder.Tool(b, &mcp.Tool{Name: "echo"}, func(ctx context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, textIn, error) {
		return nil, in, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	srv, err := b.Build(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	tr, _ := srv.Connect(ctx)
	c, err := client.Dial(ctx, tr, &client.Options{Dialect: mcptask.Core})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	var id string
	for ev, err := range c.CallTool(ctx, "echo", map[string]any{"text": "hi"}, nil) {
		if err != nil {
			log.Fatal(err)
		}
		if ev.Kind == client.EventCreated {
			id = ev.Task.ID
		}
	}
	_ = srv.Close() // handler spans are emitted as handlers return; Close waits for them
	for _, s := range exp.GetSpans() {
		fmt.Println(s.Name, s.SpanContext.TraceID().String() == id)
	}
	// Unordered output:
	// taskbridge.handler echo true
	// taskbridge.task echo true
}
