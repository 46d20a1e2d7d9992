package bboltstore

import (
	"context"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/taskbridge/taskbridge/store"
)

// Leases. The leases bucket holds LeaseUntil|id for every task with a
// LeaseHolder; Create, Update (release, terminal status), Claim, Renew and
// Delete keep it in step with the headers in the same transaction.

// Claim takes a task's lease; see store.Store. It is one group-committed
// operation: the check and the write happen in the committer's
// transaction, so two claims of one task are serialized and at most one of
// them sees the lease free.
func (s *Store) Claim(ctx context.Context, id, holder string, now, until time.Time) (*store.Task, error) {
	if err := store.CheckClaim(holder, now, until); err != nil {
		return nil, err
	}
	key := []byte(id)
	var out *store.Task
	err := s.submit(ctx, func(tx *bolt.Tx) error {
		out = nil
		if id == "" {
			return notFound(id)
		}
		t, err := loadTask(tx, key)
		if err != nil {
			return err
		}
		ch, err := store.ApplyClaim(t, holder, now, until)
		if err != nil {
			return err
		}
		if err := put(tx.Bucket(bucketTasks), key, encodeHeader(t)); err != nil {
			return err
		}
		if err := reindex(tx, t, ch); err != nil {
			return err
		}
		out = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Renew extends holder's leases; see store.Store. The whole batch of ids is
// one group-committed operation (one transaction, shared with whatever
// else is queued): a renewal rewrites each renewed header and moves its
// lease index entry, nothing else.
func (s *Store) Renew(ctx context.Context, holder string, until time.Time, ids []string) ([]string, error) {
	if err := store.CheckRenew(holder, until); err != nil {
		return nil, err
	}
	var renewed []string
	err := s.submit(ctx, func(tx *bolt.Tx) error {
		renewed = nil // the op may be re-run
		seen := make(map[string]bool, len(ids))
		tasks := tx.Bucket(bucketTasks)
		for _, id := range ids {
			if id == "" || seen[id] {
				continue
			}
			seen[id] = true
			key := []byte(id)
			if tasks.Get(key) == nil {
				continue
			}
			t, err := loadHeader(tx, key)
			if err != nil {
				return err
			}
			ch, ok := store.ApplyRenew(t, holder, until)
			if !ok {
				continue
			}
			if err := put(tasks, key, encodeHeader(t)); err != nil {
				return err
			}
			if err := reindex(tx, t, ch); err != nil {
				return err
			}
			renewed = append(renewed, id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return renewed, nil
}

// ExpiredLeases returns up to limit leased tasks whose LeaseUntil is at or
// before now, soonest first, reading the leases index; see store.Store.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*store.Task, error) {
	return s.timeIndex(ctx, bucketLeases, now, limit)
}
