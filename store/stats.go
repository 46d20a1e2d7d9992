package store

import "time"

// Stats are counters of a store's writes since it was opened, for
// observers (package metrics exports them). A backend fills what it can
// count; the rest stays zero. Two readings a while apart give rates and
// means over that while (CommitTime/Commits is the mean commit latency).
type Stats struct {
	// Commits is the number of write transactions committed.
	Commits uint64
	// OpsCommitted is the number of write operations (Create, Update,
	// Delete, Claim, Renew) whose changes were committed; a backend that
	// batches writes (group commit) commits several in one transaction.
	OpsCommitted uint64
	// OpsFailed is the number of write operations that returned an error
	// after the store took them on (not found, conflict, fenced, a
	// cancelled context, a failed commit, ...).
	OpsFailed uint64
	// MaxOpsPerCommit is the largest number of operations one transaction
	// committed.
	MaxOpsPerCommit uint64
	// CommitErrors counts commits (or transaction starts) that failed.
	CommitErrors uint64
	// Retries counts batches a group-committing store re-ran because one
	// operation failed while writing.
	Retries uint64
	// CommitTime is the total time spent committing (writing, and syncing
	// or waiting for the database) the Commits transactions.
	CommitTime time.Duration
	// Statements is the number of SQL statements a database store sent
	// (reads, writes, BEGIN and COMMIT, notifications): zero for an
	// embedded store.
	Statements uint64
	// RoundTrips is the number of round trips to the database those
	// statements took (a pipelined batch of statements is one).
	RoundTrips uint64
}

// OpsPerCommit is the mean number of operations per committed transaction.
func (s Stats) OpsPerCommit() float64 {
	if s.Commits == 0 {
		return 0
	}
	return float64(s.OpsCommitted) / float64(s.Commits)
}

// StatsReporter is implemented by stores that count their writes (see
// Stats): bboltstore's group committer, PostgreSQL's transactions. It is
// optional; observers test for it.
type StatsReporter interface {
	// Stats returns the counters since the store was opened. It is cheap
	// and safe for concurrent use.
	Stats() Stats
}
