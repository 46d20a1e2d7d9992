package taskrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The write side of task event logs (the store keeps them; stream.go
// reads them): what a task's work reports while it runs. A tool handler
// running as a task, or a step tool the workflow bridge runs through
// RunTool with a context from Track, reports progress (Progress, or
// go-sdk's req.Session.NotifyProgress), log lines (Logger, or
// req.Session.Log) and partial output (Output); they become events of
// the task.
//
// None of them writes the task's state, and none makes the handler wait
// for a store write: an event joins the task's pending events (its
// eventSink), which are written as one pure append (store.Update with
// Events only) at most once per EventInterval per task — the first a few
// milliseconds after it was reported (firstFlushDelay), later ones at the
// end of the interval — or, sooner, in the same write as the task's next
// state change (Router.Update takes them), so that the events a handler
// reported before it returned come before its outcome, and a step that
// ends at once costs no write of its own for them. Progress is coalesced: of the progress reports of one step
// made within an interval only the latest is kept. At most
// maxPendingEvents wait; beyond that the oldest waiting log line or output
// is dropped, and the next write says how many were.

// EventInterval is the least time between two writes of a task's
// reported events (see Progress): a handler that reports progress a
// thousand times a second costs the store ten pure appends a second,
// each holding the latest progress and the log lines since the last one.
const EventInterval = 100 * time.Millisecond

// maxPendingEvents bounds the events waiting for one task's next write.
const maxPendingEvents = 64

// firstFlushDelay is how long the first report of an idle task waits for
// its write: a step or handler that ends within it has its reports
// written with its outcome, in one store write instead of two.
const firstFlushDelay = 3 * time.Millisecond

// Bounds of what one reported event carries, well inside the store's
// default event size (store.DefaultMaxEventBytes).
const (
	maxEventText  = 4 << 10 // a progress message or a log line, in bytes
	maxEventAttrs = 8 << 10 // a log line's attributes, as JSON
	// MaxOutputBytes bounds the JSON of one Output.
	MaxOutputBytes = 48 << 10
)

// ErrNoTask is returned by Progress and Output called with a context
// that belongs to no task (neither a task handler's nor one from Track).
var ErrNoTask = errors.New("taskrouter: the context belongs to no task")

// trackKey carries the task of work registered with Track.
type trackKey struct{}

// trackedTask is the task of work registered with Track.
type trackedTask struct {
	sinks *eventSinks
	id    string
}

// eventStepKey carries the name WithEventStep gives a context.
type eventStepKey struct{}

// WithEventStep returns ctx whose reported events (Progress, Logger,
// Output, notifications/progress) name step as the workflow step that
// reported them. The workflow bridge gives a step's tool call such a
// context.
func WithEventStep(ctx context.Context, step string) context.Context {
	return context.WithValue(ctx, eventStepKey{}, step)
}

// eventTarget is where the events reported through a context go.
type eventTarget struct {
	sinks *eventSinks
	id    string
	fence *store.Fence // a handler run's lease; nil for tracked work
	step  string
}

// targetOf returns the task the events reported through ctx belong to:
// the innermost work registered with Track, or the task handler ctx runs.
func targetOf(ctx context.Context) (eventTarget, bool) {
	step, _ := ctx.Value(eventStepKey{}).(string)
	if tt, ok := ctx.Value(trackKey{}).(*trackedTask); ok {
		return eventTarget{sinks: tt.sinks, id: tt.id, step: step}, true
	}
	ru := runOf(ctx)
	if ru == nil {
		return eventTarget{}, false
	}
	return runTarget(ru, step)
}

// runTarget is the target of the events a handler run reports. The task
// must exist before its events: a run still pending (an instant task in
// the making) is made real first, so a handler that reports is no
// instant task.
func runTarget(ru *run, step string) (eventTarget, bool) {
	if ru.pending != nil {
		if _, err := ru.materialize(); err != nil {
			return eventTarget{}, false
		}
	}
	return eventTarget{sinks: &ru.r.sinks, id: ru.id, fence: ru.fenceOf(), step: step}, true
}

// Progress reports the progress of the task ctx belongs to (a task
// handler's context, or one from Track, such as a workflow server step's):
// done of total (total 0 when unknown) and what is happening. It becomes
// an mcptask.EventProgress event of the task's log, which tasks/stream
// readers see at once; reports closer together than EventInterval are
// coalesced (the latest kept). It never waits for the store. Outside a
// task it returns ErrNoTask.
func Progress(ctx context.Context, done, total float64, message string) error {
	tg, ok := targetOf(ctx)
	if !ok {
		return ErrNoTask
	}
	tg.report(mcptask.EventProgress, mcptask.ProgressEvent{Progress: done, Total: total, Message: clip(message, maxEventText), Step: tg.step})
	return nil
}

// Output publishes partial output of the task ctx belongs to: v, any JSON
// value (MCP content blocks, say; at most MaxOutputBytes encoded), becomes
// an mcptask.EventOutput event of its log. Outside a task it returns
// ErrNoTask.
func Output(ctx context.Context, v any) error {
	tg, ok := targetOf(ctx)
	if !ok {
		return ErrNoTask
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("taskrouter: encoding output: %w", err)
	}
	if len(raw) > MaxOutputBytes {
		return fmt.Errorf("taskrouter: output of %d bytes is larger than an event may carry (%d): put it in the result", len(raw), MaxOutputBytes)
	}
	tg.report(mcptask.EventOutput, mcptask.OutputEvent{Step: tg.step, Output: raw})
	return nil
}

// Logger returns a logger whose records (Info and above) become
// mcptask.EventLog events of the task ctx belongs to, with their
// attributes (groups nested) as a JSON object. Outside a task its records
// go nowhere. Asking for the logger writes nothing: a quick handler that
// takes it but logs nothing stays an instant task (its outcome folded
// into the commit that creates it); its first record makes the task real.
func Logger(ctx context.Context) *slog.Logger {
	if _, tracked := ctx.Value(trackKey{}).(*trackedTask); !tracked {
		if ru := runOf(ctx); ru != nil && ru.pending != nil {
			step, _ := ctx.Value(eventStepKey{}).(string)
			return slog.New(&eventHandler{late: &lateTarget{ru: ru, step: step}})
		}
	}
	tg, ok := targetOf(ctx)
	if !ok {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(&eventHandler{tg: tg})
}

// lateTarget is the target of a pending run's logger, resolved (the
// task made real) at its first record.
type lateTarget struct {
	ru   *run
	step string

	once sync.Once
	tg   eventTarget
	ok   bool
}

// target resolves the target once.
func (l *lateTarget) target() (eventTarget, bool) {
	l.once.Do(func() { l.tg, l.ok = runTarget(l.ru, l.step) })
	return l.tg, l.ok
}

// report makes an event of payload and adds it to the task's pending
// events.
func (tg eventTarget) report(typ mcptask.EventType, payload any) {
	data, err := json.Marshal(payload)
	if err != nil {
		return // the payloads are the mcptask structs: they encode
	}
	e := store.Event{At: tg.sinks.now(), Type: typ, Data: data}
	step := ""
	if typ == mcptask.EventProgress {
		step = tg.step
	}
	tg.sinks.add(tg.id, tg.fence, pendingEvent{Event: e, progress: typ == mcptask.EventProgress, step: step})
}

// clip cuts s to at most n bytes, on a rune boundary, ending in "…".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// ---- the pending events of each task ----

// eventSinks are the tasks with reported events waiting to be written,
// by task id. Its lock is a leaf.
type eventSinks struct {
	// What the sinks write with, set once by NewRouter: the store, its
	// log, the engine's clock, and the readers of the events written.
	st      store.Store
	log     *slog.Logger
	now     func() time.Time
	readers *streams

	mu     sync.Mutex
	byTask map[string]*eventSink
}

// pendingEvent is an event waiting to be written.
type pendingEvent struct {
	store.Event
	progress bool   // a progress report: coalesced with the step's others
	step     string // the step of a progress report
}

// eventSink is one task's events waiting to be written. mu guards its
// fields and is a leaf. turn is held (a token in a channel of one) by
// whoever writes the sink's events to the store, a flush or a state write
// taking them, so that events reach the log in the order they were
// reported; it is taken without holding any lock, and only for one store
// write.
type eventSink struct {
	id   string
	turn chan struct{}

	mu      sync.Mutex
	pending []pendingEvent
	dropped int          // events dropped since the last write (maxPendingEvents)
	fence   *store.Fence // the lease of the handler run reporting, if any
	armed   bool         // a flush is scheduled
	retired bool         // removed from eventSinks: add to a new sink
}

// sink returns the sink of task id, made if needed.
func (ss *eventSinks) sink(id string) *eventSink {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.byTask[id]
	if s == nil {
		if ss.byTask == nil {
			ss.byTask = map[string]*eventSink{}
		}
		s = &eventSink{id: id, turn: make(chan struct{}, 1)}
		ss.byTask[id] = s
	}
	return s
}

// lookup returns the sink of task id, or nil.
func (ss *eventSinks) lookup(id string) *eventSink {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.byTask[id]
}

// retire removes s, which idled a whole interval.
func (ss *eventSinks) retire(s *eventSink) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.byTask[s.id] == s {
		delete(ss.byTask, s.id)
	}
}

// add queues e for task id and schedules its write: after
// firstFlushDelay when the task's events were last written an interval ago
// or more (or never), otherwise at the end of the interval.
func (ss *eventSinks) add(id string, fence *store.Fence, e pendingEvent) {
	for {
		s := ss.sink(id)
		s.mu.Lock()
		if s.retired {
			s.mu.Unlock()
			ss.retire(s) // retired meanwhile (its flush may not have removed it yet)
			continue     // the next round makes a new one
		}
		s.queue(e)
		if fence != nil {
			s.fence = fence
		}
		if !s.armed {
			s.armed = true
			// The first write of an idle task: in a moment, so that work
			// that ends at once carries its reports in its outcome's write.
			time.AfterFunc(firstFlushDelay, func() { ss.flush(s) })
		}
		s.mu.Unlock()
		return
	}
}

// queue adds e to the pending events. Call with mu held.
func (s *eventSink) queue(e pendingEvent) {
	if e.progress {
		for i, p := range s.pending {
			if p.progress && p.step == e.step {
				s.pending = append(s.pending[:i], s.pending[i+1:]...) // the latest report stands
				break
			}
		}
	}
	if len(s.pending) >= maxPendingEvents {
		for i, p := range s.pending {
			if !p.progress {
				s.pending = append(s.pending[:i], s.pending[i+1:]...)
				s.dropped++
				break
			}
		}
	}
	s.pending = append(s.pending, e)
}

// take returns the pending events as a write carries them (with a note of
// the dropped ones), emptying the sink. Call with mu held.
func (s *eventSink) take(now time.Time) []store.Event {
	if len(s.pending) == 0 && s.dropped == 0 {
		return nil
	}
	out := make([]store.Event, 0, len(s.pending)+1)
	if s.dropped > 0 {
		data, _ := json.Marshal(mcptask.LogEvent{Level: "warn", Message: fmt.Sprintf(
			"taskrouter: %d reported events dropped: more than %d within %s", s.dropped, maxPendingEvents, EventInterval)})
		out = append(out, store.Event{At: now, Type: mcptask.EventLog, Data: data})
		s.dropped = 0
	}
	for _, p := range s.pending {
		out = append(out, p.Event)
	}
	s.pending = s.pending[:0]
	return out
}

// flush writes sink s's pending events as one pure append, then waits an
// interval before the next write, which the events reported meanwhile
// wait for; a sink that stayed empty for that interval retires.
func (ss *eventSinks) flush(s *eventSink) {
	s.turn <- struct{}{}
	s.mu.Lock()
	batch := s.take(ss.now())
	fence := s.fence
	if len(batch) == 0 {
		s.retired, s.armed = true, false
		s.mu.Unlock()
		ss.retire(s)
		<-s.turn
		return
	}
	s.mu.Unlock()
	started := time.Now()
	ss.append(s.id, batch, fence)
	<-s.turn
	time.AfterFunc(EventInterval-time.Since(started), func() { ss.flush(s) }) // one write per interval, start to start
}

// takePending takes task id's pending events for a state write about to
// be made (Router.Update), so that they go to the log in that write,
// before the events the write reports itself. The caller must call
// release once the write returned, with whether it stored them (events
// not stored wait for the next write).
func (ss *eventSinks) takePending(ctx context.Context, id string) (events []store.Event, release func(stored bool)) {
	s := ss.lookup(id)
	if s == nil {
		return nil, func(bool) {}
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, func(bool) {}
	}
	s.mu.Lock()
	events = s.take(ss.now())
	s.mu.Unlock()
	return events, func(stored bool) {
		if !stored && len(events) > 0 {
			s.mu.Lock()
			back := make([]pendingEvent, 0, len(events)+len(s.pending))
			for _, e := range events {
				back = append(back, pendingEvent{Event: e})
			}
			s.pending = append(back, s.pending...)
			if len(s.pending) > maxPendingEvents {
				s.dropped += len(s.pending) - maxPendingEvents
				s.pending = s.pending[len(s.pending)-maxPendingEvents:]
			}
			s.mu.Unlock()
		}
		<-s.turn
	}
}

// updateWithPending is the store write of Router.Update: u with task
// id's pending events before its own (see takePending). When the store
// refuses a write that carries events as too large or invalid (an event
// over a store's smaller MaxEventBytes, say), the write is made again
// without its events: an event must not cost the task a state change.
func (ss *eventSinks) updateWithPending(ctx context.Context, id string, u store.Update) (*store.Task, error) {
	pending, release := ss.takePending(ctx, id)
	if len(pending) > 0 {
		u.Events = append(pending, u.Events...)
	}
	t, err := ss.st.Update(ctx, id, u)
	if len(u.Events) > 0 && !u.AppendOnly() && (errors.Is(err, store.ErrTooLarge) || errors.Is(err, store.ErrInvalid)) {
		if t2, err2 := ss.st.Update(ctx, id, store.Update(withoutEvents(u))); err2 == nil {
			ss.log.Warn("wrote a task's state without the events the store refused", "task", id, "events", len(u.Events), "error", err)
			t, err = t2, nil
			pending = nil // dropped with the others
		}
	}
	release(err == nil || len(pending) == 0)
	return t, err
}

// withoutEvents is u without its events.
func withoutEvents(u store.Update) store.Update {
	u.Events = nil
	return u
}

// append writes events to task id's log as one pure append, fenced by a
// handler run's lease. Events the store refuses (too large for its
// limits, say) are dropped one by one rather than with the rest; a task
// that ended (or whose lease moved) takes none.
func (ss *eventSinks) append(id string, events []store.Event, fence *store.Fence) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := ss.st.Update(ctx, id, store.Update{Events: events, Fence: fence})
	if (errors.Is(err, store.ErrTooLarge) || errors.Is(err, store.ErrInvalid)) && len(events) > 1 {
		for _, e := range events {
			ss.append(id, []store.Event{e}, fence)
		}
		return
	}
	switch {
	case err == nil:
		ss.readers.notify(id)
	case errors.Is(err, store.ErrTerminal), errors.Is(err, store.ErrFenced), errors.Is(err, store.ErrNotFound):
		ss.log.Debug("not writing reported events: the task ended or moved", "task", id, "events", len(events))
	default:
		ss.log.Warn("writing reported events", "task", id, "events", len(events), "error", err)
	}
}

// inputRequestEvents are the events of a task's request for client input:
// one mcptask.EventInputRequest, in the write that parks the task.
func inputRequestEvents(now time.Time, in *pendingInput) []store.Event {
	data, err := json.Marshal(mcptask.InputRequestEvent{InputRequests: map[string]json.RawMessage{in.key: in.wire()}})
	if err != nil || len(data) > store.DefaultMaxEventBytes/2 {
		return nil // an oversized request is shown by tasks/get, not by the log
	}
	return []store.Event{{At: now, Type: mcptask.EventInputRequest, Data: data}}
}
