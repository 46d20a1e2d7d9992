package workflow

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// Schedules: a workflow started at the times of a cron expression. The
// engine's schedules service (taskrouter.Schedule) decides each firing
// once, across replicas and restarts, and records the task id it starts;
// the bridge starts a task of the workflow's newest served version with
// that id, the schedule's arguments, and the firing's time in an argument
// (Schedule.TimeArgument), owned by the schedule's owner.

// DefaultTimeArgument is the prompt argument a scheduled task gets its
// firing's time in (RFC 3339, UTC) unless Schedule.TimeArgument names
// another.
const DefaultTimeArgument = "scheduled_at"

// The labels of a scheduled task.
const (
	// LabelSchedule names the schedule that started the task.
	LabelSchedule = "workflow.schedule"
	// LabelScheduledAt is the firing's time (RFC 3339, UTC).
	LabelScheduledAt = "workflow.scheduled_at"
)

// A Schedule starts a task of a workflow at each time of a cron
// expression (see taskrouter.Schedule for the expression, the time zone,
// the missed-firing and overlap policies and the owner).
type Schedule struct {
	// Name names the schedule (unique in the engine).
	Name string
	// Workflow is the registered workflow it starts.
	Workflow string
	// Cron is the expression ("0 2 * * *", "@hourly", "@every 15m").
	Cron string
	// TimeZone is the IANA zone Cron's times are in; "" means UTC.
	TimeZone string
	// Arguments are the prompt arguments of every task it starts.
	Arguments map[string]string
	// TimeArgument is the prompt argument that gets the firing's time;
	// "" means DefaultTimeArgument. The workflow must declare it.
	TimeArgument string
	// Missed, Backfill and MissedAfter say what happens to firings
	// missed while no server ran (taskrouter.Schedule).
	Missed      taskrouter.MissedPolicy
	Backfill    int
	MissedAfter time.Duration
	// Overlap is what happens when a time comes while a task the
	// schedule started still runs (taskrouter.OverlapPolicy); "" means
	// taskrouter.OverlapSkip.
	Overlap taskrouter.OverlapPolicy
	// Owner owns the tasks it starts and may pause, resume and trigger
	// it; "" means taskrouter.LocalOwner.
	Owner string
	// Description says what it does, for listings.
	Description string
}

// scheduleEngine is what schedules need of the engine; *taskrouter.Router
// has it.
type scheduleEngine interface {
	Schedules() *taskrouter.Schedules
}

// AddSchedule registers s with the engine's schedules service: register
// the workflow first. It fails when the workflow is not registered, does
// not declare the time argument, or the schedule cannot work (its
// expression, time zone or policy; see taskrouter.Schedule).
func (b *Bridge) AddSchedule(s Schedule) error {
	se, ok := b.engine.(scheduleEngine)
	if !ok {
		return fmt.Errorf("schedule %q: the task engine runs no schedules: use a *taskrouter.Router", s.Name)
	}
	if s.TimeArgument == "" {
		s.TimeArgument = DefaultTimeArgument
	}
	wf := b.newest(s.Workflow)
	if wf == nil {
		return fmt.Errorf("schedule %q: workflow %q is not registered: register it (Register) before its schedule", s.Name, s.Workflow)
	}
	if !slices.ContainsFunc(wf.def.argumentsOf(), func(a Argument) bool { return a.Name == s.TimeArgument }) {
		return fmt.Errorf("schedule %q: workflow %q declares no argument %q for the firing's time: declare it (Arg), or name one it declares in Schedule.TimeArgument", s.Name, s.Workflow, s.TimeArgument)
	}
	if _, err := wf.def.promptArgs(s.withTime(time.Unix(0, 0))); err != nil {
		return fmt.Errorf("schedule %q: its arguments do not start workflow %q: %w", s.Name, s.Workflow, err)
	}
	return se.Schedules().Add(taskrouter.Schedule{Name: s.Name, Cron: s.Cron, TimeZone: s.TimeZone, Missed: s.Missed, Backfill: s.Backfill,
		MissedAfter: s.MissedAfter, Overlap: s.Overlap, Owner: s.Owner, Description: s.Description,
		Start: func(ctx context.Context, f store.Fire) error { return b.startScheduled(ctx, s, f) }})
}

// withTime is the arguments of s's task firing at at.
func (s Schedule) withTime(at time.Time) map[string]string {
	args := maps.Clone(s.Arguments)
	if args == nil {
		args = map[string]string{}
	}
	args[s.TimeArgument] = at.UTC().Format(time.RFC3339)
	return args
}

// startScheduled starts the task of fire f of s, unless it exists (a
// start retried, or another replica's at the same moment).
func (b *Bridge) startScheduled(ctx context.Context, s Schedule, f store.Fire) error {
	if _, err := b.engine.Task(ctx, f.TaskID); err == nil {
		return nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	wf := b.newest(s.Workflow)
	if wf == nil {
		return fmt.Errorf("workflow %q is not served here", s.Workflow)
	}
	args, err := wf.def.promptArgs(s.withTime(f.At))
	if err != nil {
		return err
	}
	owner := s.Owner
	if owner == "" {
		owner = taskrouter.LocalOwner
	}
	// The server acts for the schedule's owner, with its authority: the
	// task is bound to the owner, no id-capability (a stateless anonymous
	// client, which shares the local owner, reaches none of it).
	q := &taskrouter.Request{Owner: owner, Dialect: mcptask.Core, Source: "schedule:" + s.Name, Authenticated: true}
	labels := map[string]string{LabelSchedule: s.Name, LabelScheduledAt: f.At.UTC().Format(time.RFC3339), LabelTouched: "1"}
	in, err := b.create(ctx, q, wf, newProgress(wf, args, b.engine.Now()), labels, nil, f.TaskID)
	if err != nil {
		if _, gerr := b.engine.Task(ctx, f.TaskID); gerr == nil {
			return nil // another replica created it meanwhile
		}
		return err
	}
	b.done(in)
	return nil
}
