package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

type echoIn struct {
	Text string `json:"text"`
}

type workIn struct {
	Ms float64 `json:"ms"`
}

type stepIn struct {
	N int `json:"n"`
}

type stepOut struct {
	N int `json:"n"`
}

// benchBuilder is the server under test: the same trivial tools the peer
// serves, plus ten trivial steps and a 10-step workflow over them.
func benchBuilder() *builder.Builder {
	b := builder.New("taskbridge-bench", "1").WithoutEnv()
	builder.Tool(b, &mcp.Tool{Name: "echo"}, func(ctx context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	builder.Tool(b, &mcp.Tool{Name: "work"}, work, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	// hold is work declared Retryable: a replica that takes over the task
	// of a dead one runs it again (bench row 10's takeover). work stays
	// not Retryable so that the other rows measure what they always did.
	builder.Tool(b, &mcp.Tool{Name: "hold"}, work, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional, Retryable: true})
	// wf10's steps are pure and declared Retryable, so with the server's
	// ProgressInterval (opt-in, set in serve) quick ones share progress
	// writes; wf10_once's are the same steps not Retryable: each is
	// durable before the next starts, as every step is by default.
	wf := workflow.New("wf10", "ten trivial server steps")
	wfOnce := workflow.New("wf10_once", "ten trivial server steps, each written on its own")
	wfPlain := workflow.New("wf10_plain", "ten trivial server steps, no task")
	for i := 1; i <= 10; i++ {
		name := fmt.Sprintf("step%d", i)
		builder.Tool(b, &mcp.Tool{Name: name}, func(ctx context.Context, _ *mcp.CallToolRequest, in stepIn) (*mcp.CallToolResult, stepOut, error) {
			return nil, stepOut{N: in.N + 1}, nil
		}, nil)
		for _, w := range []*workflow.Definition{wf, wfOnce, wfPlain} {
			s := workflow.Server(name, name)
			if w != wfOnce {
				s.WithRetry()
			}
			if i == 1 {
				s.Bind("n", workflow.Const(0))
			} else {
				s.Bind("n", workflow.StepOutput(fmt.Sprintf("step%d", i-1), "n"))
			}
			w.Step(s)
		}
	}
	b.TaskWorkflow(wf).TaskWorkflow(wfOnce).PlainWorkflow(wfPlain)
	addCostWorkflows(b) // pgcost.go
	// Workflows that wait (row 17's memory per waiting workflow): one for
	// its client to call echo, one asleep for an hour.
	b.TaskWorkflow(workflow.New("await_client", "waits for its client").Step(workflow.Client("ask", "echo").Bind("text", workflow.Const("hi"))))
	b.TaskWorkflow(workflow.New("nap", "sleeps an hour").Step(workflow.Sleep("nap", time.Hour)))
	// Row 22's for-each: a 10 ms step (work) per item, at most 10 at once;
	// each10ms_quick's step is Retryable, so with the server's
	// ProgressInterval items ending close together share writes.
	for _, quick := range []bool{false, true} {
		name, step := "each10ms", workflow.Server("work", "work").Bind("ms", workflow.Const(forEachStepMs))
		if quick {
			name = "each10ms_quick"
			step.WithRetry()
		}
		b.TaskWorkflow(workflow.New(name, "a 10 ms server step per item, at most 10 at once").
			Arg("items", "the items, comma-separated", true).
			Step(workflow.ForEach("each", workflow.PromptArg("items"), step).Limit(forEachLimit)))
	}
	addEventTools(b) // events.go
	return b
}

// work sleeps in.Ms milliseconds (or until cancelled), then answers
// {"finishedAt": Unix milliseconds} so that a client can tell how long the
// result took to reach it.
func work(ctx context.Context, _ *mcp.CallToolRequest, in workIn) (*mcp.CallToolResult, any, error) {
	if in.Ms > 0 {
		select {
		case <-time.After(time.Duration(in.Ms * float64(time.Millisecond))):
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	finished := float64(time.Now().UnixNano()) / 1e6
	b, _ := json.Marshal(map[string]float64{"finishedAt": finished})
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil, nil
}

// benchConfig lifts the per-owner limits (the load generator's sessions are
// one owner here) so the engine is measured, not its admission control.
func benchConfig() taskrouter.Options {
	return taskrouter.Options{
		MaxConcurrent:         4096,
		MaxConcurrentPerOwner: 4096,
		MaxPendingPerOwner:    1 << 20,
		MaxTTL:                24 * time.Hour,
		// One owner for every session, so the scale test can pre-populate
		// tasks the HTTP clients may read.
		Owner: func(context.Context, mcp.Request) (string, error) { return taskrouter.LocalOwner, nil },
	}
}

// debugStats is what a bench server's /debug/bench answers: its heap and
// goroutines (after a collection with ?gc=1, so that HeapAlloc is the live
// heap), and its store's write counters when the store keeps them.
type debugStats struct {
	HeapAlloc   uint64       `json:"heapAlloc"`
	HeapObjects uint64       `json:"heapObjects"`
	StackInuse  uint64       `json:"stackInuse"`
	Goroutines  int          `json:"goroutines"`
	NumGC       uint32       `json:"numGC"`
	Store       *store.Stats `json:"store,omitempty"`
}

// handleDebug mounts /debug/bench and the net/http/pprof handlers
// (/debug/pprof/profile for a CPU profile of a load window) on mux; st
// may be nil (the floor has no store).
func handleDebug(mux *http.ServeMux, st store.Store) {
	mux.HandleFunc("/debug/bench", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("gc") != "" {
			runtime.GC()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		out := debugStats{HeapAlloc: ms.HeapAlloc, HeapObjects: ms.HeapObjects, StackInuse: ms.StackInuse,
			Goroutines: runtime.NumGoroutine(), NumGC: ms.NumGC}
		if sr, ok := st.(store.StatsReporter); ok {
			s := sr.Stats()
			out.Store = &s
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
}

// serve runs the bench server until SIGTERM:
// `bench serve -http ADDR -store bbolt|memory|postgres -db FILE|URL [-replica NAME] [-lease D]`.
// The builder reads no TASKBRIDGE_* variables (WithoutEnv), so the replica
// settings come as flags.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("http", "127.0.0.1:0", "listen address")
	storeKind := fs.String("store", "bbolt", "bbolt, memory or postgres")
	db := fs.String("db", "", "bbolt file, or a postgres:// URL with -store postgres")
	replica := fs.String("replica", "", "replica id, the name this process holds leases under (default: host-pid-random)")
	lease := fs.Duration("lease", 0, "lease duration on a shared store (default: taskrouter.DefaultLeaseDuration)")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this address")
	observe := fs.Bool("observe", false, "turn on Prometheus metrics (at /metrics) and OpenTelemetry tracing")
	instant := fs.Duration("instant-window", 0, "taskrouter.Options.InstantWindow (0: the default; negative: off)")
	hostDeadline := fs.Duration("host-deadline", 0, "taskrouter.Options.HostDeadline (0: the default; negative: off, plain calls run in the request as before host mode)")
	noFast := fs.Bool("no-fast-path", false, "taskrouter.Options.DisableFastPath: every request through go-sdk's dispatch")
	prefault := fs.Bool("prefault", false, "open the bbolt file with bboltstore.Options.Prefault")
	window := fs.Duration("commit-window", 0, "open the bbolt file with bboltstore.Options.CommitWindow")
	maxTasks := fs.Int("max-tasks", 0, "every running and pending limit of taskrouter.Options (0: the bench's, see benchConfig)")
	sweep := fs.Duration("sweep-interval", 0, "taskrouter.Options.SweepInterval (0: the default)")
	_ = fs.Parse(args)
	cfg := benchConfig()
	cfg.SweepInterval = *sweep
	cfg.ReplicaID, cfg.LeaseDuration, cfg.InstantWindow, cfg.HostDeadline = *replica, *lease, *instant, *hostDeadline
	cfg.DisableFastPath = *noFast
	if n := *maxTasks; n > 0 {
		cfg.MaxConcurrent, cfg.MaxConcurrentPerOwner = n, n
		cfg.MaxPending, cfg.MaxPendingPerOwner, cfg.MaxPendingPerSource = n, n, n
	}
	b := benchBuilder().WithRouterOptions(cfg).WithWorkflowOptions(workflow.Options{ProgressInterval: 20 * time.Millisecond})
	var metricsHandler http.Handler
	if *observe {
		var shutdown func()
		metricsHandler, shutdown = observed(b)
		defer shutdown()
	}
	switch *storeKind {
	case "memory":
		b.WithStore(memory.New(nil))
	case "bbolt":
		if *db == "" {
			return errors.New("serve: -db is required with -store bbolt")
		}
		if !*prefault {
			b.WithDB(*db).WithBboltOptions(bboltstore.Options{CommitWindow: *window})
			break
		}
		st, err := bboltstore.Open(*db, &bboltstore.Options{Prefault: true, CommitWindow: *window})
		if err != nil {
			return err
		}
		defer st.Close() // after srv.Close: defers run last-in first-out
		b.WithStore(st)
	case "postgres":
		if !builder.IsPostgresDSN(*db) {
			return errors.New("serve: -db must be a postgres:// URL with -store postgres")
		}
		b.WithDB(*db)
	default:
		return fmt.Errorf("serve: unknown store %q", *storeKind)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := b.Build(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.HTTPHandler(nil))
	handleDebug(mux, srv.Store)
	if metricsHandler != nil {
		mux.Handle("/metrics", metricsHandler)
	}
	if *pprofAddr != "" {
		go func() { _ = http.ListenAndServe(*pprofAddr, nil) }() // DefaultServeMux has pprof
	}
	hs := &http.Server{Handler: mux}
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	fmt.Printf("{\"port\": %d}\n", ln.Addr().(*net.TCPAddr).Port)
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
