package client

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
)

// TaskEvent is one event of a task's event log, as tasks/stream delivers
// it: a status change, a step's attempt starting or ending, progress, a
// log line, partial output, a request for input (the types and payloads
// of mcptask/events.go), or a marker for events the server's log dropped
// before they were read (mcptask.EventDropped).
type TaskEvent struct {
	// TaskID names the task.
	TaskID string
	// Seq numbers the event in the task's log (1, 2, 3, ...; a dropped
	// marker carries the number of the last event it stands for).
	Seq uint64
	// Type is the event's type: taskbridge's words without their vendor
	// prefix (mcptask.EventProgress, ...), another vendor's types whole.
	Type mcptask.EventType
	// At is when the event happened, when the server says.
	At time.Time
	// Data is the event's payload (for taskbridge's types, the matching
	// mcptask payload struct).
	Data json.RawMessage
}

// Line renders the event as one line a person reads (mcptask.EventLine):
// "build: 3/4 (75%) compiling", "info: wrote a section", "step build
// failed: ...".
func (e TaskEvent) Line() string { return mcptask.EventLine(e.Type, e.Data) }

// Report reports whether the event is something the task's work said
// while it ran (progress, a log line, partial output), as opposed to the
// engine's own record of it (statuses, step attempts, input requests).
func (e TaskEvent) Report() bool {
	return e.Type == mcptask.EventProgress || e.Type == mcptask.EventLog || e.Type == mcptask.EventOutput
}

// StreamOptions configure StreamEvents.
type StreamOptions struct {
	// After is the sequence number of the last event the caller has: the
	// stream starts with the next one (zero: with the oldest the server
	// keeps).
	After uint64
}

// defaultStreamBuffer is Options.StreamBuffer's default.
const defaultStreamBuffer = 1024

// StreamEvents reads task id's events as they happen (tasks/stream,
// SEP-2694's draft, which taskbridge servers serve in both dialects): the
// events after opts.After, oldest first, each once, then new ones live,
// until the task has ended and its last event was yielded (the sequence
// ends without an error). A failure ends it with an error: an *RPCError
// (ErrNotFound for a task the caller may not see), ctx.Err(), or the
// connection's error. To resume after a failure (over a new connection,
// say), call it again with After set to the last Seq yielded.
//
// A consumer slower than the events does not slow the server: the client
// buffers Options.StreamBuffer of them and, past that, asks the server
// again from the last one consumed; where the server's log itself dropped
// events before they were read, the sequence holds one mcptask.EventDropped
// marker (mcptask.DroppedEvent) for them.
func (c *Client) StreamEvents(ctx context.Context, id string, opts *StreamOptions) iter.Seq2[TaskEvent, error] {
	var o StreamOptions
	if opts != nil {
		o = *opts
	}
	return func(yield func(TaskEvent, error) bool) {
		after := o.After
		for {
			more, err := c.streamOnce(ctx, id, &after, yield)
			switch {
			case err != nil:
				yield(TaskEvent{}, err)
				return
			case !more:
				return
			}
		}
	}
}

// streamOnce runs one tasks/stream from *after on, yielding its events
// and moving *after along. It reports more when the stream must start
// over (the buffer overflowed), false when the task ended or the consumer
// stopped.
func (c *Client) streamOnce(ctx context.Context, id string, after *uint64, yield func(TaskEvent, error) bool) (more bool, err error) {
	sub := c.subscribeEvents(id)
	defer c.unsubscribeEvents(id, sub)
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.call(callCtx, mcptask.MethodTasksStream, map[string]any{"taskId": id, "after": *after})
		done <- err
	}()
	take := func(ev TaskEvent) bool {
		if !sub.accepts(ev, *after) {
			return true // another stream's event (same task, same client)
		}
		*after = ev.Seq
		return yield(ev, nil)
	}
	for {
		select {
		case ev := <-sub.ch:
			if !take(ev) {
				return false, nil
			}
		case <-sub.overflow:
			cancel()
			<-done
			return true, nil // start over from the last event consumed
		case err := <-done:
			for { // the events that came before the result
				select {
				case ev := <-sub.ch:
					if !take(ev) {
						return false, nil
					}
					continue
				default:
				}
				break
			}
			if err == nil && sub.overflowed() {
				return true, nil
			}
			return false, err
		}
	}
}

// eventSub is one stream's share of a task's event notifications.
type eventSub struct {
	ch       chan TaskEvent
	overflow chan struct{} // closed when ch was full
	once     sync.Once
}

// accepts reports whether ev continues a stream that has every event up
// to after: the next number, or a dropped marker standing for the events
// right after it. Notifications of another stream of the same task on
// the same connection do not (they are for another position).
func (s *eventSub) accepts(ev TaskEvent, after uint64) bool {
	if ev.Type == mcptask.EventDropped {
		var d mcptask.DroppedEvent
		return json.Unmarshal(ev.Data, &d) == nil && ev.Seq > after && ev.Seq-d.Count == after
	}
	return ev.Seq == after+1
}

func (s *eventSub) overflowed() bool {
	select {
	case <-s.overflow:
		return true
	default:
		return false
	}
}

// subscribeEvents routes task id's event notifications to a new
// subscription.
func (c *Client) subscribeEvents(id string) *eventSub {
	s := &eventSub{ch: make(chan TaskEvent, c.opts.StreamBuffer), overflow: make(chan struct{})}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.eventSubs == nil {
		c.eventSubs = map[string][]*eventSub{}
	}
	c.eventSubs[id] = append(c.eventSubs[id], s)
	return s
}

func (c *Client) unsubscribeEvents(id string, s *eventSub) {
	c.mu.Lock()
	defer c.mu.Unlock()
	subs := c.eventSubs[id]
	for i, x := range subs {
		if x == s {
			subs = append(subs[:i], subs[i+1:]...)
			break
		}
	}
	if len(subs) == 0 {
		delete(c.eventSubs, id)
	} else {
		c.eventSubs[id] = subs
	}
}

// onTaskEvent delivers a notifications/tasks/event (on the read loop: it
// never blocks; a full subscription overflows instead).
func (c *Client) onTaskEvent(params json.RawMessage) {
	var p mcptask.TaskEventParams
	if err := json.Unmarshal(params, &p); err != nil || p.TaskID == "" {
		c.log.Debug("ignoring malformed task event notification", "error", err)
		return
	}
	ev := TaskEvent{TaskID: p.TaskID, Seq: p.Seq, Type: mcptask.EventTypeOf(p.Type), Data: p.Data}
	if at, ok := p.Meta[mcptask.MetaEventAt].(string); ok {
		ev.At, _ = time.Parse(time.RFC3339Nano, at)
	}
	c.mu.Lock()
	subs := c.eventSubs[p.TaskID]
	c.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- ev:
		default:
			s.once.Do(func() { close(s.overflow) })
		}
	}
}

// followEvents passes task id's events to fn from a goroutine of its own,
// from the first, until the task has ended or stop is called; stop waits
// at most wait for the events still to come (the task's last ones, when
// it has just ended), then ends the stream and returns once fn is no
// longer called.
func (c *Client) followEvents(ctx context.Context, id string, fn func(TaskEvent)) (stop func(wait time.Duration)) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range c.StreamEvents(ctx, id, nil) {
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					c.log.Debug("following a task's events", "task", id, "error", err)
				}
				return
			}
			fn(ev)
		}
	}()
	return func(wait time.Duration) {
		select {
		case <-done:
		case <-time.After(wait):
		}
		cancel()
		<-done
	}
}
