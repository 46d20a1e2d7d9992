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
	// claimed by this process). It claims (Router.Lease) whatever it
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
// (tasks/cancel, task_cancel, Router.Cancel, Router.CancelTask) or an
// expiry. The workflow bridge cancels a cancelled workflow's children.
type EndKind interface {
	Ended(ctx context.Context, t *store.Task)
}

// A CancelWording is implemented by a KindHandler that words the status
// message of its tasks' cancel: a workflow whose undo goes on in another
// task says which, and what it undid so far. message is the engine's
// wording ("cancelled by request"); the hook returns the message to
// write, or message itself.
type CancelWording interface {
	CancelMessage(t *store.Task, message string) string
}

// HandleKind registers h's hooks for the tasks of kind (the LabelKind
// label), replacing any registered before. A handler may also be an
// InputKind, an EndKind, a Reporter, a Pauser and a Placer.
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

// cancelMessage is the kind's wording of t's cancel, message by default.
func (k *kinds) cancelMessage(t *store.Task, message string) string {
	if w, ok := k.of(t).(CancelWording); ok {
		if m := w.CancelMessage(t, message); m != "" {
			return m
		}
	}
	return message
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

// reporter returns t's kind handler when it is a Reporter.
func (k *kinds) reporter(t *store.Task) Reporter {
	rep, _ := k.of(t).(Reporter)
	return rep
}
