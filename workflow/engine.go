package workflow

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// TaskEngine is what the bridge needs from the task engine;
// *taskrouter.Router implements it, and the bridge's unit tests use a
// small fake.
type TaskEngine interface {
	// Resolve returns the resolved form of a request (dialect, owner).
	Resolve(ctx context.Context, req mcp.Request) *taskrouter.Request
	// CreateTask durably creates a working task for the requestor.
	CreateTask(ctx context.Context, req *taskrouter.Request, origin store.Request, opts *taskrouter.CreateOptions) (*store.Task, error)
	// TaskFor returns a task the requestor may access, or an error
	// matching store.ErrNotFound.
	TaskFor(ctx context.Context, req *taskrouter.Request, id string) (*store.Task, error)
	// Task returns a task by id, whoever owns it.
	Task(ctx context.Context, id string) (*store.Task, error)
	// Update writes to a task and wakes its waiters.
	Update(ctx context.Context, id string, u store.Update) (*store.Task, error)
	// Await waits until done reports true for task id (read at every
	// change, on any replica), or ctx ends; it returns the task as last
	// read.
	Await(ctx context.Context, id string, done func(*store.Task) bool) (*store.Task, error)
	// RunTool runs a tools/call request in-process, never as a task (a nil
	// req.Session runs it on the engine's own session).
	RunTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error)
	// CheckToolArguments checks arguments against a tool's input schema
	// before it runs (a -32602 naming the mismatch; nil when the engine
	// holds no schema of the tool): the webhook refuses what the tool
	// would, recording nothing.
	CheckToolArguments(tool string, args json.RawMessage) error
	// Track makes tasks/cancel, expiry, shutdown and a lost lease cancel
	// work on a task.
	Track(ctx context.Context, id string) (context.Context, func())
	// TryLease claims a task's lease for work this process runs for it,
	// without waiting (store.ErrLeased when another process holds it);
	// AdoptLease keeps renewing one the process already holds (from
	// CreateTask with CreateOptions.Lease, or a takeover).
	TryLease(ctx context.Context, id string) (*taskrouter.Lease, error)
	AdoptLease(t *store.Task) *taskrouter.Lease
	// HandleKind hands the engine's hooks for workflow tasks (recovery,
	// wake-ups, expiry wording, touches) to the bridge; SetContinuation
	// routes calls with _task_id to it.
	HandleKind(kind string, h taskrouter.KindHandler)
	SetContinuation(h taskrouter.ContinuationHandler)
	// AcceptTaskIDArgument makes a tool take the task id as the argument
	// _task_id (for clients that cannot set _meta).
	AcceptTaskIDArgument(tool string)
	// SetToolOptions sets the task behaviour of a tool registered on the
	// server directly (a workflow's own tool).
	SetToolOptions(name string, opts *taskrouter.ToolOptions)
	// StartLeg makes a tools/call a task whose handler is exec (a leg, see
	// leg.go); ResumeLeg runs a leg's handler again after a restart.
	StartLeg(ctx context.Context, q *taskrouter.Request, req *mcp.CallToolRequest, kind string, labels map[string]string, exec func(ctx context.Context) (mcp.Result, error)) (mcp.Result, error)
	ResumeLeg(ctx context.Context, t *store.Task, reason string, exec func(ctx context.Context) (mcp.Result, error)) error
	// CancelTask cancels a task whoever owns it, with message as its
	// status message (a workflow's children).
	CancelTask(ctx context.Context, id, message string) (*store.Task, error)
	// Logger is where the bridge logs; Now is the engine's clock; MaxTTL
	// caps every task's ttl.
	Logger() *slog.Logger
	Now() time.Time
	MaxTTL() time.Duration
}

var _ TaskEngine = (*taskrouter.Router)(nil)

// kindHooks adapts the bridge to taskrouter.KindHandler.
type kindHooks struct{ b *Bridge }

// Recover resolves a workflow task whose process is gone, first
// recording it on its original when it is a fork the original does not
// list (see "Rerun and fork" in fork.go), and applying the orphan rule
// when its process died before its first write.
func (k kindHooks) Recover(ctx context.Context, t *store.Task, reason string) error {
	k.b.relinkFork(ctx, t)
	return k.b.recoverTask(ctx, k.b.orphanRule(ctx, t), reason)
}

// orphanRule gives workflow task t the orphan deadline when no client
// holds it, it waits for one, and no write has set its deadline yet: its
// process died between creating it and the first write of its progress
// (which sets the deadline by the time rules), so its reply was lost
// with the process, and it would otherwise wait out its ttl. It returns
// the task as it stands.
func (b *Bridge) orphanRule(ctx context.Context, t *store.Task) *store.Task {
	if t.Labels[LabelTouched] != "" || t.Labels[LabelDeadline] != "" || t.Status.Terminal() || b.opts.OrphanTimeout <= 0 {
		return t
	}
	p, err := decodeProgress(t)
	if err != nil || !waiting(p) {
		return t
	}
	u := store.Update{IfVersion: t.Version}
	b.deadline(t, p, &u, b.engine.Now())
	if u.ExpiresAt == nil {
		return t
	}
	nt, err := b.engine.Update(ctx, t.ID, u)
	if err != nil {
		return t // changed meanwhile: the write that changed it applied the rules
	}
	return nt
}
func (k kindHooks) Wake(ctx context.Context, t *store.Task) error { return k.b.wake(ctx, t) }

// ExpiryMessage words the failure of an expired workflow task. A fork
// expiring is visited for the last time: one its original does not list
// (its reply was lost with its process) is recorded there first.
func (k kindHooks) ExpiryMessage(t *store.Task) string {
	if t.Labels[LabelForkedFrom] != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		k.b.relinkFork(ctx, t)
		cancel()
	}
	return k.b.expiryMessage(t)
}
func (k kindHooks) Touched(ctx context.Context, t *store.Task) { k.b.touched(ctx, t) }
func (k kindHooks) Ended(ctx context.Context, t *store.Task)   { k.b.ended(ctx, t) }

// InputRequests lists the events a workflow task waits for (see
// taskrouter.InputKind).
func (k kindHooks) InputRequests(t *store.Task) map[string]json.RawMessage {
	return k.b.inputRequests(t)
}

// Answer delivers the client's tasks/update answers to the events a
// workflow task waits for (see taskrouter.InputKind).
func (k kindHooks) Answer(ctx context.Context, t *store.Task, responses map[string]json.RawMessage) error {
	return k.b.answerInputs(ctx, t, responses)
}

var (
	_ taskrouter.InputKind = kindHooks{}
	_ taskrouter.EndKind   = kindHooks{}
)

// Report makes the built-in task_result tool answer with the workflow's
// handoff (see taskrouter.Reporter).
func (k kindHooks) Report(ctx context.Context, t *store.Task) (*mcp.CallToolResult, bool) {
	return k.b.report(ctx, t)
}
