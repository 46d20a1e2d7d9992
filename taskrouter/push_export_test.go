package taskrouter

import (
	"context"
	"net/netip"
)

// SetPushLookup makes r's deliveries and registrations resolve host names
// with lookup (before Start, or while nothing is delivered).
func SetPushLookup(r *Router, lookup func(ctx context.Context, host string) ([]netip.Addr, error)) {
	r.hooks.policy.lookup = lookup
	r.hooks.http = r.hooks.policy.client(r.hooks.opts.Timeout)
}

// RescanPush scans task id's event log from its first event, as Start
// does, and returns when the deliveries it makes are stored.
func RescanPush(r *Router, id string) {
	sh := r.hooks.scans.shard(id)
	sh.forget(id)
	r.hooks.scan(context.Background(), sh, id, nil)
}
