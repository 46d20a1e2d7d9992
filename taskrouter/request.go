package taskrouter

import (
	"context"
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/wire"
)

// Request is one client request as the engine resolved it, once, on the
// way in: the tasks dialect it speaks, whether it declared the tasks
// extension, who it acts for and where it came from. Every dialect question
// the engine and the workflow bridge ask is answered by Dialect; nothing
// else branches on protocol versions.
type Request struct {
	// MCP is the SDK's request.
	MCP mcp.Request
	// Dialect is the tasks dialect of the request.
	Dialect mcptask.Dialect
	// Declared reports whether the request declared the tasks extension in
	// its client capabilities (extension dialect only).
	Declared bool
	// Owner is the principal the request acts for (Options.Owner); empty
	// when OwnerErr is set.
	Owner string
	// OwnerErr is why the requestor could not be identified, if it could
	// not (a -32600 JSON-RPC error). Requests that read or create tasks fail
	// with it.
	OwnerErr error
	// Authenticated reports whether the request carries an authorization
	// context (go-sdk TokenInfo). Such a request only ever sees its own
	// tasks.
	Authenticated bool
	// Source says where the request came from, for the per-source quota:
	// "session:<id>" (a stateful HTTP session, or a stdio or in-memory
	// connection wrapped by Router.Transport), "addr:<ip>" (stateless HTTP)
	// or "local" (anything else).
	Source string

	bound    bool // RequestOf a task bound to its owner: the tasks it creates are bound too
	ownScope bool // RequestOf a task that is its own scope: so are the tasks it creates

	connID  string            // shim connection (stdio, in-memory): status push target
	touched string            // a task the fast path already reported to the touch hook for this request
	task    *wire.TaskRequest // core params.task, moved into _meta by a shim
	asked   bool              // params.task was present
	taskErr error             // params.task was malformed
}

// requestKey carries the *Request through ctx. The SDK hands custom method
// handlers (tasks/*) only ctx, the session and the params, so the context
// is the one way to reach the resolved request from there.
type requestKey struct{}

// RequestFrom returns the request the router's middleware resolved for
// ctx, or nil outside a request the router saw.
func RequestFrom(ctx context.Context) *Request {
	q, _ := ctx.Value(requestKey{}).(*Request)
	return q
}

// versioned is implemented by every *mcp.ServerRequest[P].
type versioned interface {
	ProtocolVersion() string
	ClientCapabilities() *mcp.ClientCapabilities
}

// remoteHeader is the private header the HTTP shim sets to the client's IP
// address (after deleting any value the client sent).
const remoteHeader = "Taskbridge-Private-Remote-Addr"

// isNilParams reports a typed nil params pointer (a request sent without
// params), whose promoted ParamsBase methods would dereference nil.
func isNilParams(p mcp.Params) bool {
	v := reflect.ValueOf(p)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// byID reports whether tasks this request creates are id-capabilities:
// reachable by any unauthenticated requestor that knows the id.
func (q *Request) byID(sessionBound bool) bool { return !q.Authenticated && !sessionBound && !q.bound }

// mayAccess reports whether the requestor may read and act on t: its own
// tasks always; without an authorization context also every task created
// as an id-capability (see Options.SessionBound); never the records of
// push (a webhook's, a delivery's), whose owners are reserved. A
// stateless anonymous requestor shares its owner, LocalOwner, with the
// server's own tasks (a schedule's, any created without a request): of
// those, it reaches by owner only the tasks of stateless anonymous
// clients (OwnerScope), the server's by nothing (they are no
// id-capabilities).
func (q *Request) mayAccess(o *Options, t *store.Task) bool {
	if isPushOwner(t.Owner) {
		return false // a webhook's or a delivery's record is no client's task
	}
	if q.OwnerErr == nil && t.Owner == q.Owner && (!q.anonymous() || t.Labels[labelScope] == scopeTask) {
		return true
	}
	return q.byID(o.SessionBound) && t.Labels[labelAccess] == accessByID
}
