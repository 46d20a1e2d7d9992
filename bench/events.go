package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/pgserver"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// Task event logs (issue 30): what a workflow step's events cost, and how
// a task's events reach many readers, and readers on another replica.

type ticksIn struct {
	N       int `json:"n"`
	EveryMs int `json:"everyMs"`
	AfterMs int `json:"afterMs"`
}

// addEventTools adds the bench server's reporting tool: ticks, a task
// that writes n log lines, everyMs apart, after afterMs, for readers to
// follow.
func addEventTools(b *builder.Builder) {
	builder.Tool(b, &mcp.Tool{Name: "ticks"}, ticks, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
}

// ticks logs in.N lines, in.EveryMs apart, after in.AfterMs.
func ticks(ctx context.Context, _ *mcp.CallToolRequest, in ticksIn) (*mcp.CallToolResult, any, error) {
	log := taskrouter.Logger(ctx)
	next := time.Now().Add(time.Duration(in.AfterMs) * time.Millisecond)
	for i := 1; i <= in.N; i++ {
		select {
		case <-time.After(time.Until(next)):
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		log.Info("tick", "n", i)
		next = next.Add(time.Duration(in.EveryMs) * time.Millisecond)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ticked"}}}, nil, nil
}

// tenSteps is a workflow of ten trivial server steps (tools prefix1 ..
// prefix10), each durable before the next; a "loud" prefix makes each
// step's tool report a progress and a log line.
func tenSteps(name, prefix string) *workflow.Definition {
	return workflow.New(name, "ten trivial server steps ("+prefix+")").Step(stepsOf(prefix)...)
}

// stepsOf returns the ten steps over tools prefix1 .. prefix10.
func stepsOf(prefix string) []*workflow.Step {
	var out []*workflow.Step
	for i := 1; i <= 10; i++ {
		s := workflow.Server(fmt.Sprintf("step%d", i), fmt.Sprintf("%s%d", prefix, i))
		if i == 1 {
			s.Bind("n", workflow.Const(0))
		} else {
			s.Bind("n", workflow.StepOutput(fmt.Sprintf("step%d", i-1), "n"))
		}
		out = append(out, s)
	}
	return out
}

// addStepTools registers the tools of stepsOf(prefix): a loud one
// reports a progress and a log line.
func addStepTools(b *builder.Builder, prefix string, loud bool) {
	for i := 1; i <= 10; i++ {
		builder.Tool(b, &mcp.Tool{Name: fmt.Sprintf("%s%d", prefix, i)}, func(ctx context.Context, _ *mcp.CallToolRequest, in stepIn) (*mcp.CallToolResult, stepOut, error) {
			if loud {
				_ = taskrouter.Progress(ctx, float64(in.N+1), 10, "a step")
				taskrouter.Logger(ctx).Info("a step", "n", in.N)
			}
			return nil, stepOut{N: in.N + 1}, nil
		}, nil)
	}
}

// withoutEvents is a store that drops every event the engine writes: the
// engine as it would run without event logs, to compare with.
type withoutEvents struct{ store.Store }

func (s withoutEvents) Create(ctx context.Context, t *store.Task) (*store.Task, error) {
	t.Events = nil
	return s.Store.Create(ctx, t)
}

func (s withoutEvents) Update(ctx context.Context, id string, u store.Update) (*store.Task, error) {
	if u.AppendOnly() {
		return s.Store.Get(ctx, id)
	}
	u.Events = nil
	return s.Store.Update(ctx, id, u)
}

// 15. Event logs: a ten-step server workflow (every step durable before
// the next), in-process, per step: as it runs (each step's write appends
// its step_started and step_ended events; a loud one also a progress and
// a log line its tool reports) vs the same engine on a store that drops
// every event; on bbolt, and on the memory store, where no fsync hides
// the work. Each pair runs in turn, and the ratio is the median of the
// pairs' ratios, so that the machine's moods hit both sides alike.
func eventCost(o options, tmp string, rep *report) error {
	ctx, cancel := ctxTimeout()
	defer cancel()
	type side struct {
		name string
		cs   *mcp.ClientSession
		wf   string
		ds   []time.Duration
	}
	open := func(name string, drop, loud, mem bool) (*side, func(), error) {
		var st store.Store = memory.New(nil)
		if !mem {
			bs, err := bboltstore.Open(filepath.Join(tmp, "events-"+name+".db"), nil)
			if err != nil {
				return nil, nil, err
			}
			st = bs
		}
		s := st
		if drop {
			s = withoutEvents{st}
		}
		b := builder.New("events-bench", "1").WithoutEnv().WithStore(s)
		addStepTools(b, "s", loud)
		b.TaskWorkflow(tenSteps("wf", "s"))
		srv, err := b.Build(ctx)
		if err != nil {
			_ = st.Close()
			return nil, nil, err
		}
		t, err := srv.Connect(ctx)
		if err != nil {
			return nil, nil, err
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, t, nil)
		if err != nil {
			return nil, nil, err
		}
		return &side{name: name, cs: cs, wf: "wf"}, func() { _ = cs.Close(); _ = srv.Close(); _ = st.Close() }, nil
	}
	var sides []*side
	for _, v := range []struct {
		name            string
		drop, loud, mem bool
	}{{"with", false, false, false}, {"without", true, false, false}, {"loud", false, true, false}, {"loud-without", true, true, false},
		{"mem", false, false, true}, {"mem-without", true, false, true}} {
		s, closeIt, err := open(v.name, v.drop, v.loud, v.mem)
		if err != nil {
			return err
		}
		defer closeIt()
		sides = append(sides, s)
	}
	n := 60 * o.rounds
	for i := 0; i < n; i++ { // interleaved, so that the machine's moods hit every side
		for _, s := range sides {
			t0 := time.Now()
			res, err := s.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: s.wf})
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			if !strings.Contains(promptText(res), "completed") {
				return fmt.Errorf("%s: the workflow did not complete: %s", s.name, promptText(res))
			}
			s.ds = append(s.ds, time.Since(t0))
		}
	}
	per := func(s *side) time.Duration { return medianDur(s.ds[len(s.ds)/10:]) / 10 }
	ratio := func(a, b *side) float64 {
		var rs []float64
		for i := len(a.ds) / 10; i < len(a.ds); i++ {
			rs = append(rs, float64(a.ds[i])/float64(b.ds[i]))
		}
		return median(rs)
	}
	r := ratio(sides[0], sides[1])
	rep.add(row{"19", "workflow step on bbolt (durable before the next), per step: with its step_started/step_ended events vs the same engine on a store that drops them",
		ms(per(sides[0])), ms(per(sides[1])) + " (no events)", fmt.Sprintf("%.2f", r), "≤ 1.10", met(r <= 1.10)})
	r = ratio(sides[2], sides[3])
	rep.add(row{"19", "the same, each step's tool also reporting a progress and a log line (written with the step's end)",
		ms(per(sides[2])), ms(per(sides[3])) + " (no events)", fmt.Sprintf("%.2f", r), "≤ 1.15", met(r <= 1.15)})
	r = ratio(sides[4], sides[5])
	rep.add(row{"19", "the first row on the memory store (no fsync: the events' CPU and memory)",
		ms(per(sides[4])), ms(per(sides[5])) + " (no events)", fmt.Sprintf("%.2f", r), "≤ 1.25", met(r <= 1.25)})
	return nil
}

// promptText is a prompt result's text.
func promptText(res *mcp.GetPromptResult) string {
	var b strings.Builder
	for _, m := range res.Messages {
		if t, ok := m.Content.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// 16. Readers: 100 readers of one task's events (tasks/stream over
// Streamable HTTP, one connection each) vs 1, on a bbolt server process:
// delivery latency (from the line's log call to a reader's receipt, p50 and
// p99 over every reader and line) and the server's CPU time per event;
// then a reader on replica B of a task on replica A (PostgreSQL).
func readerFanOut(o options, tmp string, rep *report) error {
	const lines, everyMs = 40, 250 // apart by more than EventInterval: each line its own write
	ours, err := startOurs("bbolt", filepath.Join(tmp, "readers.db"))
	if err != nil {
		return err
	}
	defer ours.stop()
	one, err := followTicks(ours, ours, 1, lines, everyMs)
	if err != nil {
		return fmt.Errorf("1 reader: %w", err)
	}
	many, err := followTicks(ours, ours, 100, lines, everyMs)
	if err != nil {
		return fmt.Errorf("100 readers: %w", err)
	}
	rep.add(row{"20", fmt.Sprintf("100 readers of one task (tasks/stream, SSE), %d log lines %d ms apart: delivery p50 / p99 (vs 1 reader)", lines, everyMs),
		ms(many.p50) + " / " + ms(many.p99), ms(one.p50) + " / " + ms(one.p99) + " (1 reader)",
		fmt.Sprintf("%.2f (p50)", float64(many.p50)/float64(max(one.p50, time.Microsecond))), "p99 < 50 ms", met(many.p99 < 50*time.Millisecond)})
	rep.add(row{"20", "the server's CPU time per event: 100 readers vs 1",
		fmt.Sprintf("%.2f ms", many.cpuPerEvent), fmt.Sprintf("%.2f ms (1 reader)", one.cpuPerEvent),
		fmt.Sprintf("%.1f (%.2f per reader)", many.cpuPerEvent/max(one.cpuPerEvent, 0.001), many.cpuPerEvent/max(one.cpuPerEvent, 0.001)/100), "≤ 100 (the store read once per event for all)", met(many.cpuPerEvent <= 100*max(one.cpuPerEvent, 0.01))})

	pg, stop, err := startPostgres("events")
	if err != nil {
		return err
	}
	defer stop()
	var procs procSet
	defer procs.stopAll()
	a, err := procs.start("postgres", pg.URL("events"), "-replica", "a")
	if err != nil {
		return err
	}
	b, err := procs.start("postgres", pg.URL("events"), "-replica", "b")
	if err != nil {
		return err
	}
	cross, err := followTicks(a, b, 1, lines, everyMs)
	if err != nil {
		return fmt.Errorf("across replicas: %w", err)
	}
	local, err := followTicks(a, a, 1, lines, everyMs)
	if err != nil {
		return fmt.Errorf("on the writer: %w", err)
	}
	rep.add(row{"20", "a reader on replica B of a task on replica A (PostgreSQL: the append's NOTIFY, B's read): delivery p50 / p99 (vs reading on A)",
		ms(cross.p50) + " / " + ms(cross.p99), ms(local.p50) + " / " + ms(local.p99) + " (on A)",
		fmt.Sprintf("%.2f (p50)", float64(cross.p50)/float64(max(local.p50, time.Microsecond))), "p50 < 10 ms", met(cross.p50 < 10*time.Millisecond)})
	return nil
}

// startPostgres starts a durable PostgreSQL cluster (fsync on) with the
// databases named; stop stops it.
func startPostgres(dbs ...string) (pg *pgserver.Server, stop func(), err error) {
	pg, err = pgserver.Start(pgserver.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("starting PostgreSQL: %w", err)
	}
	stop = func() {
		if serr := pg.Stop(); serr != nil {
			fmt.Fprintln(os.Stderr, "  stopping PostgreSQL:", serr)
		}
	}
	ctx, cancel := ctxTimeout()
	defer cancel()
	for _, db := range dbs {
		if err := pg.CreateDatabase(ctx, db); err != nil {
			stop()
			return nil, nil, fmt.Errorf("creating database %s: %w", db, err)
		}
	}
	return pg, stop, nil
}

// fanOut is what followTicks measured.
type fanOut struct {
	p50, p99    time.Duration
	cpuPerEvent float64 // ms of the reading server's CPU per line written
}

// followTicks starts a ticks task on writer and has n readers follow it
// on reader (which may be the same process) from the start: every reader
// must get every line once, in order.
func followTicks(writer, reader *proc, n, lines, everyMs int) (fanOut, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := newHTTPClient(n + 2)
	defer client.CloseIdleConnections()
	s, err := dial(ctx, client, writer.url)
	if err != nil {
		return fanOut{}, err
	}
	raw, err := s.call(ctx, "tools/call", map[string]any{"name": "ticks", "arguments": map[string]any{"n": lines, "everyMs": everyMs, "afterMs": 1500}, "task": map[string]any{"ttl": 600000}})
	if err != nil {
		return fanOut{}, err
	}
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if err := json.Unmarshal(raw, &created); err != nil || created.Task.TaskID == "" {
		return fanOut{}, fmt.Errorf("no task in %s", raw)
	}
	id := created.Task.TaskID
	cpu0 := procCPU(reader.cmd.Process.Pid)
	var mu sync.Mutex
	var lat []time.Duration
	errs := make(chan error, n)
	for range n {
		go func() {
			got, err := readStream(ctx, client, reader.url, id)
			if err == nil && len(got) != lines {
				err = fmt.Errorf("a reader got %d lines of %d", len(got), lines)
			}
			mu.Lock()
			lat = append(lat, got...)
			mu.Unlock()
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			return fanOut{}, err
		}
	}
	cpu := procCPU(reader.cmd.Process.Pid) - cpu0
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return fanOut{p50: lat[len(lat)/2], p99: lat[len(lat)*99/100], cpuPerEvent: cpu.Seconds() * 1000 / float64(lines)}, nil
}

// readStream reads task id's events with tasks/stream until the task
// ended and returns how late each log line arrived (from its "at").
func readStream(ctx context.Context, client *http.Client, url, id string) ([]time.Duration, error) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": mcptask.MethodTasksStream, "params": extParams(map[string]any{"taskId": id})})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", extVersion)
	req.Header.Set("Mcp-Method", mcptask.MethodTasksStream)
	req.Header.Set("Mcp-Name", id)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []time.Duration
	var last uint64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		now := time.Now()
		var msg struct {
			Method string                  `json:"method"`
			Params mcptask.TaskEventParams `json:"params"`
			Error  *rpcError               `json:"error"`
			Result json.RawMessage         `json:"result"`
		}
		if err := json.Unmarshal([]byte(data), &msg); err != nil {
			return nil, err
		}
		switch {
		case msg.Error != nil:
			return nil, msg.Error
		case msg.Result != nil:
			return out, nil
		}
		if msg.Params.Seq != last+1 {
			return nil, fmt.Errorf("event %d after %d", msg.Params.Seq, last)
		}
		last = msg.Params.Seq
		if mcptask.EventTypeOf(msg.Params.Type) != mcptask.EventLog {
			continue
		}
		at, _ := msg.Params.Meta[mcptask.MetaEventAt].(string)
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return nil, fmt.Errorf("event without a time: %v", msg.Params.Meta)
		}
		out = append(out, now.Sub(t))
	}
	return nil, fmt.Errorf("the stream ended without a result: %v", sc.Err())
}
