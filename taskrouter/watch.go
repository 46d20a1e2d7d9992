package taskrouter

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// Waiting for a task to change: a waiter (tasks/result, Await, a
// subscriptions/listen stream) registers a watch, then reads the task; a
// write through this router (changed), or on a shared store a change from
// another process (the change feed), wakes it to read again.

// watches are the channels waiters (tasks/result, Wait) block on, by
// task id: each is closed at the task's next change. The waiters of one
// task share its channel; it counts them, so that one waiter that stops
// watching (it got what it waited for) never takes the channel from the
// others. Its lock is a leaf: nothing else is locked while it is held.
type watches struct {
	mu     sync.Mutex
	byTask map[string]*watch
	// own are, on a shared store, the versions of tasks this router wrote
	// and woke the waiters for (wakeOwn), until the change feed echoes
	// them back (wakeFeed): the echo wakes no one, so a waiter reads the
	// task once per change, not twice.
	own map[string]uint64
}

// watch is one task's channel and the waiters holding it.
type watch struct {
	ch chan struct{}
	n  int
}

// maxOwn bounds watches.own: past it (echoes lost) it starts over, and an
// echo it forgot wakes its waiters once more, as every echo once did.
const maxOwn = 8192

// watch returns a channel closed at the next change of task id.
func (w *watches) watch(id string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	x, ok := w.byTask[id]
	if !ok {
		if w.byTask == nil {
			w.byTask = map[string]*watch{}
		}
		x = &watch{ch: make(chan struct{})}
		w.byTask[id] = x
	}
	x.n++
	return x.ch
}

// unwatch says a waiter holding c stops watching id; the channel is
// dropped when no waiter holds it any more (a waiter that returns
// without a change, or whose task vanished).
func (w *watches) unwatch(id string, c <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x, ok := w.byTask[id]; ok && (<-chan struct{})(x.ch) == c {
		if x.n--; x.n <= 0 {
			delete(w.byTask, id)
		}
	}
}

// drop forgets the watch of a deleted task without waking it.
func (w *watches) drop(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byTask, id)
}

// wake wakes the waiters of task id.
func (w *watches) wake(id string) {
	w.mu.Lock()
	x, ok := w.byTask[id]
	if ok {
		delete(w.byTask, id)
	}
	w.mu.Unlock()
	if ok {
		close(x.ch)
	}
}

// wakeOwn wakes the waiters of task id after this router wrote its
// version (see own).
func (w *watches) wakeOwn(id string, version uint64) {
	w.mu.Lock()
	if w.own == nil || len(w.own) >= maxOwn {
		w.own = make(map[string]uint64)
	}
	if version > w.own[id] {
		w.own[id] = version
	}
	w.mu.Unlock()
	w.wake(id)
}

// wakeFeed wakes the waiters of task id for a change the store's feed
// announced, unless it is the echo of a version this router wrote and
// already woke them for.
func (w *watches) wakeFeed(id string, version uint64) {
	w.mu.Lock()
	mine, ok := w.own[id]
	echo := ok && version != 0 && version <= mine
	if ok && version >= mine {
		delete(w.own, id)
	}
	w.mu.Unlock()
	if !echo {
		w.wake(id)
	}
}

// wakeAll wakes every waiter.
func (w *watches) wakeAll() {
	w.mu.Lock()
	ws := w.byTask
	w.byTask = nil
	w.mu.Unlock()
	for _, x := range ws {
		close(x.ch)
	}
}

// fanout takes a task's change to every part that waits on it: the
// waiters (watches), the status pushes, the listeners, the webhooks, the
// readers of events; for a change the feed announced, the work and the
// slots of a task that ended elsewhere too. It writes a task's birth
// and death to the store itself (create, delete), as the parts must
// hear of both. It has no state of its own: it calls each part in turn,
// and seeing them a moment apart is fine, as each part re-reads the
// store when woken.
type fanout struct {
	shared    bool // the store is shared: a write's echo comes back (watches.own)
	st        store.Store
	now       func() time.Time // Options.Now
	obs       observer
	sched     *scheduler
	watches   *watches
	pushers   *pushConns
	listeners *listeners
	hooks     *webhooks
	streams   *streams
	recent    *recentEnded
	runs      *runTable
	quotas    *quotas
}

// create stores new task t, and tells the scheduler of its wake-up, the
// observer, the recent records and the webhooks.
func (f *fanout) create(ctx context.Context, t *store.Task) (*store.Task, error) {
	created, err := f.st.Create(ctx, t)
	if err == nil {
		f.sched.note(created.WakeAt)
		f.obs.task(TaskCreated, created, nil)
		f.recent.remember(created, f.now())
		f.hooks.changed(created)
	}
	return created, err
}

// delete deletes ended task t (its expiry passed) and forgets it here:
// its recent record, its waiters, its slot.
func (f *fanout) delete(ctx context.Context, t *store.Task) error {
	f.recent.forget(t.ID)
	if err := f.st.Delete(ctx, t.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	f.watches.drop(t.ID)
	f.obs.task(TaskDeleted, t, nil)
	f.quotas.ended(t.ID, t.Status, true)
	return nil
}

// changed wakes everyone watching task t (its events' readers too) and
// pushes its status: this process wrote t.
func (f *fanout) changed(t *store.Task) {
	if f.shared {
		f.watches.wakeOwn(t.ID, t.Version)
	} else {
		f.watches.wake(t.ID)
	}
	f.pushers.push(t)
	f.listeners.changed(t.ID)
	f.hooks.changed(t)
	f.streams.notify(t.ID)
}

// Await waits until done reports true for task id, or ctx ends. It reads
// the task at once and again at every change (written by this process or,
// on a shared store, announced by another one, with a re-read every
// ChangePollInterval in case an announcement was lost), and returns the
// task as last read; with ctx's error when ctx ended first, or the store's
// error (store.ErrNotFound once the task is gone).
func (r *Router) Await(ctx context.Context, id string, done func(*store.Task) bool) (*store.Task, error) {
	var last *store.Task
	for {
		w := r.watches.watch(id) // watch first, then read: no change in between is missed
		t, err := r.st.Get(ctx, id)
		if err != nil {
			r.watches.unwatch(id, w)
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			return last, err
		}
		last = t
		if done(t) {
			r.watches.unwatch(id, w)
			return t, nil
		}
		select {
		case <-w:
		case <-pollTick(r.poll):
			r.watches.unwatch(id, w)
		case <-ctx.Done():
			r.watches.unwatch(id, w)
			return last, ctx.Err()
		}
	}
}

// pollTick returns a channel that fires after every, the safety net of a
// waiter on a shared store (Router.poll: Options.ChangePollInterval), and
// never when every is zero (an exclusive store: every change there is
// this process's own and wakes its waiters directly).
func pollTick(every time.Duration) <-chan time.Time {
	if every <= 0 {
		return nil
	}
	return time.After(every)
}

// announced handles a change the store's feed announced (it may be this
// process's own write: its waiters were woken when it was written, and
// its echo wakes them no more, see watches.own).
func (f *fanout) announced(c store.Change) {
	switch {
	case c.Events > 0:
		f.streams.notify(c.ID) // an append: only event readers care
	case c.Resync:
		// The feed's connection was lost: wake everyone to re-read, and
		// stop the work (and give back the slots) of the tasks that ended
		// elsewhere meanwhile.
		f.watches.wakeAll()
		f.listeners.changedAll()
		f.streams.notifyAll()
		for _, id := range f.runs.workingOn() {
			if t, err := f.st.Get(context.Background(), id); err != nil || t.Status.Terminal() {
				f.runs.stop(id, errEnded)
			}
		}
		for _, id := range f.quotas.heldTasks() {
			switch t, err := f.st.Get(context.Background(), id); {
			case errors.Is(err, store.ErrNotFound):
				f.quotas.ended(id, "", true)
			case err == nil:
				f.quotas.ended(id, t.Status, false)
			}
		}
	default:
		if c.Deleted {
			f.recent.forget(c.ID)
		}
		f.watches.wakeFeed(c.ID, c.Version)
		if c.Deleted || c.Status.Terminal() {
			f.runs.stop(c.ID, errEnded)
			f.quotas.ended(c.ID, c.Status, c.Deleted)
		}
		f.listeners.changed(c.ID)
		f.hooks.feedChange(c)
		f.streams.notify(c.ID)
	}
}
