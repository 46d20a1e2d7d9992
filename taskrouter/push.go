package taskrouter

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// Pushing task status: a core-dialect task's status changes go to the
// shimmed connection (shim.go) that created it as
// notifications/tasks/status.

// pushConns are the open shimmed connections and the tasks each created,
// to push their status to. Its lock is a leaf: nothing else is locked
// while it is held.
type pushConns struct {
	log *slog.Logger // set once by NewRouter

	mu     sync.Mutex
	byID   map[string]*pushConn // shim connection id -> connection
	byTask map[string]string    // task id -> creating connection id
}

// add registers an open connection.
func (p *pushConns) add(pc *pushConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byID == nil {
		p.byID = map[string]*pushConn{}
	}
	p.byID[pc.id] = pc
}

// get returns the open connection id, or nil.
func (p *pushConns) get(id string) *pushConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byID[id]
}

// remove drops a closed connection and forgets the tasks it created.
func (p *pushConns) remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.byID, id)
	for tid, cid := range p.byTask {
		if cid == id {
			delete(p.byTask, tid)
		}
	}
}

// bind remembers which connection created a task, if it is open.
func (p *pushConns) bind(taskID, connID string) {
	if connID == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.byID[connID]; ok {
		if p.byTask == nil {
			p.byTask = map[string]string{}
		}
		p.byTask[taskID] = connID
	}
}

// target returns the open connection that created task t, or nil; once t
// has ended it forgets the binding.
func (p *pushConns) target(t *store.Task) *pushConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	cid, ok := p.byTask[t.ID]
	if !ok {
		return nil
	}
	if t.Status.Terminal() {
		delete(p.byTask, t.ID)
	}
	return p.byID[cid]
}

// push sends notifications/tasks/status for a core-dialect task to the
// connection that created it, if that connection is shimmed and open.
func (p *pushConns) push(t *store.Task) {
	pc := p.target(t)
	if pc == nil {
		return
	}
	params, err := json.Marshal(CoreTask(t))
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pc.Connection.Write(ctx, &jsonrpc.Request{Method: mcptask.NotificationTaskStatus, Params: params}); err != nil {
		p.log.Debug("pushing task status", "task", t.ID, "error", err)
	}
}
