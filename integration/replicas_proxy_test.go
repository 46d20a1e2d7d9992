package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"github.com/taskbridge/taskbridge/mcptask"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/rrproxy"
)

// proxied starts three replicas on one database behind a round-robin
// proxy and returns them with the proxy.
func proxied(t *testing.T) ([]*replica, *rrproxy.Server) {
	rs, _ := replicas(t, 3)
	var backends []string
	for _, rp := range rs {
		backends = append(backends, strings.TrimSuffix(rp.url, "/mcp"))
	}
	px, err := rrproxy.Listen("", backends...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = px.Close() })
	return rs, px
}

// ranOn returns the replica whose started channel has label (waiting up to
// 10s), and which replicas served nothing else meanwhile does not matter.
func ranOn(t *testing.T, rs []*replica, label string) *replica {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		for _, rp := range rs {
			select {
			case l := <-rp.started:
				if l == label {
					return rp
				}
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatalf("no replica started %q", label)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func stoppedOn(t *testing.T, rp *replica, label string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case l := <-rp.stopped:
			if l == label {
				return
			}
		case <-deadline:
			t.Fatalf("the handler of %q on %s was not stopped", label, rp.name)
		}
	}
}

// TestReplicasBehindProxyGoClient: the Go client in the extension dialect
// (no session, so the proxy sends every request to the next replica) runs
// a task round trip, a workflow with a client step, and a cancel, each
// request landing on another replica than the one before.
func TestReplicasBehindProxyGoClient(t *testing.T) {
	rs, px := proxied(t)
	ctx := relCtx(t, time.Minute)
	c, err := client.Dial(ctx, &mcp.StreamableClientTransport{Endpoint: px.URL + "/mcp", MaxRetries: -1}, &client.Options{Dialect: mcptask.Extension, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	before := px.Served()

	// A task round trip: created on one replica, polled on the others.
	res, err := c.CallToolAndWait(ctx, "hold", map[string]any{"label": "go-round-trip", "ms": 200}, nil)
	require.NoError(t, err)
	ran := ranOn(t, rs, "go-round-trip")
	require.Equal(t, "held go-round-trip on "+ran.name, res.Content[0].(*mcp.TextContent).Text)

	// subscriptions/listen on another replica than the one that created
	// and runs a task (the client's polls went to the third) streams its
	// notifications.
	var watched string
	for ev, err := range c.CallTool(ctx, "hold", map[string]any{"label": "go-watched", "ms": 400}, nil) {
		require.NoError(t, err)
		if ev.Kind == client.EventCreated {
			watched = ev.Task.ID
			break
		}
	}
	running := ranOn(t, rs, "go-watched")
	var third *replica
	for _, rp := range rs {
		if rp != running {
			third = rp
		}
	}
	msgs := listenAll(t, ctx, newRelHTTPClient(2), third.url, watched)
	require.Equal(t, "notifications/subscriptions/acknowledged", msgs[0]["method"])
	last := msgs[len(msgs)-2]["params"].(map[string]any)
	require.Equal(t, "completed", last["status"])
	require.Equal(t, "held go-watched on "+running.name, last["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])

	// A workflow: the prompt on one replica, the client step on the next,
	// the final read on another.
	_, doc, err := c.GetPrompt(ctx, "relay", map[string]string{"text": "from go"})
	require.NoError(t, err)
	require.Equal(t, "middle", doc.RemainingSteps[0].Name)
	out, err := c.Follow(ctx, doc, &client.FollowOptions{Fill: func(context.Context, handoff.RemainingStep, []string) (map[string]any, error) {
		return map[string]any{"text": "go middle"}, nil
	}})
	require.NoError(t, err)
	require.Contains(t, string(out), "noted noted go middle on r")

	// Cancel from another replica than the one running the handler: the
	// handler stops there.
	id := ""
	for ev, err := range c.CallTool(ctx, "hold", map[string]any{"label": "go-cancel"}, nil) {
		require.NoError(t, err)
		if ev.Kind == client.EventCreated {
			id = ev.Task.ID
			break
		}
	}
	require.NotEmpty(t, id)
	runner := ranOn(t, rs, "go-cancel")
	cancelled, err := c.CancelTask(ctx, id)
	require.NoError(t, err)
	require.Contains(t, []mcptask.Status{mcptask.StatusCancelled, mcptask.StatusWorking}, cancelled.Status)
	stoppedOn(t, runner, "go-cancel")
	got, err := c.GetTask(ctx, id)
	require.NoError(t, err)
	require.Equal(t, mcptask.StatusCancelled, got.Status)

	after := px.Served()
	for i := range after {
		require.Greater(t, after[i], before[i], "replica %d served none of the Go client's requests", i+1)
	}
}

// TestReplicasBehindProxyTypeScript: the official TypeScript SDK client,
// core dialect, one new session per step (the proxy keeps a session on its
// replica and sends each new one to the next): the steps of one task land
// on different replicas.
func TestReplicasBehindProxyTypeScript(t *testing.T) {
	modules := nodeModules(t)
	rs, px := proxied(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", nodeArgs(t, filepath.Join(modules, "..", "ts-replicas.mjs"), px.URL+"/mcp")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	steps := map[string]map[string]any{}
	backend := map[string]int{} // step -> the replica that held its session
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		name := m["step"].(string)
		require.Equal(t, true, m["ok"], "step %s failed: %v\nall output:\n%s\nstderr:\n%s", name, m, out, stderr.String())
		steps[name] = m
		sid, _ := m["sessionId"].(string)
		require.NotEmpty(t, sid, name)
		i, ok := px.SessionBackend(sid)
		require.True(t, ok, "the proxy does not know session %s of step %s", sid, name)
		backend[name] = i
	}
	for _, name := range []string{"create", "result", "getPrompt", "continue", "workflowResult", "createLong", "cancel"} {
		require.Contains(t, steps, name, "output:\n%s", out)
	}

	// The round trip: created on one replica, awaited on the next.
	creator := ranOn(t, rs, "ts-round-trip")
	require.Equal(t, "held ts-round-trip on "+creator.name, steps["result"]["text"])

	// The workflow: continued on another session and read back on a third.
	require.Equal(t, "middle", steps["getPrompt"]["next"])
	require.Equal(t, "completed", steps["continue"]["workflow"].(map[string]any)["status"])
	require.Equal(t, "completed", steps["workflowResult"]["status"])

	// The cancel, from another session than the one that created the task,
	// stops the handler on the replica running it.
	runner := ranOn(t, rs, "ts-cancel")
	require.Equal(t, "cancelled", steps["cancel"]["status"])
	stoppedOn(t, runner, "ts-cancel")

	// Every replica served the script's sessions.
	for i, n := range px.Served() {
		require.Positive(t, n, "replica %d served none of the TypeScript client's requests", i+1)
	}
	// Consecutive steps of one task were served by different replicas.
	for _, pair := range [][2]string{{"create", "result"}, {"getPrompt", "continue"}, {"continue", "workflowResult"}, {"createLong", "cancel"}} {
		require.NotEqual(t, backend[pair[0]], backend[pair[1]], "%s and %s on the same replica", pair[0], pair[1])
	}
}
