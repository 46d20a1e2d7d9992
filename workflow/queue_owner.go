package workflow

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"strings"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Queue keys and owners (Queue.SharedKeys). Unless a queue shares its
// keys, an entry's key is stored in its task's scope
// (taskrouter.OwnerScope): a mark naming the scope, then the key. The
// store's rules then keep owners apart by themselves: PerKey counts one
// scope's runs of a key, and a debounced start replaces only its own
// scope's waiting entry. What a waiting run's status says is filtered
// the same way: it names the tasks holding places only when they are
// the task's own or of its scope, and a start replaced by a debounce
// names the start that replaced it only when it is of the same scope. So
// a status never names a task its reader may not see, and the progress
// and statuses show the key as its owner named it.

// scopeMarkLen is the length of a scope's mark: "~", 16 characters of
// the scope's hash, ":".
const scopeMarkLen = 18

// scopeMark is the mark of scope: stored keys carry no owner's name.
func scopeMark(scope string) string {
	sum := sha256.Sum256([]byte(scope))
	return "~" + base64.RawURLEncoding.EncodeToString(sum[:12]) + ":"
}

// mark is the mark of the scope of task t (id); a task not read yet is
// a scope of its own.
func mark(t *store.Task, id string) string {
	if t == nil {
		return scopeMark("task:" + id)
	}
	return scopeMark(taskrouter.OwnerScope(t))
}

// scoped returns entry e of task t (id) as q's store keeps it: its key
// in its task's scope, unless q shares its keys.
func scoped(t *store.Task, id string, q *Queue, e store.QueueEntry) store.QueueEntry {
	if !q.SharedKeys {
		e.Key = mark(t, id) + e.Key
	}
	return e
}

// plainKey is a key of q as stored, as its owner named it.
func plainKey(q *Queue, key string) string {
	if q.SharedKeys || len(key) < scopeMarkLen || key[0] != '~' || key[scopeMarkLen-1] != ':' {
		return key
	}
	return key[scopeMarkLen:]
}

// visibleHolders keeps of the entries holding q's places those the
// status of task t (id) may name: the task's own, and (its keys being
// scoped) those of its scope. A queue that shares its keys names only the
// task's own.
func visibleHolders(t *store.Task, id string, q *Queue, holders []store.QueueEntry) []store.QueueEntry {
	m := mark(t, id)
	var out []store.QueueEntry
	for _, h := range holders {
		if h.TaskID == id || !q.SharedKeys && strings.HasPrefix(h.Key, m) {
			out = append(out, h)
		}
	}
	return out
}

// replacer names, for the status of the task whose waiting entry e of q
// a debounced start of task by replaced, that start: "task <id>" when
// the two are of one scope (always, unless q shares its keys), "a newer
// start" otherwise.
func (b *Bridge) replacer(ctx context.Context, q *Queue, e store.QueueEntry, by *store.Task) string {
	if by == nil {
		return "a newer start"
	}
	if !q.SharedKeys {
		return "task " + by.ID
	}
	if t, err := b.engine.Task(ctx, e.TaskID); err == nil && taskrouter.OwnerScope(t) == taskrouter.OwnerScope(by) {
		return "task " + by.ID
	}
	return "a newer start"
}
