package workflow

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/taskbridge/taskbridge/internal/testhooks"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Lineage: a workflow task that a step of another one started (a child)
// is a task of its own, labelled with its parent and the step's path. The
// engine keeps the two in step without a transaction across them:
//
//   - Exactly one child per attempt of the step. The child's id is derived
//     from the parent's id, the step's path and the attempt, and the child
//     is created before the parent records it: a parent that stops between
//     the two writes creates the same id again, finds it, and records it.
//   - The child's end reaches the parent. When the child ends, or rests
//     waiting for its client, it pokes the parent (a write that makes the
//     parent's step due); the step then reads the child and records what
//     it finds, in a write that applies only while the step still waits.
//     A poke lost with a process is made up by the step looking at its
//     child every childCheck on its own (the scheduler wakes the parent,
//     on any replica). So the end is delivered at least once and recorded
//     exactly once.
//   - A child does not outlive its parent's run: when the engine cancels
//     the parent (or it expires), or the parent ends, its children still
//     running are cancelled. The parent's end is written first: a child
//     whose cancel was lost with a process is cancelled when it is next
//     recovered (a restart, a takeover), when a client names it, or when
//     it next pokes its parent (see outlivesParent).
//   - What the client does for a child (its client steps) it does on the
//     child, with the child's id; the answer shows the parent, which has
//     taken in the child's new state (see rootOf).

// Labels of a child workflow task.
const (
	// LabelParent is the id of the workflow task whose step started this
	// one.
	LabelParent = "workflow.parent"
	// LabelParentStep is the path of that step ("notes", "deploy[2]").
	LabelParentStep = "workflow.parent_step"
	// LabelDepth counts the workflows above this one (1: a child).
	LabelDepth = "workflow.depth"
)

// lineage signals point to the AfterLineage test hook.
func (b *Bridge) lineage(point testhooks.LineagePoint, parent, child string) {
	if f := b.opts.hooks.AfterLineage; f != nil {
		f(point, parent, child)
	}
}

// MaxDepth bounds how deep children nest (a workflow that starts itself
// through others stops there).
const MaxDepth = 8

// childCheck is how often a step waiting for its child looks at it on its
// own, in case a poke was lost.
const childCheck = time.Minute

// childID is the id of the child that attempt n of the step at path of
// task parent starts.
func childID(parent, path string, n int) string {
	h := sha256.Sum256([]byte("taskbridge/child\x00" + parent + "\x00" + path + "\x00" + strconv.Itoa(n)))
	return hex.EncodeToString(h[:16])
}

// depthOf is how many workflows are above t.
func depthOf(t *store.Task) int {
	n, _ := strconv.Atoi(t.Labels[LabelDepth])
	return n
}

// errNotStarted is a child that cannot start, whatever is tried again: its
// workflow is not served here, or its arguments are refused.
var errNotStarted = errors.New("workflow: the child workflow cannot start")

// startChild creates (or finds, after a stop) child id of parent: the
// newest version of workflow name on args, owned by the parent's owner, for
// the step at path, and sets its server steps off.
func (b *Bridge) startChild(ctx context.Context, parent *store.Task, name string, args map[string]string, id, path string) (*store.Task, error) {
	if t, err := b.engine.Task(ctx, id); err == nil {
		if t.Labels[LabelParent] != parent.ID {
			return nil, fmt.Errorf("%w: task %s exists and is not a child of task %s", errNotStarted, id, parent.ID)
		}
		return t, nil // created before a stop
	}
	wf := b.newest(name)
	if wf == nil {
		return nil, fmt.Errorf("%w: workflow %q is not served here", errNotStarted, name)
	}
	a, err := wf.def.promptArgs(args)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNotStarted, err)
	}
	q := taskrouter.RequestOf(parent) // its owner, access and scope
	labels := map[string]string{LabelParent: parent.ID, LabelParentStep: path, LabelDepth: strconv.Itoa(depthOf(parent) + 1), LabelTouched: "1"}
	in, err := b.create(ctx, q, wf, newProgress(wf, a, b.engine.Now()), labels, nil, id)
	if err != nil {
		if t, gerr := b.engine.Task(ctx, id); gerr == nil && t.Labels[LabelParent] == parent.ID {
			return t, nil // another process created it meanwhile
		}
		return nil, err
	}
	defer b.done(in)
	t, _ := in.known()
	b.lineage(testhooks.LineageChildCreated, parent.ID, id)
	return t, nil
}

// spawn runs f in the background unless the bridge is closing.
func (b *Bridge) spawn(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
}

// written is told of every write of a workflow task (t as written, at
// progress p): a child that ended or rests pokes its parent; a task that
// ended cancels its children still running.
func (b *Bridge) written(t *store.Task, p *Progress) {
	if t.Labels[LabelParent] != "" && (t.Status.Terminal() || waiting(p)) {
		if t.Status.Terminal() {
			b.lineage(testhooks.LineageChildEnded, t.Labels[LabelParent], t.ID)
		}
		b.spawn(func() { b.pokeParent(b.ctx, t) })
	}
	if b.opts.hooks.AfterLineage != nil {
		walkRecords(p, func(sp *StepProgress) {
			if sp.Child != "" && sp.ended() {
				b.lineage(testhooks.LineageEndRecorded, t.ID, sp.Child)
			}
		})
	}
	if t.Status.Terminal() && hasChildren(p) {
		b.spawn(func() { b.cancelChildren(b.ctx, t, p) })
	}
}

// pokeParent makes the step of child's parent that started it due (it
// reads the child on its next turn) and sets the parent's steps off. A
// parent that ended cancels the child.
func (b *Bridge) pokeParent(ctx context.Context, child *store.Task) {
	id, path := child.Labels[LabelParent], child.Labels[LabelParentStep]
	in := b.use(id)
	defer b.done(in)
	err := in.commitTurn(ctx, func(p *Progress) (store.Update, error) {
		sl := in.wf.slotAt(p, path)
		if sl == nil || sl.sp.ended() || sl.sp.HandedToClient || sl.sp.Child != child.ID {
			return store.Update{}, errUnchanged // it took in the child's end already
		}
		now := b.engine.Now()
		for s := sl; s != nil; s = s.parent { // its containers too
			if s.sp.Until == nil || s.sp.Until.After(now) {
				s.sp.Until = &now // due, for the scheduler
			}
			if s.sp.Status == mcptask.StepAwaitingClient {
				s.sp.Status = mcptask.StepAwaitingChild // not resting, for those who wait for it to rest
			}
		}
		return store.Update{}, nil
	})
	switch {
	case err == nil:
		in.kick("")
	case errors.Is(err, errEnded) && !child.Status.Terminal():
		b.cancelChild(ctx, child.ID, id, "ended")
	case err != nil && !errors.Is(err, errUnchanged) && !errors.Is(err, errEnded):
		b.engine.Logger().Warn("telling a parent workflow its child changed", "task", id, "child", child.ID, "error", err)
	}
}

// hasChildren reports whether some record of p started a child.
func hasChildren(p *Progress) bool {
	found := false
	walkRecords(p, func(sp *StepProgress) { found = found || sp.Child != "" })
	return found
}

// cancelChildren cancels the children of ended task t (progress p) that
// are still running.
func (b *Bridge) cancelChildren(ctx context.Context, t *store.Task, p *Progress) {
	walkRecords(p, func(sp *StepProgress) {
		if sp.Child != "" && sp.Status != mcptask.StepCompleted {
			b.cancelChild(ctx, sp.Child, t.ID, string(t.Status))
		}
	})
}

// cancelChild cancels child id of parent, which is why (cancelled,
// failed, ended).
func (b *Bridge) cancelChild(ctx context.Context, id, parent, why string) {
	_, err := b.engine.CancelTask(ctx, id, fmt.Sprintf("cancelled: its parent workflow task %s %s", parent, why))
	if err != nil && !errors.Is(err, store.ErrTerminal) && !errors.Is(err, store.ErrNotFound) {
		b.engine.Logger().Warn("cancelling a child workflow", "task", parent, "child", id, "error", err)
	}
}

// outlivesParent cancels child workflow task t, still running, when its parent
// ended (or is gone), and reports whether it did: the second of the two
// writes of a parent's end (see cancelChildren), lost with a process, is
// made up. A task that is not a child costs nothing; a child, one read.
func (b *Bridge) outlivesParent(ctx context.Context, t *store.Task) bool {
	parent := t.Labels[LabelParent]
	if parent == "" || t.Status.Terminal() {
		return false
	}
	pt, err := b.engine.Task(ctx, parent)
	why := "is gone"
	switch {
	case err == nil && !pt.Status.Terminal():
		return false
	case err == nil:
		why = string(pt.Status)
	case !errors.Is(err, store.ErrNotFound):
		return false // the store: the next look decides
	}
	b.cancelChild(ctx, t.ID, parent, why)
	return true
}

// maxCause bounds the cause a parent's message quotes of its child's end.
const maxCause = 1500

// causeLine is the message of a child's end as its parent quotes it: on
// one line, and, when it is long (a chain of children, each quoting the
// next), shortened in the middle, never at its end: the cause, which the
// deepest child says last, reaches every ancestor.
func causeLine(msg string) string {
	s := strings.Join(strings.Fields(msg), " ")
	if len(s) <= maxCause {
		return s
	}
	const head = maxCause / 3
	tail := maxCause - head
	cut := len(s) - tail
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	h := head
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	return s[:h] + " … " + s[cut:]
}

// rootOf is the workflow the client works on when t (at progress p) is a
// child: its topmost ancestor, once each parent took in its child's state
// and rests (see settle); t itself otherwise.
func (b *Bridge) rootOf(ctx context.Context, t *store.Task, p *Progress) (*store.Task, *Progress) {
	for depth := 0; t.Labels[LabelParent] != "" && depth < MaxDepth; depth++ {
		b.pokeParent(ctx, t)
		pt, pp := b.settle(ctx, t.Labels[LabelParent])
		if pt == nil || pp == nil {
			return t, p
		}
		t, p = pt, pp
	}
	return t, p
}
