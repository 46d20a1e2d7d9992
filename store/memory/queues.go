package memory

import (
	"context"
	"slices"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// queue is what the store keeps of one queue: its state and its entries
// by id.
type queue struct {
	state   store.QueueState
	entries map[string]store.QueueEntry
}

// active reports whether task id exists and has not ended. Call with mu
// held.
func (s *Store) active(id string) bool {
	t, ok := s.tasks[id]
	return ok && !t.Status.Terminal()
}

// queueTx loads queue name into a store.QueueTx: the entries of active
// tasks, the others marked deleted. Call with mu held.
func (s *Store) queueTx(name string) *store.QueueTx {
	q := &store.QueueTx{Name: name}
	if s.queues == nil {
		s.queues = map[string]*queue{}
	}
	if sq := s.queues[name]; sq != nil {
		q.State = store.QueueState{Seq: sq.state.Seq, Starts: slices.Clone(sq.state.Starts)}
		for _, e := range sq.entries {
			if s.active(e.TaskID) {
				q.Entries = append(q.Entries, e)
			} else {
				q.Deleted = append(q.Deleted, e.ID)
			}
		}
	}
	return q
}

// commitQueue writes what q decided. Call with mu held.
func (s *Store) commitQueue(q *store.QueueTx) {
	sq := s.queues[q.Name]
	if sq == nil {
		sq = &queue{entries: map[string]store.QueueEntry{}}
		s.queues[q.Name] = sq
	}
	for _, id := range q.Deleted {
		delete(sq.entries, id)
	}
	for _, e := range q.Put {
		sq.entries[e.ID] = e
	}
	if q.StateChanged {
		sq.state = q.State
	}
	if len(sq.entries) == 0 && sq.state.Seq == 0 {
		delete(s.queues, q.Name)
	}
}

// Enqueue adds an entry to its queue and grants what the limits allow;
// see store.Queues.
func (s *Store) Enqueue(ctx context.Context, e store.QueueEntry, lim store.QueueLimits, now time.Time) (store.QueueResult, error) {
	if err := store.CheckQueueEntry(e, lim, now); err != nil {
		return store.QueueResult{}, err
	}
	return locked(ctx, s, true, func() (store.QueueResult, error) {
		if err := store.CheckQueueTask(e.TaskID, s.tasks[e.TaskID]); err != nil {
			return store.QueueResult{}, err
		}
		q := s.queueTx(e.Queue)
		res := q.Enqueue(e, lim, now)
		s.commitQueue(q)
		return res, nil
	})
}

// Dequeue removes an entry and grants what the limits allow then; see
// store.Queues.
func (s *Store) Dequeue(ctx context.Context, queue, id string, lim store.QueueLimits, now time.Time) (store.QueueResult, error) {
	if err := store.CheckQueueCall(queue, id, lim, now); err != nil {
		return store.QueueResult{}, err
	}
	return locked(ctx, s, true, func() (store.QueueResult, error) {
		q := s.queueTx(queue)
		res := q.Dequeue(id, lim, now)
		s.commitQueue(q)
		return res, nil
	})
}

// QueueEntries returns a queue's entries of active tasks in order; see
// store.Queues.
func (s *Store) QueueEntries(ctx context.Context, name string) ([]store.QueueEntry, error) {
	return locked(ctx, s, false, func() ([]store.QueueEntry, error) {
		var out []store.QueueEntry
		if sq := s.queues[name]; sq != nil {
			for _, e := range sq.entries {
				if s.active(e.TaskID) {
					out = append(out, e)
				}
			}
		}
		store.SortQueue(out)
		return out, nil
	})
}

// QueueCounts counts every queue's entries of active tasks; see
// store.Queues.
func (s *Store) QueueCounts(ctx context.Context) ([]store.QueueCount, error) {
	return locked(ctx, s, false, func() ([]store.QueueCount, error) {
		var out []store.QueueCount
		for name, sq := range s.queues {
			var live []store.QueueEntry
			for _, e := range sq.entries {
				if s.active(e.TaskID) {
					live = append(live, e)
				}
			}
			if len(live) > 0 {
				out = append(out, store.CountQueue(name, live))
			}
		}
		slices.SortFunc(out, func(a, b store.QueueCount) int { return compareStrings(a.Queue, b.Queue) })
		return out, nil
	})
}
