package integration

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/examples/conformance/conftools"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/store/postgres"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// confReplica serves the conformance tools on a PostgreSQL store as
// replica name, over HTTP; it returns the endpoint.
func confReplica(t *testing.T, dsn, name string) string {
	t.Helper()
	st, err := postgres.Open(context.Background(), dsn, nil)
	require.NoError(t, err)
	_, router, err := conftools.NewServer(st, &taskrouter.Options{ReplicaID: name, LeaseDuration: replicaLease,
		ChangePollInterval: 200 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, router.Start(context.Background()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/mcp", router.HTTPHandler(nil))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close(); _ = router.Close(); _ = st.Close() })
	return "http://" + ln.Addr().String() + "/mcp"
}

// relInputKeys waits until tasks/get through c shows task id
// input_required with n pending input requests, and returns them.
func relInputKeys(t *testing.T, ctx context.Context, c *relClient, id string, n int) map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := c.must(t, ctx, "tasks/get", map[string]any{"taskId": id})
		reqs, _ := got["inputRequests"].(map[string]any)
		if got["status"] == "input_required" && len(reqs) == n {
			return reqs
		}
		require.True(t, time.Now().Before(deadline), "task %s: want input_required with %d requests, got %v", id, n, got)
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReplicaInputRequests: a tool task that asks the client for input
// (extension dialect: inputRequests in tasks/get, answers by tasks/update)
// while its handler runs on one replica is read and answered through the
// other: tasks/get there shows the pending requests, a partial answer
// leaves only the unanswered one pending (at once, on either replica),
// and the task completes with the answers.
func TestReplicaInputRequests(t *testing.T) {
	dsn := pgtest.DSN(t)
	r1, r2 := confReplica(t, dsn, "r1"), confReplica(t, dsn, "r2")
	ctx := relCtx(t, time.Minute)
	hc := newRelHTTPClient(4)
	c1, c2 := newRelClient(r1, hc, relExt, ""), newRelClient(r2, hc, relExt, "")

	id := relTaskID(c1.must(t, ctx, "tools/call", map[string]any{"name": "multi_input", "arguments": map[string]any{}}))
	require.NotEmpty(t, id)
	reqs := relInputKeys(t, ctx, c2, id, 2)
	var nameKey, confirmKey string
	for key, v := range reqs {
		req := v.(map[string]any)
		require.Equal(t, "elicitation/create", req["method"])
		switch req["params"].(map[string]any)["message"] {
		case "Enter your name:":
			nameKey = key
		case "Confirm action?":
			confirmKey = key
		}
	}
	require.NotEmpty(t, nameKey, "%v", reqs)
	require.NotEmpty(t, confirmKey, "%v", reqs)

	// Answer one on r2: both replicas show only the other pending.
	c2.must(t, ctx, "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{
		nameKey:       map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}},
		"no-such-key": map[string]any{"action": "decline"},
	}})
	for _, c := range []*relClient{c2, c1} {
		got := c.must(t, ctx, "tasks/get", map[string]any{"taskId": id})
		require.Equal(t, "input_required", got["status"], "%v", got)
		require.Equal(t, []any{confirmKey}, keysOf(got["inputRequests"]), "%v", got)
	}

	// Answer the other on r2: the handler on r1 goes on and completes.
	c2.must(t, ctx, "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{
		confirmKey: map[string]any{"action": "accept", "content": map[string]any{"confirm": true}},
	}})
	done := relExtWait(t, ctx, c2, id)
	require.Equal(t, "completed", done["status"], "%v", done)
	text := done["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"]
	require.Equal(t, `name="Ada" confirmed=true`, text)
}

func keysOf(m any) []any {
	var out []any
	for k := range m.(map[string]any) {
		out = append(out, k)
	}
	return out
}
