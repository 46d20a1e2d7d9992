package store

import (
	"encoding/json"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"sort"
	"time"
)

// The checks and the application of Store.Update, shared by every backend.

// PreparedUpdate is an Update whose stateless checks (JSON validity, value
// sizes, names) have passed. Backends prepare outside their critical
// section and Apply inside it. A PreparedUpdate holds private copies of the
// update's values; Apply may be called more than once (on different
// records), and records it is applied to share its (read-only) values.
type PreparedUpdate struct {
	u          Update
	lim        Limits
	deletes    map[string]bool // variable names set to null
	appendOnly bool
}

// Changes reports what Apply changed, so a backend can write only that.
type Changes struct {
	// PrevStatus is the status before the update.
	PrevStatus mcptask.Status
	// SetVariables are the variable names written, sorted.
	SetVariables []string
	// DeletedVariables are the existing variable names removed, sorted.
	DeletedVariables []string
	// ResultChanged is set when the result or the error was replaced.
	ResultChanged bool
	// ExpiryChanged is set when the update moved ExpiresAt (Update.ExpiresAt
	// was non-nil); PrevExpiresAt is the old value, so a backend can move
	// the task's expiry index entry (the zero time means no entry).
	ExpiryChanged bool
	PrevExpiresAt time.Time
	// StatusChanged is set when the status differs from PrevStatus; the
	// update then appended to History.
	StatusChanged bool
	// LeaseChanged is set when LeaseHolder or LeaseUntil changed;
	// PrevLeaseHolder and PrevLeaseUntil are the old values, so a backend
	// can move the task's lease index entry (no entry without a holder).
	LeaseChanged    bool
	PrevLeaseHolder string
	PrevLeaseUntil  time.Time
	// WakeChanged is set when the update changed WakeAt: Update.WakeAt
	// gave another time, or a move to a terminal status cleared it.
	// PrevWakeAt is the old value, so a backend can move the task's wake
	// index entry (the zero time means no entry).
	WakeChanged bool
	PrevWakeAt  time.Time
	// Events are the events to append to the task's log, in order, their
	// At set and their Seq not yet: Update.Events, then the
	// mcptask.EventStatus event when StatusChanged. A backend numbers and
	// places them with Limits.PlanAppend after the log's newest event.
	Events []Event
	// AppendOnly is set for a pure append (Update.AppendOnly): the task
	// itself did not change (not its Version, not UpdatedAt), so the
	// backend writes the Events only.
	AppendOnly bool
}

func changesOf(t *Task) Changes {
	return Changes{PrevStatus: t.Status, PrevExpiresAt: t.ExpiresAt, PrevLeaseHolder: t.LeaseHolder,
		PrevLeaseUntil: t.LeaseUntil, PrevWakeAt: t.WakeAt}
}

// PrepareUpdate validates the parts of u that do not depend on the stored
// task: variable names, each variable value (size, then JSON validity), the
// result and the error data, label names, and the range of ExpiresAt and
// WakeAt. It fails with ErrInvalid or ErrTooLarge.
func PrepareUpdate(u Update, lim Limits) (*PreparedUpdate, error) {
	lim = lim.WithDefaults()
	p := &PreparedUpdate{lim: lim}
	for k, v := range u.Variables {
		if err := checkVarName(k); err != nil {
			return nil, err
		}
		if err := checkJSON(fmt.Sprintf("variable %q", k), v, lim.MaxVariableBytes); err != nil {
			return nil, err
		}
	}
	if u.Result != nil {
		if err := checkJSON("result", u.Result, lim.MaxResultBytes); err != nil {
			return nil, err
		}
	}
	if err := checkError(u.Error, lim); err != nil {
		return nil, err
	}
	for k := range u.Labels {
		if k == "" {
			return nil, invalid("empty label name")
		}
	}
	if u.Annotate && (u.Status != "" || u.StatusMessage != nil || len(u.Variables) > 0 || u.Result != nil || u.Error != nil ||
		u.ExpiresAt != nil || u.WakeAt != nil || u.Fence != nil || u.ReleaseLease || len(u.Labels) == 0 || len(u.Events) > 0) {
		return nil, invalid("an Annotate update only merges Labels")
	}
	if u.ExpiresAt != nil && !u.ExpiresAt.IsZero() && !ValidTime(*u.ExpiresAt) {
		return nil, invalid("ExpiresAt %v out of range", *u.ExpiresAt)
	}
	if u.WakeAt != nil && !u.WakeAt.IsZero() && !ValidTime(*u.WakeAt) {
		return nil, invalid("WakeAt %v out of range", *u.WakeAt)
	}
	if err := checkEvents(u.Events, lim); err != nil {
		return nil, err
	}

	p.copyOf(u)
	p.appendOnly = u.AppendOnly()
	return p, nil
}

// copyOf sets p.u to a private copy of u (the caller may reuse its maps
// and slices), its times in UTC and its variables set to null moved to
// p.deletes.
func (p *PreparedUpdate) copyOf(u Update) {
	p.u = u
	if u.Fence != nil {
		f := *u.Fence
		p.u.Fence = &f
	}
	if u.StatusMessage != nil {
		m := *u.StatusMessage
		p.u.StatusMessage = &m
	}
	if u.Variables != nil {
		p.u.Variables = make(map[string]json.RawMessage, len(u.Variables))
		for k, v := range u.Variables {
			if IsJSONNull(v) {
				if p.deletes == nil {
					p.deletes = make(map[string]bool)
				}
				p.deletes[k] = true
				continue
			}
			p.u.Variables[k] = cloneRaw(v)
		}
	}
	p.u.Result = cloneRaw(u.Result)
	p.u.Error = cloneError(u.Error)
	p.u.ExpiresAt = utcOrZero(u.ExpiresAt)
	p.u.WakeAt = utcOrZero(u.WakeAt)
	if u.Labels != nil {
		p.u.Labels = make(map[string]string, len(u.Labels))
		for k, v := range u.Labels {
			p.u.Labels[k] = v
		}
	}
	p.u.Events = cloneEvents(u.Events)
}

// utcOrZero returns a copy of *t in UTC (the zero time as is), or nil.
func utcOrZero(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := time.Time{}
	if !t.IsZero() {
		c = t.UTC()
	}
	return &c
}

// AppendOnly reports whether the update is a pure append (see
// Update.AppendOnly): Apply will need only the task's header, and change
// nothing of it.
func (p *PreparedUpdate) AppendOnly() bool { return p.appendOnly }

// Apply checks the update against t and, only if every check passes,
// applies it to t in place. The checks, in order (the backend has already
// found t: ErrNotFound comes first):
//
//   - u.Fence is set and differs from t's LeaseHolder and LeaseEpoch:
//     ErrFenced. It comes before the terminal check: an ended task has
//     no holder, so a fenced write to it reports the lost lease;
//   - t is terminal: *TransitionError{From: t.Status, To: u.Status or
//     t.Status} (it matches ErrTerminal) — terminal tasks never change,
//     even without a new status;
//   - u.Status is set and CanTransition(t.Status, u.Status) is false:
//     *TransitionError;
//   - u.IfVersion is non-zero and differs from t.Version: ErrConflict;
//   - the variables after the merge exceed MaxVariablesBytes: ErrTooLarge.
//
// Then the status and message are set, variables merged (null deletes),
// labels merged ("" deletes), result, error, ExpiresAt and WakeAt replaced
// when given (TTL is left as it was), the lease released when
// u.ReleaseLease is set or the new status is terminal (LeaseEpoch kept),
// WakeAt cleared when the new status is terminal, a History entry
// appended when the status changed, Version incremented and UpdatedAt set
// to now (UTC), and the events to append listed in Changes.Events (the
// update's, at now when they have no At, then the status event when the
// status changed). t must carry its full Variables for the size check and
// the merge, and its History for the append. On error t is unchanged.
//
// A pure append (AppendOnly) makes the same checks and changes nothing of
// t: Changes.AppendOnly is set and Changes.Events lists the events. It
// needs only t's header (no Variables, no History).
func (p *PreparedUpdate) Apply(t *Task, now time.Time) (Changes, error) {
	ch := changesOf(t)
	if err := p.check(t); err != nil {
		return ch, err
	}
	if p.appendOnly {
		ch.AppendOnly = true
		ch.Events = stampEvents(p.u.Events, now)
		return ch, nil
	}
	// Every check passed: mutate.
	p.applyStatusAndVariables(t, &ch)
	p.applyLabels(t)
	p.applyOutcomeAndTimes(t, &ch)
	t.Version++
	t.UpdatedAt = now.UTC()
	ch.Events = stampEvents(p.u.Events, t.UpdatedAt)
	if ch.StatusChanged {
		t.History = AppendHistory(t.History, StatusChange{Status: t.Status, Message: t.StatusMessage, At: t.UpdatedAt})
		ch.Events = append(ch.Events, statusEvent(t, p.lim))
	}
	sort.Strings(ch.SetVariables)
	sort.Strings(ch.DeletedVariables)
	return ch, nil
}

// check refuses u for t: a fence that is not t's lease, an ended task
// (unless u only annotates), a transition the lifecycle forbids, a version
// mismatch, or variables that would exceed the limit once merged.
func (p *PreparedUpdate) check(t *Task) error {
	u := &p.u
	if u.Fence != nil && (u.Fence.Holder != t.LeaseHolder || u.Fence.Epoch != t.LeaseEpoch) {
		if t.Status.Terminal() {
			return fmt.Errorf("%w: task %s is %s (its lease ended with it), update fenced by %q at epoch %d",
				ErrFenced, t.ID, t.Status, u.Fence.Holder, u.Fence.Epoch)
		}
		return fmt.Errorf("%w: task %s is leased by %q at epoch %d, update fenced by %q at epoch %d",
			ErrFenced, t.ID, t.LeaseHolder, t.LeaseEpoch, u.Fence.Holder, u.Fence.Epoch)
	}
	if t.Status.Terminal() && !u.Annotate {
		to := u.Status
		if to == "" {
			to = t.Status
		}
		return &TransitionError{ID: t.ID, From: t.Status, To: to}
	}
	if u.Status != "" && !CanTransition(t.Status, u.Status) {
		return &TransitionError{ID: t.ID, From: t.Status, To: u.Status}
	}
	if u.IfVersion != 0 && u.IfVersion != t.Version {
		return fmt.Errorf("%w: task %s is at version %d, update expected %d", ErrConflict, t.ID, t.Version, u.IfVersion)
	}
	if len(u.Variables) > 0 || len(p.deletes) > 0 {
		total := VariablesSize(t.Variables)
		for k := range p.deletes {
			if old, ok := t.Variables[k]; ok {
				total -= len(k) + len(old)
			}
		}
		for k, v := range u.Variables {
			if old, ok := t.Variables[k]; ok {
				total -= len(k) + len(old)
			}
			total += len(k) + len(v)
		}
		if total > p.lim.MaxVariablesBytes {
			return tooLarge("variables after merge", total, p.lim.MaxVariablesBytes)
		}
	}
	return nil
}

// applyStatusAndVariables applies the status, its message, the lease's
// release and the variables set and deleted.
func (p *PreparedUpdate) applyStatusAndVariables(t *Task, ch *Changes) {
	u := &p.u
	if u.Status != "" && u.Status != t.Status {
		t.Status = u.Status
		ch.StatusChanged = true
	}
	if u.StatusMessage != nil {
		t.StatusMessage = *u.StatusMessage
	}
	if (u.ReleaseLease || t.Status.Terminal()) && (t.LeaseHolder != "" || !t.LeaseUntil.IsZero()) {
		t.LeaseHolder, t.LeaseUntil = "", time.Time{}
		ch.LeaseChanged = true
	}
	for k := range p.deletes {
		if _, ok := t.Variables[k]; ok {
			delete(t.Variables, k)
			ch.DeletedVariables = append(ch.DeletedVariables, k)
		}
	}
	if len(u.Variables) > 0 && t.Variables == nil {
		t.Variables = make(map[string]json.RawMessage, len(u.Variables))
	}
	for k, v := range u.Variables {
		t.Variables[k] = v
		ch.SetVariables = append(ch.SetVariables, k)
	}
	if len(t.Variables) == 0 {
		t.Variables = nil
	}
}

// applyLabels merges u's labels into t's (an empty value deletes).
func (p *PreparedUpdate) applyLabels(t *Task) {
	u := &p.u
	for k, v := range u.Labels {
		if v == "" {
			delete(t.Labels, k)
			continue
		}
		if t.Labels == nil {
			t.Labels = make(map[string]string, len(u.Labels))
		}
		t.Labels[k] = v
	}
	if len(t.Labels) == 0 {
		t.Labels = nil
	}
}

// applyOutcomeAndTimes applies the result, the error, the expiry and the
// wake-up time (none for an ended task).
func (p *PreparedUpdate) applyOutcomeAndTimes(t *Task, ch *Changes) {
	u := &p.u
	if u.Result != nil {
		t.Result = u.Result
		ch.ResultChanged = true
	}
	if u.Error != nil {
		t.Error = cloneError(u.Error)
		ch.ResultChanged = true
	}
	if u.ExpiresAt != nil {
		t.ExpiresAt = *u.ExpiresAt
		ch.ExpiryChanged = true
	}
	wake := t.WakeAt
	if u.WakeAt != nil {
		wake = *u.WakeAt
	}
	if t.Status.Terminal() {
		wake = time.Time{} // an ended task has nothing to wake up for
	}
	if !wake.Equal(t.WakeAt) {
		t.WakeAt = wake
		ch.WakeChanged = true
	}
}

// ApplyUpdate is PrepareUpdate followed by Apply.
func ApplyUpdate(t *Task, u Update, lim Limits, now time.Time) (Changes, error) {
	p, err := PrepareUpdate(u, lim)
	if err != nil {
		return changesOf(t), err
	}
	return p.Apply(t, now)
}
