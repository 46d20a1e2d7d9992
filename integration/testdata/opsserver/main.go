// Command opsserver serves the workflows of the operations tests
// (integration/ops_test.go): a real process the tests run as replicas on
// one PostgreSQL store, SIGKILL and restart.
//
//	opsserver -http ADDR -db DSN [-deploy 400ms] [-schedule "@every 2s"]
//
// train (repo): deploy (tool deploy_service, on the queue "deploys", one
// at a time per repo) -> announce. deploy_service takes -deploy and
// answers with its repo and the start and end of its run. soak: hold (a
// tool that takes -deploy) -> announce. tick (scheduled_at): announce,
// started by the schedule "tick" when -schedule is set. The replica id
// and leases come from the environment (TASKBRIDGE_REPLICA_ID, ...).
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
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

type deployIn struct {
	Repo string `json:"repo"`
}

// Deployed is deploy_service's result: which repo, where, from when to
// when.
type Deployed struct {
	Repo    string    `json:"repo"`
	Replica string    `json:"replica"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
}

type noteIn struct {
	Text string `json:"text,omitempty"`
}

func main() {
	addr := flag.String("http", "127.0.0.1:0", "listen address")
	db := flag.String("db", "", "store")
	deploy := flag.Duration("deploy", 400*time.Millisecond, "how long deploy_service and hold take")
	schedule := flag.String("schedule", "", "the cron expression of the schedule tick (none when empty)")
	flag.Parse()
	replica := os.Getenv("TASKBRIDGE_REPLICA_ID")

	b := builder.New("opsserver", "1").WithDB(*db).WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	wait := func(ctx context.Context) error {
		select {
		case <-time.After(*deploy):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	builder.Tool(b, &mcp.Tool{Name: "deploy_service"}, func(ctx context.Context, _ *mcp.CallToolRequest, in deployIn) (*mcp.CallToolResult, Deployed, error) {
		d := Deployed{Repo: in.Repo, Replica: replica, Started: time.Now().UTC()}
		fmt.Fprintf(os.Stderr, "DEPLOY START %s %s\n", in.Repo, d.Started.Format(time.RFC3339Nano))
		if err := wait(ctx); err != nil {
			return nil, Deployed{}, err
		}
		d.Ended = time.Now().UTC()
		return nil, d, nil
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "hold"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ noteIn) (*mcp.CallToolResult, any, error) {
		fmt.Fprintf(os.Stderr, "HOLD START %s\n", time.Now().UTC().Format(time.RFC3339Nano))
		return nil, map[string]any{"held": true}, wait(ctx)
	}, nil)
	builder.Tool(b, &mcp.Tool{Name: "announce"}, func(ctx context.Context, _ *mcp.CallToolRequest, in noteIn) (*mcp.CallToolResult, any, error) {
		fmt.Fprintf(os.Stderr, "ANNOUNCE %s\n", in.Text)
		return nil, map[string]any{"announced": in.Text, "by": replica}, nil
	}, nil)

	deploys := &workflow.Queue{Name: "deploys", PerKey: 1, SharedKeys: true} // a repository everyone deploys
	b.TaskWorkflow(workflow.New("train", "deploy a repo, one deploy per repo at a time").Arg("repo", "the repo", true).Step(
		workflow.Server("deploy", "deploy_service").Bind("repo", workflow.PromptArg("repo")).
			OnQueue(deploys, workflow.QueueKey(workflow.PromptArg("repo"))),
		workflow.Server("announce", "announce").Bind("text", workflow.PromptArg("repo")),
	))
	b.TaskWorkflow(workflow.New("soak", "hold, then announce").Step(
		workflow.Server("hold", "hold"),
		workflow.Server("announce", "announce").Bind("text", workflow.Const("soaked")),
	))
	b.TaskWorkflow(workflow.New("tick", "announce the time it was scheduled for").Arg(workflow.DefaultTimeArgument, "the firing's time", true).Step(
		workflow.Server("announce", "announce").Bind("text", workflow.PromptArg(workflow.DefaultTimeArgument)),
	))
	if *schedule != "" {
		b.Schedule(workflow.Schedule{Name: "tick", Workflow: "tick", Cron: *schedule, Missed: taskrouter.MissedBackfill, Backfill: 100})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv, err := b.Build(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.HTTPHandler(nil))
	hs := &http.Server{Handler: mux}
	go func() { _ = hs.Serve(ln) }()
	<-ctx.Done()
	_ = hs.Close()
}
