package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// Queues: a queue's row in {s}.queues is what its operations lock, so that
// they serialize across replicas and the limits hold exactly; its entries
// are rows of {s}.queue_entries, read with their task's status (an entry of
// a task that ended or is gone holds nothing and is deleted). The grants
// are decided in Go by store.QueueTx, in the transaction holding the lock.
//
// A waiting entry that only looks again (an Enqueue of an entry already
// there: the engine's periodic look) does not wait behind another
// operation on its queue: it locks the queue's row with FOR UPDATE SKIP
// LOCKED, and when another transaction holds it, it returns the entry as
// stored (store.QueueWaitBusy). The operation under way, which started
// after the entry was stored, decides the queue's grants with it.

// inTx runs fn in a transaction and commits it, counting the write.
func (s *Store) inTx(ctx context.Context, op string, fn func(tx pgx.Tx) error) (err error) {
	ctx, err = s.begin(ctx)
	if err != nil {
		return err
	}
	defer s.stats.failed(&err)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.fail(op, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		if isStoreError(err) {
			return err
		}
		return s.fail(op, err)
	}
	start := time.Now()
	if err := tx.Commit(ctx); err != nil {
		s.stats.commitErrors.Add(1)
		return s.fail(op, err)
	}
	s.stats.committed(time.Since(start))
	return nil
}

// isStoreError reports an error of the store's rules (not the database's).
func isStoreError(err error) bool {
	for _, e := range []error{store.ErrNotFound, store.ErrExists, store.ErrConflict, store.ErrTerminal, store.ErrInvalid, store.ErrTooLarge} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

const (
	entryCols   = `e.id, e.task_id, e.key, e.priority, e.seq, e.enqueued_at, e.not_before, e.granted_at`
	activeTasks = `t.status IN ('working', 'input_required')`
)

// scanEntry reads one entry row (entryCols, then whether its task is
// active).
func scanEntry(rows pgx.Rows, queue string) (store.QueueEntry, bool, error) {
	var (
		id, task, key  []byte
		prio, seq, enq int64
		notBefore, gnt *int64
		active         *bool
	)
	if err := rows.Scan(&id, &task, &key, &prio, &seq, &enq, &notBefore, &gnt, &active); err != nil {
		return store.QueueEntry{}, false, err
	}
	e := store.QueueEntry{Queue: queue, ID: string(id), TaskID: string(task), Key: string(key), Priority: int(prio),
		Seq: uint64(seq), EnqueuedAt: nanos(enq)}
	if notBefore != nil {
		e.NotBefore = nanos(*notBefore)
	}
	if gnt != nil {
		e.GrantedAt = nanos(*gnt)
	}
	return e, active != nil && *active, nil
}

// readEntries reads queue's entries with their tasks' status: the live
// ones in Entries, the ids of the others in Deleted.
func (s *Store) readEntries(ctx context.Context, q pgx.Tx, queue string, into *store.QueueTx) error {
	rows, err := q.Query(ctx, `SELECT `+entryCols+`, `+activeTasks+` FROM `+s.sql.quoted+`.queue_entries e
	LEFT JOIN `+s.sql.quoted+`.tasks t ON t.id = e.task_id WHERE e.queue = $1`, []byte(queue))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		e, live, err := scanEntry(rows, queue)
		if err != nil {
			return err
		}
		if live {
			into.Entries = append(into.Entries, e)
		} else {
			into.Deleted = append(into.Deleted, e.ID)
		}
	}
	return rows.Err()
}

// lockQueue makes sure queue's row exists and locks it (FOR UPDATE, or
// FOR UPDATE SKIP LOCKED when skip is set), returning its state; ok is
// false when skip is set and another transaction holds the lock.
func (s *Store) lockQueue(ctx context.Context, tx pgx.Tx, queue string, skip bool) (st store.QueueState, ok bool, err error) {
	if _, err := tx.Exec(ctx, `INSERT INTO `+s.sql.quoted+`.queues (name, state) VALUES ($1, '{}') ON CONFLICT (name) DO NOTHING`, []byte(queue)); err != nil {
		return st, false, err
	}
	sql := `SELECT state FROM ` + s.sql.quoted + `.queues WHERE name = $1 FOR UPDATE`
	if skip {
		sql += ` SKIP LOCKED`
	}
	var raw []byte
	switch err := tx.QueryRow(ctx, sql, []byte(queue)).Scan(&raw); {
	case errors.Is(err, pgx.ErrNoRows) && skip:
		return st, false, nil
	case err != nil:
		return st, false, err
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, false, fmt.Errorf("queue %q state: %w", queue, err)
	}
	return st, true, nil
}

// queueOp runs one queue operation: lock, read, decide (fn), write.
func (s *Store) queueOp(ctx context.Context, tx pgx.Tx, name string, st store.QueueState, fn func(q *store.QueueTx) store.QueueResult) (store.QueueResult, error) {
	q := &store.QueueTx{Name: name, State: st}
	if err := s.readEntries(ctx, tx, name, q); err != nil {
		return store.QueueResult{}, err
	}
	res := fn(q)
	b := &pgx.Batch{}
	if len(q.Deleted) > 0 {
		ids := make([][]byte, len(q.Deleted))
		for i, id := range q.Deleted {
			ids[i] = []byte(id)
		}
		b.Queue(`DELETE FROM `+s.sql.quoted+`.queue_entries WHERE queue = $1 AND id = ANY($2::bytea[])`, []byte(name), ids)
	}
	for _, e := range q.Put {
		b.Queue(`INSERT INTO `+s.sql.quoted+`.queue_entries (queue, id, task_id, key, priority, seq, enqueued_at, not_before, granted_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
	ON CONFLICT (queue, id) DO UPDATE SET granted_at = EXCLUDED.granted_at, not_before = EXCLUDED.not_before`,
			[]byte(name), []byte(e.ID), []byte(e.TaskID), []byte(e.Key), int64(e.Priority), int64(e.Seq),
			e.EnqueuedAt.UnixNano(), optNanosArg(e.NotBefore), optNanosArg(e.GrantedAt))
	}
	if q.StateChanged {
		raw, err := json.Marshal(q.State)
		if err != nil {
			return store.QueueResult{}, err
		}
		b.Queue(`UPDATE `+s.sql.quoted+`.queues SET state = $2 WHERE name = $1`, []byte(name), raw)
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return store.QueueResult{}, err
		}
	}
	return res, nil
}

// Enqueue adds an entry to its queue and grants what the limits allow;
// see store.Queues.
func (s *Store) Enqueue(ctx context.Context, e store.QueueEntry, lim store.QueueLimits, now time.Time) (res store.QueueResult, err error) {
	if err := store.CheckQueueEntry(e, lim, now); err != nil {
		return res, err
	}
	err = s.inTx(ctx, "enqueue "+e.ID, func(tx pgx.Tx) error {
		res = store.QueueResult{}
		var status string
		switch err := tx.QueryRow(ctx, `SELECT status FROM `+s.sql.quoted+`.tasks WHERE id = $1`, []byte(e.TaskID)).Scan(&status); {
		case errors.Is(err, pgx.ErrNoRows):
			return store.CheckQueueTask(e.TaskID, nil)
		case err != nil:
			return err
		}
		if err := store.CheckQueueTask(e.TaskID, &store.Task{Status: mcptask.Status(status)}); err != nil {
			return err
		}
		st, ok, err := s.lockQueue(ctx, tx, e.Queue, true)
		if err != nil {
			return err
		}
		if !ok {
			// Another transaction decides the queue's grants now: an
			// entry already there only looks, and that one decides
			// with it.
			rows, err := tx.Query(ctx, `SELECT `+entryCols+`, true FROM `+s.sql.quoted+`.queue_entries e WHERE e.queue = $1 AND e.id = $2`, []byte(e.Queue), []byte(e.ID))
			if err != nil {
				return err
			}
			found := false
			for rows.Next() {
				if res.Entry, _, err = scanEntry(rows, e.Queue); err != nil {
					rows.Close()
					return err
				}
				found = true
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if found {
				if !res.Entry.Granted() {
					res.Reason = store.QueueWaitBusy
				}
				return nil
			}
			if st, _, err = s.lockQueue(ctx, tx, e.Queue, false); err != nil {
				return err
			}
		}
		res, err = s.queueOp(ctx, tx, e.Queue, st, func(q *store.QueueTx) store.QueueResult { return q.Enqueue(e, lim, now) })
		return err
	})
	return res, err
}

// Dequeue removes an entry and grants what the limits allow then; see
// store.Queues.
func (s *Store) Dequeue(ctx context.Context, queue, id string, lim store.QueueLimits, now time.Time) (res store.QueueResult, err error) {
	if err := store.CheckQueueCall(queue, id, lim, now); err != nil {
		return res, err
	}
	err = s.inTx(ctx, "dequeue "+id, func(tx pgx.Tx) error {
		st, _, err := s.lockQueue(ctx, tx, queue, false)
		if err != nil {
			return err
		}
		res, err = s.queueOp(ctx, tx, queue, st, func(q *store.QueueTx) store.QueueResult { return q.Dequeue(id, lim, now) })
		return err
	})
	return res, err
}

// QueueEntries returns a queue's entries of active tasks in order; see
// store.Queues.
func (s *Store) QueueEntries(ctx context.Context, queue string) ([]store.QueueEntry, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+entryCols+`, true FROM `+s.sql.quoted+`.queue_entries e
	JOIN `+s.sql.quoted+`.tasks t ON t.id = e.task_id AND `+activeTasks+` WHERE e.queue = $1`, []byte(queue))
	if err != nil {
		return nil, s.fail("queue entries", err)
	}
	defer rows.Close()
	var out []store.QueueEntry
	for rows.Next() {
		e, _, err := scanEntry(rows, queue)
		if err != nil {
			return nil, s.fail("queue entries", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("queue entries", err)
	}
	store.SortQueue(out)
	return out, nil
}

// QueueCounts counts every queue's entries of active tasks; see
// store.Queues.
func (s *Store) QueueCounts(ctx context.Context) ([]store.QueueCount, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT e.queue, count(*) FILTER (WHERE e.granted_at IS NULL), count(*) FILTER (WHERE e.granted_at IS NOT NULL)
	FROM `+s.sql.quoted+`.queue_entries e JOIN `+s.sql.quoted+`.tasks t ON t.id = e.task_id AND `+activeTasks+`
	GROUP BY e.queue ORDER BY e.queue`)
	if err != nil {
		return nil, s.fail("queue counts", err)
	}
	defer rows.Close()
	var out []store.QueueCount
	for rows.Next() {
		var name []byte
		var waiting, holding int64
		if err := rows.Scan(&name, &waiting, &holding); err != nil {
			return nil, s.fail("queue counts", err)
		}
		out = append(out, store.QueueCount{Queue: string(name), Waiting: int(waiting), Holding: int(holding)})
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("queue counts", err)
	}
	return out, nil
}
