package taskrouter

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
	st := sharedMemory{memory.New()}
	ctx := context.Background()
	a, err := NewRouter(st, &Options{ReplicaID: "a"})
	require.NoError(t, err)
	b, err := NewRouter(st, &Options{ReplicaID: "b"})
	require.NoError(t, err)
	for _, r := range []*Router{a, b} {
		require.NoError(t, r.Start(ctx))
		t.Cleanup(func() { _ = r.Close() })
	}
	wh, _, err := a.RegisterWebhook(ctx, nil, WebhookRegistration{URL: "https://127.0.0.1:1/x"})
	require.NoError(t, err)
	require.Nil(t, b.hooks.hooks.get(wh.WebhookID))
	require.NoError(t, b.hooks.load(ctx))
	require.NotNil(t, b.hooks.hooks.get(wh.WebhookID))
	list, err := b.Webhooks(ctx, nil, "")
	require.NoError(t, err)
	require.Len(t, list, 1)

	require.NoError(t, a.DeleteWebhook(ctx, nil, wh.WebhookID))
	require.Nil(t, b.hooks.lookup(ctx, wh.WebhookID), "a delivery's lookup reads the store on a shared one")
	require.NoError(t, b.hooks.load(ctx))
	require.Nil(t, b.hooks.hooks.get(wh.WebhookID))
}
