package integration

// The hostile-input suite: what a hostile client tries, family by family
// (see hostileFamilies), against real servers over Streamable HTTP on
// 127.0.0.1, on the fast path and on the SDK's, on bbolt and PostgreSQL
// where the store matters. TestHostileInput (reliability_hostile_test.go)
// holds the malformed-request families; this file the rest.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/taskrouter"
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
