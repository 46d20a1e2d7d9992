package taskrouter

import (
	"strings"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// Owner scopes: what belongs to an owner beside its tasks (its webhooks
// for all its tasks, its queue keys and debounced starts) is shared by
// the tasks of one scope. A task's scope is its owner, except for a task
// a stateless anonymous request created: every such client acts for the
// one LocalOwner, so none of them can be told from another, and such a
// task is a scope of its own (labelScope). A stdio or in-memory
// connection is one client: its LocalOwner is a scope like any owner.

const (
	// labelScope is set to scopeTask on a task whose scope is itself
	// (OwnerScope).
	labelScope = "scope"
	scopeTask  = "task"
)

// anonymous reports a request no one can tell from another client's:
// without an authorization context, acting for the shared LocalOwner,
// over stateless HTTP (its source is an address, not a session).
func (q *Request) anonymous() bool {
	return q != nil && !q.Authenticated && q.Owner == LocalOwner && strings.HasPrefix(q.Source, "addr:")
}

// OwnerScope returns the scope of task t: what is its owner's beside the
// task is shared with the tasks of the same scope only. It is t's owner,
// or, for a task a stateless anonymous client created (and the tasks it
// started: its children, forks, undo), "task:" and its id.
func OwnerScope(t *store.Task) string {
	if t.Labels[labelScope] == scopeTask {
		return "task:" + t.ID
	}
	return t.Owner
}

// RequestOf returns the request a task's own further tasks (a workflow's
// children, forks and undo) are created as: its owner and dialect, its
// access (an id-capability's are id-capabilities; those of a task bound
// to its owner are bound too), and its scope. Such a request has no
// source: the tasks count against the owner's quota only.
func RequestOf(t *store.Task) *Request {
	d, _ := mcptask.ParseDialect(t.Labels[LabelDialect])
	return &Request{Owner: t.Owner, Dialect: d, bound: t.Labels[labelAccess] != accessByID, ownScope: t.Labels[labelScope] == scopeTask}
}
