package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/workflow"
)

// 24. What scaling out costs the database: the statements and round trips
// a bench server on PostgreSQL sends per task round trip, per plain call,
// per workflow step, per durable sleep and per queue place, read from the
// store's own counters (a tracer on every connection: store.Stats'
// Statements and RoundTrips), one client at a time, with the server's
// background (lease renewals, the replica registry, the sweeper) measured
// idle and subtracted. The same operations on bbolt count its commits.

// costSleep is the durable sleep of the workflow cost_sleep.
const costSleep = 20 * time.Millisecond

// addCostWorkflows adds row 24's workflows: one quick server step, two,
// two around a durable sleep, and one on a queue (a place taken and
// freed). Each step is durable before the next starts (the default).
func addCostWorkflows(b *builder.Builder) {
	step := func(i int) *workflow.Step {
		return workflow.Server(fmt.Sprintf("s%d", i), "step1").Bind("n", workflow.Const(i))
	}
	b.TaskWorkflow(workflow.New("cost_steps1", "one server step").Step(step(1)))
	b.TaskWorkflow(workflow.New("cost_steps2", "two server steps").Step(step(1)).Step(step(2)))
	b.TaskWorkflow(workflow.New("cost_sleep", "two server steps around a durable sleep").Step(step(1)).Step(workflow.Sleep("nap", costSleep)).Step(step(2)))
	b.TaskWorkflow(workflow.New("cost_queued", "one server step on a queue").Step(
		step(1).OnQueue(&workflow.Queue{Name: "cost", PerKey: 10}, workflow.QueueKey(workflow.Const("k")))))
}

// dbCount is what the store sent (or committed) over some work.
type dbCount struct {
	statements, roundTrips, commits float64
}

func (a dbCount) minus(b dbCount) dbCount {
	return dbCount{a.statements - b.statements, a.roundTrips - b.roundTrips, a.commits - b.commits}
}

func (a dbCount) per(n float64) dbCount {
	return dbCount{a.statements / n, a.roundTrips / n, a.commits / n}
}

// countOf reads the counters of srv's store.
func countOf(srv *proc) (dbCount, error) {
	st := srv.storeStats()
	if st == nil {
		return dbCount{}, errors.New("the server reports no store counters")
	}
	return dbCount{float64(st.Statements), float64(st.RoundTrips), float64(st.Commits)}, nil
}

// counter measures what operations cost one server's store, net of its
// background.
type counter struct {
	srv        *proc
	background dbCount // per second, idle
}

// newCounter measures srv's background over idle.
func newCounter(srv *proc, idle time.Duration) (*counter, error) {
	a, err := countOf(srv)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	time.Sleep(idle)
	b, err := countOf(srv)
	if err != nil {
		return nil, err
	}
	return &counter{srv: srv, background: b.minus(a).per(time.Since(t0).Seconds())}, nil
}

// measure runs f n times and returns the store's count per run.
func (c *counter) measure(n int, f func() error) (dbCount, error) {
	a, err := countOf(c.srv)
	if err != nil {
		return dbCount{}, err
	}
	t0 := time.Now()
	for range n {
		if err := f(); err != nil {
			return dbCount{}, err
		}
	}
	secs := time.Since(t0).Seconds()
	b, err := countOf(c.srv)
	if err != nil {
		return dbCount{}, err
	}
	bg := c.background.per(1 / secs) // background over the window
	return b.minus(a).minus(bg).per(float64(n)), nil
}

// runWorkflow starts workflow name with prompts/get and waits for its
// task's end with tasks/result.
func runWorkflow(ctx context.Context, s *session, name string) error {
	raw, err := s.call(ctx, "prompts/get", map[string]any{"name": name})
	if err != nil {
		return err
	}
	var res struct {
		Meta mcp.Meta `json:"_meta"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return err
	}
	id := relatedTask(res.Meta)
	if id == "" {
		return fmt.Errorf("%s: no task in the prompt result %s", name, raw)
	}
	_, err = s.call(ctx, "tasks/result", map[string]any{"taskId": id})
	return err
}

// dbCosts is what row 24 measured on one store.
type dbCosts struct {
	task, plain, step, workflow, sleep, queue dbCount
}

// measureDBCosts runs row 24's operations on srv, n times each.
func measureDBCosts(srv *proc, n int) (dbCosts, error) {
	var out dbCosts
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, err := dial(ctx, newHTTPClient(1), srv.url)
	if err != nil {
		return out, err
	}
	wf := func(name string) func() error { return func() error { return runWorkflow(ctx, s, name) } }
	// Warm up every path (statements prepared on the connections).
	for _, f := range []func() error{func() error { return opTask(ctx, s) }, func() error { return opPlain(ctx, s) },
		wf("cost_steps1"), wf("cost_steps2"), wf("wf10_once"), wf("cost_sleep"), wf("cost_queued")} {
		for range 5 {
			if err := f(); err != nil {
				return out, fmt.Errorf("warm-up: %w", err)
			}
		}
	}
	c, err := newCounter(srv, 2*time.Second)
	if err != nil {
		return out, err
	}
	var one, two, ten, sleep, queued dbCount
	for _, m := range []struct {
		into *dbCount
		n    int
		f    func() error
	}{
		{&out.task, 4 * n, func() error { return opTask(ctx, s) }},
		{&out.plain, 4 * n, func() error { return opPlain(ctx, s) }},
		{&one, n, wf("cost_steps1")},
		{&two, n, wf("cost_steps2")},
		{&ten, n / 2, wf("wf10_once")},
		{&sleep, n, wf("cost_sleep")},
		{&queued, n, wf("cost_queued")},
	} {
		if *m.into, err = c.measure(max(m.n, 1), m.f); err != nil {
			return out, err
		}
	}
	out.step = ten.minus(one).per(9)
	out.workflow = one.minus(out.step)
	out.sleep = sleep.minus(two)
	out.queue = queued.minus(one)
	fmt.Fprintf(os.Stderr, "    %s: background %.1f statements/s; workflows of 1, 2 and 10 steps: %.1f, %.1f, %.1f statements\n",
		srv.name, c.background.statements, one.statements, two.statements, ten.statements)
	return out, nil
}

// dbCostRows is row 24.
func dbCostRows(o options, tmp string, rep *report) error {
	pg, stop, err := startPostgres("cost")
	if err != nil {
		return err
	}
	defer stop()
	pgSrv, err := startOurs("postgres", pg.URL("cost"))
	if err != nil {
		return err
	}
	defer pgSrv.stop()
	pgSrv.name = "taskbridge (PostgreSQL)"
	bolt, err := startOurs("bbolt", tmp+"/dbcost.db")
	if err != nil {
		return err
	}
	defer bolt.stop()
	bolt.name = "taskbridge (bbolt)"
	n := 50 * o.rounds
	onPG, err := measureDBCosts(pgSrv, n)
	if err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	onBolt, err := measureDBCosts(bolt, n)
	if err != nil {
		return fmt.Errorf("bbolt: %w", err)
	}
	for _, m := range []struct {
		what     string
		pg, bolt dbCount
	}{
		{"task round trip (tools/call with task + tasks/result; the tool instant)", onPG.task, onBolt.task},
		{"plain tools/call (host mode: a quick tool's pending task is never stored)", onPG.plain, onBolt.plain},
		{"workflow step (a quick server step, durable before the next; from workflows of 10 and 1 steps)", onPG.step, onBolt.step},
		{"workflow task beside its steps (prompts/get to tasks/result, one step's cost taken off)", onPG.workflow, onBolt.workflow},
		{fmt.Sprintf("durable sleep (%s, between two steps, against the same two steps)", costSleep), onPG.sleep, onBolt.sleep},
		{"queue place (a one-step workflow on a queue with room, against the same unqueued)", onPG.queue, onBolt.queue},
	} {
		rep.add(row{"24", "PostgreSQL statements / round trips per " + m.what + ", 1 client, net of the server's idle background",
			fmt.Sprintf("%.1f / %.1f (%.2f commits)", m.pg.statements, m.pg.roundTrips, m.pg.commits),
			fmt.Sprintf("bbolt: %.2f commits", m.bolt.commits), "-", "-", "-"})
	}
	return nil
}
