package dashboard

import (
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// rateMinutes is how many minutes of creation and finish counts a Feed
// keeps.
const rateMinutes = 30

// Feed is the dashboard's live source. It is a taskrouter.Observer: give it
// to the router (builder.WithObserver, or inside taskrouter.Observers in
// taskrouter.Options.Observer) and to New through Options.Feed. It counts the tasks
// this process creates and finishes per minute, and fans every committed
// change out to the pages watching (server-sent events). Its methods never
// block the engine: a page that falls behind is told to reload its data.
type Feed struct {
	now func() time.Time

	mu      sync.Mutex
	buckets [rateMinutes]bucket
	subs    map[*subscription]struct{}
	closed  bool
}

type bucket struct {
	minute            int64 // unix minute the counts belong to
	created, finished int
}

// change is one event sent to the pages.
type change struct {
	ID     string `json:"id,omitempty"`
	Owner  string `json:"-"`
	Status string `json:"status,omitempty"`
	Kind   string `json:"kind"` // created, updated, deleted, refresh
	// known reports that Owner is known (not a store notification).
	known bool
}

// subscription is one page's stream.
type subscription struct {
	ch      chan change
	dropped bool // an event did not fit: send a refresh
}

// NewFeed returns a Feed.
func NewFeed() *Feed {
	return &Feed{now: time.Now, subs: map[*subscription]struct{}{}}
}

// TaskEvent counts the change and sends it to the watching pages
// (taskrouter.Observer).
func (f *Feed) TaskEvent(e taskrouter.TaskEvent) {
	c := change{ID: e.Task.ID, Owner: e.Task.Owner, Status: string(e.Task.Status), known: true}
	minute := f.now().Unix() / 60
	f.mu.Lock()
	defer f.mu.Unlock()
	b := &f.buckets[minute%rateMinutes]
	if b.minute != minute {
		*b = bucket{minute: minute}
	}
	switch e.Kind {
	case taskrouter.TaskCreated:
		c.Kind = "created"
		b.created++
		if e.Ended { // created ended: its handler returned within the instant window
			b.finished++
		}
	case taskrouter.TaskDeleted:
		c.Kind = "deleted"
	default:
		c.Kind = "updated"
		if e.Ended {
			b.finished++
		}
	}
	f.publishLocked(c)
}

// HandlerEvent implements taskrouter.Observer; the dashboard does not use
// handler events.
func (f *Feed) HandlerEvent(taskrouter.HandlerEvent) {}

// storeChange relays a store.Notifier change (another process's write, or
// this one's again); the owner is not known.
func (f *Feed) storeChange(ch store.Change) {
	c := change{ID: ch.ID, Status: string(ch.Status), Kind: "updated"}
	if ch.Resync {
		c = change{Kind: "refresh"}
	} else if ch.Deleted {
		c.Kind = "deleted"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.publishLocked(c)
}

func (f *Feed) publishLocked(c change) {
	for s := range f.subs {
		select {
		case s.ch <- c:
		default:
			s.dropped = true
		}
	}
}

// subscribe registers a page; nil after Close.
func (f *Feed) subscribe() *subscription {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	s := &subscription{ch: make(chan change, 64)}
	f.subs[s] = struct{}{}
	return s
}

func (f *Feed) unsubscribe(s *subscription) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.subs[s]; ok {
		delete(f.subs, s)
		close(s.ch)
	}
}

// takeDropped reports (and clears) whether s missed events.
func (f *Feed) takeDropped(s *subscription) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := s.dropped
	s.dropped = false
	return d
}

// Close ends every page's stream (their scripts reconnect to whatever
// serves next) and refuses new ones; call it before http.Server.Shutdown,
// which otherwise waits for the streams.
func (f *Feed) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for s := range f.subs {
		delete(f.subs, s)
		close(s.ch)
	}
}

// Rate is the tasks created and finished in one minute.
type Rate struct {
	// Minute is the start of the minute.
	Minute time.Time
	// Created and Finished count the tasks this process created and moved
	// to a terminal status in that minute.
	Created, Finished int
}

// Rates returns the last n minutes (at most 30), oldest first, the current
// (partial) minute last.
func (f *Feed) Rates(n int) []Rate {
	n = min(max(n, 1), rateMinutes)
	now := f.now().Unix() / 60
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Rate, 0, n)
	for m := now - int64(n) + 1; m <= now; m++ {
		r := Rate{Minute: time.Unix(m*60, 0)}
		if b := f.buckets[((m%rateMinutes)+rateMinutes)%rateMinutes]; b.minute == m {
			r.Created, r.Finished = b.created, b.finished
		}
		out = append(out, r)
	}
	return out
}
