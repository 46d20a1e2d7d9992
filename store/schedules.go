package store

import (
	"context"
	"slices"
	"time"
)

// Schedules. The engine fires a schedule (a cron expression) by starting
// one task per firing time. What makes a firing happen exactly once, on
// whichever replica sees it first and after any restart, is here: the
// schedule's record (how far its firings have been decided, whether it is
// paused, who did what to it) is written compare-and-swap, and the fires
// it decides are written in the same transaction, each keyed by schedule
// and time, each naming the task it starts before that task exists. Of
// two replicas deciding the same firing, one write wins; the task a fire
// names is created with that id, so a start retried after a crash
// creates it once (ErrExists is the sign it was).

// ScheduleRecord is the durable state of one schedule.
type ScheduleRecord struct {
	// Name is the schedule's name (1 to MaxNameBytes bytes).
	Name string
	// Paused stops the firings: times that pass while paused are not
	// fired.
	Paused bool
	// Last is the latest firing time decided (fired or skipped); the
	// next firing is the schedule's first time after it.
	Last time.Time
	// Version counts the record's writes: 1 after its creation.
	// SaveSchedule is conditional on it.
	Version uint64
	// UpdatedAt is when the record was last written (the store's clock).
	UpdatedAt time.Time
	// Actions are what people and the engine did to the schedule (pause,
	// resume, trigger, skipped firings), oldest first, at most
	// MaxScheduleActions (the oldest go).
	Actions []ScheduleAction
}

// ScheduleAction is one entry of a schedule's history.
type ScheduleAction struct {
	At     time.Time
	By     string
	Action string
	Detail string
}

// Fire is one firing of a schedule: the durable record, keyed by Schedule
// and At, of a task to start.
type Fire struct {
	// Schedule is the schedule's name.
	Schedule string
	// At is the firing time (a time of the schedule, or a trigger's now).
	At time.Time
	// TaskID is the id of the task the firing starts (1 to MaxIDBytes).
	TaskID string
	// Reason says why it fired: the engine's words (on time, a missed
	// firing run late, a backfill, a trigger).
	Reason string
	// By is who triggered it, for a trigger.
	By string
	// RecordedAt is when the fire was recorded.
	RecordedAt time.Time
	// Started reports that its task was created (StartFire).
	Started bool
}

// Bounds of what a schedule keeps.
const (
	// MaxScheduleActions bounds ScheduleRecord.Actions.
	MaxScheduleActions = 32
	// MaxFires bounds the started fires a schedule keeps: beyond it,
	// SaveSchedule drops the oldest started ones (fires not started yet
	// are always kept).
	MaxFires = 100
	// maxActionBytes bounds one action's text fields.
	maxActionBytes = 4096
)

// Schedules is the part of Store that keeps schedules' records and fires.
type Schedules interface {
	// Schedule returns a schedule's record (ErrNotFound when it has none
	// yet).
	Schedule(ctx context.Context, name string) (*ScheduleRecord, error)
	// SaveSchedule writes rec, conditional on its Version (0: create it,
	// ErrExists when a record exists; otherwise ErrConflict when the
	// stored Version differs, ErrNotFound when there is none), and adds
	// fires (of rec's schedule; ErrExists, writing nothing, when one of
	// their times is recorded already), in one transaction. It returns
	// the record as stored: Version one more, UpdatedAt the store's now,
	// Actions capped. Started fires beyond MaxFires are dropped, oldest
	// first.
	SaveSchedule(ctx context.Context, rec *ScheduleRecord, fires []Fire) (*ScheduleRecord, error)
	// Fires returns up to limit fires of a schedule, newest first (a limit
	// of zero or less means DefaultPageSize, capped at MaxPageSize).
	Fires(ctx context.Context, schedule string, limit int) ([]Fire, error)
	// StartFire marks the fire of schedule at time at started
	// (ErrNotFound when there is none); marking it again is no error.
	StartFire(ctx context.Context, schedule string, at time.Time) error
}

// CheckSchedule validates a SaveSchedule call (ErrInvalid, ErrTooLarge).
func CheckSchedule(rec *ScheduleRecord, fires []Fire) error {
	switch {
	case rec == nil:
		return invalid("nil schedule record")
	case rec.Name == "":
		return invalid("schedule record without a name")
	case len(rec.Name) > MaxNameBytes:
		return tooLarge("schedule name", len(rec.Name), MaxNameBytes)
	case !rec.Last.IsZero() && !ValidTime(rec.Last):
		return invalid("schedule %q: last firing time %v out of range", rec.Name, rec.Last)
	}
	for _, a := range rec.Actions {
		if len(a.By)+len(a.Action)+len(a.Detail) > maxActionBytes {
			return tooLarge("schedule action", len(a.By)+len(a.Action)+len(a.Detail), maxActionBytes)
		}
	}
	seen := map[int64]bool{}
	for _, f := range fires {
		switch {
		case f.Schedule != rec.Name:
			return invalid("fire of schedule %q saved with schedule %q", f.Schedule, rec.Name)
		case f.At.IsZero() || !ValidTime(f.At):
			return invalid("schedule %q: fire time %v out of range", rec.Name, f.At)
		case f.TaskID == "":
			return invalid("schedule %q: fire at %v without a task id", rec.Name, f.At)
		case len(f.TaskID) > MaxIDBytes:
			return tooLarge("fire task id", len(f.TaskID), MaxIDBytes)
		case len(f.Reason)+len(f.By) > maxActionBytes:
			return tooLarge("fire reason", len(f.Reason)+len(f.By), maxActionBytes)
		case seen[f.At.UnixNano()]:
			return invalid("schedule %q: two fires at %v", rec.Name, f.At)
		}
		seen[f.At.UnixNano()] = true
	}
	return nil
}

// PrepareSchedule returns the record SaveSchedule stores for rec (whose
// stored Version was checked): the next version, written now, its times
// in UTC and its actions capped; and the fires in UTC, recorded now.
func PrepareSchedule(rec *ScheduleRecord, fires []Fire, now time.Time) (*ScheduleRecord, []Fire) {
	c := *rec
	c.Version++
	c.UpdatedAt = now.UTC()
	if !c.Last.IsZero() {
		c.Last = c.Last.UTC()
	}
	c.Actions = slices.Clone(rec.Actions)
	if n := len(c.Actions); n > MaxScheduleActions {
		c.Actions = c.Actions[n-MaxScheduleActions:]
	}
	for i := range c.Actions {
		c.Actions[i].At = c.Actions[i].At.UTC()
	}
	out := make([]Fire, len(fires))
	for i, f := range fires {
		f.At = f.At.UTC()
		f.RecordedAt = now.UTC()
		f.Started = false
		out[i] = f
	}
	return &c, out
}

// PruneFires returns the times of the fires a schedule drops, given all
// it keeps (any order): the started ones beyond the MaxFires newest.
func PruneFires(fires []Fire) []time.Time {
	if len(fires) <= MaxFires {
		return nil
	}
	sorted := slices.Clone(fires)
	slices.SortFunc(sorted, func(a, b Fire) int { return b.At.Compare(a.At) })
	var drop []time.Time
	for i, f := range sorted {
		if i >= MaxFires && f.Started {
			drop = append(drop, f.At)
		}
	}
	return drop
}

// CloneSchedule returns a deep copy of rec.
func CloneSchedule(rec *ScheduleRecord) *ScheduleRecord {
	if rec == nil {
		return nil
	}
	c := *rec
	c.Actions = slices.Clone(rec.Actions)
	return &c
}
