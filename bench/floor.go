package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// The floor: a bare net/http JSON-RPC server (no MCP SDK, no store, no
// durability, tasks in a map) that answers exactly what the load
// generator sends, in both dialects. Under the same load generator it
// shows what this machine and net/http allow, so every other number can
// be read against it (row 12).

// floorServe runs the floor server until killed: `bench floor -http ADDR`.
func floorServe(args []string) error {
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	addr := fs.String("http", "127.0.0.1:0", "listen address")
	_ = fs.Parse(args)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	f := &floor{tasks: map[string]*floorTask{}}
	mux := http.NewServeMux()
	mux.Handle("/mcp", f)
	handleDebug(mux, nil)
	fmt.Printf("{\"port\": %d}\n", ln.Addr().(*net.TCPAddr).Port)
	err = (&http.Server{Handler: mux}).Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

type floor struct {
	mu    sync.Mutex
	tasks map[string]*floorTask
}

type floorTask struct {
	done    chan struct{}
	created string
	result  json.RawMessage
}

type floorRequest struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Task      json.RawMessage `json:"task"`
		TaskID    string          `json:"taskId"`
		Meta      json.RawMessage `json:"_meta"`
	} `json:"params"`
}

func (f *floor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req floorRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(req.ID) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	result, err := f.answer(w, &req)
	var msg any
	if err != nil {
		msg = map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32602, "message": err.Error()}}
	} else {
		msg = map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result}
	}
	b, _ := json.Marshal(msg)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func (f *floor) answer(w http.ResponseWriter, req *floorRequest) (any, error) {
	ext := len(req.Params.Meta) > 0
	switch req.Method {
	case "initialize":
		w.Header().Set("Mcp-Session-Id", newFloorID())
		return map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tools": map[string]any{}, "tasks": map[string]any{}},
			"serverInfo": map[string]any{"name": "floor", "version": "1"}}, nil
	case "tools/call":
		var in struct {
			Text string  `json:"text"`
			Ms   float64 `json:"ms"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &in)
		if req.Params.Name == "echo" {
			return map[string]any{"content": []any{map[string]any{"type": "text", "text": in.Text}}}, nil
		}
		if len(req.Params.Task) == 0 && !ext {
			return map[string]any{"content": []any{map[string]any{"type": "text", "text": "done"}}}, nil
		}
		id := newFloorID()
		t := &floorTask{done: make(chan struct{}), created: time.Now().UTC().Format(time.RFC3339Nano)}
		f.mu.Lock()
		f.tasks[id] = t
		f.mu.Unlock()
		finish := func() {
			b, _ := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text",
				"text": fmt.Sprintf(`{"finishedAt":%f}`, float64(time.Now().UnixNano())/1e6)}}})
			t.result = b
			close(t.done)
		}
		if in.Ms > 0 {
			time.AfterFunc(time.Duration(in.Ms*float64(time.Millisecond)), finish)
		} else {
			finish()
		}
		status := "working"
		select {
		case <-t.done:
			status = "completed"
		default:
		}
		if ext {
			return map[string]any{"resultType": "task", "taskId": id, "status": status, "createdAt": t.created, "lastUpdatedAt": t.created, "ttlMs": 600000, "content": []any{}}, nil
		}
		return map[string]any{"task": map[string]any{"taskId": id, "status": status, "createdAt": t.created, "lastUpdatedAt": t.created, "ttl": 600000}}, nil
	case "tasks/get", "tasks/result":
		f.mu.Lock()
		t := f.tasks[req.Params.TaskID]
		f.mu.Unlock()
		if t == nil {
			return nil, errors.New("task not found")
		}
		if req.Method == "tasks/result" {
			<-t.done
			return json.RawMessage(t.result), nil
		}
		select {
		case <-t.done:
			return map[string]any{"resultType": "complete", "taskId": req.Params.TaskID, "status": "completed", "createdAt": t.created, "result": json.RawMessage(t.result)}, nil
		default:
			return map[string]any{"resultType": "complete", "taskId": req.Params.TaskID, "status": "working", "createdAt": t.created}, nil
		}
	}
	return nil, fmt.Errorf("method %q not found", req.Method)
}

func newFloorID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func startFloor() (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p, err := startProc("floor", exec.Command(self, "floor"))
	if err != nil {
		return nil, err
	}
	p.debug = true
	return p, nil
}

// 12. The floor: taskbridge (bbolt, durable) against the bare server,
// rounds interleaved: plain calls, core task round trips and extension
// round trips at 64 clients, and the task round trip's p50 at 1 client.
func floorRows(o options, ours *proc, rep *report) error {
	fl, err := startFloor()
	if err != nil {
		return fmt.Errorf("starting the floor server: %w", err)
	}
	defer fl.stop()
	type measure struct {
		what  string
		conc  int
		op    string
		unit  string
		p50   bool
		rates [2][]float64
		lats  [2][]time.Duration
		cpus  [2][]float64
	}
	meas := []*measure{
		{what: "plain tools/call, 64 clients", conc: 64, op: "plain", unit: "calls/s"},
		{what: "task round trips (core: tools/call + tasks/result), 64 clients", conc: 64, op: "task", unit: "tasks/s"},
		{what: "extension round trips (tools/call + tasks/get), 64 clients", conc: 64, op: "ext", unit: "tasks/s"},
		{what: "task round trip p50, 1 client", conc: 1, op: "task", p50: true},
	}
	for round := range o.rounds {
		for _, m := range meas {
			for k := range 2 {
				i := (round + k) % 2
				t := []*proc{ours, fl}[i]
				r, err := load{op: m.op, conc: m.conc, d: o.duration}.on(t)
				if err != nil || r.errs > 0 {
					return fmt.Errorf("%s on %s: %v %v", m.what, t.name, err, r.firstEr)
				}
				m.rates[i] = append(m.rates[i], r.perSec())
				m.lats[i] = append(m.lats[i], r.pct(0.5))
				m.cpus[i] = append(m.cpus[i], r.cpuPerOp())
			}
		}
	}
	for _, m := range meas {
		ca, cb := median(m.cpus[0]), median(m.cpus[1])
		if m.p50 {
			a, b := medianDur(m.lats[0]), medianDur(m.lats[1])
			rep.add(row{"12", "floor: " + m.what + ", taskbridge (bbolt) vs a bare net/http JSON-RPC server (no SDK, in memory)",
				withCPU(fmtMs(a), ca), withCPU(fmtMs(b), cb), fmt.Sprintf("%.1fx the floor", float64(a)/float64(b)), "-", "-"})
			continue
		}
		a, b := median(m.rates[0]), median(m.rates[1])
		rep.add(row{"12", "floor: " + m.what + ", taskbridge (bbolt) vs a bare net/http JSON-RPC server (no SDK, in memory)",
			withCPU(fmt.Sprintf("%.0f %s", a, m.unit), ca), withCPU(fmt.Sprintf("%.0f %s", b, m.unit), cb), fmt.Sprintf("%.2f", a/b), "-", "-"})
	}
	return nil
}

func fmtMs(d time.Duration) string { return strings.TrimSpace(ms(d)) }

// withCPU adds the server's CPU time per operation (µs) to a cell; a
// cell without one (0: not measured) stays as it is.
func withCPU(cell string, cpuUS float64) string {
	if cpuUS <= 0 {
		return cell
	}
	return fmt.Sprintf("%s, %.0f µs CPU", cell, cpuUS)
}
