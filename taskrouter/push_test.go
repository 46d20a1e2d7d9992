package taskrouter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/tests/pushtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/push"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// fastRetries makes deliveries retry quickly.
func fastRetries(o *taskrouter.Options) {
	o.Push.RetryBase = 20 * time.Millisecond
	o.Push.RetryMax = 40 * time.Millisecond
}

// startTask starts tool as a task in p's dialect and returns its id.
func startTask(t *testing.T, p *peer, tool string, args map[string]any) string {
	t.Helper()
	params := map[string]any{"name": tool, "arguments": args}
	if p.d == core {
		params["task"] = map[string]any{}
		return taskOf(t, p.mustCall("tools/call", params))["taskId"].(string)
	}
	res := p.mustCall("tools/call", params)
	require.Equal(t, "task", res["resultType"], "%v", res)
	return res["taskId"].(string)
}

func register(t *testing.T, p *peer, params map[string]any) (hookID, secret string) {
	t.Helper()
	res := p.mustCall(mcptask.MethodWebhooksRegister, params)
	wh := res["webhook"].(map[string]any)
	return wh["webhookId"].(string), res["secret"].(string)
}

// TestPushDelivered: a webhook registered over MCP, in both dialects and
// over both transports, is told of its owner's task's end by one signed,
// timestamped delivery whose webhook-id is the body's id.
func TestPushDelivered(t *testing.T) {
	for _, k := range transports {
		for _, d := range []dialect{core, ext} {
			t.Run(fmt.Sprintf("%s/%s", k, map[dialect]string{core: "core", ext: "ext"}[d]), func(t *testing.T) {
				h := newHarness(t, nil)
				rc := pushtest.New(t)
				p := h.dial(k, d, nil)
				var hookID, secret, id string
				if k == overHTTP && d == ext {
					// Stateless and anonymous: no owner to watch the
					// tasks of; a webhook of one task instead.
					_, err := p.call(mcptask.MethodWebhooksRegister, map[string]any{"url": rc.URL, "events": []string{"terminal"}})
					require.ErrorContains(t, err, "needs a requestor the server can tell apart")
					id = startTask(t, p, "sleepy", map[string]any{"ms": 30})
					hookID, secret = register(t, p, map[string]any{"url": rc.URL, "events": []string{"terminal"}, "taskId": id})
				} else {
					hookID, secret = register(t, p, map[string]any{"url": rc.URL, "events": []string{"terminal"}})
					id = startTask(t, p, "sleepy", map[string]any{"ms": 30})
				}
				require.Contains(t, secret, push.SecretPrefix)
				got := rc.Wait(t, 1)
				del := pushtest.Verified(t, secret, got[0])
				require.Equal(t, mcptask.WebhookTerminal, del.Type)
				require.Equal(t, hookID, del.WebhookID)
				require.Equal(t, id, del.Task.TaskID)
				require.Equal(t, mcptask.StatusCompleted, del.Task.Status)
				require.Equal(t, mcptask.EventStatus, del.Event.Type)
				require.Equal(t, got[0].Header.Get(push.HeaderID), del.ID)
				require.Equal(t, "application/json", got[0].Header.Get("Content-Type"))

				// The listing shows it delivered.
				var ds []mcptask.WebhookDelivery
				require.Eventually(t, func() bool {
					res := p.mustCall(mcptask.MethodWebhooksDeliveries, map[string]any{"webhookId": hookID})
					raw, _ := json.Marshal(res["deliveries"])
					require.NoError(t, json.Unmarshal(raw, &ds))
					return len(ds) == 1 && ds[0].Status == mcptask.DeliveryDelivered
				}, 30*time.Second, 10*time.Millisecond)
				require.Equal(t, del.ID, ds[0].DeliveryID)
				require.Equal(t, 1, ds[0].Attempts)

				// Nothing else arrives (the status events of working are
				// not asked for), and a receiver's tampered copy fails.
				require.Equal(t, 1, rc.Count())
				bad := append([]byte(nil), got[0].Body...)
				bad[len(bad)-2] ^= 1
				require.ErrorIs(t, push.Verify(secret, got[0].Header, bad, time.Now(), 0), push.ErrSignature)
				require.ErrorIs(t, push.Verify(secret, got[0].Header, got[0].Body, time.Now().Add(time.Hour), 0), push.ErrTimestamp)
			})
		}
	}
}

// TestPushRetriedAfterReceiverDown: a receiver that answers 500 and then
// 200 gets the same delivery twice, same id, same body, re-signed; the
// delivery is recorded delivered after two attempts.
func TestPushRetriedAfterReceiverDown(t *testing.T) {
	h := newHarness(t, fastRetries)
	rc := pushtest.New(t, http.StatusInternalServerError)
	p := h.dial(inMemory, core, nil)
	hookID, secret := register(t, p, map[string]any{"url": rc.URL})
	startTask(t, p, "sleepy", map[string]any{"ms": 1})
	got := rc.Wait(t, 2)
	first, second := pushtest.Verified(t, secret, got[0]), pushtest.Verified(t, secret, got[1])
	require.Equal(t, first.ID, second.ID)
	require.Equal(t, got[0].Body, got[1].Body)
	require.GreaterOrEqual(t, got[1].At.Sub(got[0].At), 20*time.Millisecond, "the retry waits for its backoff")
	ds, _, err := h.r.Webhooks().Deliveries(context.Background(), nil, hookID, "")
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Eventually(t, func() bool {
		ds, _, _ = h.r.Webhooks().Deliveries(context.Background(), nil, hookID, "")
		return ds[0].Status == mcptask.DeliveryDelivered
	}, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 2, ds[0].Attempts)
}

// TestPushGivesUpVisibly: a delivery that never gets a 2xx stops after
// MaxAttempts: it is failed, its webhook counts the failure with the
// reason, and the task's event log (the task still runs) records it.
func TestPushGivesUpVisibly(t *testing.T) {
	h := newHarness(t, func(o *taskrouter.Options) {
		fastRetries(o)
		o.Push.MaxAttempts = 3
	})
	rc := pushtest.New(t, 500, 500, 500, 500, 500)
	ctx := context.Background()
	task, err := h.r.CreateTask(ctx, nil, store.Request{Method: "tools/call", Name: "build"}, &taskrouter.CreateOptions{Kind: "test"})
	require.NoError(t, err)
	wh, _, err := h.r.Webhooks().Register(ctx, nil, taskrouter.WebhookRegistration{URL: rc.URL, TaskID: task.ID,
		Events: []mcptask.WebhookEvent{mcptask.WebhookStep}})
	require.NoError(t, err)
	step, _ := json.Marshal(mcptask.StepEvent{Step: "compile", Attempt: 1})
	_, err = h.r.Update(ctx, task.ID, store.Update{Events: []store.Event{{Type: mcptask.EventStepStarted, Data: step}}})
	require.NoError(t, err)
	rc.Wait(t, 3)
	var hooks []mcptask.Webhook
	require.Eventually(t, func() bool {
		hooks, err = h.r.Webhooks().List(ctx, nil, task.ID)
		require.NoError(t, err)
		return len(hooks) == 1 && hooks[0].Failures == 1
	}, 30*time.Second, 10*time.Millisecond)
	require.Contains(t, hooks[0].LastError, "gave up after 3 attempts: HTTP 500")
	require.NotEmpty(t, hooks[0].LastFailureAt)
	ds, _, err := h.r.Webhooks().Deliveries(ctx, nil, wh.WebhookID, "")
	require.NoError(t, err)
	require.Equal(t, mcptask.DeliveryFailed, ds[0].Status)
	require.Equal(t, 3, ds[0].Attempts)
	require.Equal(t, 3, rc.Count(), "no attempt after the bound")

	var failed *mcptask.PushFailedEvent
	require.Eventually(t, func() bool {
		page, err := h.st.Events(ctx, task.ID, 0, 0)
		require.NoError(t, err)
		for _, e := range page.Events {
			if e.Type == mcptask.EventPushFailed {
				failed = &mcptask.PushFailedEvent{}
				require.NoError(t, json.Unmarshal(e.Data, failed))
			}
		}
		return failed != nil
	}, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, wh.WebhookID, failed.WebhookID)
	require.Equal(t, ds[0].DeliveryID, failed.DeliveryID)
	require.Equal(t, 3, failed.Attempts)
}

// TestPushTellsOfAQueueWait: a webhook told of steps is told when a
// workflow, a step or an item starts to wait for its place on a queue
// (EventStepQueued), with where it waits.
func TestPushTellsOfAQueueWait(t *testing.T) {
	h := newHarness(t, fastRetries)
	rc := pushtest.New(t)
	ctx := context.Background()
	task, err := h.r.CreateTask(ctx, nil, store.Request{Method: "tools/call", Name: "build"}, &taskrouter.CreateOptions{Kind: "test"})
	require.NoError(t, err)
	_, secret, err := h.r.Webhooks().Register(ctx, nil, taskrouter.WebhookRegistration{URL: rc.URL, TaskID: task.ID,
		Events: []mcptask.WebhookEvent{mcptask.WebhookStep}})
	require.NoError(t, err)
	wait, _ := json.Marshal(mcptask.QueueEvent{Step: "deploy", Queue: "deploys", Key: "acme", Why: "1 of 1 places of the key taken"})
	_, err = h.r.Update(ctx, task.ID, store.Update{Events: []store.Event{{Type: mcptask.EventStepQueued, Data: wait}}})
	require.NoError(t, err)
	d := pushtest.Verified(t, secret, rc.Wait(t, 1)[0])
	require.Equal(t, mcptask.WebhookStep, d.Type)
	require.Equal(t, mcptask.EventStepQueued, d.Event.Type)
	var got mcptask.QueueEvent
	require.NoError(t, json.Unmarshal(d.Event.Data, &got))
	require.Equal(t, "acme", got.Key)
	require.Equal(t, `deploy: queued on "deploys" (key "acme"): 1 of 1 places of the key taken`, mcptask.EventLine(d.Event.Type, d.Event.Data))
}

// ownerFromMeta makes requests act for _meta["test/owner"] (default
// "alice"), with tasks bound to their owner.
func ownerFromMeta(o *taskrouter.Options) {
	o.SessionBound = true
	o.Owner = func(_ context.Context, req mcp.Request) (string, error) {
		if p := req.GetParams(); p != nil {
			if who, ok := p.GetMeta()["test/owner"].(string); ok {
				return who, nil
			}
		}
		return "alice", nil
	}
}

func as(owner string, params map[string]any) map[string]any {
	out := map[string]any{"_meta": map[string]any{"test/owner": owner}}
	for k, v := range params {
		out[k] = v
	}
	return out
}

// TestPushOwnerChecked: bob cannot register for alice's task, nor for
// alice's tasks, nor see or delete alice's webhook; bob's own webhook
// for his tasks hears nothing of alice's; an administrator may.
func TestPushOwnerChecked(t *testing.T) {
	h := newHarness(t, func(o *taskrouter.Options) {
		ownerFromMeta(o)
		o.Push.Admins = []string{"root"}
	})
	rcA, rcB := pushtest.New(t), pushtest.New(t)
	p := h.dial(inMemory, core, nil)
	aliceTask := taskOf(t, p.mustCall("tools/call", as("alice", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 60000}, "task": map[string]any{}})))["taskId"].(string)

	_, err := p.call(mcptask.MethodWebhooksRegister, as("bob", map[string]any{"url": rcB.URL, "taskId": aliceTask}))
	require.EqualValues(t, mcptask.CodeInvalidParams, rpcCode(t, err))
	require.ErrorContains(t, err, "not found")
	_, err = p.call(mcptask.MethodWebhooksRegister, as("bob", map[string]any{"url": rcB.URL, "owner": "alice"}))
	require.EqualValues(t, mcptask.CodeInvalidParams, rpcCode(t, err))
	require.ErrorContains(t, err, "only an administrator")

	aliceHook := p.mustCall(mcptask.MethodWebhooksRegister, as("alice", map[string]any{"url": rcA.URL, "taskId": aliceTask}))["webhook"].(map[string]any)["webhookId"].(string)
	bobHook := p.mustCall(mcptask.MethodWebhooksRegister, as("bob", map[string]any{"url": rcB.URL}))["webhook"].(map[string]any)["webhookId"].(string)
	require.Empty(t, p.mustCall(mcptask.MethodWebhooksList, as("bob", map[string]any{"taskId": aliceTask}))["webhooks"])
	require.Len(t, p.mustCall(mcptask.MethodWebhooksList, as("bob", nil))["webhooks"], 1)
	for _, m := range []string{mcptask.MethodWebhooksDelete, mcptask.MethodWebhooksDeliveries} {
		_, err = p.call(m, as("bob", map[string]any{"webhookId": aliceHook}))
		require.EqualValues(t, mcptask.CodeInvalidParams, rpcCode(t, err), m)
		require.ErrorContains(t, err, "not found", m)
	}

	// The administrator watches alice's task too, and sees every webhook.
	rootHook := p.mustCall(mcptask.MethodWebhooksRegister, as("root", map[string]any{"url": rcA.URL, "taskId": aliceTask, "events": []string{"terminal"}}))
	require.NotEmpty(t, rootHook["secret"])
	require.Len(t, p.mustCall(mcptask.MethodWebhooksList, as("root", nil))["webhooks"], 3)

	p.mustCall("tasks/cancel", as("alice", map[string]any{"taskId": aliceTask}))
	rcA.Wait(t, 2) // alice's and root's
	bobTask := taskOf(t, p.mustCall("tools/call", as("bob", map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 1}, "task": map[string]any{}})))["taskId"].(string)
	got := rcB.Wait(t, 1)
	var d push.Delivery
	require.NoError(t, json.Unmarshal(got[0].Body, &d))
	require.Equal(t, bobTask, d.Task.TaskID, "bob's webhook hears of bob's task only")
	require.Equal(t, bobHook, d.WebhookID)
	require.Equal(t, 1, rcB.Count())

	p.mustCall(mcptask.MethodWebhooksDelete, as("alice", map[string]any{"webhookId": aliceHook}))
	_, err = p.call(mcptask.MethodWebhooksDelete, as("alice", map[string]any{"webhookId": aliceHook}))
	require.ErrorContains(t, err, "not found")
}

// TestPushURLsChecked: URLs that are not https (or http to loopback), or
// whose host is or resolves to a private address, are refused when they
// are registered; a host that resolves to a private address only later
// (DNS rebinding) is refused at delivery, and the receiver never hears
// of it; redirects are not followed.
func TestPushURLsChecked(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	task, err := h.r.CreateTask(ctx, nil, store.Request{Method: "tools/call", Name: "x"}, &taskrouter.CreateOptions{Kind: "test"})
	require.NoError(t, err)
	p := h.dial(inMemory, ext, nil)
	for _, u := range []string{
		"ftp://example.com/x",
		"http://example.com/hook",
		"https://10.1.2.3/hook",
		"https://192.168.0.10/hook",
		"https://172.16.5.4:8443/hook",
		"https://169.254.169.254/latest/meta-data",
		"https://[fc00::1]/hook",
		"https://[::ffff:10.0.0.1]/hook",
		"https://[64:ff9b::a00:1]/hook",
		"https://0.0.0.0/hook",
		"https://user:pw@127.0.0.1/hook",
		"https:///nohost",
		"not a url",
	} {
		_, err := p.call(mcptask.MethodWebhooksRegister, map[string]any{"url": u, "taskId": task.ID})
		require.EqualValues(t, mcptask.CodeInvalidParams, rpcCode(t, err), u)
	}
	_, err = p.call(mcptask.MethodWebhooksRegister, map[string]any{"url": "https://127.0.0.1/x", "events": []string{"nope"}})
	require.ErrorContains(t, err, `unknown event "nope"`)
	_, err = p.call(mcptask.MethodWebhooksRegister, map[string]any{"url": "https://127.0.0.1/x", "secret": "hunter2"})
	require.ErrorContains(t, err, "whsec_")

	// A client that does not declare the extension is refused, as on
	// tasks/*.
	und := h.dial(inMemory, extUndeclared, nil)
	_, err = und.call(mcptask.MethodWebhooksList, nil)
	require.EqualValues(t, mcptask.CodeMissingCapability, rpcCode(t, err))
}

// TestPushAddressesCheckedAtDelivery: a name that resolved to a public
// address when registered and to a private one at delivery is refused
// then; DenyLoopback refuses loopback; redirects are not followed.
func TestPushAddressesCheckedAtDelivery(t *testing.T) {
	rc := pushtest.New(t)
	var private atomic.Bool
	h := newHarness(t, func(o *taskrouter.Options) {
		fastRetries(o)
		o.Push.MaxAttempts = 2
	})
	taskrouter.SetPushLookup(h.r, func(_ context.Context, host string) ([]netip.Addr, error) {
		if private.Load() {
			return []netip.Addr{netip.MustParseAddr("10.9.9.9")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
	})
	ctx := context.Background()
	task, err := h.r.CreateTask(ctx, nil, store.Request{Method: "tools/call", Name: "x"}, &taskrouter.CreateOptions{Kind: "test"})
	require.NoError(t, err)
	wh, _, err := h.r.Webhooks().Register(ctx, nil, taskrouter.WebhookRegistration{URL: "https://hooks.example.com/in", TaskID: task.ID})
	require.NoError(t, err)
	private.Store(true)
	_, err = h.r.Complete(ctx, task.ID, map[string]any{"ok": true}, nil, 0)
	require.NoError(t, err)
	var ds []mcptask.WebhookDelivery
	require.Eventually(t, func() bool {
		ds, _, err = h.r.Webhooks().Deliveries(ctx, nil, wh.WebhookID, "")
		require.NoError(t, err)
		return len(ds) == 1 && ds[0].Status == mcptask.DeliveryFailed
	}, 30*time.Second, 10*time.Millisecond)
	require.Contains(t, ds[0].LastError, "10.9.9.9 is in a private range")
	_, _, err = h.r.Webhooks().Register(ctx, nil, taskrouter.WebhookRegistration{URL: "https://hooks.example.com/in"})
	require.ErrorContains(t, err, "private range", "resolved at registration too")

	// Redirects: the target is never reached.
	target := pushtest.New(t)
	redirect := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusFound))
	t.Cleanup(redirect.Close)
	task2, err := h.r.CreateTask(ctx, nil, store.Request{Method: "tools/call", Name: "x"}, &taskrouter.CreateOptions{Kind: "test"})
	require.NoError(t, err)
	wh2, _, err := h.r.Webhooks().Register(ctx, nil, taskrouter.WebhookRegistration{URL: redirect.URL, TaskID: task2.ID})
	require.NoError(t, err)
	_, err = h.r.Fail(ctx, task2.ID, "broken", nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ds, _, err = h.r.Webhooks().Deliveries(ctx, nil, wh2.WebhookID, "")
		require.NoError(t, err)
		return len(ds) == 1 && ds[0].Status == mcptask.DeliveryFailed
	}, 30*time.Second, 10*time.Millisecond)
	require.Contains(t, ds[0].LastError, "redirects are not followed")
	require.Zero(t, target.Count())
	require.Zero(t, rc.Count())

	// DenyLoopback refuses the receiver on 127.0.0.1.
	h2 := newHarness(t, func(o *taskrouter.Options) { o.Push.DenyLoopback = true })
	_, _, err = h2.r.Webhooks().Register(ctx, nil, taskrouter.WebhookRegistration{URL: rc.URL})
	require.ErrorContains(t, err, "loopback")
}

// TestPushTaskWebhookAfterItsEnd: a webhook registered for a task that
// has just ended is told of the end (a client racing its own task loses
// nothing), once, however often the task is scanned again.
func TestPushTaskWebhookAfterItsEnd(t *testing.T) {
	h := newHarness(t, nil)
	rc := pushtest.New(t)
	p := h.dial(inMemory, core, nil)
	id := startTask(t, p, "sleepy", map[string]any{"ms": 1})
	p.waitStatus(id, "completed")
	_, secret := register(t, p, map[string]any{"url": rc.URL, "taskId": id})
	d := pushtest.Verified(t, secret, rc.Wait(t, 1)[0])
	require.Equal(t, id, d.Task.TaskID)
	require.Equal(t, mcptask.WebhookTerminal, d.Type)
	// A second webhook for it gets its own delivery; the first none more,
	// however often the task is scanned.
	second, _ := register(t, p, map[string]any{"url": rc.URL, "taskId": id})
	rc.Wait(t, 2)
	taskrouter.RescanPush(h.r, id)
	taskrouter.RescanPush(h.r, id)
	hooks, err := h.r.Webhooks().List(context.Background(), nil, id)
	require.NoError(t, err)
	require.Len(t, hooks, 2)
	for _, wh := range hooks {
		ds, _, err := h.r.Webhooks().Deliveries(context.Background(), nil, wh.WebhookID, "")
		require.NoError(t, err)
		require.Len(t, ds, 1, wh.WebhookID)
		require.NotEqual(t, second == wh.WebhookID, ds[0].DeliveryID == d.ID)
	}
	require.Equal(t, 2, rc.Count())
}

// TestPushSurvivesRestart (bbolt): a delivery whose receiver was down is
// retried by the next process on the same file, with the same id; a
// restart does not deliver again what was delivered.
func TestPushSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tasks.db")
	rc := pushtest.New(t, http.StatusServiceUnavailable)
	slow := func(o *taskrouter.Options) {
		o.Push.RetryBase = 300 * time.Millisecond
		o.Push.RetryMax = 300 * time.Millisecond
	}
	st, err := bboltstore.Open(path, nil)
	require.NoError(t, err)
	h := newHarnessOn(t, st, slow)
	p := h.dial(inMemory, core, nil)
	hookID, secret := register(t, p, map[string]any{"url": rc.URL})
	delivered := startTask(t, p, "sleepy", map[string]any{"ms": 1})
	first := pushtest.Verified(t, secret, rc.Wait(t, 1)[0])
	require.Equal(t, delivered, first.Task.TaskID)
	require.Eventually(t, func() bool { // the failed attempt is recorded (an attempt a stop cuts short is not counted)
		ds, _, err := h.r.Webhooks().Deliveries(context.Background(), nil, hookID, "")
		require.NoError(t, err)
		return len(ds) == 1 && ds[0].Attempts == 1
	}, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, h.r.Close())
	require.NoError(t, st.Close())

	st2, err := bboltstore.Open(path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st2.Close() })
	h2 := newHarnessOn(t, st2, slow)
	got := rc.Wait(t, 2)
	second := pushtest.Verified(t, secret, got[1])
	require.Equal(t, first.ID, second.ID, "the same delivery, deduplicable by its id")
	require.Equal(t, got[0].Body, got[1].Body)
	require.Eventually(t, func() bool {
		ds, _, err := h2.r.Webhooks().Deliveries(context.Background(), nil, hookID, "")
		require.NoError(t, err)
		return len(ds) == 1 && ds[0].Status == mcptask.DeliveryDelivered && ds[0].Attempts == 2
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, h2.r.Close())

	// A third process on the file delivers nothing again.
	require.NoError(t, st2.Close())
	st3, err := bboltstore.Open(path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st3.Close() })
	h3 := newHarnessOn(t, st3, slow)
	taskrouter.RescanPush(h3.r, delivered)
	ds, _, err := h3.r.Webhooks().Deliveries(context.Background(), nil, hookID, "")
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, mcptask.DeliveryDelivered, ds[0].Status)
	require.Equal(t, 2, rc.Count())
}

// TestPushStaticWebhook: a webhook of the configuration (Options.Push.
// Hooks, or TASKBRIDGE_PUSH_URL) hears of every owner's tasks, is listed
// to administrators, and cannot be deleted.
func TestPushStaticWebhook(t *testing.T) {
	rc := pushtest.New(t)
	secret := push.NewSecret()
	t.Setenv(taskrouter.EnvPushURL, rc.URL)
	t.Setenv(taskrouter.EnvPushSecret, secret)
	t.Setenv(taskrouter.EnvPushEvents, "terminal,step")
	t.Setenv(taskrouter.EnvPushAdmins, "root")
	opts, err := taskrouter.OptionsFromEnv(nil)
	require.NoError(t, err)
	require.Len(t, opts.Push.Hooks, 1)
	h := newHarness(t, func(o *taskrouter.Options) {
		ownerFromMeta(o)
		o.Push = opts.Push
	})
	p := h.dial(inMemory, core, nil)
	for _, who := range []string{"alice", "bob"} {
		p.mustCall("tools/call", as(who, map[string]any{"name": "sleepy", "arguments": map[string]any{"ms": 1}, "task": map[string]any{}}))
	}
	got := rc.Wait(t, 2)
	for _, g := range got {
		require.Equal(t, mcptask.WebhookTerminal, pushtest.Verified(t, secret, g).Type)
	}
	hooks := p.mustCall(mcptask.MethodWebhooksList, as("root", nil))["webhooks"].([]any)
	require.Len(t, hooks, 1)
	wh := hooks[0].(map[string]any)
	require.Equal(t, true, wh["static"])
	require.Equal(t, []any{"terminal", "step"}, wh["events"])
	_, err = p.call(mcptask.MethodWebhooksDelete, as("root", map[string]any{"webhookId": wh["webhookId"]}))
	require.ErrorContains(t, err, "declared by the server's configuration")
	require.Empty(t, p.mustCall(mcptask.MethodWebhooksList, as("alice", nil))["webhooks"])

	t.Setenv(taskrouter.EnvPushSecret, "")
	_, err = taskrouter.OptionsFromEnv(nil)
	require.ErrorContains(t, err, taskrouter.EnvPushSecret)
	_, err = taskrouter.NewRouter(h.st, &taskrouter.Options{Push: taskrouter.PushOptions{Hooks: []taskrouter.StaticWebhook{{URL: "http://example.com", Secret: "x"}}}})
	require.ErrorContains(t, err, "Options.Push.Hooks[0].URL")
	require.ErrorContains(t, err, "Options.Push.Hooks[0].Secret")
}

// TestPushDisabled: with push off the methods do not exist.
func TestPushDisabled(t *testing.T) {
	h := newHarness(t, func(o *taskrouter.Options) { o.Push.Disabled = true })
	p := h.dial(inMemory, core, nil)
	_, err := p.call(mcptask.MethodWebhooksList, nil)
	require.EqualValues(t, -32601, rpcCode(t, err))
}

// TestPushCircuitBacksOffASilentReceiver: a receiver that accepts
// deliveries and never answers gets at most MaxConcurrentPerReceiver
// attempts at once; after 3 in a row timed out its circuit opens: the
// deliveries left are put off (uncounted) until RetryBase has passed,
// saying so, while another receiver's deliveries go on.
func TestPushCircuitBacksOffASilentReceiver(t *testing.T) {
	h := newHarness(t, func(o *taskrouter.Options) {
		o.Push.Timeout = 200 * time.Millisecond
		o.Push.RetryBase = time.Hour
		o.Push.MaxConcurrentPerReceiver = 2
	})
	var mu sync.Mutex
	came := 0
	release := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		came++
		mu.Unlock()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); silent.Close() })
	rc := pushtest.New(t)
	ctx := context.Background()
	p := h.dial(inMemory, core, nil)
	var hooks []string
	for range 6 {
		wh, _, err := h.r.Webhooks().Register(ctx, nil, taskrouter.WebhookRegistration{URL: silent.URL, Owner: "*", Events: []mcptask.WebhookEvent{mcptask.WebhookTerminal}})
		require.NoError(t, err)
		hooks = append(hooks, wh.WebhookID)
	}
	_, _, err := h.r.Webhooks().Register(ctx, nil, taskrouter.WebhookRegistration{URL: rc.URL, Owner: "*", Events: []mcptask.WebhookEvent{mcptask.WebhookTerminal}})
	require.NoError(t, err)
	startTask(t, p, "sleepy", map[string]any{"ms": 1})
	startTask(t, p, "sleepy", map[string]any{"ms": 1})
	rc.Wait(t, 2) // the answering receiver hears of both, whatever the silent one does

	open := 0
	require.Eventually(t, func() bool {
		open = 0
		for _, id := range hooks {
			ds, _, err := h.r.Webhooks().Deliveries(ctx, nil, id, "")
			require.NoError(t, err)
			for _, d := range ds {
				if d.Status == mcptask.DeliveryPending && d.NextAttemptAt != "" {
					at, err := time.Parse(time.RFC3339Nano, d.NextAttemptAt)
					require.NoError(t, err)
					if at.After(h.r.Now().Add(30 * time.Minute)) {
						open++ // put off while the circuit is open
					}
				}
			}
		}
		return open >= 12-4
	}, 30*time.Second, 20*time.Millisecond, "the deliveries wait for the circuit")
	mu.Lock()
	defer mu.Unlock()
	require.LessOrEqual(t, came, 4, "3 unanswered in a row open the circuit (2 at a time: at most 4 went)")
	page, err := h.r.Store().List(ctx, store.ListOptions{Owner: "io.taskbridge/deliveries:" + taskrouter.LocalOwner, Limit: store.MaxPageSize})
	require.NoError(t, err)
	said := 0
	for _, d := range page.Tasks {
		if strings.Contains(d.StatusMessage, "attempts in a row unanswered; no attempt goes to it before") {
			said++
		}
	}
	require.Positive(t, said, "the deliveries put off say why")
}

// TestPushOptionsExtremes: every number of PushOptions is checked before
// any arithmetic: a negative count or duration, and a duration beyond
// ten years (MaxInt64 included: a delivery's or a webhook's expiry must
// stay a time the store holds), is refused naming the field; zero means
// the default.
func TestPushOptionsExtremes(t *testing.T) {
	st := memory.New(nil)
	for _, c := range []struct {
		field string
		set   func(*taskrouter.PushOptions)
	}{
		{"AnonymousTTL", func(o *taskrouter.PushOptions) { o.AnonymousTTL = math.MaxInt64 }},
		{"MaxAge", func(o *taskrouter.PushOptions) { o.MaxAge = math.MaxInt64 }},
		{"Retention", func(o *taskrouter.PushOptions) { o.Retention = 11 * 365 * 24 * time.Hour }},
		{"AnonymousTTL", func(o *taskrouter.PushOptions) { o.AnonymousTTL = -time.Second }},
		{"MaxWebhooks", func(o *taskrouter.PushOptions) { o.MaxWebhooks = -1 }},
		{"MaxConcurrent", func(o *taskrouter.PushOptions) { o.MaxConcurrent = math.MinInt }},
		{"MaxConcurrentPerReceiver", func(o *taskrouter.PushOptions) { o.MaxConcurrentPerReceiver = -3 }},
	} {
		var o taskrouter.PushOptions
		c.set(&o)
		_, err := taskrouter.NewRouter(st, &taskrouter.Options{Push: o})
		require.ErrorContains(t, err, "Options.Push."+c.field, c.field)
	}
	r, err := taskrouter.NewRouter(st, &taskrouter.Options{Push: taskrouter.PushOptions{MaxWebhooks: math.MaxInt, MaxConcurrent: math.MaxInt, AnonymousTTL: 10 * 365 * 24 * time.Hour}})
	require.NoError(t, err, "large counts and ten years are fine")
	require.NoError(t, r.Close())
}
