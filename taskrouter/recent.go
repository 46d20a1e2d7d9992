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
// few seconds, and never past their expiry minus a margin for clocks of
// other replicas; a deletion by this process or announced by the store's
// change feed drops the record at once.

const (
	recentMax      = 4096             // records kept
	recentFor      = 10 * time.Second // how long
	recentMargin   = time.Minute      // kept only while expiry is further away than this
	recentMaxBytes = 64 << 10         // larger results and variables are read from the store
)

type recentEnded struct {
	mu   sync.Mutex
	byID map[string]recentTask
	ring [recentMax]string // ids in the order they were added
	next int
}

type recentTask struct {
	t     *store.Task
	until time.Time
}

// rememberEnded keeps t, a record this process just wrote, if it ended.
func (r *Router) rememberEnded(t *store.Task) {
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
	now := r.cfg.Now()
	until := now.Add(recentFor)
	if !t.ExpiresAt.IsZero() {
		if limit := t.ExpiresAt.Add(-recentMargin); limit.Before(until) {
			until = limit
		}
	}
	if !until.After(now) {
		return
	}
	c := &r.recent
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
	c.byID[t.ID] = recentTask{t: t.Clone(), until: until}
}

// recentTask returns a copy of the record of id if this process ended it
// moments ago, or nil.
func (r *Router) recentTask(id string) *store.Task {
	c := &r.recent
	c.mu.Lock()
	e, ok := c.byID[id]
	c.mu.Unlock()
	if !ok || !r.cfg.Now().Before(e.until) {
		return nil
	}
	return e.t.Clone()
}

// forgetTask drops id (the task was deleted).
func (r *Router) forgetTask(id string) {
	c := &r.recent
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byID, id) // its ring slot is reused in turn
}
