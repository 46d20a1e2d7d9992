package taskrouter

import (
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// Recently ended tasks. A task round trip reads the task it just created
// (tasks/result, or tasks/get in the extension), and most tasks end within
// moments of their creation (an instant tool's task is created ended). A
// finished task never changes again (every later write fails with
// store.ErrTerminal) until the sweeper deletes it, which it does only once
// its expiry has passed; so the record this process wrote when the task
// ended is what a read returns, and reads of it need no store round trip
// (on a shared store, a database query). The router keeps those records a
// few seconds, and never past their expiry: on a shared store, never past
// their expiry minus a margin for the clocks of other replicas (whose
// sweepers may delete it first); on an exclusive one only this process
// deletes. A deletion by this process or announced by the store's change
// feed drops the record at once.

const (
	recentMax      = 4096             // records kept
	recentFor      = 10 * time.Second // how long
	recentMargin   = time.Minute      // on a shared store, kept only while expiry is further away than this
	recentMaxBytes = 64 << 10         // larger results and variables are read from the store
)

// recentEnded are the records this process ended moments ago. Its lock
// is a leaf: it guards the fields below it and nothing is called while it
// is held.
type recentEnded struct {
	margin time.Duration // before expiry: recentMargin on a shared store, else 0

	mu   sync.Mutex
	byID map[string]recentTask
	ring [recentMax]string // ids in the order they were added
	next int
}

type recentTask struct {
	t     *store.Task
	until time.Time
}

// remember keeps t, a record this process just wrote at now, if it ended.
func (c *recentEnded) remember(t *store.Task, now time.Time) {
	if t == nil || !t.Status.Terminal() {
		return
	}
	size := len(t.Result) + len(t.Request.Arguments)
	for _, v := range t.Variables {
		size += len(v)
	}
	if t.Error != nil {
		size += len(t.Error.Data)
	}
	if size > recentMaxBytes {
		return
	}
	until := now.Add(recentFor)
	if !t.ExpiresAt.IsZero() {
		if limit := t.ExpiresAt.Add(-c.margin); limit.Before(until) {
			until = limit
		}
	}
	if !until.After(now) {
		return
	}
	e := recentTask{t: t.Clone(), until: until}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = make(map[string]recentTask, recentMax)
	}
	if old := c.ring[c.next]; old != "" {
		delete(c.byID, old)
	}
	c.ring[c.next] = t.ID
	c.next = (c.next + 1) % recentMax
	c.byID[t.ID] = e
}

// get returns a copy of the record of id if this process ended it moments
// before now, or nil.
func (c *recentEnded) get(id string, now time.Time) *store.Task {
	return c.peek(id, now).Clone()
}

// peek is get without the copy: the record kept, which the caller reads
// and never changes (nor hands to code that might). Nothing changes it
// once kept (remember keeps a copy of its own), so readers may share it.
func (c *recentEnded) peek(id string, now time.Time) *store.Task {
	c.mu.Lock()
	e, ok := c.byID[id]
	c.mu.Unlock()
	if !ok || !now.Before(e.until) {
		return nil
	}
	return e.t
}

// forget drops id (the task was deleted).
func (c *recentEnded) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byID, id) // its ring slot is reused in turn
}
