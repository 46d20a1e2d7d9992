package bboltstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/taskbridge/taskbridge/store"
)

// Queues live in the queues bucket (schema 5): one nested bucket per
// queue name, holding the queue's state (store.QueueState, JSON) under
// queueStateKey and its entries (store.QueueEntry, JSON) by id in the
// nested bucket queueEntriesKey. An operation reads the queue's entries,
// decides with store.QueueTx and writes what changed, in one transaction
// of the committer: the single writer serializes a queue's operations.

var (
	queueStateKey   = []byte("state")
	queueEntriesKey = []byte("entries")
)

// taskActive reports whether task id exists and has not ended.
func taskActive(tx *bolt.Tx, id string) (bool, error) {
	t, err := loadTaskStatus(tx, id)
	if err != nil || t == nil {
		return false, err
	}
	return !t.Status.Terminal(), nil
}

// loadTaskStatus reads task id's header, or nil when there is none.
func loadTaskStatus(tx *bolt.Tx, id string) (*store.Task, error) {
	h := tx.Bucket(bucketTasks).Get([]byte(id))
	if h == nil {
		return nil, nil
	}
	t, err := decodeHeader(h)
	if err != nil {
		return nil, fmt.Errorf("task %q header: %w", id, err)
	}
	return t, nil
}

// readQueue loads queue name in tx: its state, the entries of active tasks
// (Entries) and the ids of the others (Deleted).
func readQueue(tx *bolt.Tx, name string) (*store.QueueTx, error) {
	q := &store.QueueTx{Name: name}
	qb := tx.Bucket(bucketQueues).Bucket([]byte(name))
	if qb == nil {
		return q, nil
	}
	if v := qb.Get(queueStateKey); v != nil {
		if err := json.Unmarshal(v, &q.State); err != nil {
			return nil, fmt.Errorf("queue %q state: %w", name, err)
		}
	}
	eb := qb.Bucket(queueEntriesKey)
	if eb == nil {
		return q, nil
	}
	err := eb.ForEach(func(k, v []byte) error {
		var e store.QueueEntry
		if err := json.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("queue %q entry %q: %w", name, k, err)
		}
		ok, err := taskActive(tx, e.TaskID)
		if err != nil {
			return err
		}
		if ok {
			q.Entries = append(q.Entries, e)
		} else {
			q.Deleted = append(q.Deleted, e.ID)
		}
		return nil
	})
	return q, err
}

// writeQueue writes what q decided in tx.
func writeQueue(tx *bolt.Tx, q *store.QueueTx) error {
	if len(q.Put) == 0 && len(q.Deleted) == 0 && !q.StateChanged {
		return nil
	}
	qb, err := tx.Bucket(bucketQueues).CreateBucketIfNotExists([]byte(q.Name))
	if err != nil {
		return &writeError{err}
	}
	eb, err := qb.CreateBucketIfNotExists(queueEntriesKey)
	if err != nil {
		return &writeError{err}
	}
	for _, id := range q.Deleted {
		if err := del(eb, []byte(id)); err != nil {
			return err
		}
	}
	for _, e := range q.Put {
		v, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if err := put(eb, []byte(e.ID), v); err != nil {
			return err
		}
	}
	if q.StateChanged {
		v, err := json.Marshal(q.State)
		if err != nil {
			return err
		}
		return put(qb, queueStateKey, v)
	}
	return nil
}

// queueOp runs one queue operation in a write transaction.
func (s *Store) queueOp(ctx context.Context, name string, check func(tx *bolt.Tx) error, fn func(q *store.QueueTx) store.QueueResult) (store.QueueResult, error) {
	var res store.QueueResult
	err := s.submit(ctx, func(tx *bolt.Tx) error {
		res = store.QueueResult{}
		if check != nil {
			if err := check(tx); err != nil {
				return err
			}
		}
		q, err := readQueue(tx, name)
		if err != nil {
			return err
		}
		res = fn(q)
		return writeQueue(tx, q)
	})
	return res, err
}

// Enqueue adds an entry to its queue and grants what the limits allow;
// see store.Queues.
func (s *Store) Enqueue(ctx context.Context, e store.QueueEntry, lim store.QueueLimits, now time.Time) (store.QueueResult, error) {
	if err := store.CheckQueueEntry(e, lim, now); err != nil {
		return store.QueueResult{}, err
	}
	check := func(tx *bolt.Tx) error {
		t, err := loadTaskStatus(tx, e.TaskID)
		if err != nil {
			return err
		}
		return store.CheckQueueTask(e.TaskID, t)
	}
	return s.queueOp(ctx, e.Queue, check, func(q *store.QueueTx) store.QueueResult { return q.Enqueue(e, lim, now) })
}

// Dequeue removes an entry and grants what the limits allow then; see
// store.Queues.
func (s *Store) Dequeue(ctx context.Context, queue, id string, lim store.QueueLimits, now time.Time) (store.QueueResult, error) {
	if err := store.CheckQueueCall(queue, id, lim, now); err != nil {
		return store.QueueResult{}, err
	}
	return s.queueOp(ctx, queue, nil, func(q *store.QueueTx) store.QueueResult { return q.Dequeue(id, lim, now) })
}

// QueueEntries returns a queue's entries of active tasks in order; see
// store.Queues.
func (s *Store) QueueEntries(ctx context.Context, name string) ([]store.QueueEntry, error) {
	var out []store.QueueEntry
	err := s.view(ctx, func(tx *bolt.Tx) error {
		q, err := readQueue(tx, name)
		if err != nil {
			return err
		}
		out = q.Entries
		return nil
	})
	store.SortQueue(out)
	return out, err
}

// QueueCounts counts every queue's entries of active tasks; see
// store.Queues.
func (s *Store) QueueCounts(ctx context.Context) ([]store.QueueCount, error) {
	var out []store.QueueCount
	err := s.view(ctx, func(tx *bolt.Tx) error {
		out = nil
		return tx.Bucket(bucketQueues).ForEachBucket(func(k []byte) error {
			q, err := readQueue(tx, string(k))
			if err != nil {
				return err
			}
			if len(q.Entries) > 0 {
				out = append(out, store.CountQueue(string(k), q.Entries))
			}
			return nil
		})
	})
	slices.SortFunc(out, func(a, b store.QueueCount) int { return compareString(a.Queue, b.Queue) })
	return out, err
}

func compareString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// queuesAndSchedules checks that every queue's state and entries and
// every schedule's record and fires decode, and that each entry and fire
// is filed under its own key.
func (sc *storeCheck) queuesAndSchedules() {
	c := sc.c
	_ = sc.tx.Bucket(bucketQueues).ForEachBucket(func(name []byte) error {
		qb := sc.tx.Bucket(bucketQueues).Bucket(name)
		if v := qb.Get(queueStateKey); v != nil && json.Unmarshal(v, &store.QueueState{}) != nil {
			c.addf("queue %q: undecodable state", name)
		}
		if eb := qb.Bucket(queueEntriesKey); eb != nil {
			_ = eb.ForEach(func(k, v []byte) error {
				var e store.QueueEntry
				if err := json.Unmarshal(v, &e); err != nil || e.ID != string(k) || e.Queue != string(name) {
					c.addf("queue %q: entry %q is undecodable or filed under another key", name, k)
				}
				return nil
			})
		}
		return nil
	})
	_ = sc.tx.Bucket(bucketSchedules).ForEachBucket(func(name []byte) error {
		sb := sc.tx.Bucket(bucketSchedules).Bucket(name)
		if rec, err := readRecord(sb, string(name)); err != nil || rec != nil && rec.Name != string(name) {
			c.addf("schedule %q: undecodable record, or one of another schedule", name)
		}
		if fb := sb.Bucket(scheduleFiresKey); fb != nil {
			_ = fb.ForEach(func(k, v []byte) error {
				var f store.Fire
				if err := json.Unmarshal(v, &f); err != nil || len(k) != 8 || f.At.UnixNano() != keyNanos(k) || f.Schedule != string(name) {
					c.addf("schedule %q: fire %x is undecodable or filed under another key", name, k)
				}
				return nil
			})
		}
		return nil
	})
}
