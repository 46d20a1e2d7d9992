package postgres

import (
	"sync/atomic"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// writeStats counts the store's writes for Stats. Every write is one
// transaction of its own (PostgreSQL serializes writers on rows, not on a
// commit queue), so commits and operations committed are the same count.
type writeStats struct {
	commits, commitNanos, opsFailed, commitErrors atomic.Uint64
}

// committed records a transaction whose commit round trip took d.
func (w *writeStats) committed(d time.Duration) {
	w.commits.Add(1)
	w.commitNanos.Add(uint64(d))
}

// failed counts a write that returned *err (when not nil): deferred by
// every write once its arguments passed validation.
func (w *writeStats) failed(err *error) {
	if *err != nil {
		w.opsFailed.Add(1)
	}
}

// Stats returns the store's write counters since Open; see store.Stats.
// Commits and OpsCommitted count the write transactions this Store
// committed (Create, Update, Claim, Delete, Renew: one each, so
// MaxOpsPerCommit is 1 once anything was written), CommitTime the round
// trips that carried their writes and COMMIT, CommitErrors those that
// failed. Retries stays zero. Writes of other processes are not counted.
func (s *Store) Stats() store.Stats {
	commits := s.stats.commits.Load()
	st := store.Stats{
		Commits:      commits,
		OpsCommitted: commits,
		OpsFailed:    s.stats.opsFailed.Load(),
		CommitErrors: s.stats.commitErrors.Load(),
		CommitTime:   time.Duration(s.stats.commitNanos.Load()),
	}
	if commits > 0 {
		st.MaxOpsPerCommit = 1
	}
	return st
}

var _ store.StatsReporter = (*Store)(nil)
