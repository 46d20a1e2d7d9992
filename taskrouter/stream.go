package taskrouter

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The read side of task event logs: readers that follow a task's events
// from a sequence number on, live (Router.Streams: Streams.Events), and
// tasks/stream, which puts them on the wire (streamwire.go); and the
// followers of a task's status (subscriptions/listen, listen.go).
//
// A reader never holds the engine up. Writers only signal: every write of
// this process that appends events (Router.Update, reported events'
// appends) and, on a shared store, every append another process announces
// (store.EventNotifier, through the change feed) wakes the task's feed,
// without waiting. The feed (one per task with readers) reads what is new
// from the store once for all its readers and keeps the latest feedCap
// events; a reader that fell further behind reads the store itself, and
// one that fell behind the log's caps gets an mcptask.EventDropped marker
// and goes on from the oldest event kept. So what a slow reader costs is
// its own goroutine and, at most, a page of the store's events.

// Streams is the handle of the readers of task events (Router.Streams):
// a task's event log, from a sequence number on, live.
type Streams struct{ s *streaming }

// streamEngine is what the streams of a task's life need of the engine;
// *Router has it.
type streamEngine interface {
	// Store holds the tasks and their event logs.
	Store() store.Store
	Logger() *slog.Logger
	Now() time.Time
	// Resolve resolves a request the shims serve below the SDK
	// (tasks/stream, subscriptions/listen).
	Resolve(ctx context.Context, req mcp.Request) *Request
	// TaskFor reads a task as requestor q may.
	TaskFor(ctx context.Context, q *Request, id string) (*store.Task, error)
	// load reads the task a tasks/* request names, as TaskFor does, and
	// tells its kind that a client named it.
	load(ctx context.Context, q *Request, id string) (*store.Task, error)
}

// streaming serves the streams of a task's life: the readers of its
// events (Streams, tasks/stream) and the followers of its status
// (subscriptions/listen). The feeds and listeners are parts of their
// own, with their own locks, that the engine's writes signal.
type streaming struct {
	e         streamEngine
	feeds     *streams
	listeners *listeners
	poll      time.Duration // the re-read of a shared store (pollTick); 0: none
	// inputs are where a task's input requests are, which a listen
	// notification carries as tasks/get does (getReply).
	inputs pendingInputs
}

// feedCap is the number of recent events a task's feed keeps for its
// readers.
const feedCap = 256

// streams are the task feeds of this process's readers, by task id. Its
// lock is a leaf.
type streams struct {
	mu     sync.Mutex
	byTask map[string]*taskFeed
	done   chan struct{} // closed by closeAll
	closed bool
}

// taskFeed is one task's events as its readers in this process share
// them. mu guards the fields below it and is a leaf; fetch is a token (a
// channel of one) held by the one reader reading the store for all.
type taskFeed struct {
	id    string
	refs  int // readers; guarded by streams.mu
	fetch chan struct{}

	mu      sync.Mutex
	events  []store.Event // the latest events read, contiguous, oldest first
	last    uint64        // Seq of the newest event read; 0 when none
	gen     uint64        // signals received
	fetched uint64        // gen when the last read of the store began
	read    bool          // the store was read at least once
	wake    chan struct{} // closed at the next signal
}

// join returns task id's feed, counting a reader; nil once the router is
// closing.
func (s *streams) join(id string) *taskFeed {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	f := s.byTask[id]
	if f == nil {
		if s.byTask == nil {
			s.byTask = map[string]*taskFeed{}
		}
		f = &taskFeed{id: id, fetch: make(chan struct{}, 1), wake: make(chan struct{})}
		s.byTask[id] = f
	}
	f.refs++
	return f
}

// leave uncounts a reader of f; the last one forgets the feed.
func (s *streams) leave(f *taskFeed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.refs--
	if f.refs == 0 && s.byTask[f.id] == f {
		delete(s.byTask, f.id)
	}
}

// notify tells the readers of task id that its log may have grown.
func (s *streams) notify(id string) {
	s.mu.Lock()
	f := s.byTask[id]
	s.mu.Unlock()
	if f != nil {
		f.signal()
	}
}

// notifyAll tells every reader to read again (a change feed that lost its
// connection may have missed appends).
func (s *streams) notifyAll() {
	s.mu.Lock()
	feeds := make([]*taskFeed, 0, len(s.byTask))
	for _, f := range s.byTask {
		feeds = append(feeds, f)
	}
	s.mu.Unlock()
	for _, f := range feeds {
		f.signal()
	}
}

// doneChan is closed when the router closes.
func (s *streams) doneChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		s.done = make(chan struct{})
	}
	return s.done
}

// closeAll ends every reader (the router is closing).
func (s *streams) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if s.done == nil {
		s.done = make(chan struct{})
	}
	close(s.done)
}

// signal marks the feed stale and wakes its readers.
func (f *taskFeed) signal() {
	f.mu.Lock()
	f.gen++
	close(f.wake)
	f.wake = make(chan struct{})
	f.mu.Unlock()
}

// wakeChan is closed at the feed's next signal.
func (f *taskFeed) wakeChan() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wake
}

// next returns the events after after: from the feed when it has them,
// after reading the store once for every reader when it is stale, or from
// the store for this reader alone when after is older than what the feed
// keeps. dropped counts the events after after that the log dropped (the
// first event returned, or the next one written, is then firstKept).
func (f *taskFeed) next(ctx context.Context, st store.Store, after uint64, fresh bool) (evs []store.Event, dropped, firstKept uint64, err error) {
	for range 3 {
		f.mu.Lock()
		stale := fresh || !f.read || f.gen != f.fetched
		switch {
		case stale:
		case after >= f.last:
			f.mu.Unlock()
			return nil, 0, 0, nil // caught up
		case len(f.events) > 0 && after+1 >= f.events[0].Seq:
			evs = slices.Clone(f.events[after+1-f.events[0].Seq:])
			f.mu.Unlock()
			return evs, 0, 0, nil
		default:
			f.mu.Unlock()
			page, err := st.Events(ctx, f.id, after, store.MaxPageSize)
			return page.Events, page.Dropped, page.First, err
		}
		f.mu.Unlock()
		if err := f.refresh(ctx, st, fresh); err != nil {
			return nil, 0, 0, err
		}
		fresh = false
	}
	page, err := st.Events(ctx, f.id, after, store.MaxPageSize) // signalled all along: read alone
	return page.Events, page.Dropped, page.First, err
}

// refresh reads the task's new events from the store into the feed, once
// for every reader waiting: a reader that finds another reading waits
// for it and, unless force, takes its read.
func (f *taskFeed) refresh(ctx context.Context, st store.Store, force bool) error {
	select {
	case f.fetch <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-f.fetch }()
	f.mu.Lock()
	gen, last := f.gen, f.last
	if f.read && f.fetched == gen && !force {
		f.mu.Unlock()
		return nil // read by another reader meanwhile
	}
	f.mu.Unlock()
	page, err := st.Events(ctx, f.id, last, store.MaxPageSize)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if page.Dropped > 0 || (len(f.events) > 0 && len(page.Events) > 0 && page.Events[0].Seq != f.last+1) {
		f.events = nil // the log moved past what the feed kept
	}
	f.events = append(f.events, page.Events...)
	if n := len(f.events); n > feedCap {
		f.events = slices.Clone(f.events[n-feedCap:])
	}
	if n := len(f.events); n > 0 {
		f.last = f.events[n-1].Seq
	} else if page.Last > f.last {
		f.last = page.Last
	}
	f.fetched, f.read = gen, true
	return nil
}

// Events passes fn the events of task id's log with a sequence number
// after after, oldest first, as they are written, whoever owns the task
// (for an operator's view; EventsFor checks the owner). Where
// the log dropped events before they were read (it keeps the latest,
// store.Limits), fn gets one mcptask.EventDropped event instead
// (mcptask.DroppedEvent), numbered like the last event it stands for, and
// then the oldest event kept.
//
// It returns nil after passing the task's terminal status event (the last
// event an ended task has) or finding the task ended with no event left
// to pass; the store's error when the task is gone (store.ErrNotFound);
// ctx's error when ctx ends; fn's error when fn fails. fn runs in the
// caller's goroutine, one event at a time: a slow fn slows only its own
// reading, never the task's work or other readers.
func (h *Streams) Events(ctx context.Context, id string, after uint64, fn func(store.Event) error) error {
	_, err := h.s.events(ctx, id, after, fn)
	return err
}

// EventsFor is Events for a requestor: a task it may not see is
// store.ErrNotFound, as for Router.TaskFor.
func (h *Streams) EventsFor(ctx context.Context, q *Request, id string, after uint64, fn func(store.Event) error) error {
	if _, err := h.s.e.TaskFor(ctx, q, id); err != nil {
		return err
	}
	return h.Events(ctx, id, after, fn)
}

// events is Streams.Events, returning the task's status once it ended.
func (s *streaming) events(ctx context.Context, id string, after uint64, fn func(store.Event) error) (mcptask.Status, error) {
	f := s.feeds.join(id)
	if f == nil {
		return "", errShutdown
	}
	defer s.feeds.leave(f)
	st := s.e.Store()
	done := s.feeds.doneChan()
	check := true   // read the task's status once caught up (first, and after each poll)
	ending := false // the task has ended: pass what is left, then stop
	for {
		wake := f.wakeChan()
		evs, dropped, firstKept, err := f.next(ctx, st, after, ending)
		if err != nil {
			return "", err
		}
		if dropped > 0 {
			marker, _ := json.Marshal(mcptask.DroppedEvent{Count: dropped, Next: firstKept})
			if err := fn(store.Event{Seq: firstKept - 1, At: s.e.Now(), Type: mcptask.EventDropped, Data: marker}); err != nil {
				return "", err
			}
			after = firstKept - 1
		}
		for _, e := range evs {
			if err := fn(e); err != nil {
				return "", err
			}
			after = e.Seq
			if st, ok := terminalStatus(e); ok {
				return st, nil
			}
		}
		if len(evs) > 0 || dropped > 0 {
			continue
		}
		if ending {
			t, err := st.Get(ctx, id)
			if err != nil {
				return "", err
			}
			return t.Status, nil // an ended task without its status event (stored before event logs)
		}
		if check {
			// Read after the status: a task seen ended has written every
			// event it has, and the next read gets them.
			t, err := st.Get(ctx, id)
			if err != nil {
				return "", err
			}
			ending, check = t.Status.Terminal(), false
			if ending {
				continue
			}
		}
		select {
		case <-wake:
		case <-pollTick(s.poll):
			check = true
			f.signal()
		case <-done:
			return "", errShutdown
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// terminalStatus reports the terminal status an event enters, if it is a
// status event that ends its task.
func terminalStatus(e store.Event) (mcptask.Status, bool) {
	if e.Type != mcptask.EventStatus {
		return "", false
	}
	var s mcptask.StatusEvent
	if json.Unmarshal(e.Data, &s) != nil || !s.Status.Terminal() {
		return "", false
	}
	return s.Status, true
}

// latestReport is the line of the latest progress report or log line
// among task id's recent events in st, or "" when it has none.
func latestReport(ctx context.Context, st store.Store, id string) string {
	head, err := st.Events(ctx, id, 0, 1)
	if err != nil || head.Last == 0 {
		return ""
	}
	const recent = 50
	after := uint64(0)
	if head.Last > recent {
		after = head.Last - recent
	}
	page, err := st.Events(ctx, id, after, recent)
	if err != nil {
		return ""
	}
	for i := len(page.Events) - 1; i >= 0; i-- {
		if e := page.Events[i]; e.Type == mcptask.EventProgress || e.Type == mcptask.EventLog {
			return mcptask.EventLine(e.Type, e.Data) + " (" + e.At.UTC().Format(time.RFC3339) + ")"
		}
	}
	return ""
}

// streamParams are tasks/stream's params (mcptask.StreamParams) as the
// SDK's request types carry them.
type streamParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
	After  uint64 `json:"after,omitempty"`
}

// errStreamGone ends a stream whose client went away.
var errStreamGone = errors.New("taskrouter: the stream's client went away")
