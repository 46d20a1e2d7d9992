package taskrouter

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/taskbridge/taskbridge/store"
)

// Tasks of a kind other than KindTool are driven by a component built on
// the engine (the workflow bridge drives KindWorkflow). The engine keeps
// them durable, expires them and wakes them; the component decides what
// their work is. It registers its hooks for the kind with HandleKind:
// one KindHandler per kind, in one registry (kinds).

// A KindHandler is a component's hooks for the tasks of one kind.
type KindHandler interface {
	// Recover resolves an active task whose process is gone (reason
	// ReasonRestart or ReasonTakeover; after a takeover the task is
	// claimed by this process). It claims (Router.TryLease) whatever it
	// runs.
	Recover(ctx context.Context, t *store.Task, reason string) error
	// Wake runs a task whose wake-up time (store.Task.WakeAt) came. On a
	// shared store several replicas may wake the same task: it claims
	// the task's lease (Router.TryLease) for the work it runs, and leaves
	// the task alone when another process holds it. It must move or
	// clear the task's WakeAt, or the engine wakes it again (after a
	// short backoff when it failed).
	Wake(ctx context.Context, t *store.Task) error
	// ExpiryMessage words the failure of an active task whose expiry
	// passed ("" keeps the default, "expired: ttl of ... elapsed").
	ExpiryMessage(t *store.Task) string
	// Touched learns that a client named the task in a request (tasks/*,
	// a continuation, a built-in task tool): the workflow bridge tells
	// orphaned workflow tasks from ones a client holds this way.
	Touched(ctx context.Context, t *store.Task)
}

// An InputKind is implemented by a KindHandler whose tasks take input from
// the client without a handler waiting for it (a workflow waiting for
// events): the extension's tasks/get lists InputRequests for such a task
// when it is input_required, and tasks/update hands the answers to
// Answer.
type InputKind interface {
	// InputRequests returns the task's pending input requests by key
	// (each a {"method": ..., "params": ...} object), or nil.
	InputRequests(t *store.Task) map[string]json.RawMessage
	// Answer takes the client's answers (tasks/update inputResponses) for
	// task t; unknown keys are ignored, as the extension says.
	Answer(ctx context.Context, t *store.Task, responses map[string]json.RawMessage) error
}

// An EndKind is implemented by a KindHandler that must learn when the
// engine ends one of its tasks from outside the task's own work: a cancel
// (tasks/cancel, task_cancel, Router.CancelTask) or an
// expiry. The workflow bridge cancels a cancelled workflow's children.
type EndKind interface {
	Ended(ctx context.Context, t *store.Task)
}

// An EndWriter is implemented by a KindHandler whose tasks keep a record
// of their own (the workflow's progress) that an end the engine writes
// from outside the task's work (a cancel, an expiry) must close in the
// same write: EndWrite adds to u, the engine's end of t (its status and
// status message set: "cancelled by request", the expiry's wording), what
// the kind's record says of that end: its own wording of the status
// message (a workflow whose undo goes on in another task says which) and
// its variables (no step of an ended workflow reads running). The engine
// then writes u conditional on t's version, and on a conflict reads t
// again and asks again.
type EndWriter interface {
	EndWrite(t *store.Task, u *store.Update)
}

// HandleKind registers h's hooks for the tasks of kind (the LabelKind
// label), replacing any registered before. A handler may also be an
// InputKind, an EndKind, an EndWriter, a Reporter, a Pauser and a Placer.
func (r *Router) HandleKind(kind string, h KindHandler) {
	r.kinds.set(kind, h)
	r.taskTools.pauseToolsIfPausable()
}

// kinds is the registry of kind hooks: one KindHandler per kind. It is
// written while the server is set up and read on the engine's paths,
// hence the RWMutex; its lock is a leaf (no hook is called while it is
// held).
type kinds struct {
	mu       sync.RWMutex
	handlers map[string]KindHandler
}

func (k *kinds) set(kind string, h KindHandler) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.handlers == nil {
		k.handlers = map[string]KindHandler{}
	}
	k.handlers[kind] = h
}

// ended tells the EndKind of t's kind that the engine ended t.
func (k *kinds) ended(ctx context.Context, t *store.Task) {
	if e, ok := k.of(t).(EndKind); ok {
		e.Ended(context.WithoutCancel(ctx), t)
	}
}

// endWrite lets t's kind add to u, the engine's end of t, what its own
// record says of it (EndWriter); it reports whether the kind did, and u
// must then be written conditional on t's version.
func (k *kinds) endWrite(t *store.Task, u *store.Update) bool {
	w, ok := k.of(t).(EndWriter)
	if ok {
		w.EndWrite(t, u)
	}
	return ok
}

// pausable reports whether a registered kind's handler is a Pauser.
func (k *kinds) pausable() bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, h := range k.handlers {
		if _, ok := h.(Pauser); ok {
			return true
		}
	}
	return false
}

// of returns the handler of t's kind, or nil.
func (k *kinds) of(t *store.Task) KindHandler {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.handlers[t.Labels[LabelKind]]
}

// The engine asks the registry for one hook at a time: nil when the kind
// has no handler.

func (k *kinds) recoverHook(t *store.Task) func(ctx context.Context, t *store.Task, reason string) error {
	if h := k.of(t); h != nil {
		return h.Recover
	}
	return nil
}

func (k *kinds) wakeHook(t *store.Task) func(ctx context.Context, t *store.Task) error {
	if h := k.of(t); h != nil {
		return h.Wake
	}
	return nil
}

// expiryMessage is the kind's wording of t's expiry, or "".
func (k *kinds) expiryMessage(t *store.Task) string {
	if h := k.of(t); h != nil {
		return h.ExpiryMessage(t)
	}
	return ""
}

// touched tells t's kind that a client named t.
func (k *kinds) touched(ctx context.Context, t *store.Task) {
	if h := k.of(t); h != nil {
		h.Touched(ctx, t)
	}
}

// inputKind returns t's kind handler when it is an InputKind.
func (k *kinds) inputKind(t *store.Task) InputKind {
	ik, _ := k.of(t).(InputKind)
	return ik
}

// placer returns t's kind handler when it is a Placer.
func (k *kinds) placer(t *store.Task) Placer {
	p, _ := k.of(t).(Placer)
	return p
}

// placers returns the registered handlers that are Placers.
func (k *kinds) placers() []Placer {
	k.mu.RLock()
	defer k.mu.RUnlock()
	var out []Placer
	for _, h := range k.handlers {
		if p, ok := h.(Placer); ok {
			out = append(out, p)
		}
	}
	return out
}

// owers reports whether a registered kind's handler is an endOwer.
func (k *kinds) owers() bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, h := range k.handlers {
		if _, ok := h.(endOwer); ok {
			return true
		}
	}
	return false
}

// reporter returns t's kind handler when it is a Reporter.
func (k *kinds) reporter(t *store.Task) Reporter {
	rep, _ := k.of(t).(Reporter)
	return rep
}
