package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter/internal/service"
)

// Schedules: tasks started at the times of a cron expression. A component
// (the workflow bridge) registers a Schedule with a Start function that
// creates one task; the engine's schedules service decides the firings
// and calls Start. Exactly once, across replicas and restarts: a firing
// is a durable record (store.Fire, keyed by schedule and time) written in
// the same compare-and-swap write of the schedule's record that decides
// it (store.Schedules.SaveSchedule), so of two replicas only one decides a
// time; the record names the task before it exists, and Start creates
// the task with that id, so a start retried after a crash (or run by two
// replicas at once) creates one task. Times the engine did not see while
// it was down (more than MissedAfter late) are missed: the schedule's
// MissedPolicy says which of them still fire; a time that comes while a
// task the schedule started still runs is its OverlapPolicy's to decide
// (schedules_overlap.go). Every decision and every
// operator's action (pause, resume, trigger) is in the schedule's
// history (store.ScheduleRecord.Actions).

// MissedPolicy says what a schedule does with the firings it missed: the
// times that passed while no process ran its schedules (or more than
// Schedule.MissedAfter before one looked).
type MissedPolicy string

// The missed-firing policies.
const (
	// MissedSkip fires none of them (the default): the schedule goes on
	// from its next time.
	MissedSkip MissedPolicy = "skip"
	// MissedRunOnce fires once, for the latest missed time, unless a time
	// is due on time anyway.
	MissedRunOnce MissedPolicy = "run_once"
	// MissedBackfill fires each of the latest Schedule.Backfill missed
	// times, oldest first; older ones are skipped.
	MissedBackfill MissedPolicy = "backfill"
)

// Why a firing happened (store.Fire.Reason).
const (
	FireOnTime   = "on time"
	FireMissed   = "missed, run once"
	FireBackfill = "missed, backfilled"
	FireTrigger  = "triggered"
)

// DefaultMissedAfter is the default Schedule.MissedAfter.
const DefaultMissedAfter = time.Minute

// ErrNoSchedule is matched by the errors about a schedule that is not
// registered.
var ErrNoSchedule = errors.New("taskrouter: no such schedule")

// A Schedule starts a task at each time of a cron expression.
type Schedule struct {
	// Name names the schedule, unique in the router (and in the store:
	// replicas running the same code share its record).
	Name string
	// Cron is the expression: five fields (minute, hour, day of month,
	// month, day of week; robfig/cron's standard parser) or a descriptor
	// (@yearly, @monthly, @weekly, @daily, @hourly, @every 1h30m).
	Cron string
	// TimeZone is the IANA time zone the expression's times are in
	// ("Europe/Berlin"); "" means UTC.
	TimeZone string
	// Missed is what happens to missed firings; "" means MissedSkip.
	Missed MissedPolicy
	// Backfill bounds the missed firings MissedBackfill runs.
	Backfill int
	// MissedAfter is how late a firing may be seen and still count as on
	// time; zero means DefaultMissedAfter.
	MissedAfter time.Duration
	// Overlap is what happens when a time comes while a task the
	// schedule started still runs (schedules_overlap.go); "" means
	// OverlapSkip.
	Overlap OverlapPolicy
	// Owner owns the tasks the schedule starts, and may pause, resume
	// and trigger it (see Schedules.MayManage); "" means
	// LocalOwner.
	Owner string
	// Description says what the schedule does, for listings.
	Description string
	// Start creates the task of fire f: its id is f.TaskID, its
	// scheduled time f.At. It must succeed also when that task exists
	// already (a start retried after a crash, or run by another replica
	// at the same moment): that counts as started. An error is tried
	// again in a later round.
	Start func(ctx context.Context, f store.Fire) error
}

// schedule is a registered Schedule, parsed.
type schedule struct {
	Schedule
	spec cron.Schedule
	loc  *time.Location
}

// cronParser reads standard expressions and descriptors.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseSchedule checks s, naming each field that cannot work.
func parseSchedule(s Schedule) (*schedule, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("taskrouter: schedule %q: "+format, append([]any{s.Name}, args...)...))
	}
	sc := &schedule{Schedule: s, loc: time.UTC}
	if s.Name == "" || len(s.Name) > store.MaxNameBytes {
		bad("Name must be 1 to %d bytes", store.MaxNameBytes)
	}
	if strings.HasPrefix(strings.TrimSpace(s.Cron), "TZ=") || strings.HasPrefix(strings.TrimSpace(s.Cron), "CRON_TZ=") {
		bad("Cron names a time zone: put it in TimeZone")
	} else if spec, err := cronParser.Parse(s.Cron); err != nil {
		bad("Cron %q: %v (five fields: minute hour day-of-month month day-of-week, or @daily, @every 1h, ...)", s.Cron, err)
	} else {
		sc.spec = spec
	}
	if s.TimeZone != "" {
		loc, err := time.LoadLocation(s.TimeZone)
		if err != nil {
			bad("TimeZone %q: %v", s.TimeZone, err)
		} else {
			sc.loc = loc
		}
	}
	switch s.Missed {
	case "":
		sc.Missed = MissedSkip
	case MissedSkip, MissedRunOnce:
	case MissedBackfill:
		if s.Backfill <= 0 {
			bad("MissedBackfill needs Backfill, how many missed firings to run (at least 1)")
		}
	default:
		bad("unknown Missed policy %q: use MissedSkip, MissedRunOnce or MissedBackfill", s.Missed)
	}
	if s.Backfill < 0 {
		bad("Backfill is negative")
	}
	if p, err := parseOverlap(s.Overlap); err != nil {
		bad("%v", err)
	} else {
		sc.Overlap = p
	}
	if s.MissedAfter < 0 {
		bad("MissedAfter is negative")
	} else if s.MissedAfter == 0 {
		sc.MissedAfter = DefaultMissedAfter
	}
	if s.Owner == "" {
		sc.Owner = LocalOwner
	}
	if s.Start == nil {
		bad("Start is nil")
	}
	return sc, errors.Join(errs...)
}

// next is the schedule's first time after t (in UTC).
func (sc *schedule) next(t time.Time) time.Time {
	return sc.spec.Next(t.In(sc.loc)).UTC()
}

// maxDue bounds the due times a round looks at: the newest are kept (a
// schedule of every second down for a week fires at most this many
// backfills and counts the rest as skipped).
const maxDue = 10000

// due lists the schedule's times after last and at or before now, the
// newest maxDue of them, and how many there were in all.
func (sc *schedule) due(last, now time.Time) (times []time.Time, total int) {
	for t := sc.next(last); !t.IsZero() && !t.After(now); t = sc.next(t) {
		total++
		times = append(times, t)
		if len(times) > 2*maxDue {
			times = slices.Clone(times[len(times)-maxDue:])
		}
	}
	if len(times) > maxDue {
		times = times[len(times)-maxDue:]
	}
	return times, total
}

// decide says which of the due times (oldest first, the newest of total)
// fire at now, by the missed policy, and how many are skipped.
func (sc *schedule) decide(times []time.Time, total int, now time.Time) (fires []store.Fire, skipped int) {
	var onTime, missed []time.Time
	for _, t := range times {
		if now.Sub(t) <= sc.MissedAfter {
			onTime = append(onTime, t)
		} else {
			missed = append(missed, t)
		}
	}
	nMissed := total - len(onTime)
	fire := func(t time.Time, why string) {
		fires = append(fires, store.Fire{Schedule: sc.Name, At: t, TaskID: NewTaskID(), Reason: why})
	}
	run := 0
	switch {
	case sc.Missed == MissedRunOnce && len(onTime) == 0 && len(missed) > 0:
		fire(missed[len(missed)-1], FireMissed)
		run = 1
	case sc.Missed == MissedBackfill:
		from := max(0, len(missed)-sc.Backfill)
		for _, t := range missed[from:] {
			fire(t, FireBackfill)
			run++
		}
	}
	for _, t := range onTime {
		fire(t, FireOnTime)
	}
	return fires, nMissed - run
}

// cronConfig configures the schedules service.
type cronConfig struct {
	// Poll is the longest wait between two rounds: a round also reads
	// what other replicas decided (a pause, a trigger).
	Poll time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c cronConfig) withDefaults() cronConfig {
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c cronConfig) validate() error {
	check := service.Check{Service: "schedules"}
	check.Positive("Poll", c.Poll)
	return check.Err()
}

// cronSignals are the schedules service's test signals.
type cronSignals struct {
	// Started: a fire's task was started (or found started) and marked.
	Started service.Signal[store.Fire]
	// Round: a round ended.
	Round service.Signal[time.Time]
}

// crons is the engine's schedules service. Its lock is a leaf: it guards
// the registered schedules only.
type crons struct {
	e       cronEngine
	tools   toolAdder // the schedule tools' (Schedules.AddTools)
	cfg     cronConfig
	loop    service.Loop
	signals cronSignals

	mu    sync.Mutex
	list  map[string]*schedule
	ended map[string]map[string]bool // by schedule: tasks of its recent fires known to have ended (schedules_overlap.go)
}

func newCrons(e cronEngine, tools toolAdder, cfg cronConfig) (*crons, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &crons{e: e, tools: tools, cfg: cfg, list: map[string]*schedule{}, ended: map[string]map[string]bool{}}, nil
}

// Name names the service.
func (c *crons) Name() string { return "schedules" }

// Start starts the loop: a first round at once.
func (c *crons) Start(ctx context.Context) error {
	c.loop.Start(ctx, 0, c.round)
	return nil
}

// Stop ends the loop, after the round in progress.
func (c *crons) Stop() { c.loop.Stop() }

// schedules returns the registered schedules in name order.
func (c *crons) schedules() []*schedule {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*schedule, 0, len(c.list))
	for _, sc := range c.list {
		out = append(out, sc)
	}
	slices.SortFunc(out, func(a, b *schedule) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// add registers sc, replacing a schedule of its name, and starts a round.
func (c *crons) add(sc *schedule) {
	c.mu.Lock()
	c.list[sc.Name] = sc
	c.mu.Unlock()
	c.loop.Poke()
}

// get returns the registered schedule name, or nil.
func (c *crons) get(name string) *schedule {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.list[name]
}

// round runs every schedule's turn and returns the wait until the
// earliest next firing (at most Poll).
func (c *crons) round(ctx context.Context) time.Duration {
	wait := c.cfg.Poll
	for _, sc := range c.schedules() {
		now := c.cfg.Now()
		next := c.turn(ctx, sc, now)
		if !next.IsZero() {
			wait = min(wait, max(0, next.Sub(c.cfg.Now())))
		}
	}
	c.signals.Round.Send(c.cfg.Now())
	return wait
}

// turn is one schedule's part of a round at now: it starts the fires not
// started yet, decides the times due (recording their fires, or the
// skipped ones) and starts those. It returns when the schedule needs
// the next round (zero: no sooner than Poll).
func (c *crons) turn(ctx context.Context, sc *schedule, now time.Time) (next time.Time) {
	log := c.e.Logger()
	defer func() {
		if p := recover(); p != nil {
			log.Error("panic running a schedule", "schedule", sc.Name, "panic", p, "stack", string(debug.Stack()))
			next = now.Add(c.cfg.Poll)
		}
	}()
	rec, err := c.record(ctx, sc, now)
	if err != nil {
		log.Warn("reading a schedule", "schedule", sc.Name, "error", err)
		return time.Time{}
	}
	retry := c.startPending(ctx, sc)
	if rec.Paused {
		return retry
	}
	times, total := sc.due(rec.Last, now)
	if total == 0 {
		return earliestOf(retry, sc.next(laterOf(rec.Last, now)))
	}
	fires, skipped := sc.decide(times, total, now)
	nr := store.CloneSchedule(rec)
	nr.Last = times[len(times)-1]
	if skipped > 0 {
		nr.Actions = append(nr.Actions, store.ScheduleAction{At: now, By: "engine", Action: "skipped",
			Detail: fmt.Sprintf("%d missed firing(s) up to %s not run (policy %s)", skipped, stamp(missedUpTo(times, fires, nr.Last)), sc.Missed)})
	}
	if len(fires) > 0 && sc.Overlap != OverlapAllowAll {
		a, err := c.look(ctx, sc, true)
		if err != nil {
			log.Warn("reading a schedule's running tasks", "schedule", sc.Name, "error", err)
			return time.Time{}
		}
		var over []time.Time
		if fires, over = sc.overlap(fires, a); len(over) > 0 {
			nr.Actions = append(nr.Actions, store.ScheduleAction{At: now, By: "engine", Action: "skipped", Detail: sc.overlapDetail(over, a)})
		}
	}
	switch _, err := c.e.Store().SaveSchedule(ctx, nr, fires); {
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrExists):
		return now // another replica decided meanwhile: read again
	case err != nil:
		log.Warn("recording a schedule's firings", "schedule", sc.Name, "error", err)
		return time.Time{}
	}
	for _, f := range fires {
		log.Info("schedule fired", "schedule", sc.Name, "at", f.At, "task", f.TaskID, "reason", f.Reason)
	}
	return earliestOf(c.startPending(ctx, sc), sc.next(laterOf(nr.Last, now)))
}

// missedUpTo is the latest time the skipped firings reached.
func missedUpTo(times []time.Time, fires []store.Fire, last time.Time) time.Time {
	fired := map[time.Time]bool{}
	for _, f := range fires {
		fired[f.At] = true
	}
	for i := len(times) - 1; i >= 0; i-- {
		if !fired[times[i]] {
			return times[i]
		}
	}
	return last
}

// record reads the schedule's record, creating it at its first
// registration: nothing before now is missed.
func (c *crons) record(ctx context.Context, sc *schedule, now time.Time) (*store.ScheduleRecord, error) {
	rec, err := c.e.Store().Schedule(ctx, sc.Name)
	if !errors.Is(err, store.ErrNotFound) {
		return rec, err
	}
	rec, err = c.e.Store().SaveSchedule(ctx, &store.ScheduleRecord{Name: sc.Name, Last: now,
		Actions: []store.ScheduleAction{{At: now, By: "engine", Action: "registered", Detail: sc.describe()}}}, nil)
	if errors.Is(err, store.ErrExists) {
		return c.e.Store().Schedule(ctx, sc.Name)
	}
	return rec, err
}

// describe says what the schedule is, for its history.
func (sc *schedule) describe() string {
	tz := sc.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	return fmt.Sprintf("%s (%s), missed firings: %s, overlap: %s", sc.Cron, tz, sc.missedText(), sc.Overlap)
}

func (sc *schedule) missedText() string {
	if sc.Missed == MissedBackfill {
		return fmt.Sprintf("backfill the latest %d", sc.Backfill)
	}
	return string(sc.Missed)
}

// pendingFires bounds the recent fires a round looks at for ones not
// started.
const pendingFires = 50

// look reads what of sc's latest fires waits to start and, when the
// overlap policy needs it, what runs: for a decision (decide), or for
// starting the fires that wait (before).
func (c *crons) look(ctx context.Context, sc *schedule, decide bool) (activity, error) {
	fires, err := c.e.Store().Fires(ctx, sc.Name, pendingFires)
	if err != nil {
		return activity{}, err
	}
	var a activity
	for i := len(fires) - 1; i >= 0; i-- {
		if !fires[i].Started {
			a.pending = append(a.pending, fires[i])
		}
	}
	switch {
	case sc.Overlap == OverlapAllowAll, !decide && (len(a.pending) == 0 || sc.Overlap == OverlapSkip):
		return a, nil
	}
	a.running, err = c.running(ctx, sc.Name, fires)
	return a, err
}

// startPending starts the schedule's fires that are not started yet,
// oldest first, and marks them; by the overlap policy, a fire first
// cancels the tasks before it, or waits for them to end. It returns when
// to look again: a start that failed is tried again, a fire that waits
// looks again within holdPoll (zero: none).
func (c *crons) startPending(ctx context.Context, sc *schedule) time.Time {
	a, err := c.look(ctx, sc, false)
	if err != nil {
		c.e.Logger().Warn("reading a schedule's fires", "schedule", sc.Name, "error", err)
		return c.cfg.Now().Add(c.cfg.Poll)
	}
	var retry time.Time
	for _, f := range a.pending {
		if c.before(ctx, sc, f, a) {
			retry = earliestOf(retry, c.cfg.Now().Add(min(c.cfg.Poll, holdPoll)))
			continue // it waits for the task before it to end
		}
		if err := sc.Start(ctx, f); err != nil {
			c.e.Logger().Warn("starting a schedule's task; trying again", "schedule", sc.Name, "at", f.At, "task", f.TaskID, "error", err)
			retry = earliestOf(retry, c.cfg.Now().Add(min(c.cfg.Poll, 5*time.Second)))
			continue
		}
		if err := c.e.Store().StartFire(ctx, sc.Name, f.At); err != nil {
			c.e.Logger().Warn("marking a schedule's fire started", "schedule", sc.Name, "at", f.At, "error", err)
			continue
		}
		f.Started = true
		a.running = append([]store.Fire{f}, a.running...)
		c.signals.Started.Send(f)
	}
	return retry
}

func earliestOf(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
