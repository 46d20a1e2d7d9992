package taskrouter_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// The differential tests of the fast path: the same requests go to two
// HTTP handlers of one router, one answering the task methods itself (the
// default) and one sending them through the SDK (DisableFastPath), and the
// answers must be the same byte for byte (status, headers but Date, body),
// once task ids, session ids and times are named instead of compared.

// diffSide is one of the two handlers and the state a case sees on it:
// its core session and its tasks by name.
type diffSide struct {
	name    string
	url     string
	session string
	// bare is a core session whose client declared no capabilities (the
	// other declared elicitation), with logging at level info.
	bare  string
	tasks map[string]string // name -> task id
}

type diffEnv struct {
	t    *testing.T
	h    *harness
	fast *diffSide
	sdk  *diffSide
	// token is sent as a bearer token when the handlers require one.
	token string
}

// diffOptions shape a pair of handlers.
type diffOptions struct {
	http  taskrouter.HTTPOptions
	wrap  func(http.Handler) http.Handler
	token string
}

func newDiffEnv(t *testing.T, h *harness, o diffOptions) *diffEnv {
	t.Helper()
	serve := func(name string, opts taskrouter.HTTPOptions) *diffSide {
		var hd http.Handler = h.r.HTTPHandler(&opts)
		if o.wrap != nil {
			hd = o.wrap(hd)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		srv := httptest.NewUnstartedServer(hd)
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		return &diffSide{name: name, url: srv.URL + "/", tasks: map[string]string{}}
	}
	fastOpts, sdkOpts := o.http, o.http
	fastOpts.DisableFastPath, sdkOpts.DisableFastPath = false, true
	e := &diffEnv{t: t, h: h, fast: serve("fast", fastOpts), sdk: serve("sdk", sdkOpts), token: o.token}
	for _, s := range e.sides() {
		s.session = e.initialize(s, "2025-11-25", `{"elicitation":{}}`)
		s.bare = e.initialize(s, "2025-11-25", `{}`)
		r := e.post(s, bareHeaders(s), `{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"info"}}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
	}
	// One 2026-07-28 request through the SDK first, as a real server sees
	// one before the fast path knows the version is supported.
	e.post(e.sdk, extHeaders("tools/list", ""), `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+extMeta+`}}`)
	return e
}

func (e *diffEnv) sides() []*diffSide { return []*diffSide{e.fast, e.sdk} }

// rawResponse is an HTTP response as the client saw it.
type rawResponse struct {
	status int
	header http.Header
	body   string
}

// post sends a POST with the default MCP headers plus hdr (a value of ""
// deletes a default) and returns the whole response.
func (e *diffEnv) post(s *diffSide, hdr map[string]string, body string) rawResponse {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url, strings.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	return e.do(req)
}

func (e *diffEnv) do(req *http.Request) rawResponse {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// initialize opens a core session on s whose client declares caps and
// returns its id.
func (e *diffEnv) initialize(s *diffSide, version, caps string) string {
	e.t.Helper()
	r := e.post(s, nil, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,"capabilities":%s,"clientInfo":{"name":"diff","version":"1"}}}`, version, caps))
	require.Equal(e.t, http.StatusOK, r.status, r.body)
	sid := r.header.Get("Mcp-Session-Id")
	require.NotEmpty(e.t, sid)
	r = e.post(s, map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": version}, `{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
	require.Equal(e.t, http.StatusAccepted, r.status, r.body)
	return sid
}

// coreHeaders are the headers of a request on the side's session.
func coreHeaders(s *diffSide) map[string]string {
	return map[string]string{"Mcp-Session-Id": s.session, "Mcp-Protocol-Version": "2025-11-25"}
}

// bareHeaders are the headers of a request on the side's bare session.
func bareHeaders(s *diffSide) map[string]string {
	return map[string]string{"Mcp-Session-Id": s.bare, "Mcp-Protocol-Version": "2025-11-25"}
}

// extMeta is the per-request _meta of a 2026-07-28 request declaring the
// tasks extension.
const extMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}},"io.modelcontextprotocol/clientInfo":{"name":"diff","version":"1"}}`

func extHeaders(method, name string) map[string]string {
	h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	return h
}

// result decodes the JSON-RPC response in a raw response (JSON or SSE).
func result(t *testing.T, r rawResponse) map[string]any {
	t.Helper()
	body := r.body
	if strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "data: ") {
				body = strings.TrimPrefix(line, "data: ")
			}
		}
	}
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &m), "%d %s", r.status, r.body)
	return m
}

// makeTask creates a task of the given kind on side s, in the core
// dialect through s's session, and waits for it to settle.
func (e *diffEnv) makeTask(s *diffSide, name, kind string) {
	e.t.Helper()
	var params string
	switch kind {
	case "done":
		params = `{"name":"sleepy","arguments":{"ms":0},"task":{"ttl":60000}}`
	case "working":
		params = fmt.Sprintf(`{"name":"sleepy","arguments":{"ms":60000,"label":"%s-%s"},"task":{}}`, s.name, name)
	case "failed":
		params = `{"name":"boom","arguments":{},"task":{}}`
	case "rpcerr":
		params = `{"name":"rpcerr","arguments":{},"task":{}}`
	case "ask":
		params = `{"name":"ask","arguments":{},"task":{}}`
	default:
		e.t.Fatalf("unknown task kind %q", kind)
	}
	r := e.post(s, coreHeaders(s), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":`+params+`}`)
	res := result(e.t, r)
	task, ok := res["result"].(map[string]any)["task"].(map[string]any)
	require.True(e.t, ok, "create %s: %s", kind, r.body)
	id := task["taskId"].(string)
	s.tasks[name] = id
	want := map[string]string{"done": "completed", "working": "working", "failed": "failed", "rpcerr": "failed", "ask": "input_required"}[kind]
	require.Eventually(e.t, func() bool {
		t, err := e.h.r.Task(context.Background(), id)
		return err == nil && string(t.Status) == want
	}, 30*time.Second, 5*time.Millisecond, "task %s never %s", kind, want)
}

var (
	isoTime = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	anyTask = regexp.MustCompile(`\b[0-9a-f]{32}\b`)
)

// sortLists orders the tasks of a tasks/list result in the body (JSON, or
// the data of SSE events) by their text: the list is in task id order,
// and the two sides' ids differ.
func sortLists(body string) string {
	lines := strings.Split(body, "\n")
	for i, line := range lines {
		prefix := ""
		if strings.HasPrefix(line, "data: ") {
			prefix, line = "data: ", strings.TrimPrefix(line, "data: ")
		}
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		var res map[string]json.RawMessage
		if json.Unmarshal(m["result"], &res) != nil || res["tasks"] == nil {
			continue
		}
		var tasks []json.RawMessage
		if json.Unmarshal(res["tasks"], &tasks) != nil {
			continue
		}
		sort.Slice(tasks, func(a, b int) bool { return string(tasks[a]) < string(tasks[b]) })
		joined := make([]string, len(tasks))
		for j, t := range tasks {
			joined[j] = string(t)
		}
		lines[i] = prefix + "(sorted) " + strings.Join(joined, ",")
	}
	return strings.Join(lines, "\n")
}

// normalize names what differs between the sides by nature.
func (e *diffEnv) normalize(s *diffSide, r rawResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d\n", r.status)
	keys := make([]string, 0, len(r.header))
	sse := strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream")
	for k := range r.header {
		// An SSE reply the fast path writes in one go has a length; the
		// SDK flushes its event, so its body is chunked, without one.
		if k != "Date" && (k != "Content-Length" || !sse) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(r.header[k], ", "))
	}
	b.WriteString("\n")
	b.WriteString(r.body)
	out := b.String()
	for name, id := range s.tasks {
		out = strings.ReplaceAll(out, id, "<task "+name+">")
	}
	if s.session != "" {
		out = strings.ReplaceAll(out, s.session, "<session>")
	}
	if s.bare != "" {
		out = strings.ReplaceAll(out, s.bare, "<bare session>")
	}
	out = anyTask.ReplaceAllString(out, "<new task>")
	return sortLists(isoTime.ReplaceAllString(out, "<time>"))
}

// diffCase is one request, built per side.
type diffCase struct {
	name string
	// tasks the case needs on each side, by name -> kind.
	tasks map[string]string
	// req builds the request for a side: its headers and body.
	req func(s *diffSide) (map[string]string, string)
	// fast: the fast path must serve it (otherwise it must not matter).
	fast bool
}

// run sends the case to both sides and requires the same answer.
func (e *diffEnv) run(c diffCase) {
	e.t.Helper()
	var got [2]string
	for i, s := range e.sides() {
		for name, kind := range c.tasks {
			if _, ok := s.tasks[name]; !ok {
				e.makeTask(s, name, kind)
			}
		}
		hdr, body := c.req(s)
		before := taskrouter.FastServed(e.h.r)
		r := e.post(s, hdr, body)
		served := taskrouter.FastServed(e.h.r) - before
		if s == e.sdk {
			require.Zero(e.t, served, "%s: the SDK side took the fast path", c.name)
		} else if c.fast {
			require.NotZero(e.t, served, "%s: the fast path did not serve it:\n%s", c.name, r.body)
		}
		got[i] = e.normalize(s, r)
	}
	require.Equal(e.t, got[1], got[0], "%s: fast path (actual) vs SDK (expected)", c.name)
}

func coreReq(method, params string) func(*diffSide) (map[string]string, string) {
	return func(s *diffSide) (map[string]string, string) {
		return coreHeaders(s), fill(s, `{"jsonrpc":"2.0","id":7,"method":"`+method+`"`+params+`}`)
	}
}

// bareReq is a request on the side's bare session.
func bareReq(method, params string) func(*diffSide) (map[string]string, string) {
	return func(s *diffSide) (map[string]string, string) {
		return bareHeaders(s), fill(s, `{"jsonrpc":"2.0","id":7,"method":"`+method+`"`+params+`}`)
	}
}

func extReq(method, params, name string) func(*diffSide) (map[string]string, string) {
	return func(s *diffSide) (map[string]string, string) {
		return extHeaders(method, fill(s, name)), fill(s, `{"jsonrpc":"2.0","id":"x-7","method":"`+method+`"`+params+`}`)
	}
}

// fill replaces {name} with the side's task id of that name.
func fill(s *diffSide, in string) string {
	for name, id := range s.tasks {
		in = strings.ReplaceAll(in, "{"+name+"}", id)
	}
	return in
}

// foldInstantTools gives instant tools (sleepy with ms 0) time to end
// within the instant window even on a loaded machine, so that their
// tasks are created ended on both sides alike.
func foldInstantTools(c *taskrouter.Options) { c.InstantWindow = time.Second }

// TestFastPathSameAsSDK sends every case to both handlers, in the
// handlers' SSE mode and in their JSON mode.
func TestFastPathSameAsSDK(t *testing.T) {
	for _, jsonMode := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonMode), func(t *testing.T) {
			h := newHarness(t, foldInstantTools)
			go func() {
				for range h.started {
				}
			}()
			e := newDiffEnv(t, h, diffOptions{http: taskrouter.HTTPOptions{Streamable: mcp.StreamableHTTPOptions{JSONResponse: jsonMode}}})
			require.True(t, taskrouter.FastPathUsable(h.r))
			// One extension request through the SDK first, as a real
			// server sees before the fast path knows the version.
			e.post(e.sdk, extHeaders("tools/list", ""), `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+extMeta+`}}`)
			for _, c := range append(coreCases(), extCases()...) {
				t.Run(c.name, func(t *testing.T) { e.t = t; e.run(c) })
			}
		})
	}
}

// TestFastPathOwnersSameAsSDK: with bearer authentication, tasks are
// bound to their user, and sessions to theirs.
func TestFastPathOwnersSameAsSDK(t *testing.T) {
	h := newHarness(t, foldInstantTools)
	go func() {
		for range h.started {
		}
	}()
	verifier := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if token == "alice" || token == "bob" || token == "nouser" {
			user := token
			if token == "nouser" {
				user = ""
			}
			return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
		}
		return nil, auth.ErrInvalidToken
	}
	e := newDiffEnv(t, h, diffOptions{wrap: auth.RequireBearerToken(verifier, nil), token: "alice"})
	for _, s := range e.sides() {
		e.makeTask(s, "mine", "done")
	}
	cases := []diffCase{
		{name: "get own", req: coreReq("tasks/get", `,"params":{"taskId":"{mine}"}`), fast: true},
		{name: "list own", req: coreReq("tasks/list", ``), fast: true},
		{name: "result own", req: coreReq("tasks/result", `,"params":{"taskId":"{mine}"}`), fast: true},
		{name: "ext get own", req: extReq("tasks/get", `,"params":{"taskId":"{mine}",`+extMeta+`}`, "{mine}"), fast: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { e.t = t; e.run(c) })
	}
	// bob: another user, on alice's session (refused by the SDK) and on
	// none (stateless), never sees alice's task.
	e.token = "bob"
	for _, c := range []diffCase{
		{name: "bob on alice's session", req: coreReq("tasks/get", `,"params":{"taskId":"{mine}"}`)},
		{name: "bob ext get", req: extReq("tasks/get", `,"params":{"taskId":"{mine}",`+extMeta+`}`, "{mine}"), fast: true},
		{name: "bob ext cancel", req: extReq("tasks/cancel", `,"params":{"taskId":"{mine}",`+extMeta+`}`, "{mine}"), fast: true},
	} {
		t.Run(c.name, func(t *testing.T) { e.t = t; e.run(c) })
	}
	e.token = "nouser"
	t.Run("token without a user", func(t *testing.T) {
		e.t = t
		e.run(diffCase{name: "no user", req: extReq("tasks/get", `,"params":{"taskId":"{mine}",`+extMeta+`}`, "{mine}"), fast: true})
	})
	e.token = ""
	t.Run("no token", func(t *testing.T) {
		e.t = t
		e.run(diffCase{name: "no token", req: coreReq("tasks/get", `,"params":{"taskId":"{mine}"}`)})
	})
}

// TestFastPathSessionsSameAsSDK: a deleted session is refused, and a
// session belongs to the handler that made it.
func TestFastPathSessionsSameAsSDK(t *testing.T) {
	h := newHarness(t, foldInstantTools)
	go func() {
		for range h.started {
		}
	}()
	e := newDiffEnv(t, h, diffOptions{})
	get := diffCase{name: "get", tasks: map[string]string{"done": "done"}, req: coreReq("tasks/get", `,"params":{"taskId":"{done}"}`), fast: true}
	e.run(get)
	// A session of one handler is unknown to the other.
	r1 := e.post(e.fast, map[string]string{"Mcp-Session-Id": e.sdk.session}, fill(e.fast, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`))
	r2 := e.post(e.sdk, map[string]string{"Mcp-Session-Id": e.fast.session}, fill(e.sdk, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`))
	require.Equal(t, http.StatusNotFound, r1.status)
	require.Equal(t, r2.status, r1.status)
	require.Equal(t, r2.body, r1.body)
	// Delete both sessions, then ask again.
	for _, s := range e.sides() {
		req, err := http.NewRequest(http.MethodDelete, s.url, nil)
		require.NoError(t, err)
		req.Header.Set("Mcp-Session-Id", s.session)
		require.Equal(t, http.StatusNoContent, e.do(req).status)
	}
	get.fast = false
	e.run(get)
	r := e.post(e.fast, coreHeaders(e.fast), fill(e.fast, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"{done}"}}`))
	require.Equal(t, http.StatusNotFound, r.status, r.body)
}

// TestFastPathWaitsSameAsSDK: a tasks/result that blocks, one cancelled
// by notifications/cancelled, and a request reusing an id in flight.
func TestFastPathWaitsSameAsSDK(t *testing.T) {
	h := newHarness(t, foldInstantTools)
	go func() {
		for range h.started {
		}
	}()
	e := newDiffEnv(t, h, diffOptions{})
	var got [2][]string
	for i, s := range e.sides() {
		// A blocking tasks/result: answered once the task ends.
		e.makeTask(s, "slow", "working")
		type answer struct{ r rawResponse }
		ch := make(chan rawResponse, 1)
		go func() {
			ch <- e.post(s, coreHeaders(s), fill(s, `{"jsonrpc":"2.0","id":41,"method":"tasks/result","params":{"taskId":"{slow}"}}`))
		}()
		waitWaiters(t, h, 1)
		// The same id again while it is in flight.
		dup := e.post(s, coreHeaders(s), fill(s, `{"jsonrpc":"2.0","id":41,"method":"tasks/get","params":{"taskId":"{slow}"}}`))
		got[i] = append(got[i], e.normalize(s, dup))
		// Cancel the task: the waiting tasks/result answers.
		e.post(s, coreHeaders(s), fill(s, `{"jsonrpc":"2.0","id":42,"method":"tasks/cancel","params":{"taskId":"{slow}"}}`))
		got[i] = append(got[i], e.normalize(s, <-ch))
		waitWaiters(t, h, 0)

		// A tasks/result the client cancels with notifications/cancelled.
		e.makeTask(s, "slow2", "working")
		go func() {
			ch <- e.post(s, coreHeaders(s), fill(s, `{"jsonrpc":"2.0","id":43,"method":"tasks/result","params":{"taskId":"{slow2}"}}`))
		}()
		waitWaiters(t, h, 1)
		c := e.post(s, coreHeaders(s), `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":43,"reason":"enough"}}`)
		got[i] = append(got[i], e.normalize(s, c))
		got[i] = append(got[i], e.normalize(s, <-ch))
		waitWaiters(t, h, 0)
		e.post(s, coreHeaders(s), fill(s, `{"jsonrpc":"2.0","id":44,"method":"tasks/cancel","params":{"taskId":"{slow2}"}}`))
		_ = answer{}
	}
	require.Equal(t, got[1], got[0])
}

// TestFastPathInputSameAsSDK: a core tasks/result whose task asks the
// client for input is served on the request's stream, as the SDK serves
// it (the fast path hands it over).
func TestFastPathInputSameAsSDK(t *testing.T) {
	h := newHarness(t, foldInstantTools)
	go func() {
		for range h.started {
		}
	}()
	e := newDiffEnv(t, h, diffOptions{})
	var got [2][]string
	for i, s := range e.sides() {
		e.makeTask(s, "ask", "ask")
		req, err := http.NewRequest(http.MethodPost, s.url, strings.NewReader(fill(s, `{"jsonrpc":"2.0","id":51,"method":"tasks/result","params":{"taskId":"{ask}"}}`)))
		require.NoError(t, err)
		for k, v := range coreHeaders(s) {
			req.Header.Set(k, v)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		sc := bufio.NewScanner(resp.Body)
		var events []string
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "data: ") {
				continue
			}
			data := strings.TrimPrefix(line, "data: ")
			events = append(events, e.normalize(s, rawResponse{body: data}))
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(data), &m))
			if m["method"] == "elicitation/create" {
				answer := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"action":"accept","content":{"ok":true}}}`, mustJSON(m["id"]))
				r := e.post(s, coreHeaders(s), answer)
				require.Equal(t, http.StatusAccepted, r.status, r.body)
				continue
			}
			if m["id"] != nil {
				break
			}
		}
		resp.Body.Close()
		got[i] = events
	}
	require.Equal(t, got[1], got[0])
	require.Len(t, got[0], 2, "an elicitation, then the result")
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func waitWaiters(t *testing.T, h *harness, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return h.r.Stats().Waiters == n }, 30*time.Second, time.Millisecond)
}

// TestFastPathPlainCallsSameAsSDK: plain calls that outlive the host
// deadline (they answer naming the task that holds the work), and a
// plain call that runs in the request, cancelled by the client.
func TestFastPathPlainCallsSameAsSDK(t *testing.T) {
	h := newHarness(t, func(o *taskrouter.Options) { o.HostDeadline = 100 * time.Millisecond })
	h.r.AddTaskTools(nil)
	h.r.AcceptTaskIDArgument("echo") // a tool a workflow asks its client to call
	h.r.AcceptTaskIDArgument("sleepy")
	e := newDiffEnv(t, h, diffOptions{})
	for _, c := range []diffCase{
		{name: "a task of a tool that takes _task_id", req: bareReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":60000,"label":"task"},"task":{"ttl":60000}}`), fast: true},
		{name: "a task of a tool that takes _task_id, with it", req: bareReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":60000,"label":"task","_task_id":"t1"},"task":{"ttl":60000}}`)},
		{name: "a tool that takes _task_id", req: bareReq("tools/call", `,"params":{"name":"echo","arguments":{"text":"x"}}`), fast: true},
		{name: "a tool that takes _task_id, with it", req: bareReq("tools/call", `,"params":{"name":"echo","arguments":{"text":"x","_task_id":"t1"}}`)},
		{name: "a tool that takes _task_id, a bad one", req: bareReq("tools/call", `,"params":{"name":"echo","arguments":{"text":"x","_task_id":7}}`)},
		{name: "outlives the deadline", req: bareReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":400,"label":"long"}}`), fast: true},
		{name: "ext, outlives the deadline", req: extReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":400,"label":"long"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`, "sleepy"), fast: true},
		{name: "within the deadline", req: bareReq("tools/call", `,"params":{"name":"sleepy","arguments":{"ms":1,"label":"quick"}}`), fast: true},
	} {
		t.Run(c.name, func(t *testing.T) { e.t = t; e.run(c) })
	}
	e.t = t

	// A call that runs in the request (a tool that is never a task),
	// cancelled with notifications/cancelled while it runs.
	var got [2][]string
	for i, s := range e.sides() {
		before := taskrouter.FastServed(h.r)
		ch := make(chan rawResponse, 1)
		go func() {
			ch <- e.post(s, bareHeaders(s), `{"jsonrpc":"2.0","id":61,"method":"tools/call","params":{"name":"doze","arguments":{"ms":60000,"label":"doze-`+s.name+`"}}}`)
		}()
		for label := ""; label != "doze-"+s.name; {
			label = <-h.started
		}
		c := e.post(s, bareHeaders(s), `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":61,"reason":"enough"}}`)
		got[i] = append(got[i], e.normalize(s, c), e.normalize(s, <-ch))
		require.True(t, h.wasCancelled("doze-"+s.name))
		if s == e.fast {
			require.NotZero(t, taskrouter.FastServed(h.r)-before)
		}
	}
	require.Equal(t, got[1], got[0])
}
