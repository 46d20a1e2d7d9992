package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// Versions: a definition changed (or removed) while a task waits. Probed
// before versions existed, each row panicked, crashed every start, stalled
// or silently switched tools. Now a task runs to its end on the version it
// started with, or fails naming its version and the ones served.

type vIn struct {
	X any `json:"x,omitempty"`
}
type vOut struct {
	By string `json:"by"`
}

// abcDef is a (server) -> b (client) -> c (server), changed by change.
func abcDef(change func(w *workflow.Definition)) *workflow.Definition {
	w := workflow.New("abc", "three steps").Step(
		workflow.Server("a", "ta"),
		workflow.Client("b", "tb").Bind("x", workflow.FromClient("x")),
		workflow.Server("c", "tc"),
	)
	if change != nil {
		change(w)
	}
	return w
}

// versionServer serves defs on the store spec names (a bbolt file or a
// PostgreSQL DSN); calls counts the runs of each tool. A task whose
// version no live process serves fails at once (VersionGrace negative):
// these tests are about what it says; the default, a wait, is
// TestVersionGoneFailsAfterGrace's and TestVersionsAppendedStepAcrossSIGKILL's.
func versionServer(t *testing.T, spec string, calls map[string]int, defs ...*workflow.Definition) *builder.Server {
	t.Helper()
	return versionServerWith(t, spec, calls, taskrouter.Options{ReplicaID: "r-" + t.Name()}, workflow.Options{VersionGrace: -1}, defs...)
}

// versionServerWith is versionServer with the engine's and the bridge's
// options.
func versionServerWith(t *testing.T, spec string, calls map[string]int, ro taskrouter.Options, wo workflow.Options, defs ...*workflow.Definition) *builder.Server {
	t.Helper()
	b := builder.New("versions", "1").WithDB(spec).WithoutEnv().WithRouterOptions(ro).WithWorkflowOptions(wo)
	for _, name := range []string{"ta", "tb", "tc", "td", "tx"} {
		builder.Tool(b, &mcp.Tool{Name: name}, func(ctx context.Context, _ *mcp.CallToolRequest, _ vIn) (*mcp.CallToolResult, vOut, error) {
			calls[name]++
			return nil, vOut{By: name}, nil
		}, nil)
	}
	for _, d := range defs {
		b.TaskWorkflow(d)
	}
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	return srv
}

// versionClient connects a go-sdk client in process.
func versionClient(t *testing.T, srv *builder.Server) *mcp.ClientSession {
	t.Helper()
	tr, err := srv.Connect(context.Background())
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// startAbc starts abc and returns its task id, paused at b.
func startAbc(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "abc"})
	require.NoError(t, err)
	doc, err := handoff.FromPromptResult(res)
	require.NoError(t, err)
	require.Equal(t, "b", doc.RemainingSteps[0].Name)
	return doc.TaskID
}

func TestVersionsChangedWhileTaskWaits(t *testing.T) {
	rows := []struct {
		name   string
		change func(w *workflow.Definition)
	}{
		{"server step inserted before b", func(w *workflow.Definition) {
			w.Steps = append([]*workflow.Step{w.Steps[0], workflow.Server("a2", "tx")}, w.Steps[1:]...)
		}},
		{"server step appended after c", func(w *workflow.Definition) { w.Step(workflow.Server("d", "td")) }},
		{"b renamed", func(w *workflow.Definition) { w.Steps[1].Name = "b2" }},
		{"c removed", func(w *workflow.Definition) { w.Steps = w.Steps[:2] }},
		{"c calls another tool", func(w *workflow.Definition) { w.Steps[2] = workflow.Server("c", "tx") }},
		{"workflow removed", nil},
	}
	stores := map[string]func(t *testing.T) string{
		"bbolt":    func(t *testing.T) string { return filepath.Join(t.TempDir(), "tasks.db") },
		"postgres": func(t *testing.T) string { return pgtest.DSN(t) },
	}
	for _, backend := range []string{"bbolt", "postgres"} {
		for _, row := range rows {
			t.Run(backend+"/"+row.name, func(t *testing.T) {
				spec := stores[backend](t)
				ctx := context.Background()
				calls := map[string]int{}
				v1 := abcDef(nil)
				srv := versionServer(t, spec, calls, v1)
				alone := startAbc(t, versionClient(t, srv))
				require.NoError(t, srv.Close())

				// The new definition alone: the old task fails naming its
				// version, at once (bbolt: at start; PostgreSQL: at the
				// first touch), and a continuation records nothing.
				var defs []*workflow.Definition
				if row.change != nil {
					defs = append(defs, abcDef(row.change))
				}
				srv = versionServer(t, spec, calls, defs...)
				cs := versionClient(t, srv)
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tb", Arguments: map[string]any{"x": 1}, Meta: mcp.Meta{"_task_id": alone}})
				require.Error(t, err)
				require.Contains(t, err.Error(), "nothing was recorded")
				require.Zero(t, calls["tb"], "the refused continuation ran nothing")
				tk, err := srv.Store.Get(ctx, alone)
				require.NoError(t, err)
				require.Equal(t, mcptask.StatusFailed, tk.Status)
				require.Contains(t, tk.StatusMessage, `workflow "abc"`)
				require.Contains(t, tk.StatusMessage, workflow.VersionOf(v1))
				require.NoError(t, srv.Close())
				if row.change == nil {
					return
				}

				// Both versions served: a task started on the old one
				// completes on it.
				srv = versionServer(t, spec, calls, v1)
				beside := startAbc(t, versionClient(t, srv))
				require.NoError(t, srv.Close())
				calls = map[string]int{}
				srv = versionServer(t, spec, calls, v1, abcDef(row.change))
				defer srv.Close()
				cs = versionClient(t, srv)
				out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tb", Arguments: map[string]any{"x": 1, "_task_id": beside}})
				require.NoError(t, err)
				require.False(t, out.IsError)
				require.Eventually(t, func() bool {
					tk, err := srv.Store.Get(ctx, beside)
					return err == nil && tk.Status == mcptask.StatusCompleted
				}, 30*time.Second, 10*time.Millisecond)
				require.Equal(t, 1, calls["tc"], "c ran its own tool, once")
				require.Zero(t, calls["tx"]+calls["td"], "no step of the new version ran")
			})
		}
	}
}

// A deploy that appends a step, across a SIGKILL of a real process in the
// middle of c: the new version alone leaves the old tasks waiting for a
// process that serves their version (Options.VersionGrace, saying so),
// and keeps serving (no crash loop); served beside the old version again,
// the waiting tasks go on where they were and every task finishes on its
// own version.
func TestVersionsAppendedStepAcrossSIGKILL(t *testing.T) {
	bin := exampleBinary(t, "./integration/testdata/versionserver")
	db := filepath.Join(t.TempDir(), "tasks.db")
	ctx := relCtx(t, time.Minute)
	hc := newRelHTTPClient(4)
	p := startProc(t, bin, nil, "-http", "ADDR", "-db", db, "-variants", "v1", "-c-sleep", "30s")
	c := newRelClient(p.url, hc, relExt, "")
	running := relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "abc"})).TaskID
	waiting := relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "abc"})).TaskID
	go func() { // b's continuation sets c off; its caller gives up
		_, _ = c.call(ctx, "tools/call", map[string]any{"name": "tb", "arguments": map[string]any{"x": 1, "_task_id": running}})
	}()
	// c is running as the server recorded it, not as its log says: "RAN
	// tb" is printed before b's outcome is written, and a kill in between
	// left the task waiting for b again.
	waitRunning(t, p, running)
	p.kill()

	p = startProc(t, bin, nil, "-http", "ADDR", "-db", db, "-variants", "appended")
	c = newRelClient(p.url, hc, relExt, "")
	for _, id := range []string{running, waiting} {
		got := c.must(t, ctx, "tasks/get", map[string]any{"taskId": id})
		require.Equal(t, "working", got["status"], "%s: %v", id, got)
		require.Contains(t, got["statusMessage"], `waiting: no live server process serves workflow "abc"`, "%s", p.log.String())
	}
	_, err := c.call(ctx, "tools/call", map[string]any{"name": "tb", "arguments": map[string]any{"x": 1, "_task_id": waiting}})
	require.NoError(t, err)
	fresh := relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "abc"})).TaskID
	require.NotContains(t, p.log.String(), "panic")
	require.NotContains(t, p.log.String(), "RAN tb", "the refused continuation ran nothing")
	p.kill()

	p = startProc(t, bin, nil, "-http", "ADDR", "-db", db, "-variants", "v1,appended")
	c = newRelClient(p.url, hc, relExt, "")
	for _, id := range []string{waiting, fresh} {
		c.must(t, ctx, "tools/call", map[string]any{"name": "tb", "arguments": map[string]any{"x": 1, "_task_id": id}})
	}
	for _, id := range []string{running, waiting, fresh} {
		require.Eventually(t, func() bool {
			got := c.must(t, ctx, "tasks/get", map[string]any{"taskId": id})
			return got["status"] == "completed"
		}, 30*time.Second, 20*time.Millisecond, "%s: %s", id, p.log.String())
	}
	require.Equal(t, 1, strings.Count(p.log.String(), "RAN td"), "the appended version ran its own last step, once (the fresh task's)")
	require.NotContains(t, p.log.String(), "panic")
	p.kill()
}

// A retry's backoff crosses a SIGKILL and a restart: the retry runs once,
// at the time the first failure set, not a full backoff after the restart.
// The backoff is 10 s and the process is killed 2 s before the retry, so
// a full backoff after the restart would run it 8 s late or more; the test
// allows 7 s for the restart on a busy machine.
func TestRetryBackoffAcrossSIGKILL(t *testing.T) {
	const backoff = 10 * time.Second
	bin := exampleBinary(t, "./integration/testdata/versionserver")
	db := filepath.Join(t.TempDir(), "tasks.db")
	ctx := relCtx(t, 2*time.Minute)
	hc := newRelHTTPClient(4)
	p := startProc(t, bin, nil, "-http", "ADDR", "-db", db, "-backoff", backoff.String())
	c := newRelClient(p.url, hc, relExt, "")
	doc := relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "flaky"}))
	f := doc.RemainingSteps[0]
	require.Equal(t, "f", f.Name)
	require.NotNil(t, f.RetryAt, "the retry is scheduled: %+v", f)
	retryAt := *f.RetryAt
	time.Sleep(time.Until(retryAt.Add(-2 * time.Second))) // well before the retry
	p.kill()
	time.Sleep(500 * time.Millisecond)
	p = startProc(t, bin, []string{"FLAKY_OK=1"}, "-http", "ADDR", "-db", db, "-backoff", backoff.String())
	c = newRelClient(p.url, hc, relExt, "")
	require.Eventually(t, func() bool { return strings.Contains(p.log.String(), "RAN tf") }, 30*time.Second, 20*time.Millisecond, "%s", p.log.String())
	require.Eventually(t, func() bool { // the step's record follows its log line: then g waits
		got := c.must(t, ctx, "tasks/get", map[string]any{"taskId": doc.TaskID})
		msg, _ := got["statusMessage"].(string)
		return strings.Contains(msg, `step "g"`)
	}, 30*time.Second, 20*time.Millisecond)

	st := p
	p.kill()
	bolt, err := bboltstore.Open(db, nil)
	require.NoError(t, err)
	defer bolt.Close()
	tk, err := bolt.Get(ctx, doc.TaskID)
	require.NoError(t, err)
	var prog workflow.Progress
	require.NoError(t, json.Unmarshal(tk.Variables[workflow.VarProgress], &prog))
	sp := prog.Steps[0]
	require.Equal(t, mcptask.StepCompleted, sp.Status, "%s", st.log.String())
	require.Equal(t, 2, sp.Attempts, "the retry ran once")
	retry := sp.History[1]
	require.Equal(t, workflow.ReasonRetry, retry.Reason)
	require.False(t, retry.At.Before(retryAt), "not before its time: %v < %v", retry.At, retryAt)
	require.Less(t, retry.At.Sub(retryAt), backoff-3*time.Second, "at its time, not a full backoff after the restart")
}

// A declared version redeployed with a changed definition (a flipped
// condition, a changed binding) is not the version a waiting task started
// on: the task fails naming the step and what changed (the fingerprint
// recorded with the task), and the changed step never runs. Before, the
// task switched silently: it skipped c after approval, or ran it with the
// new binding.
func TestVersionsDeclaredVersionCannotSwitch(t *testing.T) {
	declared := func(change func(c *workflow.Step)) *workflow.Definition {
		c := workflow.Server("c", "tc").Bind("x", workflow.StepOutput("b", "by")).When(workflow.Truthy(workflow.StepOutput("b", "by")))
		if change != nil {
			change(c)
		}
		return workflow.New("abc", "three steps").WithVersion("1").Step(
			workflow.Server("a", "ta"),
			workflow.Client("b", "tb").Bind("x", workflow.FromClient("x")),
			c,
		)
	}
	rows := map[string]struct {
		change func(c *workflow.Step)
		says   string
	}{
		"condition flipped": {func(c *workflow.Step) { c.Unless(workflow.Truthy(workflow.StepOutput("b", "by"))) }, `step "c": its condition changed`},
		"binding changed":   {func(c *workflow.Step) { c.Bind("x", workflow.StepOutput("a", "by")) }, `step "c": its argument bindings changed`},
	}
	stores := map[string]func(t *testing.T) string{
		"bbolt":    func(t *testing.T) string { return filepath.Join(t.TempDir(), "tasks.db") },
		"postgres": func(t *testing.T) string { return pgtest.DSN(t) },
	}
	for _, backend := range []string{"bbolt", "postgres"} {
		for name, row := range rows {
			t.Run(backend+"/"+name, func(t *testing.T) {
				spec := stores[backend](t)
				ctx := context.Background()
				calls := map[string]int{}
				srv := versionServer(t, spec, calls, declared(nil))
				id := startAbc(t, versionClient(t, srv))
				require.NoError(t, srv.Close())

				srv = versionServer(t, spec, calls, declared(row.change))
				defer srv.Close()
				cs := versionClient(t, srv)
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tb", Arguments: map[string]any{"x": 1}, Meta: mcp.Meta{"_task_id": id}})
				require.Error(t, err)
				require.Contains(t, err.Error(), "nothing was recorded")
				tk, err := srv.Store.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, mcptask.StatusFailed, tk.Status)
				require.Contains(t, tk.StatusMessage, row.says)
				require.Contains(t, tk.StatusMessage, "never switches definitions silently")
				require.Zero(t, calls["tb"]+calls["tc"], "nothing of the changed definition ran")
			})
		}
	}
}
