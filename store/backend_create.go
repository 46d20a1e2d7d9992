package store

import (
	"fmt"
	"time"
)

// The checks and the record of Store.Create, shared by every backend.

// PrepareCreate validates t for Create and returns the record to store: a
// deep copy of t with Version 1, times in UTC, UpdatedAt defaulted to
// CreatedAt, ExpiresAt computed from TTL, WakeAt as given, null variables
// and empty labels dropped, empty collections normalized to nil,
// LeaseEpoch 1 with a LeaseHolder (0 and a zero LeaseUntil without one),
// History set to its one creation entry, and Events set to the events to
// append to the new task's log: t.Events, their zero At set to UpdatedAt,
// then the store's mcptask.EventStatus event of the first status (number
// them with Limits.PlanAppend(0, 0, events)). A backend stores the events
// apart and clears rec.Events: Create returns the record without them. t
// is not modified.
//
// t.Status may be any valid status. A task created in a terminal status
// (completed, failed, cancelled: one that ended before it was first
// stored) must carry its outcome, a Result or an Error, and no
// LeaseHolder or WakeAt: nobody runs work for a task that has ended. Its
// result and error are held to the same limits as an Update's.
//
// It fails with ErrInvalid (bad id, owner, status, times, TTL, poll
// interval, request name, lease, wake-up time, JSON, event type, a
// terminal task without an outcome or with a lease or a wake-up time) or
// ErrTooLarge (a size limit of lim, after defaults). Backends call it
// before writing anything.
func PrepareCreate(t *Task, lim Limits) (*Task, error) {
	if t == nil {
		return nil, invalid("nil task")
	}
	lim = lim.WithDefaults()
	if err := checkNewHeader(t); err != nil {
		return nil, err
	}
	var expires time.Time
	if t.TTL > 0 {
		expires = t.CreatedAt.Add(t.TTL)
		if !ValidTime(expires) || expires.Before(t.CreatedAt) {
			return nil, invalid("task %s: CreatedAt+TTL out of range", t.ID)
		}
	}
	if err := checkNewPayloads(t, lim); err != nil {
		return nil, err
	}
	if err := checkEvents(t.Events, lim); err != nil {
		return nil, fmt.Errorf("task %s: %w", t.ID, err)
	}
	rec := newRecord(t, expires)
	rec.Events = append(stampEvents(t.Events, rec.UpdatedAt), statusEvent(rec, lim))
	return rec, nil
}

// checkNewHeader checks a new task's identity, status, times and lease.
func checkNewHeader(t *Task) error {
	switch {
	case t.ID == "":
		return invalid("empty id")
	case len(t.ID) > MaxIDBytes:
		return invalid("id is %d bytes, limit %d", len(t.ID), MaxIDBytes)
	case t.Owner == "":
		return invalid("task %s: empty owner", t.ID)
	case len(t.Owner) > MaxOwnerBytes:
		return invalid("task %s: owner is %d bytes, limit %d", t.ID, len(t.Owner), MaxOwnerBytes)
	case !t.Status.Valid():
		return invalid("task %s: initial status %q", t.ID, t.Status)
	case t.Status.Terminal() && len(t.Result) == 0 && t.Error == nil:
		return invalid("task %s: created %s without a Result or an Error", t.ID, t.Status)
	case t.Status.Terminal() && t.LeaseHolder != "":
		return invalid("task %s: created %s with lease holder %q (an ended task has no lease)", t.ID, t.Status, t.LeaseHolder)
	case t.Status.Terminal() && !t.WakeAt.IsZero():
		return invalid("task %s: created %s with WakeAt %v (an ended task has no wake-up)", t.ID, t.Status, t.WakeAt)
	case !t.WakeAt.IsZero() && !ValidTime(t.WakeAt):
		return invalid("task %s: WakeAt %v out of range", t.ID, t.WakeAt)
	case t.CreatedAt.IsZero():
		return invalid("task %s: zero CreatedAt", t.ID)
	case !ValidTime(t.CreatedAt):
		return invalid("task %s: CreatedAt %v out of range", t.ID, t.CreatedAt)
	case !t.UpdatedAt.IsZero() && !ValidTime(t.UpdatedAt):
		return invalid("task %s: UpdatedAt %v out of range", t.ID, t.UpdatedAt)
	case t.TTL < 0:
		return invalid("task %s: negative TTL", t.ID)
	case t.PollInterval < 0:
		return invalid("task %s: negative poll interval", t.ID)
	case len(t.Request.Name) > MaxNameBytes:
		return invalid("task %s: request name is %d bytes, limit %d", t.ID, len(t.Request.Name), MaxNameBytes)
	}
	if t.LeaseHolder != "" {
		if err := checkLease(t.LeaseHolder, t.LeaseUntil); err != nil {
			return fmt.Errorf("task %s: %w", t.ID, err)
		}
	}
	return nil
}

// checkNewPayloads checks a new task's JSON values (arguments, variables,
// result, error) against lim, and its label names.
func checkNewPayloads(t *Task, lim Limits) error {
	if len(t.Request.Arguments) > 0 {
		if err := checkJSON("request arguments", t.Request.Arguments, lim.MaxArgumentsBytes); err != nil {
			return err
		}
	}
	total := 0
	for k, v := range t.Variables {
		if err := checkVarName(k); err != nil {
			return err
		}
		if err := checkJSON(fmt.Sprintf("variable %q", k), v, lim.MaxVariableBytes); err != nil {
			return err
		}
		if !IsJSONNull(v) {
			total += len(k) + len(v)
		}
	}
	if total > lim.MaxVariablesBytes {
		return tooLarge("variables", total, lim.MaxVariablesBytes)
	}
	if len(t.Result) > 0 {
		if err := checkJSON("result", t.Result, lim.MaxResultBytes); err != nil {
			return err
		}
	}
	if err := checkError(t.Error, lim); err != nil {
		return err
	}
	for k := range t.Labels {
		if k == "" {
			return invalid("task %s: empty label name", t.ID)
		}
	}
	return nil
}

// newRecord is the record a store keeps for a checked new task: a copy in
// UTC, with its expiry, empty values and labels dropped, version 1, the
// lease's first epoch and the first history entry.
func newRecord(t *Task, expires time.Time) *Task {
	c := t.Clone()
	c.CreatedAt = t.CreatedAt.UTC()
	if t.UpdatedAt.IsZero() {
		c.UpdatedAt = c.CreatedAt
	} else {
		c.UpdatedAt = t.UpdatedAt.UTC()
	}
	if t.TTL > 0 {
		c.ExpiresAt = expires.UTC()
	} else {
		c.ExpiresAt = time.Time{}
	}
	if !t.WakeAt.IsZero() {
		c.WakeAt = t.WakeAt.UTC()
	}
	if len(c.Request.Arguments) == 0 {
		c.Request.Arguments = nil
	}
	if len(c.Result) == 0 {
		c.Result = nil
	}
	c.Error = cloneError(t.Error)
	for k, v := range c.Labels {
		if v == "" {
			delete(c.Labels, k)
		}
	}
	if len(c.Labels) == 0 {
		c.Labels = nil
	}
	for k, v := range c.Variables {
		if IsJSONNull(v) {
			delete(c.Variables, k)
		}
	}
	if len(c.Variables) == 0 {
		c.Variables = nil
	}
	c.Version = 1
	if c.LeaseHolder != "" {
		c.LeaseEpoch = 1
		c.LeaseUntil = t.LeaseUntil.UTC()
	} else {
		c.LeaseEpoch = 0
		c.LeaseUntil = time.Time{}
	}
	c.History = []StatusChange{{Status: c.Status, Message: c.StatusMessage, At: c.UpdatedAt}}
	return c
}

// AppendHistory returns a new slice: h with c appended, keeping the first
// entry and at most MaxStatusHistory-1 latest others. h itself is never
// modified (callers may share it).
func AppendHistory(h []StatusChange, c StatusChange) []StatusChange {
	if len(h) < MaxStatusHistory {
		return append(h[:len(h):len(h)], c)
	}
	out := make([]StatusChange, 0, MaxStatusHistory)
	out = append(out, h[0])
	out = append(out, h[len(h)-MaxStatusHistory+2:]...)
	return append(out, c)
}
