package workflow

import (
	"context"
	"encoding/json"
	"errors"

	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// abc is the workflow of the version probes: a (server) -> b (client) ->
// c (server); change edits its steps to make another definition.
func abc(change func(w *Definition)) *Definition {
	w := New("abc", "three steps").Step(
		Server("a", "ta"),
		Client("b", "tb").Bind("x", FromClient("x")),
		Server("c", "tc").Bind("in", StepOutput("b")),
	)
	if change != nil {
		change(w)
	}
	return w
}

// abcTools registers the tools the abc variants call.
func abcTools(e *fakeEngine) {
	for _, name := range []string{"ta", "tb", "tc", "tx", "td"} {
		e.tool(name, func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
			return ok(map[string]any{"by": name}), nil
		})
	}
}

// pausedAtB starts abc (as defined by first) on a fresh store and returns
// the engine, holding the store, and the task paused at b.
func pausedAtB(t *testing.T, first *Definition) (*fakeEngine, string) {
	e := newFakeEngine()
	abcTools(e)
	f := newFixture(t, e, &Options{PromptWait: -1}, first)
	tk, p := f.start(t, "abc", nil)
	require.Equal(t, mcptask.StepAwaitingClient, p.step("b").Status)
	require.Equal(t, VersionOf(first), tk.Labels[LabelVersion])
	require.Equal(t, VersionOf(first), p.Version)
	f.b.Close()
	return e, tk.ID
}

// redeploy serves wfs on e's store as a new process would.
func redeploy(t *testing.T, e *fakeEngine, opts *Options, wfs ...*Definition) *fixture {
	f := newFixture(t, e, opts, wfs...)
	e.recoverAll(t)
	return f
}

// The rows of the version probe: a definition changed while a task waits
// at b. Served alone, the new definition never runs the old task: the
// task waits Options.VersionGrace for a process that serves its version
// (refusing continuations, recording nothing), then fails naming its
// version and the ones served (no panic, no crash at start, no silent
// switch). Served beside the old one, the task completes on its own
// version.
func TestChangedDefinitionWhileTaskPaused(t *testing.T) {
	rows := []struct {
		name   string
		change func(w *Definition)
	}{
		{"server step inserted before b", func(w *Definition) {
			w.Steps = append([]*Step{w.Steps[0], Server("a2", "tx")}, w.Steps[1:]...)
		}},
		{"server step appended after c", func(w *Definition) { w.Step(Server("d", "td")) }},
		{"b renamed", func(w *Definition) { w.Steps[1].Name = "b2"; w.Steps[2].Bind("in", StepOutput("b2")) }},
		{"c removed", func(w *Definition) { w.Steps = w.Steps[:2] }},
		{"c calls another tool", func(w *Definition) { w.Steps[2] = Server("c", "tx").Bind("in", StepOutput("b")) }},
	}
	for _, row := range rows {
		t.Run(row.name+"/new version alone", func(t *testing.T) {
			v1, v2 := abc(nil), abc(row.change)
			require.NotEqual(t, VersionOf(v1), VersionOf(v2))
			e, id := pausedAtB(t, v1)
			f := redeploy(t, e, nil, v2)
			tk, _ := f.task(t, id)
			require.Equal(t, mcptask.StatusWorking, tk.Status, "recovery at start leaves it waiting for its version")
			require.Contains(t, tk.StatusMessage, `waiting: no live server process serves workflow "abc" version "`+VersionOf(v1)+`"`)
			_, err := f.call(t, id, "tb", map[string]any{"x": 1})
			var je *jsonrpc.Error
			require.ErrorAs(t, err, &je)
			require.EqualValues(t, jsonrpc.CodeInvalidParams, je.Code)
			require.ErrorContains(t, err, "nothing was recorded")
			require.Zero(t, e.callsOf("tb"), "a refused continuation runs nothing")

			e.advance(DefaultVersionGrace)
			require.Equal(t, 1, e.wakeDue(t))
			tk, _ = f.task(t, id)
			require.Equal(t, mcptask.StatusFailed, tk.Status, "failed once the grace has passed")
			require.Contains(t, tk.StatusMessage, `version "`+VersionOf(v1)+`" is not served`)
			require.Contains(t, tk.StatusMessage, VersionOf(v2))
			require.Contains(t, tk.StatusMessage, "longer than a task waits for one (Options.VersionGrace, 10m0s)")
			_, err = f.call(t, id, "tb", map[string]any{"x": 1})
			require.ErrorAs(t, err, &je)
			require.Zero(t, e.callsOf("tb"))
		})
		t.Run(row.name+"/both versions", func(t *testing.T) {
			v1, v2 := abc(nil), abc(row.change)
			e, id := pausedAtB(t, v1)
			f := redeploy(t, e, &Options{PromptWait: -1}, v1, v2)
			_, err := f.call(t, id, "tb", map[string]any{"x": 1})
			require.NoError(t, err)
			tk, p := f.settled(t, id)
			require.Equal(t, mcptask.StatusCompleted, tk.Status)
			require.Equal(t, []string{"a", "b", "c"}, p.CompletedSteps, "the task ran on the version it started with")
			require.Equal(t, 1, e.callsOf("tc"), "c called its own tool")
			require.Zero(t, e.callsOf("tx")+e.callsOf("td"))
			// New tasks start on the newest version.
			tk2, p2 := f.start(t, "abc", nil)
			require.Equal(t, VersionOf(v2), tk2.Labels[LabelVersion])
			require.Equal(t, VersionOf(v2), p2.Version)
		})
	}
}

// The workflow removed: with VersionGrace negative, recovery at start
// fails the task with a reason at once instead of leaving its stale
// status until its ttl.
func TestRemovedWorkflowFailsAtStart(t *testing.T) {
	e, id := pausedAtB(t, abc(nil))
	f := redeploy(t, e, &Options{VersionGrace: -1})
	tk, _ := f.task(t, id)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.Contains(t, tk.StatusMessage, `workflow "abc"`)
	require.Contains(t, tk.StatusMessage, "is not served by this server at all")
}

// A task of a version not served waits (refusing continuations, recording
// nothing, looked at again every versionRecheck) until a process serves
// the version again within the grace: then it continues where it was,
// its own status message back, and completes.
func TestTaskWaitsForItsVersion(t *testing.T) {
	v1, v2 := abc(nil), abc(func(w *Definition) { w.Step(Server("d", "td")) })
	e, id := pausedAtB(t, v1)
	f := redeploy(t, e, nil, v2)
	tk, _ := f.task(t, id)
	require.Contains(t, tk.StatusMessage, "waiting: no live server process serves")
	require.Contains(t, tk.StatusMessage, "(no process has recorded serving it)", "the fake engine keeps no registry: the wait counts from now")
	since := tk.Labels[labelUnserved]
	require.NotEmpty(t, since)
	require.True(t, e.Now().Add(versionRecheck).Equal(tk.WakeAt), "looked at again after versionRecheck: %v", tk.WakeAt)
	_, err := f.call(t, id, "tb", map[string]any{"x": 1})
	require.ErrorContains(t, err, "nothing was recorded")
	require.Zero(t, e.callsOf("tb"))

	// Looked at again: still waiting, counted from the same time.
	e.advance(versionRecheck)
	require.Equal(t, 1, e.wakeDue(t))
	tk, _ = f.task(t, id)
	require.Equal(t, mcptask.StatusWorking, tk.Status)
	require.Equal(t, since, tk.Labels[labelUnserved])
	f.b.Close()

	// Served again: the wake-up gives it back its own wait, and it runs.
	f = newFixture(t, e, &Options{PromptWait: -1}, v1, v2)
	e.advance(versionRecheck)
	require.Equal(t, 1, e.wakeDue(t))
	tk, _ = f.task(t, id)
	require.Empty(t, tk.Labels[labelUnserved])
	require.NotContains(t, tk.StatusMessage, "waiting: no live server process")
	require.True(t, tk.WakeAt.IsZero() || tk.WakeAt.After(e.Now()), "its own wake-up time, not the version's: %v", tk.WakeAt)
	_, err = f.call(t, id, "tb", map[string]any{"x": 1})
	require.NoError(t, err)
	tk, _ = f.settled(t, id)
	require.Equal(t, mcptask.StatusCompleted, tk.Status)
}

// A declared version reused for other steps: registration in one process
// refuses it; a task recorded under it by another deploy fails with the
// mismatch named, never a nil dereference.
func TestDeclaredVersionReusedForOtherSteps(t *testing.T) {
	e := newFakeEngine()
	abcTools(e)
	b, err := NewBridge(e, nil)
	require.NoError(t, err)
	defer b.Close()
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	_, err = b.Register(srv, abc(nil).WithVersion("v1"), e.lookup())
	require.NoError(t, err)
	_, err = b.Register(srv, abc(func(w *Definition) { w.Step(Server("d", "td")) }).WithVersion("v1"), e.lookup())
	require.ErrorContains(t, err, `version "v1" is registered twice with different steps`)

	e, id := pausedAtB(t, abc(nil).WithVersion("v1"))
	f := redeploy(t, e, &Options{VersionGrace: -1}, abc(func(w *Definition) { w.Steps = w.Steps[:2] }).WithVersion("v1"))
	tk, _ := f.task(t, id)
	require.Equal(t, mcptask.StatusFailed, tk.Status)
	require.Contains(t, tk.StatusMessage, `version "v1" is served with a definition other than the one this task started on (step "c" was removed)`)
}

// A task written before versions existed (no recorded version) is adopted
// by the served version whose steps its progress matches.
func TestUnversionedTaskIsAdopted(t *testing.T) {
	e, id := pausedAtB(t, abc(nil))
	ctx := context.Background()
	tk, err := e.st.Get(ctx, id)
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(tk.Variables[VarProgress], &raw))
	delete(raw, "version")
	raw["schemaVersion"] = 1
	b, _ := json.Marshal(raw)
	_, err = e.st.Update(ctx, id, store.Update{Labels: map[string]string{LabelVersion: ""}, Variables: map[string]json.RawMessage{VarProgress: b}})
	require.NoError(t, err)
	f := redeploy(t, e, &Options{PromptWait: -1}, abc(nil))
	_, err = f.call(t, id, "tb", map[string]any{"x": 1})
	require.NoError(t, err)
	done, p := f.settled(t, id)
	require.Equal(t, mcptask.StatusCompleted, done.Status)
	require.Equal(t, VersionOf(abc(nil)), p.Version, "the version is recorded once adopted")
	require.Equal(t, VersionOf(abc(nil)), done.Labels[LabelVersion])
}

// A caller that gives up on prompts/get while a server step runs cancels
// nothing: the step completes on the engine, the workflow pauses at the
// client step, and the task says so. The same for a continuation.
func TestCallerGivingUpCancelsNoStep(t *testing.T) {
	e := newFakeEngine()
	release := make(chan struct{})
	var ran atomic.Int32
	e.tool("slow", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) {
		select {
		case <-release:
			ran.Add(1)
			return ok(map[string]any{"done": true}), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	e.tool("review", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) { return ok("fine"), nil })
	w := New("slowflow", "slow steps around a client step").Step(
		Server("first", "slow"),
		Client("check", "review"),
		Server("last", "slow"),
	)
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	ctx, giveUp := context.WithCancel(context.Background())
	done := make(chan *mcp.GetPromptResult, 1)
	go func() {
		res, _ := f.b.workflows["slowflow"].prompt.Handle(ctx, &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: "slowflow"}})
		done <- res
	}()
	id := waitForTask(t, e)
	giveUp() // the host's timeout
	<-done
	close(release)
	tk, p := f.settled(t, id)
	require.Equal(t, mcptask.StatusWorking, tk.Status)
	require.Equal(t, mcptask.StepCompleted, p.step("first").Status, "the step ran to its end")
	require.Equal(t, mcptask.StepAwaitingClient, p.step("check").Status)
	require.Contains(t, tk.StatusMessage, `waiting for the client to call tool "review"`)

	// A continuation whose caller leaves while the next server step runs.
	release = make(chan struct{})
	raw, _ := json.Marshal(map[string]any{})
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "review", Arguments: raw, Meta: mcp.Meta{mcptask.MetaTaskID: id}}}
	cctx, giveUp2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer giveUp2()
	_, err := f.e.cont(cctx, f.e.Resolve(cctx, req), req)
	require.NoError(t, err, "the step was recorded: the answer says so even to a caller out of time")
	close(release)
	tk, p = f.settled(t, id)
	require.Equal(t, mcptask.StatusCompleted, tk.Status)
	require.EqualValues(t, 2, ran.Load())
}

// waitForTask returns the id of the one workflow task in e's store once it
// exists.
func waitForTask(t *testing.T, e *fakeEngine) string {
	t.Helper()
	var id string
	require.Eventually(t, func() bool {
		active, err := e.st.Active(context.Background())
		if err != nil || len(active) == 0 {
			return false
		}
		id = active[0].ID
		return true
	}, 30*time.Second, time.Millisecond)
	return id
}

// Two tasks share no lock: a continuation of one returns while a step of
// the other is blocked (the test would hang otherwise; it asserts no
// timing).
func TestTasksShareNoLock(t *testing.T) {
	e := newFakeEngine()
	block := make(chan struct{})
	defer close(block)
	entered := make(chan struct{}, 1)
	e.tool("gate", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
		if args["slow"] == true {
			entered <- struct{}{}
			select {
			case <-block:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return ok("ok"), nil
	})
	e.tool("note", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) { return ok("noted"), nil })
	gated := func(name string, slow bool) *Definition {
		return New(name, "a client step, then a server step").Step(
			Client("n", "note"),
			Server("g", "gate").Bind("slow", Const(slow)),
		)
	}
	f := newFixture(t, e, &Options{PromptWait: 20 * time.Millisecond}, gated("blocked", true), gated("quick", false))
	blocked, _ := f.start(t, "blocked", nil)
	quick, _ := f.start(t, "quick", nil)
	_, err := f.call(t, blocked.ID, "note", nil)
	require.NoError(t, err)
	<-entered // the blocked task's step runs, and stays
	_, err = f.call(t, quick.ID, "note", nil)
	require.NoError(t, err, "the other task's continuation is not held up")
	tk, _ := f.settled(t, quick.ID)
	require.Equal(t, mcptask.StatusCompleted, tk.Status)
	tb, pb := f.task(t, blocked.ID)
	require.Equal(t, mcptask.StatusWorking, tb.Status)
	require.Equal(t, mcptask.StepRunning, pb.step("g").Status)
}

// A workflow's ttl is its idle allowance: 72 hours between two steps are
// fine, every recorded step moves the deadline, and a ttl above the
// engine's maximum is refused at registration, not cut.
func TestWorkflowTTLIsAnIdleAllowance(t *testing.T) {
	e := newFakeEngine()
	e.maxTTL = 7 * 24 * time.Hour
	e.tool("sign", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) { return ok("signed"), nil })
	e.tool("file", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) { return ok("filed"), nil })
	w := New("approval", "wait for a human").WithTTL(72*time.Hour).Step(
		Client("sign", "sign"), Server("file", "file"), Client("sign2", "sign"),
	)
	f := newFixture(t, e, &Options{PromptWait: -1}, w)
	tk, _ := f.start(t, "approval", nil)
	require.Equal(t, 72*time.Hour, tk.TTL)
	require.Equal(t, e.Now().Add(72*time.Hour), tk.ExpiresAt)
	require.Equal(t, "1", tk.Labels[LabelTouched], "the handoff was delivered: no orphan deadline")
	require.Equal(t, DeadlineIdle, tk.Labels[LabelDeadline])

	e.advance(70 * time.Hour) // a human answers three days later
	swept, err := e.st.Expired(context.Background(), e.Now(), 10)
	require.NoError(t, err)
	require.Empty(t, swept)
	_, err = f.call(t, tk.ID, "sign", nil)
	require.NoError(t, err)
	tk, _ = f.settled(t, tk.ID)
	require.Equal(t, e.Now().Add(72*time.Hour), tk.ExpiresAt, "the recorded steps moved the deadline")

	_, err = f.b.Register(f.srv, New("toolong", "").WithTTL(8*24*time.Hour).Step(Client("s", "sign")), e.lookup())
	require.ErrorContains(t, err, "above the engine's MaxTTL")
	_, err = NewBridge(e, &Options{TTL: 8 * 24 * time.Hour})
	require.ErrorContains(t, err, "Options.TTL")
}

// The orphan rule: a task whose handoff was never delivered (the caller
// left) and that waits for a client expires after the orphan timeout; a
// delivered handoff is never orphaned.
func TestOrphanOnlyWhenTheHandoffWasNotDelivered(t *testing.T) {
	e := newFakeEngine()
	gate := make(chan struct{})
	e.tool("prep", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) {
		<-gate
		return ok("ready"), nil
	})
	e.tool("act", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) { return ok("done"), nil })
	w := New("o", "").Step(Server("prep", "prep"), Client("act", "act"))
	f := newFixture(t, e, &Options{PromptWait: -1, OrphanTimeout: 10 * time.Minute}, w)

	// Cut: the caller leaves before the handoff.
	ctx, cut := context.WithCancel(context.Background())
	go func() {
		_, _ = f.b.workflows["o"].prompt.Handle(ctx, &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: "o"}})
	}()
	id := waitForTask(t, e)
	cut()
	close(gate)
	tk, _ := f.settled(t, id)
	require.Empty(t, tk.Labels[LabelTouched])
	require.Equal(t, DeadlineOrphan, tk.Labels[LabelDeadline])
	require.Equal(t, e.Now().Add(10*time.Minute), tk.ExpiresAt)
	require.Contains(t, f.b.expiryMessage(tk), "orphaned")

	// Delivered: 3x the orphan timeout later the client continues.
	tk2, _ := f.start(t, "o", nil)
	require.Equal(t, "1", tk2.Labels[LabelTouched])
	e.advance(30 * time.Minute)
	expired, err := e.st.Expired(context.Background(), e.Now(), 10)
	require.NoError(t, err)
	for _, x := range expired {
		require.NotEqual(t, tk2.ID, x.ID, "a delivered handoff is not orphaned")
	}
	_, err = f.call(t, tk2.ID, "act", nil)
	require.NoError(t, err)
	tk2, _ = f.settled(t, tk2.ID)
	require.Equal(t, mcptask.StatusCompleted, tk2.Status)
}

// A retry's backoff is a durable wake-up: the task carries its time, and
// the scheduler (here: wakeDue) runs the retry then, in a new process too.
func TestRetryBackoffIsAWakeUp(t *testing.T) {
	e := newFakeEngine()
	var n atomic.Int32
	e.tool("flaky", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) {
		if n.Add(1) == 1 {
			return nil, errors.New("transient")
		}
		return ok("fine"), nil
	})
	e.tool("act", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) { return ok("done"), nil })
	w := New("r", "").Step(Server("f", "flaky").WithRetryPolicy(RetryPolicy{MaxAttempts: 3, Backoff: 10 * time.Minute}), Client("act", "act"))
	f := newFixture(t, e, &Options{PromptWait: 50 * time.Millisecond}, w)
	tk, p := f.start(t, "r", nil)
	tk, p = f.settled(t, tk.ID)
	sp := p.step("f")
	require.Equal(t, mcptask.StepFailed, sp.Status)
	require.NotNil(t, sp.RetryAt)
	require.Equal(t, e.Now().Add(10*time.Minute), *sp.RetryAt)
	require.Equal(t, *sp.RetryAt, tk.WakeAt, "the wake-up is in the store")
	require.Contains(t, tk.StatusMessage, "retrying at")
	f.b.Close() // the process stops

	f = newFixture(t, e, &Options{PromptWait: -1}, w)
	e.recoverAll(t)
	require.Zero(t, f.e.wakeDue(t), "nothing is due before its time")
	e.advance(10 * time.Minute)
	require.Equal(t, 1, f.e.wakeDue(t))
	tk, p = f.settled(t, tk.ID)
	require.Equal(t, mcptask.StepCompleted, p.step("f").Status)
	require.EqualValues(t, 2, n.Load(), "the retry ran once")
	require.Equal(t, mcptask.StepAwaitingClient, p.step("act").Status)
	require.True(t, tk.WakeAt.IsZero())
}

// A client's wait can end: fail the workflow, skip the step (and what
// needs its output), or have the server perform it.
func TestClientWaitTimeouts(t *testing.T) {
	for _, tc := range []struct {
		policy TimeoutPolicy
		check  func(t *testing.T, tk *store.Task, p *Progress, e *fakeEngine)
	}{
		{TimeoutFail, func(t *testing.T, tk *store.Task, p *Progress, e *fakeEngine) {
			require.Equal(t, mcptask.StatusFailed, tk.Status)
			require.Contains(t, tk.StatusMessage, `the client did not perform step "approve" (tool "approve") within 48h0m0s`)
		}},
		{TimeoutSkip, func(t *testing.T, tk *store.Task, p *Progress, e *fakeEngine) {
			require.Equal(t, mcptask.StatusCompleted, tk.Status)
			require.Equal(t, mcptask.StepSkipped, p.step("approve").Status)
			require.Equal(t, mcptask.StepSkipped, p.step("ship").Status, "it needs the skipped step's output")
			require.Contains(t, p.step("ship").SkipReason, `"approve", which was skipped`)
			require.Zero(t, e.callsOf("ship"))
		}},
		{TimeoutServer, func(t *testing.T, tk *store.Task, p *Progress, e *fakeEngine) {
			require.Equal(t, mcptask.StatusCompleted, tk.Status)
			sp := p.step("approve")
			require.Equal(t, "server", sp.CompletedBy)
			require.True(t, sp.ServerTakeover)
			require.Equal(t, ReasonTimeout, sp.History[len(sp.History)-1].Reason)
			require.JSONEq(t, `{"ok":false}`, string(sp.Arguments), "the default of the client's argument")
		}},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			e := newFakeEngine()
			e.tool("approve", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) { return ok(args), nil })
			e.tool("ship", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) { return ok("shipped"), nil })
			w := New("w", "").Step(
				Client("approve", "approve").Bind("ok", FromClient("approve?").WithDefault(false)).WaitsAtMost(48*time.Hour, tc.policy),
				Server("ship", "ship").Bind("approval", StepOutput("approve")),
			)
			f := newFixture(t, e, &Options{PromptWait: -1}, w)
			tk, p := f.start(t, "w", nil)
			require.NotNil(t, p.step("approve").Deadline)
			require.Equal(t, e.Now().Add(48*time.Hour), tk.WakeAt)
			e.advance(47 * time.Hour)
			require.Zero(t, e.wakeDue(t))
			e.advance(time.Hour)
			require.Equal(t, 1, e.wakeDue(t))
			tk, p = f.settled(t, tk.ID)
			tc.check(t, tk, p, e)
		})
	}
}

// Registration validates timeouts: TimeoutServer needs defaults for the
// client's arguments.
func TestTimeoutServerNeedsDefaults(t *testing.T) {
	e := newFakeEngine()
	e.tool("approve", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) { return ok(args), nil })
	w := New("w", "").Step(Client("approve", "approve").Bind("ok", FromClient("approve?")).WaitsAtMost(time.Hour, TimeoutServer))
	err := w.Validate(e.lookup())
	require.ErrorContains(t, err, `argument "ok" has no default`)
}

// A cancel stops the step running on the engine; the cancel's own write
// closes its record (an ended task has no record running), and the
// tool's outcome is not recorded.
func TestCancelStopsARunningStep(t *testing.T) {
	e := newFakeEngine()
	started := make(chan struct{})
	stopped := make(chan struct{})
	e.tool("long", func(ctx context.Context, _ map[string]any) (*mcp.CallToolResult, error) {
		close(started)
		<-ctx.Done()
		close(stopped)
		return nil, ctx.Err()
	})
	f := newFixture(t, e, &Options{PromptWait: 10 * time.Millisecond}, New("l", "").Step(Server("long", "long")))
	tk, _ := f.start(t, "l", nil)
	<-started
	e.cancel(t, tk.ID)
	<-stopped
	tk, p := f.settled(t, tk.ID)
	require.Equal(t, mcptask.StatusCancelled, tk.Status)
	sp := p.step("long")
	require.Equal(t, mcptask.StepCancelled, sp.Status, "the cancel's write closed the record")
	require.Len(t, sp.History, 1)
	require.Equal(t, OutcomeCancelled, sp.History[0].Outcome, "the cut attempt is not recorded as the tool's outcome")
}

// The handoff names the task id among a client step's arguments, and the
// prose leads with it.
func TestHandoffCarriesTheTaskIDArgument(t *testing.T) {
	e := newFakeEngine()
	abcTools(e)
	f := newFixture(t, e, &Options{PromptWait: -1, ResultTool: "task_result"}, abc(nil))
	res, err := f.b.workflows["abc"].prompt.Handle(context.Background(), &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: "abc"}})
	require.NoError(t, err)
	text := res.Messages[len(res.Messages)-1].Content.(*mcp.TextContent).Text
	require.Contains(t, text, `Call tool "tb" with {"_task_id":"`)
	doc, err := handoff.FromPromptResult(res)
	require.NoError(t, err)
	require.Contains(t, doc.Continuation.Instructions, `call tool "task_result" with {"task_id": `)
	require.Equal(t, "tb", doc.RemainingSteps[0].Call.Tool)
	require.True(t, e.taskIDTools["tb"], "the client step's tool takes _task_id")
}

// A task that waits for its version and reaches its ttl first expires
// saying what it waited for.
func TestWaitForVersionExpiryMessage(t *testing.T) {
	v1, v2 := abc(nil), abc(func(w *Definition) { w.Step(Server("d", "td")) })
	e, id := pausedAtB(t, v1)
	f := redeploy(t, e, nil, v2)
	tk, _ := f.task(t, id)
	msg := f.e.kind.ExpiryMessage(tk)
	require.Contains(t, msg, "expired: the workflow rested for its ttl")
	require.Contains(t, msg, `while it waited for a server process that serves its version (no live server process serves workflow "abc"`)
}
