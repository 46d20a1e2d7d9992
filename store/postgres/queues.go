package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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

// scanEntries reads queue's entries with their tasks' status (the rows
// of entriesSQL): the live ones in Entries, the ids of the others in
// Deleted.
func scanEntries(rows pgx.Rows, queue string, into *store.QueueTx) error {
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

// The statements of a queue operation's first round trip: the queue's row
// made sure of, then locked (FOR UPDATE, or FOR UPDATE SKIP LOCKED for a
// look that must not wait), then its entries read with their tasks'
// status. Pipelined, they run one after the other: the entries are read
// once the lock is granted, so they are everything committed before it.
func (s *Store) ensureQueueSQL() string {
	return `INSERT INTO ` + s.sql.quoted + `.queues (name, state) VALUES ($1, '{}') ON CONFLICT (name) DO NOTHING`
}

func (s *Store) lockQueueSQL(skip bool) string {
	sql := `SELECT state FROM ` + s.sql.quoted + `.queues WHERE name = $1 FOR UPDATE`
	if skip {
		sql += ` SKIP LOCKED`
	}
	return sql
}

func (s *Store) entriesSQL() string {
	return `SELECT ` + entryCols + `, ` + activeTasks + ` FROM ` + s.sql.quoted + `.queue_entries e
	LEFT JOIN ` + s.sql.quoted + `.tasks t ON t.id = e.task_id WHERE e.queue = $1`
}

// queueLock queues the statements that lock queue and read its entries
// (see ensureQueueSQL) on b.
func (s *Store) queueLock(b *pgx.Batch, queue string, skip bool) {
	b.Queue(s.ensureQueueSQL(), []byte(queue))
	b.Queue(s.lockQueueSQL(skip), []byte(queue))
	b.Queue(s.entriesSQL(), []byte(queue))
}

// readQueueLock reads what queueLock queued: the queue's state and
// entries into q; locked is false when skip was set and another
// transaction holds the lock (q is then not to be used).
func readQueueLock(br pgx.BatchResults, q *store.QueueTx) (locked bool, err error) {
	if _, err := br.Exec(); err != nil {
		return false, err
	}
	var raw []byte
	switch err := br.QueryRow().Scan(&raw); {
	case errors.Is(err, pgx.ErrNoRows):
		locked = false
	case err != nil:
		return false, err
	default:
		locked = true
		if err := json.Unmarshal(raw, &q.State); err != nil {
			return false, fmt.Errorf("queue %q state: %w", q.Name, err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return false, err
	}
	if err := scanEntries(rows, q.Name, q); err != nil {
		return false, err
	}
	return locked, nil
}

// queueWrites queues the writes of a decided queue operation on b: the
// dead entries deleted, the entries put, the state.
func (s *Store) queueWrites(b *pgx.Batch, q *store.QueueTx) error {
	if len(q.Deleted) > 0 {
		ids := make([][]byte, len(q.Deleted))
		for i, id := range q.Deleted {
			ids[i] = []byte(id)
		}
		b.Queue(`DELETE FROM `+s.sql.quoted+`.queue_entries WHERE queue = $1 AND id = ANY($2::bytea[])`, []byte(q.Name), ids)
	}
	for _, e := range q.Put {
		b.Queue(`INSERT INTO `+s.sql.quoted+`.queue_entries (queue, id, task_id, key, priority, seq, enqueued_at, not_before, granted_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
	ON CONFLICT (queue, id) DO UPDATE SET granted_at = EXCLUDED.granted_at, not_before = EXCLUDED.not_before`,
			[]byte(q.Name), []byte(e.ID), []byte(e.TaskID), []byte(e.Key), int64(e.Priority), int64(e.Seq),
			e.EnqueuedAt.UnixNano(), optNanosArg(e.NotBefore), optNanosArg(e.GrantedAt))
	}
	if q.StateChanged {
		raw, err := json.Marshal(q.State)
		if err != nil {
			return err
		}
		b.Queue(`UPDATE `+s.sql.quoted+`.queues SET state = $2 WHERE name = $1`, []byte(q.Name), raw)
	}
	return nil
}

// queueTx runs one queue operation in two round trips on one connection,
// as modify does a task's: BEGIN, the statements first queues (a check of
// its own, read by readFirst) and the queue's lock and entries
// (queueLock), pipelined; then, after decide (in Go), the writes and
// COMMIT. decide gets whether the lock was taken (always, unless skip);
// it returns the operation's result, and false to end without writing
// (rolled back).
func (s *Store) queueTx(ctx context.Context, op, queue string, skip bool, first func(b *pgx.Batch), readFirst func(br pgx.BatchResults) error,
	decide func(conn *pgxpool.Conn, q *store.QueueTx, locked bool) (write bool, err error)) (err error) {
	ctx, err = s.begin(ctx)
	if err != nil {
		return err
	}
	defer s.stats.failed(&err)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.fail(op, err)
	}
	defer release(ctx, conn)
	storeErr := func(err error) error {
		if isStoreError(err) {
			return err
		}
		return s.fail(op, err)
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if first != nil {
		first(b)
	}
	s.queueLock(b, queue, skip)
	q := &store.QueueTx{Name: queue}
	br := conn.SendBatch(ctx, b)
	_, err = br.Exec()
	if err == nil && readFirst != nil {
		err = readFirst(br)
	}
	locked := false
	if err == nil {
		locked, err = readQueueLock(br, q)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return storeErr(err)
	}
	write, err := decide(conn, q, locked)
	if err != nil {
		return storeErr(err)
	}
	if !write {
		return nil // rolled back by the deferred function: nothing was written
	}
	w := &pgx.Batch{}
	if err := s.queueWrites(w, q); err != nil {
		return storeErr(err)
	}
	w.Queue("COMMIT")
	start := time.Now()
	if err := conn.SendBatch(ctx, w).Close(); err != nil {
		s.stats.commitErrors.Add(1)
		return s.fail(op, err)
	}
	if st := conn.Conn().PgConn().TxStatus(); st != 'I' {
		s.stats.commitErrors.Add(1)
		return s.fail(op, fmt.Errorf("transaction status %q after COMMIT", st))
	}
	s.stats.committed(time.Since(start))
	return nil
}

// Enqueue adds an entry to its queue and grants what the limits allow;
// see store.Queues. Two round trips (queueTx): the task's status is read
// in the first, beside the queue's lock.
func (s *Store) Enqueue(ctx context.Context, e store.QueueEntry, lim store.QueueLimits, now time.Time) (res store.QueueResult, err error) {
	if err := store.CheckQueueEntry(e, lim, now); err != nil {
		return res, err
	}
	var status *string
	err = s.queueTx(ctx, "enqueue "+e.ID, e.Queue, true,
		func(b *pgx.Batch) {
			b.Queue(`SELECT status FROM `+s.sql.quoted+`.tasks WHERE id = $1`, []byte(e.TaskID))
		},
		func(br pgx.BatchResults) error {
			var st string
			switch err := br.QueryRow().Scan(&st); {
			case errors.Is(err, pgx.ErrNoRows):
				status = nil
			case err != nil:
				return err
			default:
				status = &st
			}
			return nil
		},
		func(conn *pgxpool.Conn, q *store.QueueTx, locked bool) (bool, error) {
			res = store.QueueResult{}
			if status == nil {
				return false, store.CheckQueueTask(e.TaskID, nil)
			}
			if err := store.CheckQueueTask(e.TaskID, &store.Task{Status: mcptask.Status(*status)}); err != nil {
				return false, err
			}
			if !locked {
				// Another transaction decides the queue's grants now: an
				// entry already there only looks, and that one decides
				// with it.
				found, err := s.lookEntry(ctx, conn, e, &res)
				if err != nil || found {
					return false, err
				}
				// A new entry waits for the lock.
				b := &pgx.Batch{}
				s.queueLock(b, e.Queue, false)
				*q = store.QueueTx{Name: e.Queue}
				br := conn.SendBatch(ctx, b)
				_, err = readQueueLock(br, q)
				if cerr := br.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return false, err
				}
			}
			res = q.Enqueue(e, lim, now)
			return true, nil
		})
	return res, err
}

// lookEntry reads entry e as stored into res (with QueueWaitBusy when it
// waits), for a look that found its queue locked; found is false when
// the entry is not there.
func (s *Store) lookEntry(ctx context.Context, conn *pgxpool.Conn, e store.QueueEntry, res *store.QueueResult) (found bool, err error) {
	rows, err := conn.Query(ctx, `SELECT `+entryCols+`, true FROM `+s.sql.quoted+`.queue_entries e WHERE e.queue = $1 AND e.id = $2`, []byte(e.Queue), []byte(e.ID))
	if err != nil {
		return false, err
	}
	defer rows.Close()
	for rows.Next() {
		if res.Entry, _, err = scanEntry(rows, e.Queue); err != nil {
			return false, err
		}
		found = true
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	if found && !res.Entry.Granted() {
		res.Reason = store.QueueWaitBusy
	}
	return found, nil
}

// Dequeue removes an entry and grants what the limits allow then; see
// store.Queues. Two round trips (queueTx).
func (s *Store) Dequeue(ctx context.Context, queue, id string, lim store.QueueLimits, now time.Time) (res store.QueueResult, err error) {
	if err := store.CheckQueueCall(queue, id, lim, now); err != nil {
		return res, err
	}
	err = s.queueTx(ctx, "dequeue "+id, queue, false, nil, nil,
		func(_ *pgxpool.Conn, q *store.QueueTx, _ bool) (bool, error) {
			res = q.Dequeue(id, lim, now)
			return true, nil
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
