package postgres

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

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

// wireCounter counts what the store sends PostgreSQL, as pgx's tracer of
// every connection the store opens (the pool's, the change feed's): each
// query or exec is one statement and one round trip, a batch one round
// trip for all its statements, preparing a statement one round trip.
type wireCounter struct {
	statements, roundTrips atomic.Uint64
}

var (
	_ pgx.QueryTracer   = (*wireCounter)(nil)
	_ pgx.BatchTracer   = (*wireCounter)(nil)
	_ pgx.PrepareTracer = (*wireCounter)(nil)
)

// TraceQueryStart counts a statement sent on its own.
func (w *wireCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	w.statements.Add(1)
	w.roundTrips.Add(1)
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (w *wireCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch's round trip.
func (w *wireCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	w.roundTrips.Add(1)
	return ctx
}

// TraceBatchQuery counts a statement of a batch.
func (w *wireCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	w.statements.Add(1)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (w *wireCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TracePrepareStart counts the round trip that prepares a statement (once
// per statement and connection).
func (w *wireCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	w.roundTrips.Add(1)
	return ctx
}

// TracePrepareEnd implements pgx.PrepareTracer.
func (w *wireCounter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// Stats returns the store's write counters since Open; see store.Stats.
// Commits and OpsCommitted count the write transactions this Store
// committed (Create, Update, Claim, Delete, Renew: one each, so
// MaxOpsPerCommit is 1 once anything was written), CommitTime the round
// trips that carried their writes and COMMIT, CommitErrors those that
// failed. Retries stays zero. Statements and RoundTrips count everything
// the store sent PostgreSQL (wireCounter). Writes of other processes are
// not counted.
func (s *Store) Stats() store.Stats {
	commits := s.stats.commits.Load()
	st := store.Stats{
		Commits:      commits,
		OpsCommitted: commits,
		OpsFailed:    s.stats.opsFailed.Load(),
		CommitErrors: s.stats.commitErrors.Load(),
		CommitTime:   time.Duration(s.stats.commitNanos.Load()),
		Statements:   s.wire.statements.Load(),
		RoundTrips:   s.wire.roundTrips.Load(),
	}
	if commits > 0 {
		st.MaxOpsPerCommit = 1
	}
	return st
}

var _ store.StatsReporter = (*Store)(nil)
