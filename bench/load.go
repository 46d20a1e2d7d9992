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
	sc.Buffer(make([]byte, 64<<10), 16<<20)
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

// opPlain is one plain tools/call of echo.
func opPlain(ctx context.Context, s *session) error {
	_, err := s.call(ctx, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "hi"}})
	return err
}

// opTask is one task round trip: a task-augmented call of work, then the
// blocking tasks/result.
func opTask(ctx context.Context, s *session) error {
	_, err := taskRoundTrip(ctx, s, 0)
	return err
}

func taskRoundTrip(ctx context.Context, s *session, ms int) (json.RawMessage, error) {
	raw, err := s.call(ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"ms": ms}, "task": map[string]any{"ttl": 600000}})
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

// opExtTask is one extension-dialect task round trip: tools/call of work
// (the server makes it a task), then tasks/get until the task has ended
// (its result comes inline).
func opExtTask(ctx context.Context, s *session) error {
	raw, err := s.call(ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"ms": 0}})
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

// ---- runner ----

// result of one measurement run.
type result struct {
	ops     int
	errs    int
	elapsed time.Duration
	lat     []time.Duration
	firstEr error
}

func (r result) perSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }

func (r result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(float64(len(r.lat)-1) * p)
	return r.lat[i]
}

// runLoad runs op from conc core-dialect sessions for d and collects
// latencies.
func runLoad(url string, conc int, d time.Duration, op func(context.Context, *session) error) (result, error) {
	return runLoadIn(false, url, conc, d, op)
}

// runLoadIn is runLoad in either dialect (ext: the extension).
func runLoadIn(ext bool, url string, conc int, d time.Duration, op func(context.Context, *session) error) (result, error) {
	client := newHTTPClient(conc)
	ctx := context.Background()
	sessions := make([]*session, conc)
	for i := range sessions {
		if ext {
			sessions[i] = dialExt(client, url)
			continue
		}
		s, err := dial(ctx, client, url)
		if err != nil {
			return result{}, err
		}
		sessions[i] = s
	}
	// Warm up each session once.
	for _, s := range sessions {
		if err := op(ctx, s); err != nil {
			return result{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	var mu sync.Mutex
	var all result
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
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
	sort.Slice(all.lat, func(i, j int) bool { return all.lat[i] < all.lat[j] })
	client.CloseIdleConnections()
	return all, nil
}
