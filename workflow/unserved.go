package workflow

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Versions across processes. A task runs on the workflow version it
// started with (version.go); during a rolling deploy the old and the new
// server processes serve different versions, and after one a version may
// be served by no process at all. The bridge is a taskrouter.Placer: it
// names each version it serves by a key (versionKey: the workflow, the
// version and the fingerprint of its definition), the engine heartbeats
// those keys into the store's replicas' registry, and a task needs the
// key of the version it recorded. The engine leaves a task whose key
// this process does not serve to a live replica that serves it (its
// scheduler does not wake it, its takeover does not claim it); what
// still reaches a process that cannot run a task (a client's call, a
// wake-up or takeover while no live replica serves the version, a
// restart on a single process) comes to unserved:
//
//   - another live replica serves the version: the task is left to it,
//     nothing is written (a client's call is refused, naming the
//     replicas that serve it);
//   - none does: the task waits, its status message saying for what and
//     until when, for at most Options.VersionGrace counted from the last
//     heartbeat of a process that served the version (or, when the
//     registry has none, from the first time a process found it
//     unserved: labelUnserved). It is looked at again every
//     versionRecheck, so that a process serving the version again (a
//     rollback) takes it up within that; that process's first write
//     clears the wait. When the grace has passed, the task fails saying
//     why;
//   - a progress that does not match its definition, or cannot be
//     decoded, fails the task at once (no process can run it).
//
// See "Versions and deploys" in docs/SEMANTICS.md.

// labelUnserved holds the time (RFC 3339) from which a task waits for a
// process that serves its version, when the registry knew of none that
// served it; a write by a process that serves the version clears it.
const labelUnserved = "workflow.unserved"

// versionRecheck is how often a task waiting for its version is looked
// at again (a write that moves its wake-up time).
const versionRecheck = time.Minute

// maxKeyBytes bounds a version's key: a longer one is hashed.
const maxKeyBytes = 256

// versionKey is the registry's key of workflow name's version with the
// fingerprint print ("" for a task that recorded none).
func versionKey(name, version, print string) string {
	k := fmt.Sprintf("workflow %q version %q", name, version)
	if print != "" {
		k += " " + print
	}
	if len(k) > maxKeyBytes {
		sum := sha256.Sum256([]byte(k))
		k = "workflow sha256:" + hex.EncodeToString(sum[:])
	}
	return k
}

// taskKey is the key task t needs: "" for a task that recorded no
// version (any process may try it: it is matched by its steps).
func taskKey(t *store.Task) string {
	v := t.Labels[LabelVersion]
	if v == "" {
		return ""
	}
	return versionKey(t.Labels[LabelWorkflow], v, t.Labels[LabelFingerprint])
}

// Serves lists the keys of the versions this bridge serves, each with
// its fingerprint and without (for tasks that recorded none).
func (k kindHooks) Serves() []string {
	b := k.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for name, v := range b.workflows {
		for _, c := range v.byVersion {
			out = append(out, versionKey(name, c.version, c.fingerprint), versionKey(name, c.version, ""))
		}
	}
	return out
}

// Needs is the key of the version workflow task t runs on.
func (k kindHooks) Needs(t *store.Task) string { return taskKey(t) }

var _ taskrouter.Placer = kindHooks{}

// registryEngine is the engine's registry of replicas: *taskrouter.Router
// has it. Without it (a test's engine) no other process exists.
type registryEngine interface {
	ServedBy(ctx context.Context, key string) (taskrouter.Served, error)
}

// servedBy says who serves key.
func (b *Bridge) servedBy(ctx context.Context, key string) (taskrouter.Served, error) {
	if re, ok := b.engine.(registryEngine); ok && key != "" {
		return re.ServedBy(ctx, key)
	}
	return taskrouter.Served{}, nil
}

// unserved handles a task that cannot run here (in.verr): see above.
// Call with the turn held.
func (in *instance) unserved(ctx context.Context) { _ = in.placeUnserved(ctx) }

// unservedCall is unserved for a client's call (a continuation): the
// error that refuses it, recording nothing. Call with the turn held.
func (in *instance) unservedCall(ctx context.Context) error {
	return fmt.Errorf("workflow task %s cannot continue here: %s; nothing was recorded", in.id, in.placeUnserved(ctx))
}

// placeUnserved does what unserved says and returns why the task does
// not run here, for a client. Call with the turn held.
func (in *instance) placeUnserved(ctx context.Context) string {
	b, t, verr := in.b, in.task, in.verr
	log := b.engine.Logger()
	if !errors.Is(verr, ErrVersionNotServed) {
		msg := verr.Error()
		log.Error("failing a workflow task that cannot run on any server", "task", t.ID, "workflow", t.Labels[LabelWorkflow], "version", t.Labels[LabelVersion], "reason", msg)
		b.failTask(ctx, t.ID, msg)
		in.invalidate()
		return msg
	}
	sv, err := b.servedBy(ctx, taskKey(t))
	if err != nil {
		log.Warn("reading the replicas' registry for a task whose version is not served here", "task", t.ID, "error", err)
		return verr.Error() + " (and the registry of server processes could not be read; try again)"
	}
	what := fmt.Sprintf("workflow %q version %q", t.Labels[LabelWorkflow], t.Labels[LabelVersion])
	if len(sv.Live) > 0 {
		in.leave(ctx)
		return fmt.Sprintf("it runs on %s, which this server process does not serve; the live server processes %s serve it: send the call to one of them",
			what, quoteList(sv.Live))
	}
	now, grace := b.engine.Now(), b.opts.VersionGrace
	since, ok := sv.Last, true
	if since.IsZero() {
		since, ok = parseStamp(t.Labels[labelUnserved])
		if !ok {
			since = now
		}
	}
	if grace < 0 || !now.Before(since.Add(grace)) {
		msg := verr.Error()
		if grace >= 0 {
			msg = fmt.Sprintf("no live server process has served %s since %s, longer than a task waits for one (Options.VersionGrace, %s): %s",
				what, stamp(since), grace, msg)
		}
		log.Error("failing a workflow task whose version no server process serves", "task", t.ID, "workflow", t.Labels[LabelWorkflow], "version", t.Labels[LabelVersion], "reason", msg)
		b.failTask(ctx, t.ID, msg)
		in.invalidate()
		return msg
	}
	deadline := since.Add(grace)
	last := "no process has recorded serving it"
	if !sv.Last.IsZero() {
		last = "one last did at " + stamp(sv.Last)
	}
	msg := fmt.Sprintf("waiting: no live server process serves %s (%s); the task waits for one until %s (Options.VersionGrace, %s), then fails: %v",
		what, last, stamp(deadline), grace, verr)
	at := now.Add(versionRecheck)
	if deadline.Before(at) {
		at = deadline
	}
	in.park(ctx, msg, since, ok || !sv.Last.IsZero(), at)
	return msg
}

// leave gives the task up to another process: the lease this process
// took (a takeover's claim) is released. Call with the turn held.
func (in *instance) leave(ctx context.Context) {
	if in.lease == nil || !in.lease.Held() {
		return
	}
	t := in.lease.Task
	in.dropLease()
	if err := in.b.releaseLease(ctx, t); err != nil {
		in.b.engine.Logger().Warn("releasing the lease of a task left to another server process", "task", t.ID, "error", err)
	}
	in.invalidate()
}

// park writes that the task waits for its version: msg, the wake-up
// time at (the next look, or the deadline), the time the wait counts
// from (unless the registry knows it: known), and no lease. Call with the
// turn held.
func (in *instance) park(ctx context.Context, msg string, since time.Time, known bool, at time.Time) {
	b, t := in.b, in.task
	if t.StatusMessage == msg && !t.WakeAt.IsZero() && t.WakeAt.After(b.engine.Now()) && (in.lease == nil || !in.lease.Held()) {
		return // parked already; the next look is still to come
	}
	u := store.Update{IfVersion: t.Version, StatusMessage: &msg, WakeAt: &at}
	if !known {
		setLabel(&u, labelUnserved, stamp(since))
	}
	if in.lease != nil && in.lease.Held() {
		u.Fence, u.ReleaseLease = in.lease.Fence(), true
		in.lease.Release()
	}
	if t.StatusMessage != msg {
		b.engine.Logger().Warn("a workflow task waits for a server process that serves its version", "task", t.ID,
			"workflow", t.Labels[LabelWorkflow], "version", t.Labels[LabelVersion], "until", msg)
	}
	nt, err := b.engine.Update(ctx, t.ID, u)
	if u.ReleaseLease {
		in.dropLease()
	}
	if err != nil {
		in.invalidate()
		if !isGone(err) && !errors.Is(err, store.ErrConflict) {
			b.engine.Logger().Warn("recording that a workflow task waits for its version", "task", t.ID, "error", err)
		}
		return
	}
	in.locked(func() { in.adopt(nt) })
}

// parked reports whether t waits for a process that serves its version
// (a status message park wrote, or labelUnserved): the first write of a
// process that serves it clears that.
func parked(t *store.Task) bool {
	return t.Labels[labelUnserved] != "" || strings.HasPrefix(t.StatusMessage, "waiting: no live server process serves ")
}

func parseStamp(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, s)
	return t, err == nil && s != ""
}
