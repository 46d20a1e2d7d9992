package taskrouter

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/memory"
)

// TestPushAddressRules: which addresses a delivery may reach, by policy.
func TestPushAddressRules(t *testing.T) {
	def, private, noLoop := urlPolicy{}, urlPolicy{allowPrivate: true}, urlPolicy{denyLoopback: true}
	for _, c := range []struct {
		ip                       string
		def, private, noLoopback bool
	}{
		{"93.184.215.14", true, true, true},
		{"2606:4700::6810:84e5", true, true, true},
		{"127.0.0.1", true, true, false},
		{"127.8.9.10", true, true, false},
		{"::1", true, true, false},
		{"::ffff:127.0.0.1", true, true, false},
		{"10.1.2.3", false, true, false},
		{"172.31.255.1", false, true, false},
		{"192.168.1.1", false, true, false},
		{"100.64.0.1", false, true, false},
		{"169.254.169.254", false, true, false},
		{"fd00::1", false, true, false},
		{"fe80::1", false, true, false},
		{"::ffff:10.0.0.1", false, true, false},
		{"64:ff9b::a00:1", false, true, false},   // NAT64 of 10.0.0.1
		{"64:ff9b::5db8:d70e", true, true, true}, // NAT64 of a public address
		{"64:ff9b:1::a00:1", false, true, false}, // local-use NAT64 (RFC 8215): a network's own
		{"64:ff9b:1:5db8:d70e::", false, true, false},
		{"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", false, true, false},
		{"64:ff9b:2::1", true, true, true},       // beyond the /48: a global address
		{"2002:a00:1::1", false, true, false},    // 6to4 of 10.0.0.1
		{"2002:7f00:1::1", false, false, false},  // 6to4 of 127.0.0.1: not this host's loopback
		{"64:ff9b::7f00:1", false, false, false}, // NAT64 of 127.0.0.1: likewise
		{"2002:5db8:d70e::1", true, true, true},  // 6to4 of a public address
		{"0.0.0.0", false, false, false},         // never
		{"::", false, false, false},              // never
		{"224.0.0.1", false, false, false},       // multicast: never
		{"255.255.255.255", false, false, false}, // broadcast: never
		{"198.18.0.1", false, true, false},       // benchmarking
		{"240.0.0.1", false, true, false},        // reserved
	} {
		ip := netip.MustParseAddr(c.ip)
		require.Equal(t, c.def, def.allowed(ip, false) == nil, "default %s", c.ip)
		require.Equal(t, c.private, private.allowed(ip, false) == nil, "AllowPrivate %s", c.ip)
		require.Equal(t, c.noLoopback, noLoop.allowed(ip, false) == nil, "DenyLoopback %s", c.ip)
	}
	// http:// without AllowHTTP reaches loopback only.
	require.NoError(t, def.allowed(netip.MustParseAddr("127.0.0.1"), true))
	require.Error(t, def.allowed(netip.MustParseAddr("93.184.215.14"), true))
}

// TestPushBackoff: the wait doubles from RetryBase up to RetryMax, with
// at most 10% jitter.
func TestPushBackoff(t *testing.T) {
	w := &webhooks{opts: PushOptions{RetryBase: time.Second, RetryMax: 10 * time.Second}}
	w.jitter = func() float64 { return 0 }
	var got []time.Duration
	for a := 1; a <= 6; a++ {
		got = append(got, w.backoff(a))
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}, got)
	w.jitter = func() float64 { return 0.999 }
	require.InDelta(t, float64(1100*time.Millisecond), float64(w.backoff(1)), float64(time.Millisecond))
}

// TestPushReplicasRefresh: on a shared store, a replica learns of a
// webhook another registered, and forgets one another deleted, when it
// re-reads them; a delivery it makes for a deleted one is cancelled.
func TestPushReplicasRefresh(t *testing.T) {
	st := sharedMemory{memory.New(nil)}
	ctx := context.Background()
	a, err := NewRouter(st, &Options{ReplicaID: "a"})
	require.NoError(t, err)
	b, err := NewRouter(st, &Options{ReplicaID: "b"})
	require.NoError(t, err)
	for _, r := range []*Router{a, b} {
		require.NoError(t, r.Start(ctx))
		t.Cleanup(func() { _ = r.Close() })
	}
	wh, _, err := a.Webhooks().Register(ctx, nil, WebhookRegistration{URL: "https://127.0.0.1:1/x"})
	require.NoError(t, err)
	require.Nil(t, b.hooks.hooks.get(wh.WebhookID))
	require.NoError(t, b.hooks.load(ctx))
	require.NotNil(t, b.hooks.hooks.get(wh.WebhookID))
	list, err := b.Webhooks().List(ctx, nil, "")
	require.NoError(t, err)
	require.Len(t, list, 1)

	require.NoError(t, a.Webhooks().Delete(ctx, nil, wh.WebhookID))
	require.Nil(t, b.hooks.lookup(ctx, wh.WebhookID), "a delivery's lookup reads the store on a shared one")
	require.NoError(t, b.hooks.load(ctx))
	require.Nil(t, b.hooks.hooks.get(wh.WebhookID))
}

// TestPushReceiverCircuit: the delivery pool's places and circuits, on a
// clock of the test's: at most MaxConcurrentPerReceiver attempts per
// receiver and MaxConcurrent in all; 3 attempts in a row a receiver
// leaves unanswered open its circuit for RetryBase, doubling at each
// reopening up to RetryMax; then one attempt goes through (the others
// wait for its outcome), whose answer closes the circuit. Another
// receiver is never held by it.
func TestPushReceiverCircuit(t *testing.T) {
	var p deliveryPool
	p.init(PushOptions{MaxConcurrent: 5, MaxConcurrentPerReceiver: 2, RetryBase: time.Minute, RetryMax: 3 * time.Minute, Timeout: 10 * time.Second})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	silent, other, third := "https://silent.example", "https://other.example", "https://third.example"
	take := func(key string) (bool, time.Time, string) { return p.acquire(key, now) }

	ok, _, _ := take(silent)
	require.True(t, ok)
	ok, _, _ = take(silent)
	require.True(t, ok)
	ok, retry, why := take(silent)
	require.False(t, ok, "two per receiver")
	require.Equal(t, now.Add(10*time.Second), retry, "no answer yet: until its oldest attempt times out")
	require.Contains(t, why, "MaxConcurrentPerReceiver")
	for range 2 {
		ok, _, _ = take(other)
		require.True(t, ok, "another receiver is not held by the silent one")
	}
	ok, _, _ = take(third)
	require.True(t, ok)
	ok, _, why = take(third)
	require.False(t, ok, "five in all")
	require.Contains(t, why, "MaxConcurrent)")
	p.release(other, now, true, now)
	p.release(other, now, true, now)
	p.release(third, now, true, now)

	// The silent receiver's two attempts time out, then a third.
	p.release(silent, now, false, now)
	p.release(silent, now, false, now)
	ok, _, _ = take(silent)
	require.True(t, ok, "two unanswered: not yet")
	p.release(silent, now, false, now)
	ok, retry, why = take(silent)
	require.False(t, ok, "three unanswered in a row: the circuit opens")
	require.Equal(t, now.Add(time.Minute), retry)
	require.Contains(t, why, "left 3 attempts in a row unanswered")
	ok, _, _ = take(other)
	require.True(t, ok, "the other receiver goes on")
	p.release(other, now, true, now)

	// After the cooldown, one attempt goes through; it times out: the
	// circuit opens again, twice as long.
	now = now.Add(time.Minute)
	ok, _, _ = take(silent)
	require.True(t, ok, "half open: one attempt")
	ok, _, why = take(silent)
	require.False(t, ok)
	require.Contains(t, why, "being tried again")
	p.release(silent, now, false, now)
	ok, retry, _ = take(silent)
	require.False(t, ok)
	require.Equal(t, now.Add(2*time.Minute), retry)
	now = now.Add(2 * time.Minute)
	ok, _, _ = take(silent)
	require.True(t, ok)
	p.release(silent, now, false, now)
	_, retry, _ = take(silent)
	require.Equal(t, now.Add(3*time.Minute), retry, "up to RetryMax")

	// An answer closes it.
	now = now.Add(3 * time.Minute)
	ok, _, _ = take(silent)
	require.True(t, ok)
	p.release(silent, now, true, now)
	for range 2 {
		ok, _, _ = take(silent)
		require.True(t, ok, "closed: two at once again")
	}
	require.Len(t, p.receivers, 1, "only the receiver with attempts running is remembered")

	// A receiver that answers, slowly: put off for twice its latency.
	slow := "https://slow.example"
	ok, _, _ = take(slow)
	require.True(t, ok)
	p.release(slow, now, true, now.Add(300*time.Millisecond))
	now = now.Add(300 * time.Millisecond)
	for range 2 {
		ok, _, _ = take(slow)
		require.True(t, ok)
	}
	_, retry, _ = take(slow)
	require.Equal(t, now.Add(600*time.Millisecond), retry)
}

// TestPushMatchScopesAndExpiry: an owner's webhook watches the tasks of
// its scope: a stateless anonymous client's task (a scope of its own) is
// watched by webhooks of the task and of every owner's tasks only, never
// by the webhook of the owner all such clients share; a webhook whose
// record expired watches nothing.
func TestPushMatchScopesAndExpiry(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var s hookSet
	for _, h := range []*webhook{
		{id: "local", watch: LocalOwner},
		{id: "all", watch: allOwners},
		{id: "mine", task: "t1"},
		{id: "alice", watch: "user:alice", expires: now.Add(time.Second)},
		{id: "gone", watch: "user:alice", expires: now},
	} {
		s.add(h)
	}
	ids := func(t *store.Task, at time.Time) []string {
		var out []string
		for _, h := range s.match(t, at) {
			out = append(out, h.id)
		}
		slices.Sort(out)
		return out
	}
	anon := &store.Task{ID: "t1", Owner: LocalOwner, Labels: map[string]string{labelScope: scopeTask}}
	require.Equal(t, []string{"all", "mine"}, ids(anon, now))
	stdio := &store.Task{ID: "t2", Owner: LocalOwner}
	require.Equal(t, []string{"all", "local"}, ids(stdio, now))
	alice := &store.Task{ID: "t3", Owner: "user:alice"}
	require.Equal(t, []string{"alice", "all"}, ids(alice, now))
	require.Equal(t, []string{"all"}, ids(alice, now.Add(time.Second)), "expired")
	require.Empty(t, ids(&store.Task{ID: "wh_x", Owner: webhookOwnerPrefix + "user:alice"}, now), "push records are nobody's to watch")
}
