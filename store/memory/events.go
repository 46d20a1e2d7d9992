package memory

import (
	"context"
	"slices"

	"github.com/taskbridge/taskbridge/store"
)

// eventLog is one task's event log: the events it keeps, oldest first,
// numbered densely (drops only ever take the oldest).
type eventLog struct {
	events []store.LoggedEvent
}

// appendEvents appends events (as Changes.Events or Create's record carry
// them) to task id's log and drops what the caps no longer keep. The
// caller holds mu for writing.
func (s *Store) appendEvents(id string, events []store.Event) {
	if len(events) == 0 {
		return
	}
	l := s.logs[id]
	if l == nil {
		l = &eventLog{}
		s.logs[id] = l
	}
	var (
		last uint64
		end  int64
	)
	if n := len(l.events); n > 0 {
		last, end = l.events[n-1].Seq, l.events[n-1].End()
	}
	p := s.limits.PlanAppend(last, end, events)
	drop := 0
	for drop < len(l.events) && p.Dropped(l.events[drop]) {
		drop++
	}
	// Reslicing from the front and appending keeps the backing array
	// bounded: append reallocates, with only the kept events, once the
	// array's tail is used up.
	clear(l.events[:drop])
	l.events = append(l.events[drop:], p.Events...)
}

// Events reads a task's event log; see store.Store.
func (s *Store) Events(ctx context.Context, id string, after uint64, limit int) (store.EventPage, error) {
	limit = store.PageLimit(limit)
	return withTask(ctx, s, false, id, func(*store.Task) (store.EventPage, error) {
		l := s.logs[id]
		if l == nil || len(l.events) == 0 {
			return store.NewEventPage(after, 0, 0, nil), nil
		}
		i, found := slices.BinarySearchFunc(l.events, after, func(e store.LoggedEvent, seq uint64) int {
			switch {
			case e.Seq < seq:
				return -1
			case e.Seq > seq:
				return 1
			}
			return 0
		})
		if found {
			i++
		}
		var out []store.Event
		for _, e := range l.events[i:min(i+limit, len(l.events))] {
			e.Data = append(e.Data[:0:0], e.Data...)
			out = append(out, e.Event)
		}
		return store.NewEventPage(after, l.events[0].Seq, l.events[len(l.events)-1].Seq, out), nil
	})
}
