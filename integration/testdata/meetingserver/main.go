// Command meetingserver serves the workflows of the attempt-budget
// meetings (integration/attempts_test.go): a real process the tests stop
// with SIGTERM and SIGKILL, on bbolt or PostgreSQL, that writes every
// attempt of its tools to an fsync'd ledger.
//
//	meetingserver -http ADDR -db SPEC -ledger FILE [-hold 1h] [-lease 2s]
//
// charge: one step, not retryable, whose tool waits -hold (or until its
// context ends) and then fails. slow: one step with Timeout -timeout and
// MaxAttempts 2, whose tool never answers before its context ends. Each
// run of a tool appends "start <tool> <task> <attempt>" to the ledger, and
// "fail <tool> <task> <attempt>" when it fails by itself. SIGTERM stops it
// gracefully (the server hands running steps back).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

type in struct{}

type out struct {
	OK bool `json:"ok"`
}

// ledger appends lines to a file, each synced before the tool goes on.
type ledger struct {
	mu sync.Mutex
	f  *os.File
}

func (l *ledger) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.f, format+"\n", args...)
	_ = l.f.Sync()
}

func main() {
	addr := flag.String("http", "127.0.0.1:0", "listen address")
	db := flag.String("db", "", "store")
	path := flag.String("ledger", "", "ledger file")
	hold := flag.Duration("hold", time.Hour, "how long charge runs before it fails")
	timeout := flag.Duration("timeout", 1500*time.Millisecond, "slow's Timeout")
	lease := flag.Duration("lease", 2*time.Second, "the task lease (a shared store)")
	flag.Parse()
	f, err := os.OpenFile(*path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "meetingserver:", err)
		os.Exit(1)
	}
	led := &ledger{f: f}
	b := builder.New("meetingserver", "1").WithDB(*db).WithoutEnv().
		WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))).
		WithRouterOptions(taskrouter.Options{LeaseDuration: *lease, PollInterval: 50 * time.Millisecond, ChangePollInterval: 100 * time.Millisecond}).
		WithWorkflowOptions(workflow.Options{PromptWait: 100 * time.Millisecond})
	tool := func(name string, run func(ctx context.Context) error) {
		builder.Tool(b, &mcp.Tool{Name: name}, func(ctx context.Context, _ *mcp.CallToolRequest, _ in) (*mcp.CallToolResult, out, error) {
			info, _ := workflow.StepFrom(ctx)
			led.add("start %s %s %d", name, info.TaskID, info.Attempt)
			if err := run(ctx); err != nil {
				if ctx.Err() == nil {
					led.add("fail %s %s %d", name, info.TaskID, info.Attempt)
				}
				return nil, out{}, err
			}
			return nil, out{OK: true}, nil
		}, nil)
	}
	tool("charge", func(ctx context.Context) error {
		select {
		case <-time.After(*hold):
			return errors.New("card declined")
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	tool("slow", func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	b.TaskWorkflow(workflow.New("charge", "charge a card once").Step(workflow.Server("charge", "charge").FailsWorkflow()))
	b.TaskWorkflow(workflow.New("slow", "a step that times out").Step(
		workflow.Server("slow", "slow").Timeout(*timeout).WithRetryPolicy(workflow.RetryPolicy{MaxAttempts: 2, Backoff: 50 * time.Millisecond}).FailsWorkflow()))
	srv, err := b.Build(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "meetingserver:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "meetingserver:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.HTTPHandler(nil))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { _ = hs.Serve(ln) }()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "meetingserver: closing:", err)
	}
	fmt.Fprintln(os.Stderr, "STOPPED gracefully")
}
