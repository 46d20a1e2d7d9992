package store

import (
	"github.com/taskbridge/taskbridge/mcptask"
	"sort"
)

// MinQueryScan is the least number of index entries a Query call may
// examine, whatever its page size; see QueryScanBudget.
const MinQueryScan = 5000

// QueryScanBudget is the number of index entries a backend may examine to
// fill one Query page of limit tasks (after PageLimit): ten per requested
// task, at least MinQueryScan. It bounds the work of a query whose filters
// the driving index does not cover.
func QueryScanBudget(limit int) int {
	return max(10*PageLimit(limit), MinQueryScan)
}

// AllStatuses returns every task status, in lifecycle order.
func AllStatuses() []mcptask.Status {
	return []mcptask.Status{mcptask.StatusWorking, mcptask.StatusInputRequired, mcptask.StatusCompleted, mcptask.StatusFailed, mcptask.StatusCancelled}
}

// NormalizeQuery validates q and returns it with Statuses sorted and
// without duplicates (nil when empty) and Limit resolved by PageLimit. It
// fails with ErrInvalid for an unknown status, an Owner longer than
// MaxOwnerBytes or a Name longer than MaxNameBytes (no task can match
// them).
func NormalizeQuery(q Query) (Query, error) {
	q.Limit = PageLimit(q.Limit)
	if len(q.Statuses) > 0 {
		st := make([]mcptask.Status, 0, len(q.Statuses))
		for _, s := range q.Statuses {
			if !s.Valid() {
				return Query{}, invalid("query status %q", s)
			}
			st = append(st, s)
		}
		sort.Slice(st, func(i, j int) bool { return st[i] < st[j] })
		q.Statuses = st[:0]
		for i, s := range st {
			if i == 0 || s != st[i-1] {
				q.Statuses = append(q.Statuses, s)
			}
		}
	} else {
		q.Statuses = nil
	}
	if len(q.Owner) > MaxOwnerBytes {
		return Query{}, invalid("query owner is %d bytes, limit %d", len(q.Owner), MaxOwnerBytes)
	}
	if len(q.Name) > MaxNameBytes {
		return Query{}, invalid("query name is %d bytes, limit %d", len(q.Name), MaxNameBytes)
	}
	return q, nil
}

// Match reports whether t passes q's filters (q normalized or not).
func (q Query) Match(t *Task) bool {
	if q.Owner != "" && t.Owner != q.Owner {
		return false
	}
	if q.Name != "" && t.Request.Name != q.Name {
		return false
	}
	if len(q.Statuses) == 0 {
		return true
	}
	for _, s := range q.Statuses {
		if s == t.Status {
			return true
		}
	}
	return false
}

// QueryIndex names an index a backend may drive a Query from.
type QueryIndex int

// The Query driving indexes; every one is ordered by (CreatedAt, id).
const (
	// ByStatus is a per-status index, merged over q.Statuses (or all of
	// them when the query has none).
	ByStatus QueryIndex = iota
	// ByOwner is the per-owner index.
	ByOwner
	// ByName is the per-request-name index.
	ByName
)

// PlanQuery picks the index to drive a normalized query from, so that every
// backend makes the same choice: the status index when q filters by status
// and the counts of those statuses (from Counts, O(1)) add up to no more
// than the scan budget (the whole result is then reachable within a few
// pages), otherwise the owner index when q has an Owner, otherwise the
// name index when q has a Name, otherwise the status index. counts may be
// nil when unknown.
func PlanQuery(q Query, counts map[mcptask.Status]int) QueryIndex {
	if len(q.Statuses) > 0 && counts != nil && (q.Owner != "" || q.Name != "") {
		n := 0
		for _, s := range q.Statuses {
			n += counts[s]
		}
		if n <= QueryScanBudget(q.Limit) {
			return ByStatus
		}
	}
	switch {
	case q.Owner != "":
		return ByOwner
	case q.Name != "":
		return ByName
	}
	return ByStatus
}

// NewCounts returns a Counts result with every status at zero.
func NewCounts() map[mcptask.Status]int {
	all := AllStatuses()
	m := make(map[mcptask.Status]int, len(all))
	for _, s := range all {
		m[s] = 0
	}
	return m
}
