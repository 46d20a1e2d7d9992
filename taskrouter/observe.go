package taskrouter

import (
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// An Observer learns of every committed change this process makes to a
// task, and of the engine's handler activity: the hook for metrics,
// traces and dashboards (Options.Observer). Its methods are called
// synchronously on the engine's paths, after the change is durable: they
// must be quick and must not block or call back into the Router.
type Observer interface {
	// TaskEvent reports one committed change to a task.
	TaskEvent(e TaskEvent)
	// HandlerEvent reports a task handler starting or ending in this
	// process.
	HandlerEvent(e HandlerEvent)
}

// TaskEventKind says what a TaskEvent reports.
type TaskEventKind int

// The task event kinds.
const (
	// TaskCreated: the task was created (Task is the stored record). A
	// tool task whose handler returned within Options.InstantWindow is
	// created already ended: Ended is set then, and no TaskUpdated
	// follows.
	TaskCreated TaskEventKind = iota + 1
	// TaskUpdated: a write to a task that is still active, the write
	// that ended it (Ended is set then), or labels added to an ended task
	// (store.Update.Annotate).
	TaskUpdated
	// TaskDeleted: the sweeper deleted the task after its ttl (Task is the
	// record as it was).
	TaskDeleted
)

// A TaskEvent is one committed change to a task.
type TaskEvent struct {
	Kind TaskEventKind
	// Task is the task after the change (before it, for TaskDeleted). It
	// must not be modified.
	Task *store.Task
	// Ended is set on the write that moved the task to a terminal status
	// (which happens once per task: an update, or the create of a task
	// that ended before it was first stored).
	Ended bool
}

// A HandlerEvent reports a task handler starting (Running) or ending in
// this process.
type HandlerEvent struct {
	TaskID string
	// Tool is the tool the handler runs.
	Tool string
	// Running is true when the handler starts, false when it returns.
	Running bool
	// Queued is how long the task waited for a running slot (when it
	// starts), or Duration how long the handler ran (when it ends).
	Queued, Duration time.Duration
}

// observer tells the configured Observer (Options.Observer; nil: none)
// what the engine did.
type observer struct{ o Observer }

// task reports a committed change.
func (ob observer) task(kind TaskEventKind, t *store.Task, u *store.Update) {
	if ob.o == nil || t == nil {
		return
	}
	ended := (kind == TaskCreated || u != nil && u.Status != "") && t.Status.Terminal()
	ob.o.TaskEvent(TaskEvent{Kind: kind, Task: t, Ended: ended})
}

// handler reports a handler's start or end.
func (ob observer) handler(e HandlerEvent) {
	if ob.o != nil {
		ob.o.HandlerEvent(e)
	}
}

// Stats are the engine's current load in this process.
type Stats struct {
	// Pending is the tasks queued or running; Running the handlers
	// running; Queued = Pending - Running.
	Pending, Running, Queued int
	// Waiters is the tasks/result requests waiting for a task to end.
	Waiters int
	// Tracked is the in-request work (workflow server steps) running.
	Tracked int
	// Steps is the step tools running (Track, then RunTool) and
	// StepsQueued those waiting for a step slot
	// (Options.MaxConcurrentSteps).
	Steps, StepsQueued int
}

// Observers combines observers into one, called in order.
type Observers []Observer

// TaskEvent calls every observer.
func (o Observers) TaskEvent(e TaskEvent) {
	for _, x := range o {
		x.TaskEvent(e)
	}
}

// HandlerEvent calls every observer.
func (o Observers) HandlerEvent(e HandlerEvent) {
	for _, x := range o {
		x.HandlerEvent(e)
	}
}
