package postgres

import (
	"context"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// Claim takes a task's lease; see store.Store. The task row is locked while
// store.ApplyClaim decides, so of two replicas claiming one expired lease
// the second waits for the first's commit and then finds the lease taken
// (store.ErrLeased).
func (s *Store) Claim(ctx context.Context, id, holder string, now, until time.Time) (*store.Task, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	if err := store.CheckClaim(holder, now, until); err != nil {
		return nil, err
	}
	return s.modify(ctx, "claim", id, s.sql.get, func(t *store.Task) (store.Changes, error) {
		return store.ApplyClaim(t, holder, now, until)
	})
}

// Renew extends holder's leases in one UPDATE of all the listed rows; see
// store.Store. The holder check is in its WHERE clause, so a lease claimed
// by another process in the meantime is not renewed. Nothing is notified:
// a renewal bumps no version.
func (s *Store) Renew(ctx context.Context, holder string, until time.Time, ids []string) (_ []string, err error) {
	ctx, err = s.begin(ctx)
	if err != nil {
		return nil, err
	}
	if err := store.CheckRenew(holder, until); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(ids))
	var keys [][]byte
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			keys = append(keys, []byte(id))
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	defer s.stats.failed(&err)
	// One statement, one implicit transaction: committed once every row
	// came back.
	start := time.Now()
	rows, err := s.pool.Query(ctx, s.sql.renew, keys, []byte(holder), until.UnixNano())
	if err != nil {
		s.stats.commitErrors.Add(1)
		return nil, s.fail("renew", err)
	}
	defer rows.Close()
	got := make(map[string]bool, len(keys))
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			s.stats.commitErrors.Add(1)
			return nil, s.fail("renew", err)
		}
		got[string(id)] = true
	}
	if err := rows.Err(); err != nil {
		s.stats.commitErrors.Add(1)
		return nil, s.fail("renew", err)
	}
	s.stats.committed(time.Since(start))
	var renewed []string
	for _, k := range keys {
		if got[string(k)] {
			renewed = append(renewed, string(k))
		}
	}
	return renewed, nil
}

// ExpiredLeases returns up to limit leased tasks whose LeaseUntil is at or
// before now, soonest first, from the lease index; see store.Store.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*store.Task, error) {
	return s.timeIndex(ctx, "expired leases", s.sql.leases, now, limit)
}
