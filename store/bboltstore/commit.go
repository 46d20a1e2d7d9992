package bboltstore

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/taskbridge/taskbridge/store"
)

// op is one write operation queued for the committer. fn validates and then
// writes inside the shared transaction; it returns a plain error when
// validation fails (it has written nothing) and a *writeError when a write
// failed after validation (the transaction may hold part of its writes). fn
// may be run more than once (in successive transactions) if its batch is
// retried, so it must only write to variables it resets on entry.
type op struct {
	ctx  context.Context
	fn   func(tx *bolt.Tx) error
	done chan error // buffered, receives exactly one value
}

// submit queues fn for the committer and waits for its outcome. ctx is
// respected while waiting to enqueue and until the committer picks the
// operation up; after that the caller always gets the true outcome.
func (s *Store) submit(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	ctx = ctxOrBackground(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	o := &op{ctx: ctx, fn: fn, done: make(chan error, 1)}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return store.ErrClosed
	}
	select {
	case s.ops <- o:
	case <-ctx.Done():
		s.closeMu.RUnlock()
		return ctx.Err()
	}
	s.closeMu.RUnlock()
	return <-o.done
}

// commitLoop is the single writer. It blocks for the first operation,
// gathers a batch (see gather) and commits it in one transaction. It exits
// once ops is closed and drained.
func (s *Store) commitLoop() {
	defer close(s.done)
	// A damaged page bbolt maps faults; as a panic, runOp and commit
	// recover it.
	debug.SetPanicOnFault(true)
	batch := make([]*op, 0, maxBatch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for first := range s.ops {
		batch = s.gather(append(batch[:0], first), timer)
		s.runBatch(batch)
		clear(batch) // drop references for the GC
	}
}

// gather adds to batch every operation already queued (up to maxBatch)
// without waiting. When that makes CommitWindowFrom or more (writers are
// many: the commit's fixed cost dominates), it goes on taking operations
// for up to the commit window, so that one commit and its fsyncs serve
// more of them; fewer never wait. timer is the loop's own, stopped.
func (s *Store) gather(batch []*op, timer *time.Timer) []*op {
drain:
	for len(batch) < maxBatch {
		select {
		case o, ok := <-s.ops:
			if !ok {
				return batch
			}
			batch = append(batch, o)
		default:
			break drain
		}
	}
	if s.window <= 0 || len(batch) < CommitWindowFrom {
		return batch
	}
	timer.Reset(s.window)
	defer timer.Stop()
	for len(batch) < maxBatch {
		select {
		case o, ok := <-s.ops:
			if !ok {
				return batch
			}
			batch = append(batch, o)
		case <-timer.C:
			return batch
		}
	}
	return batch
}

// runOp runs one operation, turning a panic into a write error (its writes,
// if any, cannot be trusted).
func runOp(o *op, tx *bolt.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &writeError{fmt.Errorf("panic: %v\n%s", r, debug.Stack())}
		}
	}()
	return o.fn(tx)
}

// runBatch runs the operations in one read-write transaction, commits it
// once, and replies to every operation.
func (s *Store) runBatch(batch []*op) {
	pending := batch
	results := make([]error, len(batch))
	for len(pending) > 0 {
		results = results[:len(pending)]
		tx, err := s.db.Begin(true)
		if err != nil {
			s.stats.commitErrors.Add(1)
			s.log.Error("bboltstore: cannot begin write transaction", "err", err, "ops", len(pending))
			err = fmt.Errorf("bboltstore: begin transaction: %w", err)
			for _, o := range pending {
				s.reply(o, err)
			}
			return
		}
		poisoned := -1
		ok := 0
		for i, o := range pending {
			if err := o.ctx.Err(); err != nil {
				results[i] = err
				continue
			}
			err := runOp(o, tx)
			results[i] = err
			if err == nil {
				ok++
				continue
			}
			var we *writeError
			if errors.As(err, &we) {
				poisoned = i
				break
			}
		}
		if poisoned >= 0 {
			// The transaction holds part of one operation's writes: drop
			// it, fail that operation, and re-run the others.
			_ = tx.Rollback()
			s.stats.retries.Add(1)
			s.log.Error("bboltstore: write failed after validation; retrying the rest of the batch",
				"err", results[poisoned], "ops", len(pending))
			s.reply(pending[poisoned], results[poisoned])
			pending = append(pending[:poisoned:poisoned], pending[poisoned+1:]...)
			continue
		}
		start := time.Now()
		if ok == 0 {
			// Nothing to write: skip the commit (and its fsync).
			_ = tx.Rollback()
		} else if err := s.commit(tx); err != nil {
			s.stats.commitErrors.Add(1)
			s.log.Error("bboltstore: commit failed", "err", err, "ops", ok)
			for i := range results {
				if results[i] == nil {
					results[i] = fmt.Errorf("bboltstore: commit: %w", err)
				}
			}
		} else {
			s.stats.commits.Add(1)
			s.stats.commitNanos.Add(uint64(time.Since(start)))
			s.stats.opsCommitted.Add(uint64(ok))
			for {
				cur := s.stats.maxBatch.Load()
				if uint64(ok) <= cur || s.stats.maxBatch.CompareAndSwap(cur, uint64(ok)) {
					break
				}
			}
		}
		for i, o := range pending {
			s.reply(o, results[i])
		}
		return
	}
}

// commit commits tx, turning a panic inside bbolt (a damaged page met while
// writing) into an error matching ErrCorrupt; the transaction is rolled
// back then, so that the next one can start.
func (s *Store) commit(tx *bolt.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			func() {
				defer func() { _ = recover() }()
				_ = tx.Rollback()
			}()
			err = &CorruptError{Path: s.path, Detail: fmt.Sprintf("bbolt failed committing: %v", r)}
		}
	}()
	return tx.Commit()
}

func (s *Store) reply(o *op, err error) {
	if err != nil {
		s.stats.opsFailed.Add(1)
	}
	o.done <- err
}

// Stats are counters of the group committer since Open: store.Stats,
// every field filled (Commits are the group commits, OpsCommitted the
// operations they carried, Retries the batches re-run).
type Stats = store.Stats

var _ store.StatsReporter = (*Store)(nil)

// Stats returns the committer's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Commits:         s.stats.commits.Load(),
		OpsCommitted:    s.stats.opsCommitted.Load(),
		OpsFailed:       s.stats.opsFailed.Load(),
		MaxOpsPerCommit: s.stats.maxBatch.Load(),
		CommitErrors:    s.stats.commitErrors.Load(),
		Retries:         s.stats.retries.Load(),
		CommitTime:      time.Duration(s.stats.commitNanos.Load()),
	}
}
