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
// holds while server steps run here, and those steps. Every write this
// process makes to the task goes through the instance, one at a time (mu),
// so the steps of one task never race each other here and no other task
// ever waits for them: there is no lock shared between tasks. Writes are
// conditional on the task's version; a writer elsewhere (another replica,
// a client's touch, a cancel) makes the next write reload and apply its
// change again.
//
// mu is never held while a tool runs.
type instance struct {
	b  *Bridge
	id string

	mu   sync.Mutex
	task *store.Task // the task as last read or written; nil: reload
	p    *Progress   // its progress, decoded
	wf   *compiled   // the version the task runs on; nil when verr is set
	verr error       // why the task cannot run here (a version not served, a mismatch, undecodable progress)

	lease   *taskrouter.Lease
	running map[string]*stepRun      // server steps whose tool runs here now
	clients map[string]chan struct{} // client steps a continuation performs here now; closed when it ends
	driving bool                     // the drive loop runs
	again   bool                     // a kick arrived while the drive loop ran: plan again
	passed  chan struct{}            // closed when the drive loop's next pass ends (see kick)
	results chan stepResult
	poke    chan struct{}
	written time.Time // when this process last wrote the task
	refs    int       // users: requests, the drive loop (guarded by Bridge.mu)
}

// use returns the instance of task id, creating it, and counts a user;
// done must follow.
func (b *Bridge) use(id string) *instance {
	b.mu.Lock()
	defer b.mu.Unlock()
	in := b.instances[id]
	if in == nil {
		in = &instance{b: b, id: id, running: map[string]*stepRun{}, clients: map[string]chan struct{}{},
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

// adopt sets what the instance knows from t (read or written elsewhere).
// Call with mu held.
func (in *instance) adopt(t *store.Task) {
	in.task, in.p, in.wf, in.verr = t, nil, nil, nil
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
	wf, err := in.b.versionFor(name, recorded, p)
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

// load reads the task unless the instance knows it. Call with mu held.
func (in *instance) load(ctx context.Context) error {
	if in.task != nil {
		return nil
	}
	t, err := in.b.engine.Task(ctx, in.id)
	if err != nil {
		return err
	}
	in.adopt(t)
	return nil
}

// invalidate makes the next use reload the task. Call with mu held.
func (in *instance) invalidate() {
	in.task, in.p, in.wf, in.verr = nil, nil, nil, nil
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
// fenced by the lease while one is held). On a version conflict it reloads
// the task and applies change again. change returns errStale (or another
// error) to give up: nothing is written and the instance reloads; it
// returns errNoWrite to keep its change in memory, unwritten (coalesced
// progress). Call with mu held. The errors: errEnded (the task ended or is
// gone, also when a fenced write found it so), errTakenOver (another
// process holds the lease), in.verr (the
// task's version is not served here), change's own, and JSON-RPC errors
// for store failures.
func (in *instance) commit(ctx context.Context, change func(p *Progress) (store.Update, error)) error {
	for attempt := 0; ; attempt++ {
		if err := in.load(ctx); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return errEnded
			}
			return storeErr(err)
		}
		if in.task.Status.Terminal() {
			return errEnded
		}
		if in.verr != nil {
			return in.verr
		}
		u, err := change(in.p)
		switch {
		case errors.Is(err, errNoWrite), errors.Is(err, errUnchanged):
			return err
		}
		if err != nil {
			in.invalidate()
			return err
		}
		err = in.write(ctx, u)
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
		return storeErr(err)
	}
}

// write stores the instance's progress with u: the progress variable, the
// status message (the pause reason, unless u sets one), the wake-up time,
// the deadline, and the fence of the lease while one is held. Call with mu
// held.
func (in *instance) write(ctx context.Context, u store.Update) error {
	p, t := in.p, in.task
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
		wake := p.nextWake(now)
		u.WakeAt = &wake
		in.b.deadline(t, p, &u, now)
		// A workflow waiting only for events needs the client's input
		// (tasks/update, or the webhook): input_required, with its
		// inputRequests; working otherwise.
		if want := wantStatus(t, p); u.Status == "" && t.Status != want {
			u.Status = want
		}
	}
	nt, err := in.b.engine.Update(ctx, in.id, u)
	if err != nil {
		p.Revision--
		return err
	}
	in.task = nt
	in.written = now
	if u.ReleaseLease || nt.Status.Terminal() {
		in.dropLease()
	}
	return nil
}

// dropLease stops renewing the lease (after the write that released it in
// the store, or when it was lost). Call with mu held.
func (in *instance) dropLease() {
	if in.lease != nil {
		in.lease.Release()
		in.lease = nil
	}
}

// holdLease takes the task's lease for work this process is about to run,
// unless it holds it: without waiting when another process holds it
// (store.ErrLeased). On an exclusive store it succeeds at once and fences
// nothing. Call with mu held.
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
		in.adopt(l.Task) // the claim wrote the task (shared store), or it moved on
	}
	return nil
}

// deadline sets u.ExpiresAt by the workflow's time rules (see Bridge):
// a task no client holds yet that waits for one expires after the orphan
// timeout; otherwise every write that records progress moves the deadline
// to now + the task's ttl if that is later.
func (b *Bridge) deadline(t *store.Task, p *Progress, u *store.Update, now time.Time) {
	held := t.Labels[LabelTouched] != "" || u.Labels[LabelTouched] != ""
	switch {
	case !held && b.opts.OrphanTimeout > 0 && waiting(p):
		at := now.Add(b.opts.OrphanTimeout)
		if ttl := renewed(t, now); ttl.Before(at) {
			at = ttl
		}
		u.ExpiresAt = &at
		setLabel(u, LabelDeadline, DeadlineOrphan)
	case t.TTL > 0:
		at := renewed(t, now)
		u.ExpiresAt = &at
		setLabel(u, LabelDeadline, DeadlineIdle)
	}
}

// renewed is the deadline of t after progress at now: at least now + its
// ttl, never earlier than its current ttl deadline.
func renewed(t *store.Task, now time.Time) time.Time {
	at := now.Add(t.TTL)
	if cur := t.ExpiresAt; t.Labels[LabelDeadline] != DeadlineOrphan && cur.After(at) {
		at = cur
	}
	if first := t.CreatedAt.Add(t.TTL); first.After(at) {
		at = first
	}
	return at
}

func setLabel(u *store.Update, k, v string) {
	if u.Labels == nil {
		u.Labels = map[string]string{}
	}
	u.Labels[k] = v
}

// waiting reports whether p waits for the client: not done, nothing runs
// on the server or is due to, and some step waits for the client.
func waiting(p *Progress) bool {
	client := false
	for i := range p.Steps {
		sp := &p.Steps[i]
		switch {
		case sp.ended(), sp.GaveUp:
		case sp.Status == StepRunning, sp.RetryAt != nil, sp.Status == StepSleeping:
			return false
		case sp.Status == StepAwaitingClient, sp.Status == StepAwaitingEvent, sp.HandedToClient:
			client = true
		}
	}
	return client
}

// timerWake is the earliest time the clock gives the server work on p: a
// retry, or the end of a client's wait; zero for none.
func (p *Progress) timerWake() time.Time {
	var at time.Time
	take := func(t *time.Time) {
		if t != nil && (at.IsZero() || t.Before(at)) {
			at = *t
		}
	}
	for i := range p.Steps {
		sp := &p.Steps[i]
		if sp.ended() {
			continue
		}
		take(sp.RetryAt)
		take(sp.Deadline)
		take(sp.Until)
	}
	return at
}

// nextWake is the task's wake-up time (store.Task.WakeAt) at progress p
// written at now: now when a server step is due but not started (so that
// if this process stops before it starts the step, the engine's scheduler
// has another process start it), else timerWake.
func (p *Progress) nextWake(now time.Time) time.Time {
	if p.serverDue() {
		return now
	}
	return p.timerWake()
}

// serverDue reports whether the server has a step to start now: the first
// step not done (no client step before it waits) is a server step that
// neither runs nor waits for a retry, or every step is done and the task
// is not completed yet.
func (p *Progress) serverDue() bool {
	for i := range p.Steps {
		sp := &p.Steps[i]
		switch {
		case sp.ended(), sp.GaveUp:
			continue
		case sp.HandedToClient:
			return false
		case sp.Execution == string(ClientDeferred) && !sp.ServerTakeover:
			return false
		case sp.Status == StepRunning, sp.RetryAt != nil, sp.Until != nil:
			return false
		}
		return true
	}
	return true
}

// wantStatus is the status of active workflow task t at progress p:
// input_required while it waits only for events and its client speaks the
// extension dialect (which answers them with tasks/update), working
// otherwise (a core client cannot answer: the webhook delivers them).
func wantStatus(t *store.Task, p *Progress) store.Status {
	d, _ := mcptask.ParseDialect(t.Labels[taskrouter.LabelDialect])
	return statusFor(d, p)
}

// statusFor is wantStatus for a client of dialect d.
func statusFor(d mcptask.Dialect, p *Progress) store.Status {
	if d.HasMethod(mcptask.MethodTasksUpdate) && p.waitsOnEventsOnly() {
		return store.StatusInputRequired
	}
	return store.StatusWorking
}

// waitsOnEventsOnly reports whether every step the workflow waits on is
// an event (the task is then input_required: its inputRequests name them).
func (p *Progress) waitsOnEventsOnly() bool {
	events := false
	for i := range p.Steps {
		sp := &p.Steps[i]
		switch {
		case sp.ended(), sp.GaveUp:
		case sp.Status == StepAwaitingEvent:
			events = true
		case sp.Status == StepPending && sp.RetryAt == nil && !sp.HandedToClient:
			// not reached: it waits for what comes before it
		default:
			return false
		}
	}
	return events
}

// vars reads task variables for TaskVar sources. Call with mu held.
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
