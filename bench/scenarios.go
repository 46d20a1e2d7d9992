package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/internal/gcpolicy"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// rounds runs op on t for o.rounds rounds and returns the median ops/s,
// the median server CPU µs per operation and the pooled sorted latencies.
func rounds(o options, t *proc, conc int, op string) (float64, float64, result, error) {
	var rates, cpus []float64
	var pooled result
	for range o.rounds {
		r, err := load{op: op, conc: conc, d: o.duration}.on(t)
		if err != nil {
			return 0, 0, result{}, err
		}
		if r.errs > 0 {
			return 0, 0, result{}, fmt.Errorf("%d errors at %d clients, first: %v", r.errs, conc, r.firstEr)
		}
		rates = append(rates, r.perSec())
		cpus = append(cpus, r.cpuPerOp())
		pooled.lat = append(pooled.lat, r.lat...)
		pooled.ops += r.ops
	}
	sort.Slice(pooled.lat, func(i, j int) bool { return pooled.lat[i] < pooled.lat[j] })
	return median(rates), median(cpus), pooled, nil
}

// 1. Task overhead: task round trips (core: tools/call with params.task,
// then tasks/result; extension: tools/call, then tasks/get until done) vs
// plain calls on the same server, rounds interleaved.
func taskOverhead(o options, ours *proc, rep *report) error {
	for _, conc := range []int{1, 64} {
		var plain, task, ext, plainCPU, taskCPU, extCPU []float64
		var plainLat, taskLat []time.Duration
		for range o.rounds {
			p, err := load{op: "plain", conc: conc, d: o.duration}.on(ours)
			if err != nil || p.errs > 0 {
				return fmt.Errorf("plain calls: %v %v", err, p.firstEr)
			}
			t, err := load{op: "task", conc: conc, d: o.duration}.on(ours)
			if err != nil || t.errs > 0 {
				return fmt.Errorf("task calls: %v %v", err, t.firstEr)
			}
			plain, plainCPU = append(plain, p.perSec()), append(plainCPU, p.cpuPerOp())
			task, taskCPU = append(task, t.perSec()), append(taskCPU, t.cpuPerOp())
			plainLat = append(plainLat, p.pct(0.5))
			taskLat = append(taskLat, t.pct(0.5))
			if conc == 64 {
				e, err := load{op: "ext", conc: conc, d: o.duration}.on(ours)
				if err != nil || e.errs > 0 {
					return fmt.Errorf("extension task calls: %v %v", err, e.firstEr)
				}
				ext, extCPU = append(ext, e.perSec()), append(extCPU, e.cpuPerOp())
			}
		}
		mp, mt := median(plain), median(task)
		cp, ct := median(plainCPU), median(taskCPU)
		ratio := mt / mp
		goal, ok := "-", "-"
		if conc == 64 {
			goal, ok = "≥ 0.6", met(ratio >= 0.6)
		}
		rep.add(row{"1", fmt.Sprintf("task round trips vs plain tools/call, %d client(s), bbolt", conc),
			withCPU(fmt.Sprintf("%.0f tasks/s", mt), ct), withCPU(fmt.Sprintf("%.0f plain calls/s", mp), cp), fmt.Sprintf("%.2f", ratio), goal, ok})
		if conc == 1 {
			lp, lt := medianDur(plainLat), medianDur(taskLat)
			r := float64(lt) / float64(lp)
			rep.add(row{"1", "latency p50, task round trip vs plain tools/call, 1 client, bbolt", ms(lt), ms(lp), fmt.Sprintf("%.2f", r), "≤ 2.5", met(r <= 2.5)})
		}
		if conc == 64 {
			me := median(ext)
			rep.add(row{"1", "extension dialect: tools/call + tasks/get until done vs plain tools/call, 64 clients, bbolt",
				withCPU(fmt.Sprintf("%.0f tasks/s", me), median(extCPU)), withCPU(fmt.Sprintf("%.0f plain calls/s", mp), cp), fmt.Sprintf("%.2f", me/mp), "≥ 0.5", met(me/mp >= 0.5)})
		}
	}
	return nil
}

// 2. Durability cost: bbolt vs memory store, full task round trips.
func durability(o options, bolt, mem *proc, rep *report) error {
	for _, conc := range []int{1, 16, 64} {
		sd, err := interleaved(o, conc, "task", bolt, mem)
		if err != nil {
			return err
		}
		mb, mm := sd[0].rate(), sd[1].rate()
		goal, ok := "-", "-"
		if conc == 64 {
			goal, ok = "≥ 0.3", met(mb/mm >= 0.3)
		}
		rep.add(row{"2", fmt.Sprintf("tasks created+completed, bbolt vs memory store, %d writer(s)", conc),
			withCPU(fmt.Sprintf("%.0f tasks/s (bbolt)", mb), sd[0].cpu()), withCPU(fmt.Sprintf("%.0f tasks/s (memory)", mm), sd[1].cpu()), fmt.Sprintf("%.2f", mb/mm), goal, ok})
	}
	return nil
}

// 3. Against the TypeScript SDK's task server, same load.
func againstPeer(o options, ours, peer *proc, rep *report) error {
	for _, conc := range []int{1, 64} {
		ro, co, lo, err := rounds(o, ours, conc, "task")
		if err != nil {
			return fmt.Errorf("taskbridge: %w", err)
		}
		rp, cp, lp, err := rounds(o, peer, conc, "task")
		if err != nil {
			return fmt.Errorf("typescript peer: %w", err)
		}
		goal, ok := "-", "-"
		if conc == 64 {
			goal, ok = "≥ 3", met(ro/rp >= 3)
		}
		rep.add(row{"3", fmt.Sprintf("task throughput vs TypeScript SDK task server (InMemoryTaskStore), %d client(s); ours on bbolt", conc),
			withCPU(fmt.Sprintf("%.0f tasks/s", ro), co), withCPU(fmt.Sprintf("%.0f tasks/s", rp), cp), fmt.Sprintf("%.2f", ro/rp), goal, ok})
		rep.add(row{"3", fmt.Sprintf("create-to-result latency p50 / p99, %d client(s)", conc),
			ms(lo.pct(0.5)) + " / " + ms(lo.pct(0.99)), ms(lp.pct(0.5)) + " / " + ms(lp.pct(0.99)),
			fmt.Sprintf("%.2f (p50)", float64(lp.pct(0.5))/float64(lo.pct(0.5))), "-", "-"})
	}
	return nil
}

// 4. Result latency: from the tool finishing to tasks/result returning.
func resultLatency(ours, peer *proc, rep *report) error {
	// samples, after warm-up: the peer's tasks/result sleeps a whole poll
	// interval (1s) when the task is still running, so it gets fewer.
	measure := func(p *proc, samples, warm int) (time.Duration, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		s, err := dial(ctx, newHTTPClient(1), p.url)
		if err != nil {
			return 0, 0, err
		}
		var lats []time.Duration
		for i := 0; i < samples+warm; i++ {
			raw, err := taskRoundTrip(ctx, s, 5)
			now := float64(time.Now().UnixNano()) / 1e6
			if err != nil {
				return 0, 0, err
			}
			var res struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			}
			if err := json.Unmarshal(raw, &res); err != nil || len(res.Content) == 0 {
				return 0, 0, fmt.Errorf("unexpected result %s", raw)
			}
			var fin struct {
				FinishedAt float64 `json:"finishedAt"`
			}
			if err := json.Unmarshal([]byte(res.Content[0].Text), &fin); err != nil {
				return 0, 0, err
			}
			if i >= warm {
				lats = append(lats, time.Duration((now-fin.FinishedAt)*float64(time.Millisecond)))
			}
		}
		sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
		return lats[len(lats)/2], lats[len(lats)*99/100], nil
	}
	o50, o99, err := measure(ours, 200, 20)
	if err != nil {
		return err
	}
	other, ratio := "-", "-"
	if peer != nil {
		p50, p99, err := measure(peer, 20, 2)
		if err != nil {
			return fmt.Errorf("peer: %w", err)
		}
		other = ms(p50) + " / " + ms(p99)
		ratio = fmt.Sprintf("%.0fx faster", float64(p50)/float64(o50))
	}
	rep.add(row{"4", "task finished → tasks/result returned, p50 / p99 (1 client)", ms(o50) + " / " + ms(o99), other, ratio, "p50 < 1 ms", met(o50 < time.Millisecond)})
	return nil
}

// 6. Workflow: prompts/get of a 10-step server workflow vs the 10 calls.
func workflowCost(o options, ours *proc, rep *report) error {
	ctx, cancel := ctxTimeout()
	defer cancel()
	s, err := dial(ctx, newHTTPClient(1), ours.url)
	if err != nil {
		return err
	}
	n := 60 * o.rounds
	timeIt := func(f func() error) (time.Duration, error) {
		var ds []time.Duration
		for i := 0; i < n; i++ {
			t0 := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			ds = append(ds, time.Since(t0))
		}
		return medianDur(ds[n/10:]), nil
	}
	direct, err := timeIt(func() error {
		for i := 1; i <= 10; i++ {
			if _, err := s.call(ctx, "tools/call", map[string]any{"name": fmt.Sprintf("step%d", i), "arguments": map[string]any{"n": i}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	plain, err := timeIt(func() error {
		_, err := s.call(ctx, "prompts/get", map[string]any{"name": "wf10_plain"})
		return err
	})
	if err != nil {
		return err
	}
	tasked, err := timeIt(func() error {
		_, err := s.call(ctx, "prompts/get", map[string]any{"name": "wf10"})
		return err
	})
	if err != nil {
		return err
	}
	once, err := timeIt(func() error {
		_, err := s.call(ctx, "prompts/get", map[string]any{"name": "wf10_once"})
		return err
	})
	if err != nil {
		return err
	}
	wr := float64(once) / float64(direct)
	rep.add(row{"6", "10-step server workflow: prompts/get (task, bbolt, every step durable before the next: the default) vs 10 direct tools/call", ms(once), ms(direct),
		fmt.Sprintf("%.2f", wr), "≤ 1.3", met(wr <= 1.3)})
	rep.add(row{"6", "the same with the steps Retryable and ProgressInterval=20ms (opt-in: quick steps share writes)", ms(tasked), ms(direct),
		fmt.Sprintf("%.2f", float64(tasked)/float64(direct)), "-", "-"})
	rep.add(row{"6", "per step: task-aware / plain workflow (no task)", ms(tasked/10) + " / " + ms(plain/10), ms(direct/10) + " per direct call", "-", "-", "-"})
	return nil
}

// 5. Scale: tasks/get and one tasks/list page with few vs many stored
// tasks; memory and file size with many.
func scale(o options, tmp string, rep *report) error {
	type point struct {
		get, list    time.Duration
		anon, mapped float64
		file         float64
	}
	populated := map[int][]string{}
	measure := func(n int, extra ...string) (point, error) {
		path := filepath.Join(tmp, fmt.Sprintf("scale-%d.db", n))
		ids, ok := populated[n]
		if !ok {
			var err error
			if ids, err = populate(path, n); err != nil {
				return point{}, err
			}
			populated[n] = ids
		}
		srv, err := startOurs("bbolt", path, extra...)
		if err != nil {
			return point{}, err
		}
		defer srv.stop()
		ctx, cancel := ctxTimeout()
		defer cancel()
		s, err := dial(ctx, newHTTPClient(1), srv.url)
		if err != nil {
			return point{}, err
		}
		var gets, lists []time.Duration
		for i := 0; i < 2000; i++ {
			id := ids[rand.IntN(len(ids))]
			t0 := time.Now()
			if _, err := s.call(ctx, "tasks/get", map[string]any{"taskId": id}); err != nil {
				return point{}, err
			}
			gets = append(gets, time.Since(t0))
		}
		var cursor string
		for i := 0; i < 200; i++ {
			params := map[string]any{}
			if cursor != "" {
				params["cursor"] = cursor
			}
			t0 := time.Now()
			raw, err := s.call(ctx, "tasks/list", params)
			if err != nil {
				return point{}, err
			}
			lists = append(lists, time.Since(t0))
			var page struct {
				NextCursor string `json:"nextCursor"`
			}
			_ = json.Unmarshal(raw, &page)
			cursor = page.NextCursor
		}
		st, err := os.Stat(path)
		if err != nil {
			return point{}, err
		}
		pid := srv.cmd.Process.Pid
		fmt.Fprintf(os.Stderr, "  %d tasks: VmRSS %.0f MiB (anon %.0f, file-backed %.0f)\n", n, memMiB(pid, "VmRSS"), memMiB(pid, "RssAnon"), memMiB(pid, "RssFile"))
		return point{get: medianDur(gets[200:]), list: medianDur(lists[20:]), anon: memMiB(pid, "RssAnon"), mapped: memMiB(pid, "RssFile"), file: float64(st.Size()) / (1 << 20)}, nil
	}
	small, err := measure(1000)
	if err != nil {
		return err
	}
	big, err := measure(o.scale)
	if err != nil {
		return err
	}
	// The same file, served by a store opened with Options.Prefault (opt-in).
	pre, err := measure(o.scale, "-prefault")
	if err != nil {
		return err
	}
	gr, lr := float64(big.get)/float64(small.get), float64(big.list)/float64(small.list)
	rep.add(row{"5", fmt.Sprintf("tasks/get with %s vs 1k stored tasks (bbolt)", count(o.scale)), ms(big.get), ms(small.get), fmt.Sprintf("%.2f", gr), "≤ 1.5", met(gr <= 1.5)})
	rep.add(row{"5", fmt.Sprintf("tasks/list page (50) with %s vs 1k stored tasks", count(o.scale)), ms(big.list), ms(small.list), fmt.Sprintf("%.2f", lr), "≤ 1.5", met(lr <= 1.5)})
	pg, pl := float64(pre.get)/float64(small.get), float64(pre.list)/float64(small.list)
	rep.add(row{"5", fmt.Sprintf("the same %s file opened with bboltstore.Options.Prefault (opt-in): tasks/get / tasks/list page vs 1k stored tasks", count(o.scale)),
		ms(pre.get) + " / " + ms(pre.list), ms(small.get) + " / " + ms(small.list), fmt.Sprintf("%.2f / %.2f", pg, pl), "≤ 1.5", met(pg <= 1.5 && pl <= 1.5)})
	rep.add(row{"5", fmt.Sprintf("server heap+stacks (RssAnon) / mapped file pages / file size, %s vs 1k tasks", count(o.scale)),
		fmt.Sprintf("%.0f / %.0f / %.0f MiB", big.anon, big.mapped, big.file), fmt.Sprintf("%.0f / %.0f / %.1f MiB", small.anon, small.mapped, small.file),
		fmt.Sprintf("%.2f (anon)", big.anon/small.anon), "memory flat", met(big.anon/small.anon <= 2)})
	return nil
}

func count(n int) string {
	if n >= 1_000_000 && n%1_000_000 == 0 {
		return fmt.Sprintf("%dM", n/1_000_000)
	}
	return fmt.Sprintf("%dk", n/1000)
}

// populate writes n finished tasks for the local owner with 64 concurrent
// writers (group commit) and returns a sample of their ids.
func populate(path string, n int) ([]string, error) {
	st, err := bboltstore.Open(path, nil)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	t0 := time.Now()
	const writers = 64
	var (
		mu      sync.Mutex
		sample  []string
		wg      sync.WaitGroup
		firstEr error
	)
	result := json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`)
	per := (n + writers - 1) / writers
	base := time.Now().Add(-time.Hour)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per && w*per+i < n; i++ {
				id := taskrouter.NewTaskID()
				created := base.Add(time.Duration(w*per+i) * time.Microsecond)
				_, err := st.Create(context.Background(), &store.Task{
					ID: id, Owner: taskrouter.LocalOwner, Status: mcptask.StatusWorking, CreatedAt: created,
					Request: store.Request{Method: "tools/call", Name: "work", Arguments: json.RawMessage(`{"ms":0}`)},
					Labels:  map[string]string{taskrouter.LabelKind: taskrouter.KindTool},
				})
				if err == nil {
					_, err = st.Update(context.Background(), id, store.Update{Status: mcptask.StatusCompleted, Result: result})
				}
				if err != nil {
					mu.Lock()
					firstEr = err
					mu.Unlock()
					return
				}
				if i%97 == 0 {
					mu.Lock()
					sample = append(sample, id)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if firstEr != nil {
		return nil, firstEr
	}
	fmt.Fprintf(os.Stderr, "  populated %d tasks in %s\n", n, time.Since(t0).Round(time.Millisecond))
	return sample, nil
}

// 9. The GC policy: the bench server with the binaries' default
// (gcpolicy.DefaultGOGC) vs Go's GOGC=100, task round trips and plain
// calls at 64 clients, rounds interleaved; peak RSS of each.
func gcEffect(o options, tmp string, rep *report) error {
	def, err := startOurs("bbolt", filepath.Join(tmp, "gc-default.db"))
	if err != nil {
		return err
	}
	defer def.stop()
	g100, err := startOursEnv([]string{"GOGC=100"}, "bbolt", filepath.Join(tmp, "gc-100.db"))
	if err != nil {
		return err
	}
	defer g100.stop()
	for _, op := range []struct{ name, op string }{{"task round trips", "task"}, {"plain tools/call", "plain"}} {
		sd, err := interleaved(o, 64, op.op, def, g100)
		if err != nil {
			return err
		}
		md, m100 := sd[0].rate(), sd[1].rate()
		rep.add(row{"9", fmt.Sprintf("%s, 64 clients: GOGC=%d (the binaries' default) vs GOGC=100", op.name, gcpolicy.DefaultGOGC),
			withCPU(fmt.Sprintf("%.0f/s", md), sd[0].cpu()), withCPU(fmt.Sprintf("%.0f/s", m100), sd[1].cpu()), fmt.Sprintf("%.2f", md/m100), "-", "-"})
	}
	rep.add(row{"9", "peak RSS after the above", fmt.Sprintf("%.0f MiB", memMiB(def.cmd.Process.Pid, "VmHWM")),
		fmt.Sprintf("%.0f MiB", memMiB(g100.cmd.Process.Pid, "VmHWM")), "-", "-", "-"})
	return nil
}

// 11. Folding an instant tool's completion into its create commit: task
// round trips on a server with the default InstantWindow vs one with it
// off (a create commit, then a completion commit), rounds interleaved.
func instantFold(o options, tmp string, rep *report) error {
	on, err := startOurs("bbolt", filepath.Join(tmp, "instant-on.db"))
	if err != nil {
		return err
	}
	defer on.stop()
	off, err := startOurs("bbolt", filepath.Join(tmp, "instant-off.db"), "-instant-window", "-1ns")
	if err != nil {
		return err
	}
	defer off.stop()
	for _, conc := range []int{1, 64} {
		sd, err := interleaved(o, conc, "task", on, off)
		if err != nil {
			return err
		}
		mOn, mOff := sd[0].rate(), sd[1].rate()
		lOn, lOff := sd[0].p50s, sd[1].p50s
		rep.add(row{"11", fmt.Sprintf("task round trips, %d client(s), bbolt: instant tool folded into its create commit (InstantWindow %s) vs off", conc, taskrouter.DefaultInstantWindow),
			withCPU(fmt.Sprintf("%.0f tasks/s, p50 %s", mOn, ms(medianDur(lOn))), sd[0].cpu()), withCPU(fmt.Sprintf("%.0f tasks/s, p50 %s", mOff, ms(medianDur(lOff))), sd[1].cpu()), fmt.Sprintf("%.2f", mOn/mOff), "-", "-"})
	}
	return nil
}
