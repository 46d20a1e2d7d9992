package integration

// Several server processes ("replicas") sharing one PostgreSQL store: any
// replica answers any task, wakes waiters for tasks that ended elsewhere,
// stops work cancelled elsewhere, takes over the tasks of a replica that
// stopped renewing its leases, serializes continuations of one workflow,
// and streams notifications/tasks for tasks running elsewhere. These run
// the replicas in one test process (each with its own router, HTTP server
// and replica id); integration/replicas_chaos_test.go kills real
// processes.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store/postgres"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// replica is one in-process server on the shared store.
type replica struct {
	name string
	srv  *builder.Server
	url  string
	hs   *http.Server
	// started receives the label of every "hold" handler that starts here;
	// stopped, of every one whose context ended.
	started, stopped chan string
	runs             atomic.Int32 // "work" handler runs here
}

type holdIn struct {
	Label string `json:"label"`
	Ms    int    `json:"ms,omitempty"`
}

const replicaLease = time.Second

func startReplica(t *testing.T, dsn, name string) *replica {
	t.Helper()
	rp := &replica{name: name, started: make(chan string, 64), stopped: make(chan string, 64)}
	st, err := postgres.Open(context.Background(), dsn, nil)
	require.NoError(t, err)
	b := builder.New("replica-test", "1").WithStore(st).WithoutEnv().WithRouterOptions(taskrouter.Options{
		ReplicaID: name, LeaseDuration: replicaLease, ChangePollInterval: 200 * time.Millisecond, PollInterval: 20 * time.Millisecond,
	})
	// hold runs until cancelled, or for ms.
	builder.Tool(b, &mcp.Tool{Name: "hold"}, func(ctx context.Context, _ *mcp.CallToolRequest, in holdIn) (*mcp.CallToolResult, any, error) {
		rp.runs.Add(1)
		rp.started <- in.Label
		d := time.Hour
		if in.Ms > 0 {
			d = time.Duration(in.Ms) * time.Millisecond
		}
		select {
		case <-time.After(d):
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "held " + in.Label + " on " + name}}}, nil, nil
		case <-ctx.Done():
			rp.stopped <- in.Label
			return nil, nil, ctx.Err()
		}
	}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional, Retryable: true})
	builder.Tool(b, &mcp.Tool{Name: "note"}, func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "noted " + in.Text + " on " + name}}}, nil, nil
	}, nil)
	b.TaskWorkflow(workflow.New("relay", "note on the server, then the client notes, then the server again").Arg("text", "t", true).Step(
		workflow.Server("first", "note").Bind("text", workflow.PromptArg("text")),
		workflow.Client("middle", "note").Bind("text", workflow.FromClient("anything")),
		workflow.Server("last", "note").Bind("text", workflow.StepOutput("middle")),
	))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	rp.srv = srv
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.HTTPHandler(nil))
	rp.hs = &http.Server{Handler: mux}
	go func() { _ = rp.hs.Serve(ln) }()
	rp.url = "http://" + ln.Addr().String() + "/mcp"
	t.Cleanup(func() { rp.stop(); _ = st.Close() })
	return rp
}

// stop closes the replica's HTTP server and engine (running handlers are
// cancelled without recording anything, as after a crash; their leases
// are left to expire).
func (rp *replica) stop() {
	_ = rp.hs.Close()
	_ = rp.srv.Close()
}

func replicas(t *testing.T, n int) ([]*replica, string) {
	t.Helper()
	dsn := pgtest.DSN(t)
	var out []*replica
	for i := range n {
		out = append(out, startReplica(t, dsn, fmt.Sprintf("r%d", i+1)))
	}
	return out, dsn
}

// TestReplicasAnswerAnyTask: a task created on one replica is read,
// awaited (woken within milliseconds when it ends elsewhere), and
// cancelled from the others; the cancel stops the handler on the replica
// that runs it.
func TestReplicasAnswerAnyTask(t *testing.T) {
	rs, _ := replicas(t, 3)
	ctx := relCtx(t, time.Minute)
	hc := newRelHTTPClient(8)
	a := newRelClient(rs[0].url, hc, relCore, "")
	require.NoError(t, a.initialize(ctx))
	bCore := newRelClient(rs[1].url, hc, relCore, "")
	require.NoError(t, bCore.initialize(ctx))
	cExt := newRelClient(rs[2].url, hc, relExt, "")

	// tasks/result on B for a task that runs (and ends) on A.
	// Held 2 s, not 300 ms: the tasks/get below must land while it runs,
	// one HTTP round trip and a PostgreSQL read a loaded machine can make
	// take longer than 300 ms.
	id := relTaskID(a.must(t, ctx, "tools/call", map[string]any{"name": "hold", "arguments": map[string]any{"label": "short", "ms": 2000}, "task": map[string]any{}}))
	require.Equal(t, "short", <-rs[0].started)
	got := cExt.must(t, ctx, "tasks/get", map[string]any{"taskId": id})
	require.Equal(t, "working", got["status"])
	res := bCore.must(t, ctx, "tasks/result", map[string]any{"taskId": id})
	require.Equal(t, "held short on r1", res["content"].([]any)[0].(map[string]any)["text"])

	// Cancel on C stops the handler running on A.
	long := relTaskID(a.must(t, ctx, "tools/call", map[string]any{"name": "hold", "arguments": map[string]any{"label": "long"}, "task": map[string]any{}}))
	require.Equal(t, "long", <-rs[0].started)
	cExt.must(t, ctx, "tasks/cancel", map[string]any{"taskId": long})
	select {
	case l := <-rs[0].stopped:
		require.Equal(t, "long", l)
	case <-time.After(30 * time.Second):
		t.Fatal("the handler on r1 was not stopped by a cancel on r3")
	}
	got = bCore.must(t, ctx, "tasks/get", map[string]any{"taskId": long})
	require.Equal(t, "cancelled", got["status"])
}

// TestReplicaTakeover: a replica stops (its leases are no longer renewed)
// while running a retryable task; another replica takes the task over
// once the lease lapses, runs it again and completes it. How soon is
// logged, not asserted: a busy machine delays it.
func TestReplicaTakeover(t *testing.T) {
	rs, _ := replicas(t, 2)
	ctx := relCtx(t, time.Minute)
	hc := newRelHTTPClient(4)
	a := newRelClient(rs[0].url, hc, relExt, "")
	// Held 3 s, not 200 ms: r1 must be stopped before its run ends, or it
	// completes the task itself and there is nothing to take over; waking
	// the test and closing r1 can take longer than 200 ms on a loaded
	// machine.
	id := relTaskID(a.must(t, ctx, "tools/call", map[string]any{"name": "hold", "arguments": map[string]any{"label": "moved", "ms": 3000}}))
	require.Equal(t, "moved", <-rs[0].started)
	stoppedAt := time.Now()
	rs[0].stop() // as good as a crash for its leases: they are not renewed
	select {
	case l := <-rs[1].started:
		require.Equal(t, "moved", l)
	case <-time.After(replicaLease + time.Minute):
		t.Fatal("r2 did not take the task over")
	}
	takeover := time.Since(stoppedAt)
	b := newRelClient(rs[1].url, hc, relExt, "")
	got := relExtWait(t, ctx, b, id)
	require.Equal(t, "completed", got["status"])
	require.Equal(t, "held moved on r2", got["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])
	t.Logf("takeover after %v (lease %v)", takeover.Round(time.Millisecond), replicaLease)
}

// TestReplicaFencing: a process that lost its lease (another claimed the
// task) cannot write the task's outcome any more.
func TestReplicaFencing(t *testing.T) {
	rs, dsn := replicas(t, 1)
	ctx := relCtx(t, time.Minute)
	a := newRelClient(rs[0].url, newRelHTTPClient(2), relExt, "")
	id := relTaskID(a.must(t, ctx, "tools/call", map[string]any{"name": "hold", "arguments": map[string]any{"label": "fenced", "ms": 1500}}))
	require.Equal(t, "fenced", <-rs[0].started)
	// Another process steals the lease as if r1's had expired (r1 is
	// alive, but presumed dead: paused, partitioned).
	st, err := postgres.Open(context.Background(), dsn, nil)
	require.NoError(t, err)
	defer st.Close()
	stolen, err := st.Claim(ctx, id, "intruder", time.Now().Add(time.Hour), time.Now().Add(2*time.Hour))
	require.NoError(t, err)
	// r1's renewal finds the lease gone and stops its handler; its
	// outcome is never recorded.
	select {
	case l := <-rs[0].stopped:
		require.Equal(t, "fenced", l)
	case <-time.After(30 * time.Second):
		t.Fatal("r1 kept running work whose lease it lost")
	}
	time.Sleep(2 * time.Second) // past the handler's own end
	now, err := st.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusWorking, now.Status, "the old holder wrote nothing")
	require.Equal(t, "intruder", now.LeaseHolder)
	require.Equal(t, stolen.LeaseEpoch, now.LeaseEpoch)
}

// TestReplicasShareWorkflows: a workflow started on one replica is
// continued on another and completes; two continuations of the same step
// racing on two replicas record it once (the other gets the recorded
// result).
func TestReplicasShareWorkflows(t *testing.T) {
	rs, _ := replicas(t, 3)
	ctx := relCtx(t, time.Minute)
	hc := newRelHTTPClient(8)
	a := newRelClient(rs[0].url, hc, relExt, "")
	doc := relHandoff(t, a.must(t, ctx, "prompts/get", map[string]any{"name": "relay", "arguments": map[string]any{"text": "hi"}}))
	require.Equal(t, "middle", doc.RemainingSteps[0].Name)
	var wg sync.WaitGroup
	results := make([]map[string]any, 2)
	for i, rp := range rs[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newRelClient(rp.url, hc, relExt, "")
			results[i] = c.must(t, ctx, "tools/call", map[string]any{"name": "note", "arguments": map[string]any{"text": "middle"},
				"_meta": map[string]any{mcptask.MetaTaskID: doc.TaskID}})
		}()
	}
	wg.Wait()
	replayed := 0
	for _, r := range results {
		sum := r["_meta"].(map[string]any)[mcptask.MetaWorkflow].(map[string]any)
		require.Equal(t, "completed", sum["status"])
		if sum["replayed"] == true {
			replayed++
		}
	}
	require.Equal(t, 1, replayed, "exactly one of the racing continuations ran")
	got := newRelClient(rs[0].url, hc, relExt, "").must(t, ctx, "tasks/get", map[string]any{"taskId": doc.TaskID})
	require.Equal(t, "completed", got["status"])
}

// TestReplicaListenNotifications: subscriptions/listen on one replica
// streams notifications/tasks for a task that runs and ends on another.
func TestReplicaListenNotifications(t *testing.T) {
	rs, _ := replicas(t, 2)
	ctx := relCtx(t, time.Minute)
	hc := newRelHTTPClient(4)
	a := newRelClient(rs[0].url, hc, relExt, "")
	id := relTaskID(a.must(t, ctx, "tools/call", map[string]any{"name": "hold", "arguments": map[string]any{"label": "watched", "ms": 300}}))
	// Listen on r2.
	msgs := listenAll(t, ctx, hc, rs[1].url, id, "0123456789abcdef0123456789abcdef")
	require.GreaterOrEqual(t, len(msgs), 3, "%v", msgs)
	ack := msgs[0]
	require.Equal(t, "notifications/subscriptions/acknowledged", ack["method"])
	require.Equal(t, []any{id}, ack["params"].(map[string]any)["notifications"].(map[string]any)["taskIds"], "only the known task is agreed")
	var statuses []string
	for _, m := range msgs[1 : len(msgs)-1] {
		require.Equal(t, "notifications/tasks", m["method"])
		p := m["params"].(map[string]any)
		require.Equal(t, id, p["taskId"])
		require.EqualValues(t, 7, p["_meta"].(map[string]any)["io.modelcontextprotocol/subscriptionId"])
		statuses = append(statuses, p["status"].(string))
	}
	require.Equal(t, "completed", statuses[len(statuses)-1], "%v", statuses)
	last := msgs[len(msgs)-2]["params"].(map[string]any)
	require.Equal(t, "held watched on r1", last["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])
	require.EqualValues(t, 7, msgs[len(msgs)-1]["id"])
}

// listenAll sends subscriptions/listen for ids to one replica and returns
// every message of the stream up to the final response.
func listenAll(t *testing.T, ctx context.Context, hc *http.Client, url string, ids ...string) []map[string]any {
	t.Helper()
	l := newRelClient(url, hc, relExt, "")
	params := l.withMeta(map[string]any{"notifications": map[string]any{"taskIds": ids}})
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": params})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	for k, v := range l.headers("subscriptions/listen", params) {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var msgs []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m))
		msgs = append(msgs, m)
		if _, final := m["result"]; final {
			break
		}
	}
	return msgs
}
