package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// 25. A task's whole life on bbolt: the round trip creates it (row 15
// measures that), and when its ttl has passed the ttl sweeper deletes it,
// a second write every task costs. The load's usual ttl (ten minutes)
// keeps the sweeper out of every other window; here the tasks of one
// window of task round trips expire together after it, and the server's
// CPU time and the store's commits are read until it has deleted them
// all.
func lifetimeCost(o options, tmp string, rep *report) error {
	srv, err := startOurs("bbolt", filepath.Join(tmp, "lifetime.db"), "-sweep-interval=500ms")
	if err != nil {
		return err
	}
	defer srv.stop()
	srv.name = "taskbridge (bbolt)"
	// Every task expires after the window ends: its ttl is the window and
	// a margin, counted from its creation.
	margin := 2 * time.Second
	ttl := o.cpuDuration + margin
	r, err := load{op: "task", conc: 64, d: o.cpuDuration, ttl: int(ttl / time.Millisecond)}.on(srv)
	if err != nil {
		return err
	}
	if r.errs > 0 {
		return fmt.Errorf("task round trips: %d errors, first: %v", r.errs, r.firstEr)
	}
	created := uint64(r.ops + 64) // the window's and one warm-up per session
	// The server's CPU time while idle (timers, the sweeper finding
	// nothing), per second, measured before the wave expires.
	idleFrom, cpu0 := time.Now(), srv.cpu()
	time.Sleep(margin / 2)
	idle := float64(srv.cpu()-cpu0) / float64(time.Since(idleFrom))
	st0 := srv.storeStats()
	if st0 == nil {
		return errors.New("no store counters")
	}
	start, cpu1 := time.Now(), srv.cpu()
	deadline := start.Add(2*time.Minute + 2*ttl)
	var st1 *storeCounters
	for {
		time.Sleep(100 * time.Millisecond)
		if s := srv.storeStats(); s != nil && s.OpsCommitted-st0.OpsCommitted >= created {
			st1 = &storeCounters{commits: s.Commits - st0.Commits, ops: s.OpsCommitted - st0.OpsCommitted}
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sweeper did not delete the %d tasks within %s", created, deadline.Sub(start).Round(time.Second))
		}
	}
	took := time.Since(start)
	busy := float64(srv.cpu()-cpu1) - idle*float64(took)
	perTask := busy / float64(time.Microsecond) / float64(created)
	fmt.Fprintf(os.Stderr, "    sweep: %d tasks deleted in %s, %d commits\n", created, took.Round(time.Millisecond), st1.commits)
	rep.add(row{"25", "a task's deletion by the ttl sweeper (bbolt, every task's second write): server CPU and store commits per deleted task, after 64 clients' task round trips",
		fmt.Sprintf("%.0f µs, %.3f commits", perTask, float64(st1.commits)/float64(created)),
		withCPU(fmt.Sprintf("the round trip: %.3f commits", float64(r.store.Commits)/float64(max(r.ops, 1))), r.cpuPerOp()),
		fmt.Sprintf("%.2f", perTask/r.cpuPerOp()), "-", "-"})
	return nil
}

// storeCounters are the store counters a window moved.
type storeCounters struct {
	commits, ops uint64
}
