package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/pgserver"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// Row 21: what a queue costs a start. n workflows of one short server
// step start from 32 clients at once, and the row times the first start
// to the last completion: once with the step on a queue with a per-key
// limit of 10 (over 4 keys: at most 40 run at once, the others wait in
// the store and are woken when a place frees), once without. In process,
// on bbolt and on PostgreSQL.

const (
	queueStarts  = 1000
	queueClients = 32
	queueKeys    = 4
	queueStepMs  = 5
)

// queueOverhead is row 21.
func queueOverhead(o options, tmp string, rep *report) error {
	n := queueStarts
	if o.duration < 2*time.Second { // -quick
		n = 300
	}
	pg, err := pgserver.Start(pgserver.Options{})
	if err != nil {
		return fmt.Errorf("starting PostgreSQL: %w", err)
	}
	defer func() {
		if serr := pg.Stop(); serr != nil {
			fmt.Fprintln(os.Stderr, "  stopping PostgreSQL:", serr)
		}
	}()
	ctx, cancel := ctxTimeout()
	defer cancel()
	if err := pg.CreateDatabase(ctx, "queues"); err != nil {
		return err
	}
	for _, st := range []struct{ name, db string }{{"bbolt", filepath.Join(tmp, "queues.db")}, {"PostgreSQL", pg.URL("queues")}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		srv, cs, err := queueServer(ctx, st.db)
		if err != nil {
			return err
		}
		var plain, queued []time.Duration
		for range o.rounds { // interleaved, so both see the same machine
			d, err := startAll(ctx, srv, cs, "plain", n)
			if err != nil {
				srv.Close()
				return err
			}
			plain = append(plain, d)
			if d, err = startAll(ctx, srv, cs, "queued", n); err != nil {
				srv.Close()
				return err
			}
			queued = append(queued, d)
		}
		cs.Close()
		srv.Close()
		p, q := medianDur(plain), medianDur(queued)
		perStart := (q - p) / time.Duration(n)
		ratio := float64(q) / float64(p)
		rep.add(row{n: "21", what: fmt.Sprintf("%d workflow starts (one %d ms server step), %d clients, first start to last completion, %s: through a queue with a per-key limit of 10 (%d keys) vs unqueued",
			n, queueStepMs, queueClients, st.name, queueKeys),
			ours: fmt.Sprintf("queued %s (%s more per start)", ms(q), ms(perStart)), other: "unqueued " + ms(p),
			ratio: fmt.Sprintf("%.2f×", ratio), goal: "≤ 3×", met: met(ratio <= 3)})
	}
	return nil
}

// queueServer is a server with the tool work, the workflows plain and
// queued (work on a queue keyed by the argument key), and a session.
func queueServer(ctx context.Context, db string) (*builder.Server, *mcp.ClientSession, error) {
	b := builder.New("bench-queues", "1").WithDB(db).WithoutEnv().WithWorkflowOptions(workflow.Options{PromptWait: time.Millisecond}).
		WithRouterOptions(taskrouter.Options{MaxTTL: 2 * time.Hour})
	addWorkTool(b)
	step := func() *workflow.Step { return workflow.Server("work", "work").Bind("ms", workflow.Const(queueStepMs)) }
	b.TaskWorkflow(workflow.New("plain", "one step").Arg("key", "k", true).Step(step()))
	b.TaskWorkflow(workflow.New("queued", "one step on a queue").Arg("key", "k", true).Step(
		step().OnQueue(&workflow.Queue{Name: "bench", PerKey: 10}, workflow.QueueKey(workflow.PromptArg("key")))))
	return buildAndConnect(ctx, b)
}

// startAll starts n tasks of workflow name from queueClients goroutines
// and returns the time from the first start to the last completion.
func startAll(ctx context.Context, srv *builder.Server, cs *mcp.ClientSession, name string, n int) (time.Duration, error) {
	ids := make(chan string, n)
	errs := make(chan error, queueClients)
	var next sync.Mutex
	i := 0
	t0 := time.Now()
	var wg sync.WaitGroup
	for range queueClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				k := i
				i++
				next.Unlock()
				if k >= n {
					return
				}
				res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: map[string]string{"key": fmt.Sprint(k % queueKeys)}})
				if err != nil {
					errs <- err
					return
				}
				ids <- relatedTask(res.Meta)
			}
		}()
	}
	wg.Wait()
	close(ids)
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	for id := range ids {
		t, err := srv.Router.Await(ctx, id, func(t *store.Task) bool { return t.Status.Terminal() })
		if err != nil {
			return 0, err
		}
		if t.Status != mcptask.StatusCompleted {
			return 0, fmt.Errorf("task %s of %s ended %s: %s", id, name, t.Status, t.StatusMessage)
		}
	}
	return time.Since(t0), nil
}

// relatedTask is the task id a result's _meta names.
func relatedTask(meta mcp.Meta) string {
	raw, _ := json.Marshal(meta[mcptask.MetaRelatedTask])
	var rt mcptask.RelatedTask
	_ = json.Unmarshal(raw, &rt)
	return rt.TaskID
}
