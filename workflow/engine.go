package workflow

import (
	"context"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// TaskEngine is what the bridge needs from the task engine;
// *taskrouter.Router implements it.
type TaskEngine interface {
	// Resolve returns the resolved form of a request (dialect, owner).
	Resolve(ctx context.Context, req mcp.Request) *taskrouter.Request
	// CreateTask durably creates a working task for the requestor.
	CreateTask(ctx context.Context, req *taskrouter.Request, origin store.Request, opts taskrouter.CreateOptions) (*store.Task, error)
	// TaskFor returns a task the requestor may access, or an error
	// matching store.ErrNotFound.
	TaskFor(ctx context.Context, req *taskrouter.Request, id string) (*store.Task, error)
	// Task returns a task by id, whoever owns it.
	Task(ctx context.Context, id string) (*store.Task, error)
	// Update writes to a task and wakes its waiters.
	Update(ctx context.Context, id string, u store.Update) (*store.Task, error)
	// CallTool runs a tool in-process, never as a task.
	CallTool(ctx context.Context, session *mcp.ServerSession, name string, args any, meta mcp.Meta) (*mcp.CallToolResult, error)
	// RunTool runs a client's tools/call in-process, never as a task.
	RunTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error)
	// Track makes tasks/cancel, expiry, shutdown and a lost lease cancel
	// work on a task.
	Track(ctx context.Context, id string) (context.Context, func())
	// Lease claims a task's lease for this process while it runs the
	// task's server steps; AdoptLease keeps renewing one it already holds
	// (from CreateTask with CreateOptions.Lease).
	Lease(ctx context.Context, id string) (*taskrouter.Lease, error)
	AdoptLease(t *store.Task) *taskrouter.Lease
	// OnRecover, OnExpire and OnTouch register the bridge's hooks for
	// workflow tasks; SetContinuation routes calls with _meta._task_id to
	// it.
	OnRecover(kind string, f taskrouter.RecoverFunc)
	OnExpire(kind string, f taskrouter.ExpiryHook)
	OnTouch(kind string, f taskrouter.TouchHook)
	SetContinuation(h taskrouter.ContinuationHandler)
	// Logger is where the bridge logs.
	Logger() *slog.Logger
	// Now is the engine's clock.
	Now() time.Time
}

var _ TaskEngine = (*taskrouter.Router)(nil)
