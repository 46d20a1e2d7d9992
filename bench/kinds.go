package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// The step kinds' rows run in process on a bbolt store: what they measure
// is the engine's scheduling (steps started together, wake-ups on time),
// not the transport.

type benchStepIn struct {
	Ms int `json:"ms"`
}

// kindsServer builds a server with a tool that sleeps ms milliseconds,
// the workflows wfs, and a client session on it.
func kindsServer(ctx context.Context, db string, wfs ...*workflow.Definition) (*builder.Server, *mcp.ClientSession, error) {
	b := builder.New("bench-kinds", "1").WithDB(db).WithoutEnv().WithWorkflowOptions(workflow.Options{PromptWait: -1}).
		// Row 14 keeps 10,000 workflows asleep at once, all started by one
		// session: above the default pending limits (issue 31).
		WithRouterOptions(taskrouter.Options{MaxTTL: 2 * time.Hour, MaxPending: 1 << 20, MaxPendingPerOwner: 1 << 20, MaxPendingPerSource: 1 << 20})
	addWorkTool(b)
	for _, w := range wfs {
		b.TaskWorkflow(w)
	}
	return buildAndConnect(ctx, b)
}

// addWorkTool adds the tool work, which sleeps ms milliseconds.
func addWorkTool(b *builder.Builder) {
	builder.Tool(b, &mcp.Tool{Name: "work"}, func(ctx context.Context, _ *mcp.CallToolRequest, in benchStepIn) (*mcp.CallToolResult, any, error) {
		select {
		case <-time.After(time.Duration(in.Ms) * time.Millisecond):
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	}, nil)
}

// buildAndConnect builds b and connects a client session (that declares
// the tasks extension) to it in process.
func buildAndConnect(ctx context.Context, b *builder.Builder) (*builder.Server, *mcp.ClientSession, error) {
	srv, err := b.Build(ctx)
	if err != nil {
		return nil, nil, err
	}
	tr, err := srv.Connect(ctx)
	if err != nil {
		srv.Close()
		return nil, nil, err
	}
	caps := &mcp.ClientCapabilities{}
	caps.AddExtension(mcptask.ExtensionID, nil)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{Capabilities: caps}).Connect(ctx, tr, nil)
	if err != nil {
		srv.Close()
		return nil, nil, err
	}
	return srv, cs, nil
}

// parallelGroup is row 13: three equal server steps in a parallel group
// against the same three in sequence, each workflow run from prompts/get
// to its completion (the prompt waits until the workflow rests).
func parallelGroup(o options, tmp string, rep *report) error {
	const stepMs = 100
	work := func(name string) *workflow.Step {
		return workflow.Server(name, "work").Bind("ms", workflow.Const(stepMs))
	}
	seq := workflow.New("seq3", "three steps in a row").Step(work("a"), work("b"), work("c"))
	par := workflow.New("par3", "three steps together").Step(workflow.Parallel("g", work("a"), work("b"), work("c")))
	ctx, cancel := ctxTimeout()
	defer cancel()
	srv, cs, err := kindsServer(ctx, filepath.Join(tmp, "kinds.db"), seq, par)
	if err != nil {
		return err
	}
	defer srv.Close()
	defer cs.Close()
	run := func(name string) (time.Duration, error) {
		t0 := time.Now()
		res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name})
		if err != nil {
			return 0, err
		}
		if st := statusOfPrompt(res); st != "completed" {
			return 0, fmt.Errorf("workflow %s ended %s", name, st)
		}
		return time.Since(t0), nil
	}
	n := 10 * o.rounds
	var ds, dp []time.Duration
	for i := 0; i < n; i++ { // interleaved, so both see the same machine
		d, err := run("seq3")
		if err != nil {
			return err
		}
		ds = append(ds, d)
		if d, err = run("par3"); err != nil {
			return err
		}
		dp = append(dp, d)
	}
	s, p := medianDur(ds), medianDur(dp)
	ratio := float64(p) / float64(s)
	rep.add(row{n: "13", what: fmt.Sprintf("workflow of 3 equal %d ms server steps, prompts/get to completed (bbolt)", stepMs),
		ours: "parallel group " + ms(p), other: "in sequence " + ms(s), ratio: fmt.Sprintf("%.2f×", ratio),
		goal: "≤ 0.5×", met: met(ratio <= 0.5)})
	return nil
}

// statusOfPrompt reads the status of a workflow prompt's handoff.
func statusOfPrompt(res *mcp.GetPromptResult) string {
	raw, _ := json.Marshal(res.Meta[mcptask.MetaHandoff])
	var doc struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(raw, &doc)
	return doc.Status
}

// sleepLateness is row 14: n workflows sleep at once (each a durable
// sleep until its own time, spread over a window), and the engine's
// scheduler ends every sleep; lateness is when the sleep's step ended
// minus when it was due, from each task's recorded progress.
func sleepLateness(o options, tmp string, rep *report) error {
	n, window := 10_000, 20*time.Second
	if o.scale < 1_000_000 { // -quick
		n, window = 2_000, 10*time.Second
	}
	w := workflow.New("nap", "one durable sleep").Arg("at", "when the sleep ends (Unix seconds)", true).
		Step(workflow.SleepUntil("nap", workflow.PromptArg("at")))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, cs, err := kindsServer(ctx, filepath.Join(tmp, "sleep.db"), w)
	if err != nil {
		return err
	}
	defer srv.Close()
	defer cs.Close()

	// Start every workflow first (their sleeps begin some time after the
	// last start), then let the wakes come. The lead leaves room for a
	// machine shared with other work (10k starts took 33 s on a busy one).
	lead := time.Minute
	if n < 10_000 {
		lead = 20 * time.Second
	}
	first := time.Now().Add(lead)
	ids := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				at := first.Add(window * time.Duration(i) / time.Duration(n))
				res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "nap",
					Arguments: map[string]string{"at": strconv.FormatFloat(float64(at.UnixNano())/1e9, 'f', 6, 64)}})
				if err != nil {
					errs <- err
					return
				}
				related, _ := res.Meta[mcptask.MetaRelatedTask].(map[string]any)
				ids[i], _ = related["taskId"].(string)
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("starting the sleeping workflows: %w", err)
	default:
	}
	if late := time.Since(first); late > 0 {
		return fmt.Errorf("starting %d workflows took longer than the %s lead (%s late): raise the lead", n, lead, late)
	}
	// Wait for every task to complete.
	deadline := first.Add(window + time.Minute)
	for _, id := range ids {
		for {
			t, err := srv.Store.Get(ctx, id)
			if err != nil {
				return err
			}
			if t.Status == mcptask.StatusCompleted {
				break
			}
			if t.Status.Terminal() || time.Now().After(deadline) {
				return fmt.Errorf("task %s is %s: %s", id, t.Status, t.StatusMessage)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var lates []time.Duration
	for _, id := range ids {
		t, err := srv.Store.Get(ctx, id)
		if err != nil {
			return err
		}
		var p workflow.Progress
		if err := json.Unmarshal(t.Variables[workflow.VarProgress], &p); err != nil {
			return err
		}
		sp := p.Steps[0]
		if sp.Until == nil || len(sp.History) == 0 {
			return fmt.Errorf("task %s recorded no sleep", id)
		}
		a := sp.History[len(sp.History)-1]
		ended := a.At.Add(time.Duration(a.DurationMs) * time.Millisecond)
		lates = append(lates, max(0, ended.Sub(*sp.Until)))
	}
	sort.Slice(lates, func(i, j int) bool { return lates[i] < lates[j] })
	p50, p99 := lates[len(lates)/2], lates[len(lates)*99/100]
	rep.add(row{n: "14", what: fmt.Sprintf("durable sleeps: %d workflows asleep at once, waking over %s (bbolt); lateness = step ended − due", n, window),
		ours: fmt.Sprintf("p50 %s, p99 %s", ms(p50), ms(p99)), other: "-", ratio: "-", goal: "p99 < 1 s", met: met(p99 < time.Second)})
	return nil
}
