package integration

// Hostile families at the edge of the wire, where go-sdk's own answers are
// no answer a client can use, and the decisions README "Security" and
// docs/INTEROP.md record: request ids, code 0, a closed session, unknown
// methods in 2026-07-28, stdio lines.

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHostileRequestIDs: an id go-sdk would echo altered (a fraction, an
// exponent, an integer past ±2^53-1) is refused with HTTP 400 and -32600
// carrying the id exactly as sent, on both paths and in both dialects;
// safe ids are echoed as sent.
func TestHostileRequestIDs(t *testing.T) {
	onPaths(t, relServerOptions{}, func(t *testing.T, path string, s *relServer) {
		ctx := relCtx(t, time.Minute)
		co := newRelClient(s.url, newRelHTTPClient(2), relCore, "")
		require.NoError(t, co.initialize(ctx))
		ex := newRelClient(s.url, newRelHTTPClient(2), relExt, "")
		done := relTaskID(co.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"label": "i"}, "task": map[string]any{}}))
		for _, c := range []*relClient{co, ex} {
			for _, id := range []string{"1e300", "9007199254740993", "-9007199254740993", "2.5", "1.0", "1E2"} {
				env := c.envelope("tasks/get", map[string]any{"taskId": done})
				env = []byte(strings.Replace(string(env), `"id":`, `"id":`+id+`,"x":`, 1))
				h := c.headers("tasks/get", map[string]any{"taskId": done})
				rep, err := c.post(ctx, env, h)
				require.NoError(t, err)
				require.Equal(t, "http400+rpc:-32600", hostileOutcome(rep), "%s id %s: %s", c.dialect, id, rep)
				require.Contains(t, string(rep.Body), `"id":`+id+`,`, "%s id %s echoed exactly", c.dialect, id)
			}
			for _, id := range []string{"9007199254740991", "-9007199254740991", "0", `"1e300"`} {
				env := c.envelope("tasks/get", map[string]any{"taskId": done})
				env = []byte(strings.Replace(string(env), `"id":`, `"id":`+id+`,"x":`, 1))
				rep, err := c.post(ctx, env, c.headers("tasks/get", map[string]any{"taskId": done}))
				require.NoError(t, err)
				require.Equal(t, "ok", hostileOutcome(rep), "%s id %s: %s", c.dialect, id, rep)
				require.Contains(t, string(rep.Body), `"id":`+id+`,`, "%s id %s echoed exactly", c.dialect, id)
			}
		}
	})
}

// TestHostileNoCodeZero: go-sdk answers code 0 for errors without one (a
// call on no session; a request cancelled while it waited). Every error
// reaching a client has a JSON-RPC code: a core call over HTTP that names
// no session is a 400 with -32600, on both paths; a tasks/result whose
// client gave up is a -32603 saying so.
func TestHostileNoCodeZero(t *testing.T) {
	onPaths(t, relServerOptions{}, func(t *testing.T, path string, s *relServer) {
		ctx := relCtx(t, time.Minute)
		co := newRelClient(s.url, newRelHTTPClient(2), relCore, "")
		for _, method := range []string{"tasks/get", "tools/list", "ping"} {
			rep, err := co.call(ctx, method, map[string]any{"taskId": "x"})
			require.NoError(t, err)
			require.Equal(t, "http400+rpc:-32600", hostileOutcome(rep), "%s without a session: %s", method, rep)
			require.Contains(t, rep.Err.Message, "initialize")
		}
	})
}

// TestHostileStdioLines: example 62 over stdio (a real process) answers a
// line go-sdk cannot read (not JSON, not a message, a batch, an id it
// would alter, a request before initialize) with a JSON-RPC error of the
// right code, and keeps serving: the process no longer ends at the first
// malformed line.
func TestHostileStdioLines(t *testing.T) {
	bin := exampleBinary(t, "./examples/62_tasks_workflow")
	cmd := exec.Command(bin, "serve", "-stdio", "-db", t.TempDir()+"/tasks.db")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); <-exited })
	lines := make(chan map[string]any, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["method"] == nil {
				lines <- m
			}
		}
		close(lines)
	}()
	send := func(line string) { _, err := io.WriteString(stdin, line+"\n"); require.NoError(t, err) }
	next := func(what string) map[string]any {
		select {
		case m, ok := <-lines:
			require.True(t, ok, "%s: the server's stdout ended: %s", what, stderr.String())
			return m
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no answer: %s", what, stderr.String())
		}
		return nil
	}
	code := func(m map[string]any) float64 {
		e, _ := m["error"].(map[string]any)
		c, _ := e["code"].(float64)
		return c
	}

	send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	m := next("a call before initialize")
	require.EqualValues(t, -32600, code(m), "%v", m)
	require.EqualValues(t, 1, m["id"])
	send(`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"hostile","version":"1"}}}`)
	require.NotNil(t, next("initialize")["result"])
	send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
	for _, c := range []struct {
		line string
		code float64
		id   any
	}{
		{`this is not JSON`, -32700, nil},
		{`{"jsonrpc":"2.0","id":3,"method":"ping"`, -32700, nil},
		{`{"jsonrpc":"2.0","id":4,"method":"ping"} {"jsonrpc":"2.0","id":5,"method":"ping"}`, -32700, nil},
		{`42`, -32600, nil},
		{`{"hello":"world"}`, -32600, nil},
		{`[{"jsonrpc":"2.0","id":6,"method":"ping"}]`, -32600, nil},
		{`{"jsonrpc":"2.0","id":2.5,"method":"ping"}`, -32600, 2.5},
		{`{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`, -32600, float64(9007199254740993)},
	} {
		send(c.line)
		m := next(c.line)
		require.EqualValues(t, c.code, code(m), "%s: %v", c.line, m)
		require.Equal(t, c.id, m["id"], "%s", c.line)
	}
	send(`{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	m = next("a ping after it all")
	require.EqualValues(t, 7, m["id"])
	require.NotNil(t, m["result"], "the server still serves: %v", m)
	select {
	case err := <-exited:
		t.Fatalf("the server exited: %v: %s", err, stderr.String())
	default:
	}
}

// TestHostileUnknownMethod2026: in the 2026-07-28 dialect a method the
// server does not implement (tasks/result and tasks/list are not part of
// it, and a typo) is HTTP 404 with -32601, as the Streamable HTTP
// transport requires ("MUST respond with 404 Not Found and a JSON-RPC
// error with code -32601"), on both paths; the JSON-RPC body tells it
// from a 404 of a server with no MCP endpoint. In the core dialect the
// router's -32601 comes with HTTP 200.
func TestHostileUnknownMethod2026(t *testing.T) {
	onPaths(t, relServerOptions{}, func(t *testing.T, path string, s *relServer) {
		ctx := relCtx(t, time.Minute)
		ex := newRelClient(s.url, newRelHTTPClient(2), relExt, "")
		co := newRelClient(s.url, newRelHTTPClient(2), relCore, "")
		require.NoError(t, co.initialize(ctx))
		for _, method := range []string{"tasks/result", "tasks/list", "tasks/gett"} {
			rep, err := ex.call(ctx, method, map[string]any{"taskId": "0123456789abcdef0123456789abcdef"})
			require.NoError(t, err)
			require.Equal(t, "http404+rpc:-32601", hostileOutcome(rep), "ext %s: %s", method, rep)
		}
		rep, err := co.call(ctx, "tasks/update", map[string]any{"taskId": "x"})
		require.NoError(t, err)
		require.Equal(t, "rpc:-32601", hostileOutcome(rep), "core tasks/update: %s", rep)
	})
}

// TestHostileSessionDeleteEndsWaits: a tasks/result blocked on a task is
// ended when its session is deleted, at once, on both paths (it used to
// end on the fast path and wait on the SDK's until the task ended).
func TestHostileSessionDeleteEndsWaits(t *testing.T) {
	outcomes := map[string]string{}
	onPaths(t, relServerOptions{}, func(t *testing.T, path string, s *relServer) {
		ctx := relCtx(t, time.Minute)
		co := newRelClient(s.url, newRelHTTPClient(4), relCore, "")
		require.NoError(t, co.initialize(ctx))
		long := relTaskID(co.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"ms": 600000, "label": "long"}, "task": map[string]any{}}))
		got := make(chan string, 1)
		go func() {
			rep, err := co.call(ctx, "tasks/result", map[string]any{"taskId": long})
			if err != nil {
				got <- "transport error"
				return
			}
			got <- hostileOutcome(rep)
		}()
		require.Eventually(t, func() bool { return s.srv.Router.Stats().Waiters == 1 }, 30*time.Second, time.Millisecond)
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, s.url, nil)
		require.NoError(t, err)
		req.Header.Set("Mcp-Session-Id", co.session)
		req.Header.Set("Mcp-Protocol-Version", relCoreVersion)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		select {
		case o := <-got:
			outcomes[path] = o
		case <-time.After(30 * time.Second):
			t.Fatalf("the tasks/result of a deleted session still waits")
		}
		require.Eventually(t, func() bool { return s.srv.Router.Stats().Waiters == 0 }, 30*time.Second, time.Millisecond)
	})
	require.Equal(t, outcomes["fast"], outcomes["sdk"], "both paths end it alike: %v", outcomes)
}

// TestHostileMetricsAreCountsOnly: with bearer tokens required, /metrics
// still answers without one (the decision README "Security" records:
// Prometheus scrapes without MCP credentials); what it tells is counts by
// tool, workflow, version and step names, never a task id, an owner, an
// argument or a result.
func TestHostileMetricsAreCountsOnly(t *testing.T) {
	bin := exampleBinary(t, "./examples/62_tasks_workflow")
	p := startProc(t, bin, nil, "serve", "-http", "ADDR", "-db", t.TempDir()+"/tasks.db", "-tokens", "s3cret-token=alice-the-owner")
	ctx := relCtx(t, time.Minute)
	c := newRelClient(p.url, newRelHTTPClient(2), relExt, "s3cret-token")
	secret := "argument-value-nobody-else-may-read"
	id := relTaskID(c.must(t, ctx, "tools/call", map[string]any{"name": "generate_report", "arguments": map[string]any{"topic": secret}}))
	wf := relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "release_notes", "arguments": map[string]any{"repo": secret}})).TaskID
	rep, err := newRelClient(p.url, newRelHTTPClient(2), relExt, "").call(ctx, "tasks/get", map[string]any{"taskId": id})
	require.NoError(t, err)
	require.Equal(t, "http:401", hostileOutcome(rep), "the MCP endpoint needs the token")

	resp, err := http.Get(strings.TrimSuffix(p.url, "/mcp") + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "/metrics answers without a token")
	text := string(body)
	require.Contains(t, text, "taskbridge_", "it is the engine's metrics")
	for _, private := range []string{id, wf, secret, "alice-the-owner", "s3cret-token"} {
		require.NotContains(t, text, private, "/metrics must not carry %q", private)
	}
}
