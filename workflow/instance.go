package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/internal/storerpc"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// instance is this process's side of one workflow task: what it knows of
// the task and its progress, the definition the task runs on, the lease it
// holds while server steps run here, and those steps. It executes the
// decisions of plan.go: every write this process makes to the task goes
// through the instance, one at a time (the write turn), so the steps of
// one task never race each other here and no other task ever waits for
// them: there is no lock shared between tasks. Writes are conditional on
// the task's version; a writer elsewhere (another replica, a client's
// touch, a cancel) makes the next write reload and apply its change again.
//
// Two things order the instance. turn is the write turn: a writer holds
// it from reading the record to the end of its store write (commit), and
// for nothing else: never across a tool, a queue, a child, or the effects
// a decision leaves (carry). mu guards the instance's memory and is held
// for memory only, never across a call to the store, a queue, a child or
// a tool (TestInstanceHoldsNoLockAcrossCalls). p, wf, verr, lease and
// written are the turn's: a change moves p on in place, so whoever reads
// them holds the turn; task is set with both held, so that a reader
// holding mu (known) sees it whole.
//
// Both are taken in this file only: other files run their sections
// through locked, writing, commitTurn, refresh and known
// (TestInstanceLockInOneFile checks it). The methods documented "Call
// with the turn held" run inside writing.
type instance struct {
	b  *Bridge
	id string

	turn chan struct{} // the write turn: a token, taken by writing

	task    *store.Task // the task as last read or written; nil: reload (the turn and mu)
	p       *Progress   // its progress, decoded (ahead of task while a decision's change is kept unwritten)
	wf      *compiled   // the version the task runs on; nil when verr is set
	verr    error       // why the task cannot run here (a version not served, a mismatch, undecodable progress)
	lease   *taskrouter.Lease
	written time.Time // when this process last wrote the task
	kept    bool      // p holds a change not written yet (errNoWrite): the next commit writes it
	// lastWrite is the progress this process wrote last and its
	// attempts, for the next write's step events (events.go); the
	// write turn guards it.
	lastWrite *writtenAttempts

	mu sync.Mutex

	running map[string]*stepRun      // server steps whose tool runs here now
	clients map[string]chan struct{} // client steps a continuation performs here now; closed when it ends
	driving bool                     // the drive loop runs
	parked  bool                     // the drive loop waits between passes (for an outcome, a kick or its timer)
	again   bool                     // a kick arrived while the drive loop ran: plan again
	passed  chan struct{}            // closed when the drive loop's next pass ends (see kick)
	results chan stepResult
	poke    chan struct{}
	offers  map[string]placeAnswer // places other tasks' queue operations granted it, for its next decision (queue.go)
	peer    peerView               // the client's connection, as the last pass found it (peerRoot)
	root    string                 // the root of the task's lineage, once found
	refs    int                    // users: requests, the drive loop (guarded by Bridge.mu)

	// unwritten is an event whose decision's write the store refused
	// for a reason that may pass, decided again (drive.go); refusals
	// counts the refusals in a row.
	unwritten *occurrence
	refusals  int

	// handed are the answers of effects carried outside the drive loop
	// (a pause's, a resume's: handAnswers), for its next pass to decide.
	handed *occurrence
}

// peerView is what the instance knows of its client's connection.
type peerView struct {
	reach bool             // the engine sends requests to clients
	of    *taskrouter.Peer // the client's connection, when it is known
}

// use returns the instance of task id, creating it, and counts a user;
// done must follow.
func (b *Bridge) use(id string) *instance {
	b.mu.Lock()
	defer b.mu.Unlock()
	in := b.instances[id]
	if in == nil {
		in = &instance{b: b, id: id, turn: make(chan struct{}, 1), running: map[string]*stepRun{}, clients: map[string]chan struct{}{},
			results: make(chan stepResult, 16), poke: make(chan struct{}, 1)}
		b.instances[id] = in
	}
	in.refs++
	return in
}

// done releases a user of in; the last one forgets it (the store keeps
// everything that matters).
func (b *Bridge) done(in *instance) {
	b.mu.Lock()
	defer b.mu.Unlock()
	in.refs--
	if in.refs == 0 && b.instances[in.id] == in {
		delete(b.instances, in.id)
	}
}

// locked runs f with the instance's memory lock held, unlocking even
// when f panics. f calls nothing that waits (no store, queue, child or
// tool).
func (in *instance) locked(f func()) {
	in.mu.Lock()
	defer in.mu.Unlock()
	f()
}

// writing runs f with the write turn held (see instance), handing it on
// even when f panics.
func (in *instance) writing(f func()) {
	in.turn <- struct{}{}
	defer func() { <-in.turn }()
	f()
}

// commitTurn is commit with the write turn taken for it.
func (in *instance) commitTurn(ctx context.Context, change func(p *Progress) (store.Update, error)) (err error) {
	in.writing(func() { err = in.commit(ctx, change) })
	return err
}

// refresh adopts t when it is newer than what the instance knows, applies
// the version policy to a task that cannot run here, and returns the
// version the task runs on, or why there is none.
func (in *instance) refresh(ctx context.Context, t *store.Task) (wf *compiled, err error) {
	in.writing(func() {
		if in.task == nil || t.Version > in.task.Version {
			in.locked(func() { in.adopt(t) })
		}
		if in.verr != nil {
			err = in.verr
			in.unserved(ctx)
			return
		}
		wf = in.wf
	})
	return wf, err
}

// known returns the task and its progress as this process last read or
// wrote them (nil when it knows nothing), decoded afresh: the instance's
// own Progress changes under the turn.
func (in *instance) known() (*store.Task, *Progress) {
	var t *store.Task
	in.locked(func() { t = in.task })
	if t == nil {
		return nil, nil
	}
	p, err := decodeProgress(t)
	if err != nil {
		return nil, nil
	}
	return t, p
}

// adopt sets what the instance knows from t (read or written elsewhere).
// Call with the turn and mu held.
func (in *instance) adopt(t *store.Task) {
	in.task, in.p, in.wf, in.verr = t, nil, nil, nil
	in.kept = false // a change kept unwritten is the record's no more
	p, err := decodeProgress(t)
	if err != nil {
		in.verr = err
		return
	}
	in.p = p
	name := t.Labels[LabelWorkflow]
	if name == "" {
		name = p.Workflow
	}
	recorded := t.Labels[LabelVersion]
	if recorded == "" {
		recorded = p.Version
	}
	wf, err := in.b.versionFor(name, recorded, t.Labels[LabelFingerprint], p)
	if err == nil {
		err = wf.check(p)
	}
	if err != nil {
		in.verr = err
		return
	}
	in.wf = wf
	if p.Version == "" {
		p.Version = wf.version // recorded with the next write
	}
}

// load reads the task unless the instance knows it. Call with the turn
// held.
func (in *instance) load(ctx context.Context) error {
	if in.task != nil {
		return nil
	}
	t, err := in.b.engine.Task(ctx, in.id)
	if err != nil {
		return err
	}
	in.locked(func() { in.adopt(t) })
	return nil
}

// invalidate makes the next use reload the task. Call with the turn
// held.
func (in *instance) invalidate() {
	in.locked(func() { in.task, in.p, in.wf, in.verr = nil, nil, nil, nil })
	in.kept = false
}

// errStale is returned by a change that no longer applies to the progress
// it was given (another writer moved the workflow on).
var errStale = errors.New("workflow: the change no longer applies")

// errEnded reports a write refused because the task has ended.
var errEnded = errors.New("workflow: the task has ended")

// errTakenOver reports a write refused because another process holds the
// task's lease now.
var errTakenOver = errors.New("workflow: another server process took the task over")

// commit applies change to the progress and writes it, with the update
// change returns, in one write conditional on the task's version (and
// fenced by the lease while one is held). On a version conflict it
// reloads the task and applies change again. change returns errStale (or
// another error) to give up: nothing is written and the instance
// reloads; it returns errNoWrite to keep its change in memory, unwritten
// (coalesced progress), and errUnchanged when it changed nothing. Call
// with the turn held (not mu: the store is called). The errors: errEnded
// (the task ended or is gone, also when a fenced write found it so),
// errTakenOver (another process holds the lease), in.verr (the task's
// version is not served here), change's own, and JSON-RPC errors for
// store failures (a *refused for good, a *storeFailure that may pass).
func (in *instance) commit(ctx context.Context, change func(p *Progress) (store.Update, error)) error {
	for attempt := 0; ; attempt++ {
		if err := in.load(ctx); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return errEnded
			}
			return &storeFailure{rpc: storeErr(err), cause: err}
		}
		if in.task.Status.Terminal() {
			return errEnded
		}
		if in.verr != nil {
			return in.verr
		}
		p := in.p
		u, err := change(p)
		switch {
		case errors.Is(err, errNoWrite):
			in.kept = true // the change stays in p, unwritten
			return err
		case errors.Is(err, errUnchanged) && in.kept:
			err = nil // nothing new, but what was kept is written now
		case errors.Is(err, errUnchanged):
			return err
		}
		if err != nil {
			in.invalidate()
			return err
		}
		err = in.write(ctx, p, u)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, store.ErrConflict) && attempt < 8:
			in.invalidate()
			continue
		case errors.Is(err, store.ErrFenced):
			// The store checks the fence before the terminal status (an
			// ended task has no lease holder): read the task to tell a
			// task that ended from one another process holds.
			in.invalidate()
			in.dropLease()
			if t, gerr := in.b.engine.Task(context.WithoutCancel(ctx), in.id); errors.Is(gerr, store.ErrNotFound) || gerr == nil && t.Status.Terminal() {
				return errEnded
			}
			return errTakenOver
		case errors.Is(err, store.ErrTerminal), errors.Is(err, store.ErrNotFound):
			in.invalidate()
			return errEnded
		}
		in.invalidate()
		if permanent(err) {
			return &refused{rpc: storeErr(err), cause: err}
		}
		return &storeFailure{rpc: storeErr(err), cause: err}
	}
}

// storeFailure is a store error retrying may get past (the store down or
// busy, conflicts that went on): the JSON-RPC error a client sees,
// wrapping its cause too. The drive loop decides the event again
// (keepUnwritten).
type storeFailure struct{ rpc, cause error }

func (e *storeFailure) Error() string   { return e.rpc.Error() }
func (e *storeFailure) Unwrap() []error { return []error{e.rpc, e.cause} }

// refused is a store error retrying cannot get past (a value too large, a
// time the store cannot keep): the JSON-RPC error a client sees, wrapping
// its cause too.
type refused struct{ rpc, cause error }

func (e *refused) Error() string   { return e.rpc.Error() }
func (e *refused) Unwrap() []error { return []error{e.rpc, e.cause} }

// permanent reports a store error that will not go away by retrying.
func permanent(err error) bool {
	return errors.Is(err, store.ErrTooLarge) || errors.Is(err, store.ErrInvalid)
}

// write stores progress p (the instance's, moved on by a change) with u:
// the progress variable, the status message (the pause reason, unless u
// sets one), the wake-up time, the deadline, the fence of the lease while
// one is held, and the events of the attempts the write opens and closes
// (stepEvents). Call with the turn held (not mu: the store is called).
func (in *instance) write(ctx context.Context, p *Progress, u store.Update) error {
	t := in.task
	now := in.b.engine.Now()
	p.Revision++
	p.UpdatedAt = now
	p.SchemaVersion = ProgressSchemaVersion
	raw, err := json.Marshal(p)
	if err != nil {
		p.Revision--
		return mcptask.InternalError("encoding workflow progress: %v", err)
	}
	vars := make(map[string]json.RawMessage, len(u.Variables)+1)
	for k, v := range u.Variables {
		vars[k] = v
	}
	vars[VarProgress] = raw
	u.Variables = vars
	if u.StatusMessage == nil {
		u.StatusMessage = &p.PauseReason
	}
	if parked(t) {
		setLabel(&u, labelUnserved, "") // served here: it no longer waits for its version (unserved.go)
	}
	if t.Labels[LabelVersion] == "" && p.Version != "" {
		if u.Labels == nil {
			u.Labels = map[string]string{}
		}
		u.Labels[LabelVersion] = p.Version
	}
	u.IfVersion = t.Version
	if in.lease != nil && in.lease.Held() {
		u.Fence = in.lease.Fence()
		if u.ReleaseLease || u.Status.Terminal() {
			in.lease.Release() // stop renewing first: see taskrouter.Lease.Release
		}
	}
	if !u.Status.Terminal() {
		in.b.recordRules(t, p, &u, now) // the wake-up, the expiry, the status (timerules.go)
	}
	u.Events = append(stepEvents(t, p, in.lastWrite), u.Events...) // the attempts it opens and closes (events.go), then what the plan adds (a pause)
	nt, err := in.b.engine.Update(ctx, in.id, u)
	if err != nil {
		p.Revision--
		return err
	}
	in.lastWrite = attemptsOf(raw, p)
	in.locked(func() { in.task = nt })
	in.written, in.kept = now, false
	if u.ReleaseLease || nt.Status.Terminal() {
		in.dropLease()
	}
	in.b.written(nt, p)
	return nil
}

// dropLease stops renewing the lease (after the write that released it in
// the store, or when it was lost). Call with the turn held.
func (in *instance) dropLease() {
	if in.lease != nil {
		in.lease.Release()
		in.lease = nil
	}
}

// holdLease takes the task's lease for work this process is about to run,
// unless it holds it: without waiting when another process holds it
// (store.ErrLeased). On an exclusive store it succeeds at once and fences
// nothing. Call with the turn held.
func (in *instance) holdLease(ctx context.Context) error {
	if in.lease != nil {
		return nil
	}
	l, err := in.b.engine.TryLease(ctx, in.id)
	if err != nil {
		return err
	}
	in.lease = l
	if in.task == nil || l.Task.Version != in.task.Version {
		in.locked(func() { in.adopt(l.Task) }) // the claim wrote the task (shared store), or it moved on
	}
	return nil
}

func setLabel(u *store.Update, k, v string) {
	if u.Labels == nil {
		u.Labels = map[string]string{}
	}
	u.Labels[k] = v
}

// vars reads task variables for TaskVar sources. Call with the turn or
// mu held.
func (in *instance) vars(name string) (json.RawMessage, bool) {
	return userVar(name, in.task.Variables)
}

// userVar looks a task variable up in layers, first match wins, hiding the
// engine's reserved variables from TaskVar sources.
func userVar(name string, layers ...map[string]json.RawMessage) (json.RawMessage, bool) {
	if strings.HasPrefix(name, ReservedPrefix) {
		return nil, false
	}
	for _, l := range layers {
		if v, ok := l[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func decodeProgress(t *store.Task) (*Progress, error) {
	raw, ok := t.Variables[VarProgress]
	if !ok {
		return nil, fmt.Errorf("task %s has no workflow progress", t.ID)
	}
	var p Progress
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("task %s: decoding workflow progress: %w", t.ID, err)
	}
	if p.Outputs == nil {
		p.Outputs = map[string]json.RawMessage{}
	}
	if p.Arguments == nil {
		p.Arguments = map[string]string{}
	}
	return &p, nil
}

// storeErrors words the store errors the workflow bridge meets (see
// storerpc.Mapping; an empty message is the error's own text). Unlike the
// task methods' mapping (taskrouter), it leaves store.ErrInvalid and
// store.ErrInvalidCursor to the default, -32603.
var storeErrors = storerpc.Mapping{
	{Err: store.ErrConflict, Code: mcptask.CodeInternalError, Message: "the workflow task was changed concurrently; retry"},
	{Err: store.ErrTerminal, Code: mcptask.CodeInvalidParams, Message: "the workflow task has already ended"},
	{Err: store.ErrTooLarge, Code: mcptask.CodeInvalidParams},
	{Err: store.ErrNotFound, Code: mcptask.CodeInvalidParams, Message: "workflow task not found"},
}

// storeErr maps a store error to the JSON-RPC error a client sees.
func storeErr(err error) error { return storeErrors.Error(err) }

// isGone reports a write refused because the task ended, vanished or is
// leased by another process now.
func isGone(err error) bool {
	return errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrTerminal) || errors.Is(err, store.ErrNotFound)
}
