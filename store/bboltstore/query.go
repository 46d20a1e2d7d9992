package bboltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// revIter walks the keys of one index under prefix (keys prefix |
// createdAt (8) | id) backwards, newest first, or forwards, oldest first,
// when fwd is set.
type revIter struct {
	c      *bolt.Cursor
	prefix []byte
	fwd    bool
	k      []byte // the current key; nil when exhausted
}

// newRevIter positions an iterator on the last key under prefix that is
// strictly before bound (a full key), or on the last key under prefix when
// bound is nil.
func newRevIter(b *bolt.Bucket, prefix, bound []byte) *revIter {
	it := &revIter{c: b.Cursor(), prefix: prefix}
	if bound == nil {
		bound = prefixEnd(prefix)
	}
	if bound == nil {
		it.k, _ = it.c.Last()
	} else if k, _ := it.c.Seek(bound); k == nil {
		it.k, _ = it.c.Last()
	} else {
		it.k, _ = it.c.Prev()
	}
	it.check()
	return it
}

// newFwdIter positions a forward iterator on the first key under prefix
// that is strictly after bound (a full key), or on the first key under
// prefix when bound is nil.
func newFwdIter(b *bolt.Bucket, prefix, bound []byte) *revIter {
	it := &revIter{c: b.Cursor(), prefix: prefix, fwd: true}
	if bound == nil {
		it.k, _ = it.c.Seek(prefix)
	} else if it.k, _ = it.c.Seek(bound); it.k != nil && bytes.Equal(it.k, bound) {
		it.k, _ = it.c.Next()
	}
	it.check()
	return it
}

func (it *revIter) check() {
	if it.k != nil && (!bytes.HasPrefix(it.k, it.prefix) || len(it.k) < len(it.prefix)+8) {
		it.k = nil
	}
}

func (it *revIter) next() {
	if it.fwd {
		it.k, _ = it.c.Next()
	} else {
		it.k, _ = it.c.Prev()
	}
	it.check()
}

// pos is the current key without the prefix: createdAt (8) | id, which
// sorts like (CreatedAt, id).
func (it *revIter) pos() []byte { return it.k[len(it.prefix):] }

// prefixEnd returns the smallest key greater than every key starting with
// prefix, or nil when there is none.
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// readCounts reads the per-status counters of the meta bucket.
func readCounts(tx *bolt.Tx) map[mcptask.Status]int {
	out := store.NewCounts()
	meta := tx.Bucket(bucketMeta)
	for st := range out {
		if v := meta.Get(countKey(st)); len(v) == 8 {
			out[st] = int(int64(binary.BigEndian.Uint64(v)))
		}
	}
	return out
}

// Counts returns the number of tasks by status from the counters in the
// meta bucket (five reads); see store.Store.
func (s *Store) Counts(ctx context.Context) (map[mcptask.Status]int, error) {
	var out map[mcptask.Status]int
	err := s.view(ctx, func(tx *bolt.Tx) error {
		out = readCounts(tx)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Query returns one page of tasks across owners, newest first (oldest
// first with q.Oldest); see store.Store. It walks the index
// store.PlanQuery picks backwards (forwards) from the cursor position — by_owner or by_name under one prefix, or by_status
// under each wanted status's prefix, merged — decoding each entry's header
// to apply the remaining filters, and stops after store.QueryScanBudget
// entries.
func (s *Store) Query(ctx context.Context, q store.Query) (store.Page, error) {
	q, err := store.NormalizeQuery(q)
	if err != nil {
		return store.Page{}, err
	}
	var after []byte // createdAt | id of the cursor position
	if q.Cursor != "" {
		at, id, err := s.codec.DecodeQuery(q, q.Cursor)
		if err != nil {
			return store.Page{}, err
		}
		after = append(timeKey(at.UnixNano()), id...)
	}
	var page store.Page
	err = s.view(ctx, func(tx *bolt.Tx) error {
		page = store.Page{}
		var (
			bucket   *bolt.Bucket
			prefixes [][]byte
		)
		switch store.PlanQuery(q, readCounts(tx)) {
		case store.ByOwner:
			bucket, prefixes = tx.Bucket(bucketByOwner), [][]byte{ownerPrefix(q.Owner)}
		case store.ByName:
			bucket, prefixes = tx.Bucket(bucketByName), [][]byte{ownerPrefix(q.Name)}
		default:
			bucket = tx.Bucket(bucketByStatus)
			statuses := q.Statuses
			if len(statuses) == 0 {
				statuses = store.AllStatuses()
			}
			for _, st := range statuses {
				prefixes = append(prefixes, ownerPrefix(string(st)))
			}
		}
		iters := make([]*revIter, len(prefixes))
		for i, p := range prefixes {
			var bound []byte
			if after != nil {
				bound = append(bytes.Clone(p), after...)
			}
			if q.Oldest {
				iters[i] = newFwdIter(bucket, p, bound)
			} else {
				iters[i] = newRevIter(bucket, p, bound)
			}
		}
		budget := store.QueryScanBudget(q.Limit)
		var last []byte
		sign := 1 // newest first: take the greatest position
		if q.Oldest {
			sign = -1
		}
		for examined := 0; ; examined++ {
			var best *revIter
			for _, it := range iters {
				if it.k != nil && (best == nil || sign*bytes.Compare(it.pos(), best.pos()) > 0) {
					best = it
				}
			}
			if best == nil {
				return nil // every index range exhausted: the last page
			}
			if len(page.Tasks) == q.Limit || examined == budget {
				page.NextCursor = s.codec.EncodeQuery(q, time.Unix(0, keyNanos(last)), string(last[8:]))
				return nil
			}
			last = bytes.Clone(best.pos())
			best.next()
			t, err := loadHeader(tx, last[8:])
			if err != nil {
				return fmt.Errorf("query index: %w", err)
			}
			if q.Match(t) {
				page.Tasks = append(page.Tasks, t)
			}
		}
	})
	if err != nil {
		return store.Page{}, err
	}
	return page, nil
}
