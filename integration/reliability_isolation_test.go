package integration

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// TestIsolationBetweenOwners serves the router behind go-sdk's
// auth.RequireBearerToken with two users and checks, in both dialects,
// that neither can get, list, cancel, read the result of, update or
// continue the other's tasks and workflows; that a request without a token
// is refused with HTTP 401; and that each owner's own operations work,
// across sessions and dialects (the owner is the user, not the session).
func TestIsolationBetweenOwners(t *testing.T) {
	verifier := relTokens(map[string]string{"alice-token": "alice", "bob-token": "bob"})
	s := newRelServer(t, relServerOptions{wrap: auth.RequireBearerToken(verifier, nil)})
	ctx := relCtx(t, time.Minute)
	hc := newRelHTTPClient(8)
	aliceCore := newRelClient(s.url, hc, relCore, "alice-token")
	require.NoError(t, aliceCore.initialize(ctx))
	aliceExt := newRelClient(s.url, hc, relExt, "alice-token")
	bobCore := newRelClient(s.url, hc, relCore, "bob-token")
	require.NoError(t, bobCore.initialize(ctx))
	bobExt := newRelClient(s.url, hc, relExt, "bob-token")

	// Alice's tasks: a long tool task, finished tool tasks in each dialect,
	// a workflow waiting for its client step in each dialect.
	aLong := relTaskID(aliceCore.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"ms": 60000, "label": "alice-long"}, "task": map[string]any{}}))
	require.Eventually(t, func() bool {
		for {
			select {
			case l := <-s.hooks.started:
				if l == "alice-long" {
					return true
				}
			default:
				return false
			}
		}
	}, 30*time.Second, 5*time.Millisecond, "alice's long task starts")
	aDone := relTaskID(aliceCore.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"label": "alice-core"}, "task": map[string]any{}}))
	aliceCore.must(t, ctx, "tasks/result", map[string]any{"taskId": aDone})
	aExtDone := relTaskID(aliceExt.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"label": "alice-ext"}}))
	relExtWait(t, ctx, aliceExt, aExtDone)
	aWf := relHandoff(t, aliceCore.must(t, ctx, "prompts/get", map[string]any{"name": relFlow, "arguments": map[string]any{"topic": "alice-core"}})).TaskID
	aWfExt := relHandoff(t, aliceExt.must(t, ctx, "prompts/get", map[string]any{"name": relFlow, "arguments": map[string]any{"topic": "alice-ext"}})).TaskID
	alice := []string{aLong, aDone, aExtDone, aWf, aWfExt}

	// Bob's own tasks.
	bDone := relTaskID(bobCore.must(t, ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"label": "bob"}, "task": map[string]any{}}))
	bobCore.must(t, ctx, "tasks/result", map[string]any{"taskId": bDone})
	bWf := relHandoff(t, bobExt.must(t, ctx, "prompts/get", map[string]any{"name": relFlow, "arguments": map[string]any{"topic": "bob"}})).TaskID

	for _, id := range alice {
		tk, err := s.st.Get(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, "user:alice", tk.Owner, "tasks of an authenticated user belong to the user in both dialects")
	}
	aliceBefore := relSnapOf(t, s.st, alice)

	// Bob tries everything on every one of Alice's tasks.
	expectNotFound := func(c *relClient, method string, params map[string]any) {
		t.Helper()
		rep, err := c.call(ctx, method, params)
		require.NoError(t, err)
		require.NotNil(t, rep.Err, "%s %s by bob (%s): %s", method, params["taskId"], c.dialect, rep)
		require.EqualValues(t, mcptask.CodeInvalidParams, rep.Err.Code, "%s by bob (%s): %s", method, c.dialect, rep)
	}
	sign := func(id string) map[string]any {
		return map[string]any{"name": "sign", "arguments": map[string]any{"draft": "d", "verdict": "bob says yes"}, "_meta": map[string]any{mcptask.MetaTaskID: id}}
	}
	for _, id := range alice {
		expectNotFound(bobCore, "tasks/get", map[string]any{"taskId": id})
		expectNotFound(bobCore, "tasks/result", map[string]any{"taskId": id})
		expectNotFound(bobCore, "tasks/cancel", map[string]any{"taskId": id})
		expectNotFound(bobExt, "tasks/get", map[string]any{"taskId": id})
		expectNotFound(bobExt, "tasks/cancel", map[string]any{"taskId": id})
		expectNotFound(bobExt, "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{"x": map[string]any{"action": "accept"}}})
		// Continuing or resuming Alice's workflows (and naming her tool
		// tasks as workflows) is refused too.
		expectNotFound(bobCore, "tools/call", sign(id))
		expectNotFound(bobExt, "tools/call", sign(id))
		expectNotFound(bobCore, "prompts/get", map[string]any{"name": relFlow, "_meta": map[string]any{mcptask.MetaTaskID: id}})
		expectNotFound(bobExt, "prompts/get", map[string]any{"name": relFlow, "_meta": map[string]any{mcptask.MetaTaskID: id}})
	}
	// Bob's listing shows only his tasks (both pages' worth).
	listed := relListAll(t, ctx, bobCore)
	require.ElementsMatch(t, []string{bDone, bWf}, listed)
	// Bob cannot ride Alice's session either.
	hijack := newRelClient(s.url, hc, relCore, "bob-token")
	hijack.session = aliceCore.session
	rep, err := hijack.call(ctx, "tasks/list", map[string]any{})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, rep.Status, "%s", rep)

	// Nothing of Alice's changed, and her long task is still running.
	require.Empty(t, aliceBefore.diff(relSnapOf(t, s.st, alice)), "bob's attempts changed alice's tasks")

	// No token: 401 in both dialects, before anything runs.
	for _, d := range []relDialect{relCore, relExt} {
		anon := newRelClient(s.url, hc, d, "")
		for _, m := range []struct {
			method string
			params map[string]any
		}{
			{"initialize", map[string]any{"protocolVersion": relCoreVersion, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "anon", "version": "1"}}},
			{"tasks/get", map[string]any{"taskId": aDone}},
			{"tools/call", map[string]any{"name": "work", "arguments": map[string]any{}, "task": map[string]any{}}},
			{"tools/call", sign(aWf)},
		} {
			rep, err := anon.call(ctx, m.method, m.params)
			require.NoError(t, err)
			require.Equal(t, http.StatusUnauthorized, rep.Status, "%s %s without a token: %s", d, m.method, rep)
			require.False(t, rep.IsRPC(), "%s", rep)
		}
	}
	require.Empty(t, aliceBefore.diff(relSnapOf(t, s.st, alice)))

	// Alice's own operations work, from another session and either dialect.
	aliceCore2 := newRelClient(s.url, hc, relCore, "alice-token")
	require.NoError(t, aliceCore2.initialize(ctx))
	require.ElementsMatch(t, alice, relListAll(t, ctx, aliceCore2), "alice lists all her tasks, from any session and dialect")
	for _, id := range alice {
		require.Equal(t, id, aliceCore2.must(t, ctx, "tasks/get", map[string]any{"taskId": id})["taskId"])
		require.Equal(t, id, aliceExt.must(t, ctx, "tasks/get", map[string]any{"taskId": id})["taskId"])
	}
	res := aliceCore2.must(t, ctx, "tasks/result", map[string]any{"taskId": aExtDone})
	require.Contains(t, res["_meta"], mcptask.MetaRelatedTask)
	aliceExt.must(t, ctx, "tasks/update", map[string]any{"taskId": aLong, "inputResponses": map[string]any{}})
	cancelled := aliceCore2.must(t, ctx, "tasks/cancel", map[string]any{"taskId": aLong})
	require.Equal(t, "cancelled", cancelled["status"])
	out := aliceCore2.must(t, ctx, "tools/call", map[string]any{"name": "sign", "arguments": map[string]any{"draft": "d", "verdict": "ok"},
		"_meta": map[string]any{mcptask.MetaTaskID: aWf}})
	require.Equal(t, "completed", out["_meta"].(map[string]any)[mcptask.MetaWorkflow].(map[string]any)["status"])
	out = aliceExt.must(t, ctx, "tools/call", map[string]any{"name": "sign", "arguments": map[string]any{"draft": "d", "verdict": "ok"},
		"_meta": map[string]any{mcptask.MetaTaskID: aWfExt}})
	require.Equal(t, "completed", out["_meta"].(map[string]any)[mcptask.MetaWorkflow].(map[string]any)["status"])
	for _, id := range []string{aWf, aWfExt} {
		require.Equal(t, "completed", aliceExt.must(t, ctx, "tasks/get", map[string]any{"taskId": id})["status"])
	}
	// Bob's workflow is untouched by all of this and still his to finish.
	bw, err := s.st.Get(context.Background(), bWf)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusWorking, bw.Status)
	out = bobExt.must(t, ctx, "tools/call", map[string]any{"name": "sign", "arguments": map[string]any{"draft": "d", "verdict": "ok"},
		"_meta": map[string]any{mcptask.MetaTaskID: bWf}})
	require.Equal(t, "completed", out["_meta"].(map[string]any)[mcptask.MetaWorkflow].(map[string]any)["status"])
}

// relSnapOf is relSnap restricted to ids.
func relSnapOf(t testing.TB, st store.Store, ids []string) relSnapshot {
	t.Helper()
	all := relSnap(t, st)
	out := relSnapshot{}
	for _, id := range ids {
		out[id] = all[id]
	}
	return out
}

// relListAll pages through core tasks/list and returns every task id.
func relListAll(t testing.TB, ctx context.Context, c *relClient) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for range 1000 {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		page := c.must(t, ctx, "tasks/list", params)
		tasks, _ := page["tasks"].([]any)
		for _, tk := range tasks {
			ids = append(ids, tk.(map[string]any)["taskId"].(string))
		}
		cursor, _ = page["nextCursor"].(string)
		if cursor == "" {
			return ids
		}
	}
	t.Fatal("tasks/list did not end")
	return nil
}
