package taskrouter

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"slices"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// This file holds the generic task calls a component built on the engine
// (the workflow bridge) uses to drive a task it owns: create, read, update,
// complete, fail.

// CreateOptions shape a task created through CreateTask; nil means the
// defaults.
type CreateOptions struct {
	// TTL is the requested ttl; zero means the configured default. It is
	// capped at Options.MaxTTL.
	TTL time.Duration
	// Kind is stored as the LabelKind label.
	Kind string
	// Labels are extra labels.
	Labels map[string]string
	// Variables are the task's initial variables.
	Variables map[string]json.RawMessage
	// StatusMessage is the initial status message.
	StatusMessage string
	// Lease makes this process the task's lease holder from creation (it
	// is about to run work for it) on a shared store; see Router.TryLease.
	Lease bool
	// WakeAt, when set, is the task's first wake-up time (see
	// store.Task.WakeAt and the engine's scheduler).
	WakeAt time.Time
	// ID, when set, is the new task's id instead of a random one: an id
	// derived from what the task is for (a workflow's child, from its
	// parent and step; a schedule's fire, which names its task before it
	// exists) makes creating it idempotent, since a second create of the
	// id fails with store.ErrExists. Make it like NewTaskID's (32 hex
	// digits), from a hash or from NewTaskID.
	ID string
	// InputRequired creates the task input_required instead of working:
	// it waits for the client's input from the start (its kind's
	// InputRequests say what; see InputKind).
	InputRequired bool
}

// ttl is the ttl a task gets when requested asks for one: DefaultTTL
// for none, at most MaxTTL.
func (o *Options) ttl(requested time.Duration) time.Duration {
	if requested <= 0 {
		return o.DefaultTTL
	}
	return min(requested, o.MaxTTL)
}

// Task returns a task by id, whoever owns it. A webhook's record comes
// without its signing secret (see Webhooks): the secret is shown once,
// when the webhook is registered.
func (r *Router) Task(ctx context.Context, id string) (*store.Task, error) {
	t, err := r.st.Get(ctx, id)
	return redactHook(t), err
}

// TaskFor returns the task if the requestor may access it, and an error
// matching store.ErrNotFound otherwise, so that tasks hidden from the
// requestor are indistinguishable from missing ones (see Options.SessionBound
// for who may access what).
func (r *Router) TaskFor(ctx context.Context, req *Request, id string) (*store.Task, error) {
	t := r.recent.get(id, r.opts.Now()) // a task this process just ended (recent.go)
	if t == nil {
		var err error
		if t, err = r.st.Get(ctx, id); err != nil {
			return nil, err
		}
	}
	if !req.mayAccess(&r.opts, t) {
		return nil, fmt.Errorf("task %s: %w", id, store.ErrNotFound)
	}
	r.peers.bindRequest(id, req)
	return t, nil
}

// Update applies u to a task and wakes its waiters. A wake-up time it
// sets is handed to the engine's scheduler.
//
// The events the task's work reported and that wait to be written (see
// Progress) go into the same write, before u.Events; a write the store
// refuses because of one of them (too large for its limits) is made again
// without them. A pure append (u.AppendOnly) wakes only the readers of the
// task's events.
func (r *Router) Update(ctx context.Context, id string, u store.Update) (*store.Task, error) {
	t, err := r.sinks.updateWithPending(ctx, id, u)
	if err != nil {
		return nil, err
	}
	if u.AppendOnly() {
		r.streams.notify(id)
		r.hooks.changed(t) // a webhook may want these events delivered
		return t, nil
	}
	r.recent.remember(t, r.opts.Now())
	if u.WakeAt != nil {
		r.sched.note(t.WakeAt)
	}
	r.obs.task(TaskUpdated, t, &u)
	r.fan.changed(t)
	r.quotas.ended(t.ID, t.Status, false)
	return t, nil
}

// MaxTTL is the longest ttl a task may have (Options.MaxTTL).
func (r *Router) MaxTTL() time.Duration { return r.opts.MaxTTL }

// Complete ends a task as completed with result (any JSON-encodable MCP
// result), optionally merging final variables in the same write.
// ifVersion, when non-zero, makes the write conditional.
func (r *Router) Complete(ctx context.Context, id string, result any, vars map[string]json.RawMessage, ifVersion uint64) (*store.Task, error) {
	raw, err := json.Marshal(result)
	if err != nil {
		return nil, fmt.Errorf("taskrouter: encoding result: %w", err)
	}
	return r.Update(ctx, id, store.Update{IfVersion: ifVersion, Status: mcptask.StatusCompleted, Result: raw, Variables: vars, StatusMessage: ptr("")})
}

// Fail ends a task as failed with a status message and, optionally, the
// JSON-RPC error that tasks/result reports.
func (r *Router) Fail(ctx context.Context, id string, message string, rpcErr *mcptask.ErrorInfo) (*store.Task, error) {
	return r.Update(ctx, id, store.Update{Status: mcptask.StatusFailed, StatusMessage: &message, Error: rpcErr})
}

func ptr[T any](v T) *T { return &v }

// deref is *p, or T's zero value (the defaults) for a nil p: how a
// function that takes *XOptions reads them.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// LabelCount is the number of active tasks whose labels have Values (in
// the order the labels were asked for).
type LabelCount struct {
	Values []string
	N      int
}

// ActiveByLabels counts the active tasks (working or input_required) of
// kind (the LabelKind label; "" counts every kind) by the values of labels:
// the operator's view of, say, how many workflow tasks still run on each
// workflow version. It pages through the store's query index (headers
// only) and reads at most max tasks; complete reports whether it counted
// every active task. Counts are sorted by their values.
func (r *Router) ActiveByLabels(ctx context.Context, kind string, labels []string, max int) (counts []LabelCount, complete bool, err error) {
	by := map[string]*LabelCount{}
	q := store.Query{Statuses: []mcptask.Status{mcptask.StatusWorking, mcptask.StatusInputRequired}, Limit: store.MaxPageSize}
	read := 0
	for {
		page, err := r.st.Query(ctx, q)
		if err != nil {
			return nil, false, err
		}
		for _, t := range page.Tasks {
			read++
			if kind != "" && t.Labels[LabelKind] != kind {
				continue
			}
			vals := make([]string, len(labels))
			for i, l := range labels {
				vals[i] = t.Labels[l]
			}
			key := strings.Join(vals, "\x00")
			if by[key] == nil {
				by[key] = &LabelCount{Values: vals}
			}
			by[key].N++
		}
		if page.NextCursor == "" {
			complete = true
			break
		}
		if read >= max {
			break
		}
		q.Cursor = page.NextCursor
	}
	for _, c := range by {
		counts = append(counts, *c)
	}
	slices.SortFunc(counts, func(a, b LabelCount) int { return slices.Compare(a.Values, b.Values) })
	return counts, complete, nil
}

// endTask writes u, which ends active task t from outside its work (a
// cancel, its expiry), then stops its work with cause and tells its kind
// (EndKind).
func (r *Router) endTask(ctx context.Context, t *store.Task, u store.Update, cause error) (*store.Task, error) {
	nt, err := r.Update(ctx, t.ID, u)
	if err != nil {
		return nil, err
	}
	r.runs.stop(t.ID, cause)
	r.kinds.ended(ctx, nt)
	return nt, nil
}
