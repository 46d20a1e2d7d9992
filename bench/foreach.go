package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
)

// Row 22's shape (issue 29): 100 items of a 10 ms step, 10 at a time.
const (
	forEachItems  = 100
	forEachStepMs = 10
	forEachLimit  = 10
)

// forEachCost is row 22: a for-each of 100 items of a 10 ms server step,
// at most 10 at once (workflow each10ms, prompts/get until it completed:
// a task on bbolt, every item durable), against the same 100 calls of the
// tool made directly, 10 at a time (tools/call, no task), on the same
// server; and the for-each again with its step Retryable (each10ms_quick:
// with the server's ProgressInterval, items ending close together share
// a write). The two sides run in turn, so that the machine's moods hit both
// alike; each side's wall time is the median over its runs, and its CPU
// per item is the server process's CPU time over all its runs, per item.
func forEachCost(o options, ours *proc, rep *report) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := dial(ctx, newHTTPClient(forEachLimit), ours.url)
	if err != nil {
		return err
	}
	names := make([]string, forEachItems)
	for i := range names {
		names[i] = fmt.Sprintf("item%d", i+1)
	}
	items := strings.Join(names, ",")
	forEach := func(name string) error {
		raw, err := s.call(ctx, "prompts/get", map[string]any{"name": name, "arguments": map[string]any{"items": items}})
		if err != nil {
			return err
		}
		var res struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		}
		var doc struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return err
		}
		if err := json.Unmarshal(res.Meta[mcptask.MetaHandoff], &doc); err != nil || doc.Status != "completed" {
			return fmt.Errorf("the for-each ended %q (not completed within the prompt's wait)", doc.Status)
		}
		return nil
	}
	direct := func() error {
		var wg sync.WaitGroup
		errs := make(chan error, forEachLimit)
		next := make(chan int, forEachItems)
		for i := range forEachItems {
			next <- i
		}
		close(next)
		for range forEachLimit {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range next {
					if _, err := s.call(ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"ms": forEachStepMs}}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	// timed runs f, adding its wall time to ds and the server's CPU time
	// to cpu.
	timed := func(f func() error, ds *[]time.Duration, cpu *time.Duration) error {
		c0, t0 := ours.cpu(), time.Now()
		if err := f(); err != nil {
			return err
		}
		*ds = append(*ds, time.Since(t0))
		*cpu += ours.cpu() - c0
		return nil
	}
	each := func() error { return forEach("each10ms") }
	quick := func() error { return forEach("each10ms_quick") }
	var de, dq, dd []time.Duration
	var ce, cq, cd time.Duration
	for range 2 { // warm up every side
		for _, f := range []func() error{each, quick, direct} {
			if err := f(); err != nil {
				return err
			}
		}
	}
	n := 5 * o.rounds
	for range n {
		if err := timed(each, &de, &ce); err != nil {
			return err
		}
		if err := timed(quick, &dq, &cq); err != nil {
			return err
		}
		if err := timed(direct, &dd, &cd); err != nil {
			return err
		}
	}
	e, q, d := medianDur(de), medianDur(dq), medianDur(dd)
	perItem := func(cpu time.Duration) string {
		return fmt.Sprintf("%.0f µs", float64(cpu)/float64(n*forEachItems)/float64(time.Microsecond))
	}
	ratio := float64(e) / float64(d)
	rep.add(row{n: "22", what: fmt.Sprintf("for-each of %d items of a %d ms server step, at most %d at once (prompts/get to completed, bbolt) vs %d direct tools/call, %d at a time: wall time per %d items",
		forEachItems, forEachStepMs, forEachLimit, forEachItems, forEachLimit, forEachItems),
		ours: ms(e), other: ms(d), ratio: fmt.Sprintf("%.2f×", ratio), goal: "≤ 1.5×", met: met(ratio <= 1.5)})
	rep.add(row{n: "22", what: "the same, the server's CPU per item", ours: perItem(ce), other: perItem(cd),
		ratio: fmt.Sprintf("%.2f×", float64(ce)/float64(cd)), goal: "-", met: "-"})
	rep.add(row{n: "22", what: "the same with the step Retryable and ProgressInterval=20ms (opt-in: items ending close together share writes): wall time / CPU per item",
		ours: ms(q) + " / " + perItem(cq), other: ms(d) + " / " + perItem(cd), ratio: fmt.Sprintf("%.2f× / %.2f×", float64(q)/float64(d), float64(cq)/float64(cd)), goal: "-", met: "-"})
	return nil
}
