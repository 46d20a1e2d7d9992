package integration

// The hostile-input suite: what a hostile client tries, family by family
// (hostileFamilies in hostile_helpers_test.go), against real servers over
// Streamable HTTP on 127.0.0.1 and stdio, on the fast path and on the
// SDK's, on bbolt and PostgreSQL where the store matters. TestHostileInput
// (reliability_hostile_test.go) holds the malformed-request families,
// hostile_crash_test.go those that need a SIGKILL, hostile_wire_test.go
// the wire's edges; this file the rest. Run it alone with
// go test ./integration -run 'TestHostile|TestIsolation|TestTokenOwners|TestStatelessFlood'.

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/postgres"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// TestHostileDamagedRecords: a task whose stored JSON is damaged (its
// result, its error's data) is answered with the same -32603 on the fast
// path and on the SDK's, by tasks/get, tasks/result and task_result, on
// bbolt and PostgreSQL: never a hang, never an empty body.
func TestHostileDamagedRecords(t *testing.T) {
	for _, be := range hostileStores {
		t.Run(be.name, func(t *testing.T) {
			spec := be.spec(t)
			s := newRelServer(t, relServerOptions{db: spec})
			ctx := relCtx(t, 2*time.Minute)
			co := newRelClient(s.url, newRelHTTPClient(2), relCore, "")
			require.NoError(t, co.initialize(ctx))
			done := relTaskID(co.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"label": "d"}, "task": map[string]any{}}))
			co.must(t, ctx, "tasks/result", map[string]any{"taskId": done})
			failed := relTaskID(co.must(t, ctx, "tools/call", map[string]any{"name": "rpcfail", "arguments": map[string]any{}, "task": map[string]any{}}))
			_, err := co.call(ctx, "tasks/result", map[string]any{"taskId": failed})
			require.NoError(t, err)
			s.close()
			hostileDamage(t, spec, done, "result")
			hostileDamage(t, spec, failed, "error")

			outcomes := map[string][]string{}
			for _, path := range hostilePaths {
				s := newRelServer(t, relServerOptions{db: spec, httpOpts: &taskrouter.HTTPOptions{DisableFastPath: path.noFast}})
				co := newRelClient(s.url, newRelHTTPClient(2), relCore, "")
				require.NoError(t, co.initialize(ctx))
				ex := newRelClient(s.url, newRelHTTPClient(2), relExt, "")
				for _, c := range []struct {
					name   string
					c      *relClient
					method string
					params map[string]any
					want   string
				}{
					{"core tasks/result, damaged result", co, "tasks/result", map[string]any{"taskId": done}, "rpc:-32603"},
					{"core tasks/result, damaged error data", co, "tasks/result", map[string]any{"taskId": failed}, "rpc:-32603"},
					{"core tasks/get, damaged result (no result in the reply)", co, "tasks/get", map[string]any{"taskId": done}, "ok"},
					{"ext tasks/get, damaged result", ex, "tasks/get", map[string]any{"taskId": done}, "rpc:-32603"},
					{"ext tasks/get, damaged error data", ex, "tasks/get", map[string]any{"taskId": failed}, "rpc:-32603"},
					{"task_result, damaged result", ex, "tools/call", map[string]any{"name": "task_result", "arguments": map[string]any{"task_id": done}}, "ok"},
				} {
					cctx, cancel := context.WithTimeout(ctx, time.Minute)
					rep, err := c.c.call(cctx, c.method, c.params)
					cancel()
					require.NoError(t, err, "%s, %s path: an answer, not a hang", c.name, path.name)
					got := hostileOutcome(rep)
					require.Equal(t, c.want, got, "%s, %s path: %s", c.name, path.name, rep)
					if c.want == "rpc:-32603" {
						require.Contains(t, rep.Err.Message, "damaged", "%s: the error says why", c.name)
					}
					if c.method == "tools/call" {
						require.Equal(t, true, rep.Map()["isError"], "%s", rep)
						require.Contains(t, textOfResult(rep.Map()), "cannot be read")
					}
					outcomes[c.name] = append(outcomes[c.name], got)
				}
				s.close()
			}
			for name, got := range outcomes {
				require.Equal(t, got[0], got[1], "%s: the fast path and the SDK's answer alike", name)
			}
		})
	}
}

// textOfResult joins the text content of a tool result.
func textOfResult(res map[string]any) string {
	out := ""
	content, _ := res["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok && m["type"] == "text" {
			out += m["text"].(string)
		}
	}
	return out
}

// TestHostileNameHeaderAmbiguousBody: an extension tasks/* request whose
// params hold taskId twice, in different case, is refused with HTTP 400
// whatever its Mcp-Name header names, on both paths: the header check and
// the SDK's decoder would read different keys (the check read the last,
// case-insensitively; the SDK the exact one), so a header naming either
// task must not pass. A body naming its task once passes with a correct
// header.
func TestHostileNameHeaderAmbiguousBody(t *testing.T) {
	onPaths(t, relServerOptions{}, func(t *testing.T, path string, s *relServer) {
		ctx := relCtx(t, time.Minute)
		ex := newRelClient(s.url, newRelHTTPClient(2), relExt, "")
		a := relTaskID(ex.must(t, ctx, "tools/call", map[string]any{"name": "must_work", "arguments": map[string]any{"label": "a"}}))
		b := relTaskID(ex.must(t, ctx, "tools/call", map[string]any{"name": "must_work", "arguments": map[string]any{"label": "b"}}))
		for _, name := range []string{a, b} {
			for _, body := range []string{
				`{"taskId":"` + a + `","taskid":"` + b + `"}`,
				`{"taskid":"` + b + `","taskId":"` + a + `"}`,
				`{"TASKID":"` + b + `","taskId":"` + a + `"}`,
				`{"taskId":"` + a + `","taskId":"` + b + `"}`,
			} {
				env := ex.envelope("tasks/get", map[string]any{})
				env = []byte(strings.Replace(string(env), `"params":{`, `"params":`+body[:len(body)-1]+`,`, 1))
				h := ex.headers("tasks/get", nil)
				h.Set("Mcp-Name", name)
				rep, err := ex.post(ctx, env, h)
				require.NoError(t, err)
				require.Equal(t, "http400+rpc:-32602", hostileOutcome(rep), "Mcp-Name %s, params %s: %s", name, body, rep)
				require.Contains(t, rep.Err.Message, "taskId")
			}
		}
		got := ex.must(t, ctx, "tasks/get", map[string]any{"taskId": a})
		require.Equal(t, a, got["taskId"], "one taskId and its header pass")
	})
}

// TestHostileWebhookBodies: a webhook body that does not parse, is not a
// JSON object, or does not match what the step takes (the client step's
// tool's input schema; the event's payload schema) is answered 400 and
// records nothing (no attempt, no output, the task unchanged), on bbolt
// and PostgreSQL; a matching body is then accepted.
func TestHostileWebhookBodies(t *testing.T) {
	for _, be := range hostileStores {
		t.Run(be.name, func(t *testing.T) {
			spec := be.spec(t)
			h := newHookServer(t, spec)
			ctx := relCtx(t, time.Minute)
			ex := newRelClient(h.mcp, newRelHTTPClient(2), relExt, "")
			doc := relHandoff(t, ex.must(t, ctx, "prompts/get", map[string]any{"name": "approve"}))
			id := doc.TaskID
			var token string
			for _, s := range doc.RemainingSteps {
				if s.Name == "decide" && s.Webhook != nil {
					token = s.Webhook.Token
				}
			}
			require.NotEmpty(t, token, "the handoff gives the webhook token")
			before, err := h.srv.Router.Store().Get(ctx, id)
			require.NoError(t, err)

			for _, c := range []struct{ name, step, body string }{
				{"not JSON", "decide", `{"approved": tru`},
				{"two JSON values", "decide", `{"approved": true, "reason": "x"} {}`},
				{"an array", "decide", `[true, "x"]`},
				{"a string", "decide", `"approve"`},
				{"null", "decide", `null`},
				{"a required argument missing", "decide", `{"approved": true}`},
				{"an argument of the wrong type", "decide", `{"approved": "yes", "reason": "x"}`},
				{"event payload of the wrong shape", "shipped", `{"version": 3}`},
				{"event payload missing its field", "shipped", `{}`},
			} {
				code, out := h.post(t, id, c.step, token, c.body)
				require.Equal(t, http.StatusBadRequest, code, "%s: %v", c.name, out)
				require.NotEmpty(t, out["error"], c.name)
				now, err := h.srv.Router.Store().Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, before.Version, now.Version, "%s: nothing recorded", c.name)
			}
			code, out := h.post(t, id, "decide", token, `{"approved": true, "reason": "looks good"}`)
			require.Equal(t, http.StatusOK, code, "%v", out)
			require.Equal(t, false, out["isError"])
			_, p := crashTaskProgress(t, h.srv.Router.Store(), id)
			require.Equal(t, mcptask.StepCompleted, stepNamed(t, p, "decide").Status)
			require.Equal(t, 1, stepNamed(t, p, "decide").Attempts, "only the matching body was an attempt")
		})
	}
}

// crashTaskProgress reads task id and its workflow progress from st.
func crashTaskProgress(t *testing.T, st store.Store, id string) (*store.Task, *workflow.Progress) {
	t.Helper()
	tk, err := st.Get(context.Background(), id)
	require.NoError(t, err)
	return tk, crashProgress(t, tk)
}

// stepNamed returns step name of p.
func stepNamed(t *testing.T, p *workflow.Progress, name string) *workflow.StepProgress {
	t.Helper()
	for i := range p.Steps {
		if p.Steps[i].Name == name {
			return &p.Steps[i]
		}
	}
	t.Fatalf("no step %q", name)
	return nil
}

// TestHostileConcurrentForks: hundreds of forks of one task at once are
// every one recorded on the original (bbolt and PostgreSQL): one label
// per fork merges without a version check, where one list in one label
// lost forks to version conflicts.
func TestHostileConcurrentForks(t *testing.T) {
	const n = 300
	for _, be := range hostileStores {
		t.Run(be.name, func(t *testing.T) {
			s := newRelServer(t, relServerOptions{db: be.spec(t), cfg: taskrouter.Options{MaxPendingPerSource: 4 * n}})
			ctx := relCtx(t, 3*time.Minute)
			hc := newRelHTTPClient(64)
			ex := newRelClient(s.url, hc, relExt, "")
			orig := relHandoff(t, ex.must(t, ctx, "prompts/get", map[string]any{"name": relFlow, "arguments": map[string]any{"topic": "forks"}})).TaskID
			ids := make(chan string, n)
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res := ex.must(t, ctx, "tools/call", map[string]any{"name": workflow.DefaultForkToolName, "arguments": map[string]any{"task_id": orig, "from": "sign"}})
					require.NotEqual(t, true, res["isError"], "%v", res)
					ids <- relHandoffOf(t, res).TaskID
				}()
			}
			wg.Wait()
			close(ids)
			want := map[string]bool{}
			for id := range ids {
				want[id] = true
			}
			require.Len(t, want, n)
			tk, err := s.st.Get(ctx, orig)
			require.NoError(t, err)
			got := map[string]bool{}
			for _, f := range workflow.Forks(tk) {
				require.Equal(t, "sign", f.From)
				got[f.TaskID] = true
			}
			require.Equal(t, want, got, "the original lists every fork, and only them")
		})
	}
}

// relHandoffOf is the handoff of a tool result (its structured content).
func relHandoffOf(t testing.TB, res map[string]any) *handoff.Document {
	t.Helper()
	b, err := json.Marshal(res["structuredContent"])
	require.NoError(t, err)
	var d handoff.Document
	require.NoError(t, json.Unmarshal(b, &d))
	require.NotEmpty(t, d.TaskID, "no handoff in %v", res)
	return &d
}

// TestHostileStepsBounded: the server steps of many workflows (parallel
// groups of three) never run more than MaxConcurrent (2) tools at once;
// the others wait for a slot and run when one frees. Before, 120 server
// steps ran at once whatever MaxConcurrent said.
func TestHostileStepsBounded(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	running, peak, ran := 0, 0, 0
	b := builder.New("steps", "1").WithDB("memory://").WithoutEnv().
		WithRouterOptions(taskrouter.Options{MaxConcurrent: 2}).
		WithWorkflowOptions(workflow.Options{PromptWait: 10 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "slow"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			ran++
			mu.Unlock()
		}()
		select {
		case <-release:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	}, nil)
	b.TaskWorkflow(workflow.New("par", "three at once").Step(
		workflow.Parallel("g", workflow.Server("s1", "slow"), workflow.Server("s2", "slow"), workflow.Server("s3", "slow"))))
	srv, url := serveBuilder(t, b)
	ctx := relCtx(t, time.Minute)
	ex := newRelClient(url, newRelHTTPClient(8), relExt, "")
	var ids []string
	for range 4 {
		ids = append(ids, relHandoff(t, ex.must(t, ctx, "prompts/get", map[string]any{"name": "par"})).TaskID)
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		s := srv.Router.Stats()
		return running == 2 && s.Steps == 2 && s.StepsQueued == 10
	}, 20*time.Second, 5*time.Millisecond, "two step tools run, ten wait")
	close(release)
	for _, id := range ids {
		require.Equal(t, "completed", relExtWait(t, ctx, ex, id)["status"])
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 12, ran)
	require.Equal(t, 2, peak, "never more than MaxConcurrent step tools at once")
}

// TestHostileQuotasPerKind: one owner's quota (MaxPendingPerOwner 3)
// counts every kind of task the engine creates, together: tool tasks,
// workflow tasks from prompts/get, forks. Past it each kind is refused
// naming the limit (a -32000; an isError result for a tool a model
// calls), another owner is not, and a task that ends frees its slot.
func TestHostileQuotasPerKind(t *testing.T) {
	s := newRelServer(t, relServerOptions{cfg: taskrouter.Options{MaxPendingPerOwner: 3}, wrap: hostileUsers()})
	ctx := relCtx(t, time.Minute)
	core, ex, _, bob := hostileClients(t, ctx, s)

	tool := func(c *relClient) (*relReply, error) {
		return c.call(ctx, "tools/call", map[string]any{"name": "must_work", "arguments": map[string]any{"ms": 60000, "label": "q"}})
	}
	prompt := func(c *relClient) (*relReply, error) {
		return c.call(ctx, "prompts/get", map[string]any{"name": relFlow, "arguments": map[string]any{"topic": "q"}})
	}
	toolTask := relTaskID(core.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"ms": 60000}, "task": map[string]any{}}))
	wf := relHandoff(t, ex.must(t, ctx, "prompts/get", map[string]any{"name": relFlow, "arguments": map[string]any{"topic": "q"}})).TaskID
	fork := ex.must(t, ctx, "tools/call", map[string]any{"name": workflow.DefaultForkToolName, "arguments": map[string]any{"task_id": wf, "from": "sign"}})
	require.NotEqual(t, true, fork["isError"], "%v", fork)

	refusedRPC := func(name string, rep *relReply, err error) {
		require.NoError(t, err)
		require.NotNil(t, rep.Err, "%s: %s", name, rep)
		require.EqualValues(t, mcptask.CodeTooManyTasks, rep.Err.Code, name)
		require.Contains(t, rep.Err.Message, "limit MaxPendingPerOwner=3", name)
	}
	refusedTool := func(name string, rep *relReply, err error) {
		require.NoError(t, err)
		require.Nil(t, rep.Err, "%s: %s", name, rep)
		require.Equal(t, true, rep.Map()["isError"], "%s: %s", name, rep)
		require.Contains(t, textOfResult(rep.Map()), "limit MaxPendingPerOwner=3", name)
	}
	rep, err := core.call(ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"ms": 1}, "task": map[string]any{}})
	refusedRPC("a core tool task", rep, err)
	rep, err = tool(ex)
	refusedRPC("an extension tool task", rep, err)
	rep, err = prompt(ex)
	refusedRPC("a workflow from prompts/get", rep, err)
	rep, err = ex.call(ctx, "tools/call", map[string]any{"name": workflow.DefaultForkToolName, "arguments": map[string]any{"task_id": wf, "from": "sign"}})
	refusedTool("a fork", rep, err)

	// Another owner is not refused.
	rep, err = prompt(bob)
	require.NoError(t, err)
	require.Nil(t, rep.Err, "%s", rep)

	// A task that ends frees its slot (a tool task's once its handler has
	// stopped), whatever kind takes it next.
	core.must(t, ctx, "tasks/cancel", map[string]any{"taskId": toolTask})
	// alice's two, and bob's one.
	require.Eventually(t, func() bool { return s.srv.Router.Stats().Pending == 3 }, 30*time.Second, time.Millisecond)
	rep, err = prompt(ex)
	require.NoError(t, err)
	require.Nil(t, rep.Err, "%s", rep)
	rep, err = tool(ex)
	refusedRPC("full again", rep, err)
}

// TestHostilePermanentWriteFailure: a server step whose output the store
// refuses for good (over MaxVariableBytes) fails the workflow task with
// that reason, on bbolt and PostgreSQL: tasks/get shows it failed with the
// reason and its error, and the log says so. It never stays "running step
// ..." until its ttl.
func TestHostilePermanentWriteFailure(t *testing.T) {
	limits := store.Limits{MaxVariableBytes: 8 << 10, MaxVariablesBytes: 64 << 10}
	for _, be := range hostileStores {
		t.Run(be.name, func(t *testing.T) {
			spec := be.spec(t)
			var st store.Store
			var err error
			if builder.IsPostgresDSN(spec) {
				st, err = postgres.Open(context.Background(), spec, &postgres.Options{Options: store.Options{Limits: limits}})
			} else {
				st, err = bboltstore.Open(spec, &bboltstore.Options{Options: store.Options{Limits: limits}})
			}
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			var logs lockedBuffer
			b := builder.New("big", "1").WithStore(st).WithoutEnv().
				WithLogger(slog.New(slog.NewTextHandler(&logs, nil))).
				WithWorkflowOptions(workflow.Options{PromptWait: 10 * time.Millisecond})
			builder.Tool(b, &mcp.Tool{Name: "huge"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]any, error) {
				return nil, map[string]any{"blob": strings.Repeat("x", 32<<10)}, nil
			}, nil)
			b.TaskWorkflow(workflow.New("bigflow", "one step whose output is too large").Step(workflow.Server("huge", "huge")))
			_, url := serveBuilder(t, b)
			ctx := relCtx(t, time.Minute)
			ex := newRelClient(url, newRelHTTPClient(2), relExt, "")
			id := relHandoff(t, ex.must(t, ctx, "prompts/get", map[string]any{"name": "bigflow"})).TaskID
			got := relExtWait(t, ctx, ex, id)
			require.Equal(t, "failed", got["status"], "%v", got)
			require.Contains(t, got["statusMessage"], "cannot be recorded")
			require.Contains(t, got["statusMessage"], "too large")
			require.NotNil(t, got["error"], "tasks/get carries the error")
			require.Contains(t, logs.String(), "recording a workflow task's progress")
			require.Contains(t, logs.String(), id)
		})
	}
}

// TestHostileOddLengths: a sleep length given as a prompt argument is
// checked at prompts/get, each odd value refused with -32602 and its own
// reason (NaN and infinities are no finite number, 1e308 and MaxInt64
// seconds and 2100000h are past the maximum, which the error names; only
// a negative length is called negative); nothing is created.
func TestHostileOddLengths(t *testing.T) {
	b := builder.New("naps", "1").WithDB("memory://").WithoutEnv()
	b.TaskWorkflow(workflow.New("nap", "sleep as long as asked").
		TypedArg("secs", "how long", true, workflow.ArgDuration).
		Step(workflow.SleepFor("nap", workflow.PromptArg("secs"))))
	srv, url := serveBuilder(t, b)
	ctx := relCtx(t, time.Minute)
	for _, d := range []relDialect{relCore, relExt} {
		c := newRelClient(url, newRelHTTPClient(2), d, "")
		if d == relCore {
			require.NoError(t, c.initialize(ctx))
		}
		for value, reason := range map[string]string{
			"NaN":                 "not a finite number",
			"Inf":                 "not a finite number",
			"-Inf":                "not a finite number",
			"1e308":               "longer than the maximum, 366 days",
			"9223372036854775807": "longer than the maximum, 366 days",
			"2100000h":            "longer than the maximum, 366 days",
			"-5":                  "negative",
			"-1s":                 "negative",
		} {
			rep, err := c.call(ctx, "prompts/get", map[string]any{"name": "nap", "arguments": map[string]any{"secs": value}})
			require.NoError(t, err)
			require.NotNil(t, rep.Err, "%s %q: %s", d, value, rep)
			require.EqualValues(t, mcptask.CodeInvalidParams, rep.Err.Code, "%s %q", d, value)
			require.Contains(t, rep.Err.Message, reason, "%s %q", d, value)
			if reason != "negative" {
				require.NotContains(t, rep.Err.Message, "negative", "%s %q", d, value)
			}
		}
	}
	counts, err := srv.Router.Store().Counts(ctx)
	require.NoError(t, err)
	for status, n := range counts {
		require.Zero(t, n, "no task was created (%s)", status)
	}
}

// TestHostileOwnersEveryPath: with bearer tokens, bob reaches none of
// alice's tasks on any path that names a task, on the fast path and the
// SDK's: the tasks/* methods of both dialects, the built-in task tools,
// a continuation (the _task_id argument and _meta._task_id), a resume by
// prompts/get, the fork tool, and subscriptions/listen. Every attempt is
// "not found" (as for an id that does not exist), and alice's tasks are
// unchanged.
func TestHostileOwnersEveryPath(t *testing.T) {
	onPaths(t, relServerOptions{wrap: hostileUsers()}, func(t *testing.T, path string, s *relServer) {
		ctx := relCtx(t, time.Minute)
		aCore, aExt, bCore, bExt := hostileClients(t, ctx, s)
		hc := newRelHTTPClient(2)
		long := relTaskID(aCore.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"ms": 60000, "label": "a"}, "task": map[string]any{}}))
		wf := relHandoff(t, aExt.must(t, ctx, "prompts/get", map[string]any{"name": relFlow, "arguments": map[string]any{"topic": "a"}})).TaskID
		before := relSnap(t, s.st)

		notFound := func(name string, rep *relReply, err error) {
			t.Helper()
			require.NoError(t, err, name)
			if rep.Err != nil {
				require.EqualValues(t, mcptask.CodeInvalidParams, rep.Err.Code, "%s: %s", name, rep)
				msg := strings.ToLower(rep.Err.Message)
				require.True(t, strings.Contains(msg, "not found") || strings.Contains(msg, "unknown"), "%s: %s", name, rep)
				return
			}
			require.Equal(t, true, rep.Map()["isError"], "%s answered: %s", name, rep)
			text := strings.ToLower(textOfResult(rep.Map()))
			require.True(t, strings.Contains(text, "that you may see") || strings.Contains(text, "not found") || strings.Contains(text, "unknown"), "%s: %s", name, text)
		}
		sign := map[string]any{"draft": "d", "verdict": "v"}
		for _, id := range []string{long, wf} {
			for _, c := range []struct {
				name   string
				client *relClient
				method string
				params map[string]any
			}{
				{"core tasks/get", bCore, "tasks/get", map[string]any{"taskId": id}},
				{"core tasks/result", bCore, "tasks/result", map[string]any{"taskId": id}},
				{"core tasks/cancel", bCore, "tasks/cancel", map[string]any{"taskId": id}},
				{"ext tasks/get", bExt, "tasks/get", map[string]any{"taskId": id}},
				{"ext tasks/cancel", bExt, "tasks/cancel", map[string]any{"taskId": id}},
				{"ext tasks/update", bExt, "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{}}},
				{"task_result", bExt, "tools/call", map[string]any{"name": "task_result", "arguments": map[string]any{"task_id": id}}},
				{"task_cancel", bExt, "tools/call", map[string]any{"name": "task_cancel", "arguments": map[string]any{"task_id": id}}},
				{"continuation by argument", bExt, "tools/call", map[string]any{"name": "sign", "arguments": map[string]any{"draft": "d", "verdict": "v", "_task_id": id}}},
				{"continuation by _meta", bCore, "tools/call", map[string]any{"name": "sign", "arguments": sign, "_meta": map[string]any{"_task_id": id}}},
				{"resume by prompts/get", bExt, "prompts/get", map[string]any{"name": relFlow, "_meta": map[string]any{"_task_id": id}}},
				{"fork tool", bExt, "tools/call", map[string]any{"name": workflow.DefaultForkToolName, "arguments": map[string]any{"task_id": id}}},
			} {
				rep, err := c.client.call(ctx, c.method, c.params)
				notFound(c.name, rep, err)
			}
		}
		// tasks/list shows bob none of alice's tasks.
		page := bCore.must(t, ctx, "tasks/list", map[string]any{})
		for _, tk := range page["tasks"].([]any) {
			require.NotContains(t, []string{long, wf}, tk.(map[string]any)["taskId"])
		}
		// subscriptions/listen tells bob nothing of them.
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		params := bExt.withMeta(map[string]any{"notifications": map[string]any{"taskIds": []string{long, wf}}})
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen", "params": params})
		req, err := http.NewRequestWithContext(lctx, http.MethodPost, s.url, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header = bExt.headers("subscriptions/listen", params)
		resp, err := hc.Do(req)
		require.NoError(t, err)
		stream, err := io.ReadAll(resp.Body) // the stream ends: bob follows no task
		resp.Body.Close()
		require.NoError(t, err)
		require.Contains(t, string(stream), `"id":9`, "the listen request is answered")
		for _, id := range []string{long, wf} {
			require.NotContains(t, string(stream), id, "listen tells bob nothing of alice's task")
		}
		require.Empty(t, before.diff(relSnap(t, s.st)), "alice's tasks are unchanged")
	})
}

// TestHostileFamilies keeps the suite's table (hostileFamilies) true:
// every family names tests, and every test it names exists in this
// package.
func TestHostileFamilies(t *testing.T) {
	defined := map[string]bool{}
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				defined[fn.Name.Name] = true
			}
		}
	}
	for _, f := range hostileFamilies {
		require.NotEmpty(t, f.tests, f.family)
		for _, name := range f.tests {
			require.True(t, defined[name], "family %q names %s, which is no test of this package", f.family, name)
		}
	}
}
