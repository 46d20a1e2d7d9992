package taskrouter

import (
	"context"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
)

// SDKTransport is Router.Transport with the task methods served by the
// SDK, as before the fast path: the differential tests compare both.
func SDKTransport(r *Router, t mcp.Transport) mcp.Transport {
	return &taskTransport{inner: t, r: r, noFast: true}
}

// FastPathUsable reports whether the fast path serves this router.
func FastPathUsable(r *Router) bool { return r.fast.usable() }

// FastServed counts the requests the fast path served.
func FastServed(r *Router) int64 { return r.fast.served.Load() }

// RecentTask is the record of a task this router ended moments ago, or
// nil.
func RecentTask(r *Router, id string) *store.Task { return r.recent.get(id, r.opts.Now()) }

// SweeperStopping reports whether the router's sweeper was asked to stop.
func SweeperStopping(r *Router) bool { return r.sweeper.stopping.Load() }

// Sweep runs one round of the ttl sweeper now (the engine sweeps every
// Options.SweepInterval by itself) and returns how many tasks it deleted
// or failed.
func Sweep(ctx context.Context, r *Router) (int, error) { return r.sweeper.sweep(ctx) }

// Takeover runs one round of the takeover of expired leases now (the
// engine runs it periodically on a shared store) and returns how many
// tasks it took over.
func Takeover(ctx context.Context, r *Router) (int, error) { return r.takeover.takeOver(ctx) }
