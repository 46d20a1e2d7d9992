package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// session is one MCP client session over Streamable HTTP, kept lean so the
// load generator measures the servers, not itself. It speaks the core
// dialect (protocol 2025-11-25), which both servers under test serve.
type session struct {
	url    string
	client *http.Client
	id     string
	nextID atomic.Int64
	// ext makes the session speak the 2026-07-28 extension dialect: no
	// initialize, every request carries its protocol version and
	// capabilities (declaring io.modelcontextprotocol/tasks) in _meta.
	ext bool
	// tools are what the session's operations call (nil: benchTools).
	tools *toolSet
	// ttl is the ttl its task round trips ask for, in ms (0: ten minutes,
	// longer than any window, so that no task is swept while measured).
	ttl int
}

// toolSet names the tools a load calls on one server, with their
// arguments: the plain call's, and the task round trip's (also the
// extension round trip's). The example servers serve other tools than
// the bench server, the floor and the TypeScript peer.
type toolSet struct {
	plain     string
	plainArgs map[string]any
	task      string
	taskArgs  map[string]any
}

// benchTools are the tools of the bench server, the floor and the
// TypeScript peer: echo and a work of 0 ms.
var benchTools = &toolSet{plain: "echo", plainArgs: map[string]any{"text": "hi"}, task: "work", taskArgs: map[string]any{"ms": 0}}

// conformanceTools are the load on examples/conformance, as issue 43
// measured it: greet (never a task) and an instant slow_compute.
var conformanceTools = &toolSet{plain: "greet", plainArgs: map[string]any{"name": "x"},
	task: "slow_compute", taskArgs: map[string]any{"seconds": 0, "label": "load"}}

// example62Tools are the load on example 62: promote_release (a trivial
// tool that is never a task) and an instant generate_report.
var example62Tools = &toolSet{plain: "promote_release", plainArgs: map[string]any{"repo": "x", "version": "v1.0.0"},
	task: "generate_report", taskArgs: map[string]any{"topic": "load"}}

// toolSets are the tool sets by name (bench load -tools).
var toolSets = map[string]*toolSet{"bench": benchTools, "conformance": conformanceTools, "62": example62Tools}

// toolsOf is the session's tool set.
func (s *session) toolsOf() *toolSet {
	if s.tools == nil {
		return benchTools
	}
	return s.tools
}

// extVersion is the protocol version of the extension dialect.
const extVersion = "2026-07-28"

// dialExt opens an extension-dialect session (nothing to send up front).
func dialExt(client *http.Client, url string) *session {
	return &session{url: url, client: client, ext: true}
}

// extParams adds the per-request _meta of the extension dialect.
func extParams(params any) any {
	m, ok := params.(map[string]any)
	if !ok {
		return params
	}
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	out["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    extVersion,
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}},
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "taskbridge-bench", "version": "1"},
	}
	return out
}

type rpcError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("jsonrpc %d: %s", e.Code, e.Message) }

type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *rpcError       `json:"error"`
}

func newHTTPClient(conns int) *http.Client {
	tr := &http.Transport{MaxIdleConns: conns * 2, MaxIdleConnsPerHost: conns * 2, IdleConnTimeout: time.Minute}
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// dial opens a session: initialize, then notifications/initialized.
func dial(ctx context.Context, client *http.Client, url string) (*session, error) {
	s := &session{url: url, client: client}
	_, hdr, err := s.post(ctx, "initialize", map[string]any{
		"protocolVersion": "2025-11-25",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "taskbridge-bench", "version": "1"},
	}, true)
	if err != nil {
		return nil, fmt.Errorf("initialize: %w", err)
	}
	s.id = hdr.Get("Mcp-Session-Id")
	if _, _, err := s.post(ctx, "notifications/initialized", map[string]any{}, false); err != nil {
		return nil, err
	}
	return s, nil
}

// call sends a request and returns its result.
func (s *session) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	res, _, err := s.post(ctx, method, params, true)
	return res, err
}

func (s *session) post(ctx context.Context, method string, params any, isCall bool) (json.RawMessage, http.Header, error) {
	if s.ext {
		params = extParams(params)
	}
	msg := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
	var id int64
	if isCall {
		id = s.nextID.Add(1)
		msg["id"] = id
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return nil, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if s.id != "" {
		req.Header.Set("Mcp-Session-Id", s.id)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	if s.ext {
		req.Header.Set("Mcp-Protocol-Version", extVersion)
		req.Header.Set("Mcp-Method", method)
		if m, ok := params.(map[string]any); ok {
			for _, k := range []string{"name", "taskId"} {
				if v, ok := m[k].(string); ok {
					req.Header.Set("Mcp-Name", v)
				}
			}
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if !isCall {
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode >= 300 {
			return nil, nil, fmt.Errorf("%s: HTTP %d", method, resp.StatusCode)
		}
		return nil, resp.Header, nil
	}
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, nil, fmt.Errorf("%s: HTTP %d: %s", method, resp.StatusCode, bytes.TrimSpace(b))
	}
	r, err := readResponse(resp, id)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", method, err)
	}
	if r.Error != nil {
		return nil, resp.Header, r.Error
	}
	return r.Result, resp.Header, nil
}

// readResponse reads a JSON or SSE body until the response with id.
func readResponse(resp *http.Response, id int64) (*rpcResponse, error) {
	want := fmt.Sprint(id)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var r rpcResponse
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return nil, err
		}
		return &r, nil
	}
	sc := bufio.NewScanner(resp.Body)
	// A small first buffer, grown only for a long event: a 64 KiB one per
	// response was the generator's largest cost against servers that
	// answer with SSE (GC on the cores the servers share).
	sc.Buffer(make([]byte, 0, 4<<10), 16<<20)
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "data:"):
			data.WriteString(strings.TrimSpace(strings.TrimPrefix(line, "data:")))
		case line == "":
			if data.Len() == 0 {
				continue
			}
			var r rpcResponse
			if err := json.Unmarshal([]byte(data.String()), &r); err == nil && string(r.ID) == want {
				return &r, nil
			}
			data.Reset()
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("stream ended without a response")
}

// ---- operations ----

// opPlain is one plain tools/call of the session's plain tool (echo).
func opPlain(ctx context.Context, s *session) error {
	t := s.toolsOf()
	_, err := s.call(ctx, "tools/call", map[string]any{"name": t.plain, "arguments": t.plainArgs})
	return err
}

// opTask is one task round trip: a task-augmented call of the session's
// task tool (work of 0 ms), then the blocking tasks/result.
func opTask(ctx context.Context, s *session) error {
	t := s.toolsOf()
	_, err := callAndResult(ctx, s, t.task, t.taskArgs)
	return err
}

// taskRoundTrip is a task round trip of work for ms milliseconds.
func taskRoundTrip(ctx context.Context, s *session, ms int) (json.RawMessage, error) {
	return callAndResult(ctx, s, "work", map[string]any{"ms": ms})
}

// callAndResult calls tool with args as a task, then waits for its
// result with tasks/result.
func callAndResult(ctx context.Context, s *session, tool string, args map[string]any) (json.RawMessage, error) {
	ttl := s.ttl
	if ttl == 0 {
		ttl = 600000
	}
	raw, err := s.call(ctx, "tools/call", map[string]any{"name": tool, "arguments": args, "task": map[string]any{"ttl": ttl}})
	if err != nil {
		return nil, err
	}
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if err := json.Unmarshal(raw, &created); err != nil || created.Task.TaskID == "" {
		return nil, fmt.Errorf("no task in create reply %s", raw)
	}
	return s.call(ctx, "tasks/result", map[string]any{"taskId": created.Task.TaskID})
}

// opExtTask is one extension-dialect task round trip: tools/call of the
// session's task tool (the server makes it a task), then tasks/get until
// the task has ended (its result comes inline).
func opExtTask(ctx context.Context, s *session) error {
	tools := s.toolsOf()
	raw, err := s.call(ctx, "tools/call", map[string]any{"name": tools.task, "arguments": tools.taskArgs})
	if err != nil {
		return err
	}
	var t struct {
		TaskID string `json:"taskId"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &t); err != nil || t.TaskID == "" {
		return fmt.Errorf("no task in create reply %s", raw)
	}
	for i := 0; ; i++ {
		raw, err := s.call(ctx, "tasks/get", map[string]any{"taskId": t.TaskID})
		if err != nil {
			return err
		}
		var got struct {
			Status string          `json:"status"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			return err
		}
		switch got.Status {
		case "completed":
			if len(got.Result) == 0 {
				return fmt.Errorf("completed without a result: %s", raw)
			}
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("task %s: %s", got.Status, raw)
		}
		if i > 2 {
			time.Sleep(time.Millisecond)
		}
	}
}

// ops are the operations a load repeats, by name.
var ops = map[string]func(context.Context, *session) error{"plain": opPlain, "task": opTask, "ext": opExtTask}

// ---- runner ----

// result of one measurement run.
type result struct {
	ops     int
	errs    int
	elapsed time.Duration
	lat     []time.Duration
	firstEr error
	// use is the CPU time the window cost (see usage).
	use usage
	// store is what the server's store committed over the window (a
	// bench server whose store keeps counters), nil otherwise.
	store *store.Stats
	// syncs is the server's fdatasync and fsync calls over the window
	// (load.syncs), -1 when not counted.
	syncs int64
	// profile is the path of the server's CPU profile of the window
	// (-cpuprofile), "" when none was taken.
	profile string
}

func (r result) perSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// cpuPerOp is the server's CPU time per completed operation, µs.
func (r result) cpuPerOp() float64 { return perOp(r.use.server, r.ops) }

func (r result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(float64(len(r.lat)-1) * p)
	return r.lat[i]
}

// load is one measured window: op ("plain", "task" or "ext", which
// speaks the extension dialect) repeated by conc sessions for d.
type load struct {
	op   string
	conc int
	d    time.Duration
	// syncs counts the server's fdatasync and fsync calls in the window.
	syncs bool
	// ttl is the ttl of the tasks created, in ms (0: see session.ttl).
	ttl int
}

// on runs l against t: it opens the sessions, warms each up once, then
// measures the window: operations, latencies, and the CPU time of the
// server, its database and the load generator (read before and after,
// so the warm-up is not in it), with the store's counters, a sync count
// (l.syncs) and a CPU profile (-cpuprofile) where asked and possible.
func (l load) on(t *proc) (result, error) {
	op, ok := ops[l.op]
	if !ok {
		return result{}, fmt.Errorf("unknown operation %q", l.op)
	}
	ext := l.op == "ext"
	client := newHTTPClient(l.conc)
	defer client.CloseIdleConnections()
	ctx := context.Background()
	sessions := make([]*session, l.conc)
	for i := range sessions {
		if ext {
			sessions[i] = dialExt(client, t.url)
			sessions[i].tools, sessions[i].ttl = t.tools, l.ttl
			continue
		}
		s, err := dial(ctx, client, t.url)
		if err != nil {
			return result{}, err
		}
		s.tools, s.ttl = t.tools, l.ttl
		sessions[i] = s
	}
	// Warm up each session once.
	for _, s := range sessions {
		if err := op(ctx, s); err != nil {
			return result{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	var all result
	all.syncs = -1
	var syncs *syncCounter
	if l.syncs && t.pid() != 0 {
		syncs = countSyncs(t.pid())
	}
	st0 := t.storeStats()
	profiled := profiling.start(t, l)
	before := takeSnapshot(t)
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(l.d)
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local result
			for time.Now().Before(deadline) {
				t0 := time.Now()
				err := op(ctx, s)
				if err != nil {
					local.errs++
					if local.firstEr == nil {
						local.firstEr = err
					}
					continue
				}
				local.ops++
				local.lat = append(local.lat, time.Since(t0))
			}
			mu.Lock()
			all.ops += local.ops
			all.errs += local.errs
			all.lat = append(all.lat, local.lat...)
			if all.firstEr == nil {
				all.firstEr = local.firstEr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	all.elapsed = time.Since(start)
	all.use = before.to(takeSnapshot(t))
	all.profile = profiled()
	if st1 := t.storeStats(); st0 != nil && st1 != nil {
		all.store = storeDelta(*st0, *st1)
	}
	all.syncs = syncs.stop()
	sort.Slice(all.lat, func(i, j int) bool { return all.lat[i] < all.lat[j] })
	return all, nil
}

// storeDelta is what a store committed between two readings of its
// counters (MaxOpsPerCommit is the later reading's, since open).
func storeDelta(a, b store.Stats) *store.Stats {
	return &store.Stats{Commits: b.Commits - a.Commits, OpsCommitted: b.OpsCommitted - a.OpsCommitted,
		OpsFailed: b.OpsFailed - a.OpsFailed, MaxOpsPerCommit: b.MaxOpsPerCommit, CommitErrors: b.CommitErrors - a.CommitErrors,
		Retries: b.Retries - a.Retries, CommitTime: b.CommitTime - a.CommitTime,
		Statements: b.Statements - a.Statements, RoundTrips: b.RoundTrips - a.RoundTrips}
}

// storeStats reads the counters of the server's store: a bench server's
// from /debug/bench, an example's from its /metrics; nil when it reports
// none.
func (p *proc) storeStats() *store.Stats {
	if len(p.members) > 0 { // a group: its servers' counters, summed
		var sum store.Stats
		for _, m := range p.members {
			st := m.storeStats()
			if st == nil {
				return nil
			}
			sum.Commits += st.Commits
			sum.OpsCommitted += st.OpsCommitted
			sum.CommitTime += st.CommitTime
			sum.Statements += st.Statements
			sum.RoundTrips += st.RoundTrips
		}
		return &sum
	}
	if p.metrics != "" {
		return metricsStats(p.metrics)
	}
	if st := p.debugStats(false); st != nil {
		return st.Store
	}
	return nil
}

// debugStats reads a bench server's /debug/bench (after a garbage
// collection with gc); nil for any other server or on error.
func (p *proc) debugStats(gc bool) *debugStats {
	if !p.debug {
		return nil
	}
	u := baseURL(p.url) + "/debug/bench"
	if gc {
		u += "?gc=1"
	}
	resp, err := http.Get(u)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var st debugStats
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return nil
	}
	return &st
}
