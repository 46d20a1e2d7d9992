package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// Overlap: what a schedule does when its time comes while a task it
// started still runs (Temporal's ScheduleOverlapPolicy is the model). The
// decision is part of the round that decides the time, so it is made
// once across replicas: a time skipped is recorded as skipped in the
// same compare-and-swap write of the schedule's record that moves its
// Last (store.Schedules.SaveSchedule), and a time fired is a recorded
// fire. What a fire does to the tasks before it (wait for them, cancel
// them) is done by whoever starts it (startPending), again after a crash
// or on another replica: cancelling an ended task and starting an
// existing one change nothing.
//
// A schedule's tasks are those of its latest fires (pendingFires of
// them): started and not ended, they run; recorded and not started yet,
// they are about to.

// OverlapPolicy says what a schedule does when its time comes while a
// task it started still runs.
type OverlapPolicy string

// The overlap policies.
const (
	// OverlapSkip starts nothing (the default): the time is skipped, and
	// the schedule's history says so; the next time after the running
	// task ends fires.
	OverlapSkip OverlapPolicy = "skip"
	// OverlapBufferOne records the firing and starts its task when the
	// running one has ended (the round after it ended, within a second);
	// at most one firing waits: the times that come meanwhile are
	// skipped.
	OverlapBufferOne OverlapPolicy = "buffer_one"
	// OverlapAllowAll starts a task at every time, whatever still runs.
	OverlapAllowAll OverlapPolicy = "allow_all"
	// OverlapCancelOther cancels the running tasks (their status message
	// says which firing replaced them), then starts the new one.
	OverlapCancelOther OverlapPolicy = "cancel_other"
)

// holdPoll bounds the wait of a round while a buffered firing waits for
// the running task to end.
const holdPoll = time.Second

// parseOverlap checks p ("" is OverlapSkip).
func parseOverlap(p OverlapPolicy) (OverlapPolicy, error) {
	switch p {
	case "":
		return OverlapSkip, nil
	case OverlapSkip, OverlapBufferOne, OverlapAllowAll, OverlapCancelOther:
		return p, nil
	}
	return "", fmt.Errorf("unknown Overlap policy %q: use OverlapSkip, OverlapBufferOne, OverlapAllowAll or OverlapCancelOther", p)
}

// activity is what a round knows of a schedule's tasks.
type activity struct {
	// running are the started fires whose task has not ended, newest
	// first.
	running []store.Fire
	// pending are the fires not started yet, oldest first.
	pending []store.Fire
}

// busy reports whether a task of the schedule runs or is about to.
func (a activity) busy() bool { return len(a.running) > 0 || len(a.pending) > 0 }

// runningBefore are the running fires from before at.
func (a activity) runningBefore(at time.Time) []store.Fire {
	var out []store.Fire
	for _, f := range a.running {
		if f.At.Before(at) {
			out = append(out, f)
		}
	}
	return out
}

// running returns the started fires among fires of schedule name
// (newest first, as Fires returns them) whose task has not ended.
// Whether a task ended is read from the store, once per task: an ended
// task never runs again.
func (c *crons) running(ctx context.Context, name string, fires []store.Fire) ([]store.Fire, error) {
	var out []store.Fire
	keep := make(map[string]bool, len(fires))
	for _, f := range fires {
		if !f.Started {
			continue
		}
		keep[f.TaskID] = true
		c.mu.Lock()
		ended := c.ended[name][f.TaskID]
		c.mu.Unlock()
		if ended {
			continue
		}
		t, err := c.e.Store().Get(ctx, f.TaskID)
		switch {
		case errors.Is(err, store.ErrNotFound) || err == nil && t.Status.Terminal():
			c.mu.Lock()
			if c.ended[name] == nil {
				c.ended[name] = map[string]bool{}
			}
			c.ended[name][f.TaskID] = true
			c.mu.Unlock()
		case err != nil:
			return nil, err
		default:
			out = append(out, f)
		}
	}
	c.mu.Lock()
	for id := range c.ended[name] {
		if !keep[id] {
			delete(c.ended[name], id) // only the latest fires are looked at
		}
	}
	c.mu.Unlock()
	return out, nil
}

// overlap applies sc's overlap policy to the fires a round decided
// (oldest first), given what runs: it returns the fires to record and
// the times it skips.
func (sc *schedule) overlap(fires []store.Fire, a activity) (keep []store.Fire, skipped []time.Time) {
	if len(fires) == 0 || sc.Overlap == OverlapAllowAll {
		return fires, nil
	}
	skip := func(fs []store.Fire) {
		for _, f := range fs {
			skipped = append(skipped, f.At)
		}
	}
	switch sc.Overlap {
	case OverlapCancelOther:
		// The newest replaces whatever runs; the older ones of this round
		// would be cancelled by it at once.
		last := fires[len(fires)-1]
		skip(fires[:len(fires)-1])
		if a.busy() {
			last.Reason += fmt.Sprintf("; it cancels the running %s (overlap %s)", taskList(append(a.running, a.pending...)), sc.Overlap)
		}
		return []store.Fire{last}, skipped
	case OverlapBufferOne:
		if !a.busy() {
			// Nothing runs: the first starts, the next waits for it.
			keep = fires[:min(2, len(fires))]
			if len(keep) == 2 {
				keep[1].Reason += fmt.Sprintf("; it waits for task %s (overlap %s)", keep[0].TaskID, sc.Overlap)
			}
			skip(fires[len(keep):])
			return keep, skipped
		}
		if len(a.pending) > 0 {
			skip(fires) // one waits already
			return nil, skipped
		}
		first := fires[0]
		first.Reason += fmt.Sprintf("; it waits for %s (overlap %s)", taskList(a.running), sc.Overlap)
		skip(fires[1:])
		return []store.Fire{first}, skipped
	}
	// OverlapSkip.
	if a.busy() {
		skip(fires)
		return nil, skipped
	}
	skip(fires[1:])
	return fires[:1], skipped
}

// taskList names the tasks of fires.
func taskList(fires []store.Fire) string {
	ids := make([]string, len(fires))
	for i, f := range fires {
		ids[i] = f.TaskID
	}
	if len(ids) == 1 {
		return "task " + ids[0]
	}
	return "tasks " + strings.Join(ids, ", ")
}

// overlapDetail words the times a round skipped for overlap.
func (sc *schedule) overlapDetail(skipped []time.Time, a activity) string {
	var why string
	switch {
	case sc.Overlap == OverlapBufferOne && len(a.pending) > 0:
		why = "the firing at " + stamp(a.pending[0].At) + " waits already"
		if len(a.running) > 0 {
			why += ", for " + taskList(a.running[:1]) + " to end"
		}
	case len(a.running) > 0:
		why = taskList(a.running[:1]) + " of the schedule still runs"
	case len(a.pending) > 0:
		why = "the firing at " + stamp(a.pending[0].At) + " is about to start its task"
	}
	return fmt.Sprintf("%d firing(s) up to %s not run: %s (overlap %s)", len(skipped), stamp(skipped[len(skipped)-1]), why, sc.Overlap)
}

// before says what fire f does, by the overlap policy, before it starts:
// hold (buffer one: a task before it still runs), or cancel the tasks
// before it (cancel other).
func (c *crons) before(ctx context.Context, sc *schedule, f store.Fire, a activity) (hold bool) {
	switch sc.Overlap {
	case OverlapBufferOne:
		return len(a.runningBefore(f.At)) > 0
	case OverlapCancelOther:
		for _, run := range a.runningBefore(f.At) {
			msg := fmt.Sprintf("cancelled by schedule %q: its firing at %s replaces this task (overlap %s)", sc.Name, stamp(f.At), sc.Overlap)
			if _, err := c.e.CancelTask(ctx, run.TaskID, msg); err != nil && !errors.Is(err, store.ErrTerminal) && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrInvalidTransition) {
				c.e.Logger().Warn("cancelling a schedule's running task", "schedule", sc.Name, "task", run.TaskID, "error", err)
			}
		}
	}
	return false
}
