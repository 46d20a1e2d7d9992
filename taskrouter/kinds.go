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
// their work is. It registers its hooks per kind, with HandleKind or one
// by one (OnRecover, OnWake, OnExpire, OnTouch).

// A KindHandler is a component's hooks for the tasks of one kind.
type KindHandler interface {
	// Recover resolves an active task whose process is gone (reason
	// ReasonRestart or ReasonTakeover; after a takeover the task is
	// claimed by this process). See RecoverFunc.
	Recover(ctx context.Context, t *store.Task, reason string) error
	// Wake runs a task whose wake-up time (store.Task.WakeAt) came. See
	// WakeFunc.
	Wake(ctx context.Context, t *store.Task) error
	// ExpiryMessage words the failure of an active task whose expiry
	// passed ("" keeps the default). See ExpiryHook.
	ExpiryMessage(t *store.Task) string
	// Touched learns that a client named the task in a request. See
	// TouchHook.
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

// inputKindOf returns t's kind handler when it is an InputKind.
func (r *Router) inputKindOf(t *store.Task) InputKind {
	r.kinds.mu.Lock()
	defer r.kinds.mu.Unlock()
	ik, _ := r.kinds.handlers[t.Labels[LabelKind]].(InputKind)
	return ik
}

// A WakeFunc runs a task whose wake-up time came (see OnWake). On a shared
// store several replicas may wake the same task: the function claims the
// task's lease (Router.TryLease) for the work it runs, and leaves the task
// alone when another process holds it. It must move or clear the task's
// WakeAt, or the engine wakes it again (after a short backoff when it
// failed).
type WakeFunc func(ctx context.Context, t *store.Task) error

// kinds holds the hooks registered per task kind.
type kinds struct {
	mu       sync.Mutex
	handlers map[string]KindHandler // registered with HandleKind
	recover  map[string]RecoverFunc
	wake     map[string]WakeFunc
	expire   map[string]ExpiryHook
	touch    map[string]TouchHook
}

func (k *kinds) set(kind string, rf RecoverFunc, wf WakeFunc, ef ExpiryHook, tf TouchHook) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if rf != nil {
		if k.recover == nil {
			k.recover = map[string]RecoverFunc{}
		}
		k.recover[kind] = rf
	}
	if wf != nil {
		if k.wake == nil {
			k.wake = map[string]WakeFunc{}
		}
		k.wake[kind] = wf
	}
	if ef != nil {
		if k.expire == nil {
			k.expire = map[string]ExpiryHook{}
		}
		k.expire[kind] = ef
	}
	if tf != nil {
		if k.touch == nil {
			k.touch = map[string]TouchHook{}
		}
		k.touch[kind] = tf
	}
}

// of returns the hooks registered for t's kind (nil where none is).
func (k *kinds) of(t *store.Task) (RecoverFunc, WakeFunc, ExpiryHook, TouchHook) {
	kind := t.Labels[LabelKind]
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.recover[kind], k.wake[kind], k.expire[kind], k.touch[kind]
}

// HandleKind registers h's hooks for the tasks of kind (the LabelKind
// label).
func (r *Router) HandleKind(kind string, h KindHandler) {
	r.kinds.set(kind, h.Recover, h.Wake, h.ExpiryMessage, h.Touched)
	r.kinds.mu.Lock()
	defer r.kinds.mu.Unlock()
	if r.kinds.handlers == nil {
		r.kinds.handlers = map[string]KindHandler{}
	}
	r.kinds.handlers[kind] = h
}

// OnRecover registers how Start resolves active tasks of a kind that a
// previous process left behind. Tool tasks are handled by the router
// itself.
func (r *Router) OnRecover(kind string, f RecoverFunc) { r.kinds.set(kind, f, nil, nil, nil) }

// OnWake registers how the engine's scheduler runs tasks of a kind whose
// wake-up time came.
func (r *Router) OnWake(kind string, f WakeFunc) { r.kinds.set(kind, nil, f, nil, nil) }

// OnExpire registers how Sweep words the failure of an active task of one
// kind whose expiry passed: the workflow bridge uses it for workflow tasks
// that expire before any client held them.
func (r *Router) OnExpire(kind string, f ExpiryHook) { r.kinds.set(kind, nil, nil, f, nil) }

// OnTouch registers a TouchHook for tasks of one kind.
func (r *Router) OnTouch(kind string, f TouchHook) { r.kinds.set(kind, nil, nil, nil, f) }
