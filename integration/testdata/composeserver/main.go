// Command composeserver serves workflows made of issue 29's step kinds for
// the integration tests (integration/compose_*_test.go): a real process
// the tests drive with the TypeScript SDK client and SIGKILL mid-flight.
//
//	composeserver -http ADDR -db FILE|DSN -journal FILE [-slow D] [-kill-at POINT] [-kill-in TOOL:ARG]
//
// Workflows:
//
//   - reviews (files): a for-each whose body is a client step, review_file
//     per file (each performed with "TASK#review[i]"), then merge_reviews.
//   - quiz: a loop whose body is a client step, answer, until it passes
//     (score 7 or more), at most 3 runs.
//   - fanout (items): a for-each of build_item, at most 2 at once (an item
//     whose name starts with "slow" takes -slow), then report_items.
//   - train (repo): build, then the child workflow notes (draft, the
//     client's review_notes, publish), then ship.
//   - release (services): deploy_service per service in sequence, each
//     undone by rollback_service, then check, which always fails: every
//     deploy is rolled back, last first.
//
// Every tool appends a line to the journal file before it returns
// ("tool arg key=IDEMPOTENCY-KEY start|end"), so a test counts the calls
// that a SIGKILL cut short too. -kill-at makes the process SIGKILL itself
// at a lineage point of a parent and its child (the AfterLineage test
// hook, testhooks.Workflow: child-created, child-ended, end-recorded), the first time
// it is reached; -kill-in makes it SIGKILL itself inside a tool, for one
// argument ("rollback_service:web"), after the journal's start line.
package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/taskbridge/taskbridge/internal/testhooks"
	"github.com/taskbridge/taskbridge/mcptask"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// journal appends one line per tool event to a file (O_APPEND: a line
// written before a SIGKILL is in the file after it).
type journal struct {
	mu sync.Mutex
	f  *os.File
}

func (j *journal) add(ctx context.Context, tool, arg, what string) {
	info, _ := workflow.StepFrom(ctx)
	j.mu.Lock()
	defer j.mu.Unlock()
	fmt.Fprintf(j.f, "%s %s key=%s %s\n", tool, arg, info.IdempotencyKey, what)
}

// die SIGKILLs the process, as a crash would end it.
func die(why string) {
	fmt.Fprintln(os.Stderr, "KILLING myself:", why)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

func main() {
	addr := flag.String("http", "127.0.0.1:0", "listen address")
	db := flag.String("db", "", "store: a bbolt file or a postgres:// DSN")
	journalPath := flag.String("journal", "", "the file every tool call is journalled to")
	slow := flag.Duration("slow", time.Hour, `how long build_item takes for an item named "slow..."`)
	killAt := flag.String("kill-at", "", "SIGKILL the process at this lineage point (child-created, child-ended, end-recorded)")
	killIn := flag.String("kill-in", "", `SIGKILL the process inside this tool call, "TOOL:ARG"`)
	flag.Parse()

	f, err := os.OpenFile(*journalPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "composeserver:", err)
		os.Exit(1)
	}
	j := &journal{f: f}
	// tool registers a journalled tool: it logs its start, dies there when
	// -kill-in names it, runs do, and logs its end.
	tool := func(b *builder.Builder, name string, arg func(args map[string]any) string, do func(ctx context.Context, args map[string]any) (any, error)) {
		builder.Tool(b, &mcp.Tool{Name: name}, func(ctx context.Context, _ *mcp.CallToolRequest, args map[string]any) (*mcp.CallToolResult, any, error) {
			a := arg(args)
			j.add(ctx, name, a, "start")
			if *killIn == name+":"+a {
				die("in " + *killIn)
			}
			out, err := do(ctx, args)
			if err != nil {
				j.add(ctx, name, a, "failed")
				return nil, nil, err
			}
			j.add(ctx, name, a, "end")
			return nil, out, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	}
	field := func(k string) func(args map[string]any) string {
		return func(args map[string]any) string { return fmt.Sprint(args[k]) }
	}
	none := func(map[string]any) string { return "-" }
	var once sync.Once
	var opts workflow.Options
	testhooks.SetWorkflow(&opts, testhooks.Workflow{AfterLineage: func(point testhooks.LineagePoint, parent, child string) {
		if string(point) == *killAt {
			once.Do(func() { die(fmt.Sprintf("at %s (parent %s, child %s)", point, parent, child)) })
		}
	}})
	b := builder.New("composeserver", "1").WithDB(*db).WithWorkflowOptions(opts).
		WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))

	tool(b, "review_file", field("file"), func(ctx context.Context, args map[string]any) (any, error) {
		return map[string]any{"file": args["file"], "verdict": args["verdict"]}, nil
	})
	tool(b, "merge_reviews", none, func(ctx context.Context, args map[string]any) (any, error) {
		reviews, _ := args["reviews"].([]any)
		return map[string]any{"merged": len(reviews)}, nil
	})
	tool(b, "answer", field("score"), func(ctx context.Context, args map[string]any) (any, error) {
		score, _ := args["score"].(float64)
		return map[string]any{"score": score, "passed": score >= 7}, nil
	})
	tool(b, "build_item", field("item"), func(ctx context.Context, args map[string]any) (any, error) {
		d := 20 * time.Millisecond
		if strings.HasPrefix(fmt.Sprint(args["item"]), "slow") {
			d = *slow
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return map[string]any{"built": args["item"]}, nil
	})
	tool(b, "report_items", none, func(ctx context.Context, args map[string]any) (any, error) {
		builds, _ := args["builds"].([]any)
		return map[string]any{"reported": len(builds)}, nil
	})
	for _, name := range []string{"build", "ship", "publish"} {
		tool(b, name, none, func(ctx context.Context, args map[string]any) (any, error) {
			return map[string]any{"did": name}, nil
		})
	}
	tool(b, "draft", field("repo"), func(ctx context.Context, args map[string]any) (any, error) {
		return map[string]any{"draft": fmt.Sprintf("notes for %v", args["repo"])}, nil
	})
	tool(b, "review_notes", field("approved"), func(ctx context.Context, args map[string]any) (any, error) {
		return map[string]any{"approved": args["approved"]}, nil
	})
	tool(b, "deploy_service", field("service"), func(ctx context.Context, args map[string]any) (any, error) {
		return map[string]any{"deployed": args["service"]}, nil
	})
	tool(b, "rollback_service", field("service"), func(ctx context.Context, args map[string]any) (any, error) {
		return map[string]any{"rolledBack": args["service"]}, nil
	})
	tool(b, "check", none, func(ctx context.Context, args map[string]any) (any, error) {
		return nil, fmt.Errorf("smoke test failed")
	})

	b.TaskWorkflow(workflow.New("reviews", "Review every file").Arg("files", "files to review, comma-separated", true).Step(
		workflow.ForEach("review", workflow.PromptArg("files"),
			workflow.Client("review_file", "review_file").Bind("file", workflow.Item()).
				Bind("verdict", workflow.FromClient("ok, or the problem you found"))),
		workflow.Server("merge", "merge_reviews").Bind("reviews", workflow.StepOutput("review")),
	).AsTool())
	b.TaskWorkflow(workflow.New("quiz", "Answer until you pass").Step(
		workflow.Repeat("ask", workflow.Client("answer", "answer").Bind("score", workflow.FromClient("your score, 0 to 10"))).
			Until(workflow.Truthy(workflow.StepOutput("answer", "passed"))).AtMost(3),
	).AsTool())
	b.TaskWorkflow(workflow.New("fanout", "Build every item, two at once").Arg("items", "items, comma-separated", true).Step(
		workflow.ForEach("build", workflow.PromptArg("items"),
			workflow.Server("build_item", "build_item").Bind("item", workflow.Item())).Limit(2),
		workflow.Server("report", "report_items").Bind("builds", workflow.StepOutput("build")),
	).AsTool())
	b.TaskWorkflow(workflow.New("notes", "Draft, review, publish").Arg("repo", "the repository", true).Step(
		workflow.Server("draft", "draft").Bind("repo", workflow.PromptArg("repo")),
		workflow.Client("review", "review_notes").Bind("draft", workflow.StepOutput("draft", "draft")).
			Bind("approved", workflow.FromClient("true to approve")),
		workflow.Server("publish", "publish"),
	).AsTool())
	b.TaskWorkflow(workflow.New("train", "Build, notes by a child workflow, ship").Arg("repo", "the repository", true).Step(
		workflow.Server("build", "build"),
		workflow.Child("notes", "notes").Bind("repo", workflow.PromptArg("repo")),
		workflow.Server("ship", "ship").Bind("notes", workflow.StepOutput("notes")),
	).AsTool())
	b.TaskWorkflow(workflow.New("release", "Deploy in sequence, check, roll back").Arg("services", "services, comma-separated", true).Step(
		workflow.ForEach("deploy", workflow.PromptArg("services"),
			workflow.Server("deploy_service", "deploy_service").Bind("service", workflow.Item()).
				Undo(workflow.Server("rollback_service", "rollback_service").Bind("service", workflow.Item()))).InSequence(),
		workflow.Server("check", "check").FailsWorkflow(),
	).AsTool())

	srv, err := b.Build(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "composeserver:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "composeserver:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.HTTPHandler(nil))
	fmt.Fprintln(os.Stderr, "serving", ln.Addr())
	_ = (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}
