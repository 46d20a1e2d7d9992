// The Go API of schedules (Router.Schedules; scheduletools.go gives a
// model the same): adding one, reading them, pausing, resuming and
// triggering one, and who may manage which.

package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/store"
)

// Schedules is the schedules' handle (Router.Schedules): registering a
// schedule, listing them with their state, pausing, resuming and
// triggering one, and the tools that let a client do the same.
type Schedules struct{ c *crons }

// cronEngine is what the schedules need of the engine; *Router has it.
type cronEngine interface {
	// Store holds the schedules' records and fires.
	Store() store.Store
	Logger() *slog.Logger
	// CancelTask cancels a task a schedule started (OverlapCancelOther).
	CancelTask(ctx context.Context, id, message string) (*store.Task, error)
	// Resolve resolves the request of a schedule tool (its owner).
	Resolve(ctx context.Context, req mcp.Request) *Request
}

// Add registers s (see Schedule): its first firing is its first time
// after the moment the engine first sees it (a schedule new to the store
// misses nothing). It may be called before or after Start; registering a
// name again replaces the schedule.
func (h *Schedules) Add(s Schedule) error {
	sc, err := parseSchedule(s)
	if err != nil {
		return err
	}
	h.c.add(sc)
	return nil
}

// ScheduleInfo is a schedule as Schedules.List lists it.
type ScheduleInfo struct {
	Name        string       `json:"name"`
	Cron        string       `json:"cron"`
	TimeZone    string       `json:"timeZone,omitempty"`
	Description string       `json:"description,omitempty"`
	Owner       string       `json:"owner"`
	Missed      MissedPolicy `json:"missed"`
	Backfill    int          `json:"backfill,omitempty"`
	// Overlap is what it does when a time comes while a task it started
	// still runs.
	Overlap OverlapPolicy `json:"overlap"`
	// Paused reports a paused schedule (it fires nothing).
	Paused bool `json:"paused"`
	// Next is its next firing time; zero while paused.
	Next time.Time `json:"next,omitzero"`
	// Last is the latest firing time decided (fired or skipped).
	Last time.Time `json:"last,omitzero"`
	// Fires are its latest fires, newest first.
	Fires []store.Fire `json:"fires,omitempty"`
	// Actions are its history, oldest first.
	Actions []store.ScheduleAction `json:"actions,omitempty"`
}

// infoFires bounds ScheduleInfo.Fires.
const infoFires = 10

// info reads sc's record and latest fires.
func (c *crons) info(ctx context.Context, sc *schedule) (ScheduleInfo, error) {
	now := c.cfg.Now()
	rec, err := c.record(ctx, sc, now)
	if err != nil {
		return ScheduleInfo{}, err
	}
	fires, err := c.e.Store().Fires(ctx, sc.Name, infoFires)
	if err != nil {
		return ScheduleInfo{}, err
	}
	in := ScheduleInfo{Name: sc.Name, Cron: sc.Cron, TimeZone: sc.TimeZone, Description: sc.Description, Owner: sc.Owner,
		Missed: sc.Missed, Backfill: sc.Backfill, Overlap: sc.Overlap, Paused: rec.Paused, Last: rec.Last, Fires: fires, Actions: rec.Actions}
	if !rec.Paused {
		// The time after the last firing, as the round computes it: an
		// @every schedule counts from its last firing, not from now.
		in.Next = sc.next(rec.Last)
		if rec.Last.IsZero() || !in.Next.After(now) {
			in.Next = sc.next(laterOf(rec.Last, now)) // due now, or missed: the next after now
		}
	}
	return in, nil
}

// List lists the registered schedules, in name order, with their state.
func (h *Schedules) List(ctx context.Context) ([]ScheduleInfo, error) {
	var out []ScheduleInfo
	for _, sc := range h.c.schedules() {
		in, err := h.c.info(ctx, sc)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// lookup returns the registered schedule name, or an error matching
// ErrNoSchedule.
func (c *crons) lookup(name string) (*schedule, error) {
	sc := c.get(name)
	if sc == nil {
		var names []string
		for _, s := range c.schedules() {
			names = append(names, fmt.Sprintf("%q", s.Name))
		}
		return nil, fmt.Errorf("%w: %q (the schedules are: %s)", ErrNoSchedule, name, strings.Join(names, ", "))
	}
	return sc, nil
}

// change applies change to schedule name's record and saves it,
// again after a concurrent write (another replica's round).
func (c *crons) change(ctx context.Context, name string, change func(rec *store.ScheduleRecord, now time.Time) []store.Fire) (ScheduleInfo, []store.Fire, error) {
	sc, err := c.lookup(name)
	if err != nil {
		return ScheduleInfo{}, nil, err
	}
	for attempt := 0; ; attempt++ {
		now := c.cfg.Now()
		rec, err := c.record(ctx, sc, now)
		if err != nil {
			return ScheduleInfo{}, nil, err
		}
		rec = store.CloneSchedule(rec)
		fires := change(rec, now)
		_, err = c.e.Store().SaveSchedule(ctx, rec, fires)
		switch {
		case (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrExists)) && attempt < 8:
			continue
		case err != nil:
			return ScheduleInfo{}, nil, err
		}
		c.loop.Poke()
		in, err := c.info(ctx, sc)
		return in, fires, err
	}
}

// Pause pauses schedule name: its times fire nothing until it is resumed.
// by (who) and reason go into its history.
func (h *Schedules) Pause(ctx context.Context, name, by, reason string) (ScheduleInfo, error) {
	in, _, err := h.c.change(ctx, name, func(rec *store.ScheduleRecord, now time.Time) []store.Fire {
		rec.Paused = true
		rec.Actions = append(rec.Actions, store.ScheduleAction{At: now, By: by, Action: "paused", Detail: reason})
		return nil
	})
	return in, err
}

// Resume resumes schedule name: it fires from its next time on; the
// times that passed while it was paused are not fired (its history says
// how many). Resuming a schedule that is not paused changes nothing but
// its history.
func (h *Schedules) Resume(ctx context.Context, name, by string) (ScheduleInfo, error) {
	sc, err := h.c.lookup(name)
	if err != nil {
		return ScheduleInfo{}, err
	}
	in, _, err := h.c.change(ctx, name, func(rec *store.ScheduleRecord, now time.Time) []store.Fire {
		detail := ""
		if rec.Paused {
			if _, n := sc.due(rec.Last, now); n > 0 {
				detail = fmt.Sprintf("%d firing(s) passed while paused, not run", n)
			}
			rec.Last = laterOf(rec.Last, now)
		}
		rec.Paused = false
		rec.Actions = append(rec.Actions, store.ScheduleAction{At: now, By: by, Action: "resumed", Detail: detail})
		return nil
	})
	return in, err
}

// Trigger fires schedule name now, once, outside its times (also while it
// is paused), and starts its task whatever runs (the overlap policy is
// for the schedule's times); it returns the fire (its TaskID names the
// task).
func (h *Schedules) Trigger(ctx context.Context, name, by string) (store.Fire, error) {
	c := h.c
	_, fires, err := c.change(ctx, name, func(rec *store.ScheduleRecord, now time.Time) []store.Fire {
		f := store.Fire{Schedule: name, At: now, TaskID: NewTaskID(), Reason: FireTrigger, By: by}
		rec.Actions = append(rec.Actions, store.ScheduleAction{At: now, By: by, Action: "triggered", Detail: "task " + f.TaskID})
		return []store.Fire{f}
	})
	if err != nil {
		return store.Fire{}, err
	}
	f := fires[0]
	sc, _ := c.lookup(name)
	if err := sc.Start(ctx, f); err != nil {
		return f, fmt.Errorf("taskrouter: schedule %q: the trigger is recorded (its task %s starts in a later round): %w", name, f.TaskID, err)
	}
	if err := c.e.Store().StartFire(ctx, name, f.At); err == nil {
		f.Started = true
		c.signals.Started.Send(f)
	}
	return f, nil
}

// MayManage reports whether requestor q may see, pause, resume and
// trigger schedule name: its owner may. A schedule of LocalOwner (the
// default: the server's own) is managed by a stdio or in-memory client
// (the one local client), not by a stateless anonymous client (every such
// client is LocalOwner: it would be anyone's) nor by a session's. An
// administrator acts through the Go API or the dashboard.
func (h *Schedules) MayManage(q *Request, name string) bool { return h.c.mayManage(q, name) }

func (c *crons) mayManage(q *Request, name string) bool {
	sc := c.get(name)
	if sc == nil || q == nil || q.OwnerErr != nil {
		return false
	}
	return q.Owner == sc.Owner && !q.anonymous()
}
