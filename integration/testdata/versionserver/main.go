// Command versionserver serves variants of one workflow for the version
// tests (integration/versions_test.go): a real process the tests SIGKILL
// and restart with a changed definition.
//
//	versionserver -http ADDR -db FILE -variants v1,appended
//
// abc: a (server) -> b (client) -> c (server); "appended" adds d (server)
// after c. c sleeps -c-sleep. flaky: f (server, fails its first run,
// retried after -backoff) -> g (client). nap (-nap v1, v2 or v1,v2): a
// (server), a durable sleep of -nap-sleep, c (server); v2 adds d
// (server) after c (the rolling deploy tests: two processes on one
// PostgreSQL database, built from two definitions). SIGTERM (or SIGINT)
// stops it gracefully: the server closes, handing running steps back
// (the deploy tests); -max-interruptions sets
// workflow.Options.MaxInterruptions.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/workflow"
)

type in struct {
	X any `json:"x,omitempty"`
}

type out struct {
	By string `json:"by"`
}

func main() {
	addr := flag.String("http", "127.0.0.1:0", "listen address")
	db := flag.String("db", "", "store")
	variants := flag.String("variants", "v1", "workflow variants to serve, oldest first: v1, appended")
	cSleep := flag.Duration("c-sleep", 0, "how long step c takes")
	backoff := flag.Duration("backoff", 2*time.Second, "flaky step's retry backoff")
	maxInterruptions := flag.Int("max-interruptions", 0, "workflow.Options.MaxInterruptions (0: the default)")
	nap := flag.String("nap", "", "versions of the nap workflow to serve, oldest first: v1, v2")
	napSleep := flag.Duration("nap-sleep", 1500*time.Millisecond, "nap's durable sleep")
	flag.Parse()

	var flakyRuns atomic.Int32
	b := builder.New("versionserver", "1").WithDB(*db).WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))).
		WithWorkflowOptions(workflow.Options{MaxInterruptions: *maxInterruptions})
	tool := func(name string, f func(ctx context.Context) error) {
		builder.Tool(b, &mcp.Tool{Name: name}, func(ctx context.Context, _ *mcp.CallToolRequest, _ in) (*mcp.CallToolResult, out, error) {
			if f != nil {
				if err := f(ctx); err != nil {
					return nil, out{}, err
				}
			}
			fmt.Fprintf(os.Stderr, "RAN %s at %s\n", name, time.Now().UTC().Format(time.RFC3339Nano))
			return nil, out{By: name}, nil
		}, nil)
	}
	tool("ta", nil)
	tool("tb", nil)
	tool("td", nil)
	tool("tc", func(ctx context.Context) error {
		select {
		case <-time.After(*cSleep):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	tool("tf", func(ctx context.Context) error {
		if flakyRuns.Add(1) == 1 && os.Getenv("FLAKY_OK") == "" {
			return fmt.Errorf("transient failure")
		}
		return nil
	})
	for _, v := range strings.Split(*variants, ",") {
		w := workflow.New("abc", "three steps").Step(
			workflow.Server("a", "ta"),
			workflow.Client("b", "tb").Bind("x", workflow.FromClient("x")),
			workflow.Server("c", "tc"),
		)
		if v == "appended" {
			w.Step(workflow.Server("d", "td"))
		}
		b.TaskWorkflow(w)
	}
	for _, v := range strings.Split(*nap, ",") {
		if v == "" {
			continue
		}
		w := workflow.New("nap", "a step, a nap, a step").Step(
			workflow.Server("a", "ta"),
			workflow.Sleep("nap", *napSleep),
			workflow.Server("c", "tc"),
		)
		if v == "v2" {
			w.Step(workflow.Server("d", "td"))
		}
		b.TaskWorkflow(w)
	}
	b.TaskWorkflow(workflow.New("flaky", "a retried step").Step(
		workflow.Server("f", "tf").WithRetryPolicy(workflow.RetryPolicy{MaxAttempts: 3, Backoff: *backoff}),
		workflow.Client("g", "tb"),
	))
	srv, err := b.Build(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "versionserver:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "versionserver:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.HTTPHandler(nil))
	hs := &http.Server{Handler: mux}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { _ = hs.Serve(ln) }()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "versionserver: closing:", err)
	}
	fmt.Fprintln(os.Stderr, "STOPPED gracefully")
}
