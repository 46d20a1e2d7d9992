package integration

// The hostile-input suite: what a hostile client tries, family by family
// (see hostileFamilies), against real servers over Streamable HTTP on
// 127.0.0.1, on the fast path and on the SDK's, on bbolt and PostgreSQL
// where the store matters. TestHostileInput (reliability_hostile_test.go)
// holds the malformed-request families; this file the rest.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/store"
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
					cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					rep, err := c.c.call(cctx, c.method, c.params)
					cancel()
					require.NoError(t, err, "%s, %s path: an answer within 5 s", c.name, path.name)
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
	for _, path := range hostilePaths {
		t.Run(path.name, func(t *testing.T) {
			s := newRelServer(t, relServerOptions{httpOpts: &taskrouter.HTTPOptions{DisableFastPath: path.noFast}})
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
			require.Equal(t, workflow.StepCompleted, stepNamed(t, p, "decide").Status)
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
