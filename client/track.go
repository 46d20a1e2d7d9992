package client

import (
	"github.com/taskbridge/taskbridge/mcptask"
	"slices"
	"time"
)

// TrackedTask is the client's local record of a task it started with
// CallTool (the TaskPoller of the Roo Code design): the last status it
// observed, from any source (the creation reply, polling, status
// notifications, GetTask, CancelTask, ListTasks).
type TrackedTask struct {
	// ID is the task id.
	ID string
	// Tool is the tool the task runs.
	Tool string
	// Status and StatusMessage are the last observed status.
	Status        mcptask.Status
	StatusMessage string
	// Started is when the client created the task (local clock).
	Started time.Time
	// Updated is when the client last observed the task (local clock).
	Updated time.Time
}

// Tracked returns the tasks this client started and has not forgotten, in
// the order they were started.
func (c *Client) Tracked() []TrackedTask {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]TrackedTask, 0, len(c.order))
	for _, id := range c.order {
		if t, ok := c.tracked[id]; ok {
			out = append(out, *t)
		}
	}
	return out
}

// Forget drops a task from Tracked. It reports whether the task was
// tracked. The task itself is not touched.
func (c *Client) Forget(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.tracked[id]; !ok {
		return false
	}
	delete(c.tracked, id)
	c.order = slices.DeleteFunc(c.order, func(s string) bool { return s == id })
	return true
}

// track records a task this client started.
func (c *Client) track(t *Task, tool string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.tracked[t.ID]; !ok {
		c.order = append(c.order, t.ID)
	}
	c.tracked[t.ID] = &TrackedTask{ID: t.ID, Tool: tool, Status: t.Status, StatusMessage: t.StatusMessage, Started: now, Updated: now}
}

// observe updates the record of a tracked task. A terminal status is never
// replaced by a non-terminal one (observations can arrive out of order).
func (c *Client) observe(t *Task) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tt, ok := c.tracked[t.ID]
	if !ok {
		return
	}
	if tt.Status.Terminal() && !t.Status.Terminal() {
		return
	}
	tt.Status, tt.StatusMessage, tt.Updated = t.Status, t.StatusMessage, time.Now()
}

// trackedStatus returns the last observed status of a tracked task.
func (c *Client) trackedStatus(id string) (TrackedTask, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tt, ok := c.tracked[id]
	if !ok {
		return TrackedTask{}, false
	}
	return *tt, true
}

// retrieved is called once a task's result has been handed to the caller.
func (c *Client) retrieved(id string) {
	if c.opts.ForgetAfterResult {
		c.Forget(id)
	}
}

// ---- watchers: a running CallTool following one task ----

type inputAnswer struct {
	result []byte
	err    error
}

type inputAsk struct {
	taskID string
	req    InputRequest
	reply  chan inputAnswer
}

type watcher struct {
	id       string
	status   chan *Task     // latest pushed status (capacity 1, newest wins)
	inputs   chan *inputAsk // input requests for the task (core dialect)
	done     chan struct{}
	acceptIn bool
}

// push delivers a status notification without blocking, keeping only the
// newest.
func (w *watcher) push(t *Task) {
	for {
		select {
		case w.status <- t:
			return
		default:
		}
		select {
		case <-w.status:
		default:
		}
	}
}

func (c *Client) addWatcher(id string, acceptInputs bool) *watcher {
	w := &watcher{id: id, status: make(chan *Task, 1), inputs: make(chan *inputAsk), done: make(chan struct{}), acceptIn: acceptInputs}
	c.mu.Lock()
	c.watchers[id] = append(c.watchers[id], w)
	c.mu.Unlock()
	return w
}

func (c *Client) removeWatcher(w *watcher) {
	c.mu.Lock()
	ws := slices.DeleteFunc(c.watchers[w.id], func(x *watcher) bool { return x == w })
	if len(ws) == 0 {
		delete(c.watchers, w.id)
	} else {
		c.watchers[w.id] = ws
	}
	c.mu.Unlock()
	close(w.done)
}

// inputWatcher returns a watcher that takes input requests for task id.
func (c *Client) inputWatcher(id string) *watcher {
	if id == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.watchers[id] {
		if w.acceptIn {
			return w
		}
	}
	return nil
}
