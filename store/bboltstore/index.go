package bboltstore

import (
	"encoding/binary"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
	bolt "go.etcd.io/bbolt"
)

// addCount adds delta to the counter of status st in the meta bucket.
// Invariant: the counters equal the number of tasks per status; every write
// that creates, deletes or moves a task between statuses calls it in the
// same transaction.
func addCount(tx *bolt.Tx, st mcptask.Status, delta int64) error {
	meta := tx.Bucket(bucketMeta)
	k := countKey(st)
	var n uint64
	if v := meta.Get(k); len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	return put(meta, k, binary.BigEndian.AppendUint64(nil, n+uint64(delta)))
}

// indexTask writes every index entry of a new task t and counts it.
// Invariant (checked by Check): a task has exactly these entries —
// by_owner, by_status and by_name always; expiry when it has an ExpiresAt;
// leases when it has a LeaseHolder; wake when it has a WakeAt (only a
// task that is not terminal has one); active while it is not terminal.
func indexTask(tx *bolt.Tx, t *store.Task) error {
	id := []byte(t.ID)
	if err := put(tx.Bucket(bucketByOwner), ownerKey(t.Owner, t.CreatedAt.UnixNano(), t.ID), empty); err != nil {
		return err
	}
	if err := put(tx.Bucket(bucketByStatus), statusKey(t), empty); err != nil {
		return err
	}
	if err := put(tx.Bucket(bucketByName), nameKey(t), empty); err != nil {
		return err
	}
	if !t.ExpiresAt.IsZero() {
		if err := put(tx.Bucket(bucketExpiry), expiryKey(t.ExpiresAt.UnixNano(), t.ID), empty); err != nil {
			return err
		}
	}
	if t.LeaseHolder != "" {
		if err := put(tx.Bucket(bucketLeases), leaseKey(t.LeaseUntil, t.ID), empty); err != nil {
			return err
		}
	}
	if !t.WakeAt.IsZero() {
		if err := put(tx.Bucket(bucketWake), wakeKey(t.WakeAt, t.ID), empty); err != nil {
			return err
		}
	}
	if !t.Status.Terminal() {
		if err := put(tx.Bucket(bucketActive), id, empty); err != nil {
			return err
		}
	}
	return addCount(tx, t.Status, 1)
}

// unindexTask removes every index entry of t (as stored) and uncounts it.
func unindexTask(tx *bolt.Tx, t *store.Task) error {
	id := []byte(t.ID)
	if err := del(tx.Bucket(bucketByOwner), ownerKey(t.Owner, t.CreatedAt.UnixNano(), t.ID)); err != nil {
		return err
	}
	if err := del(tx.Bucket(bucketByStatus), statusKey(t)); err != nil {
		return err
	}
	if err := del(tx.Bucket(bucketByName), nameKey(t)); err != nil {
		return err
	}
	if !t.ExpiresAt.IsZero() {
		if err := del(tx.Bucket(bucketExpiry), expiryKey(t.ExpiresAt.UnixNano(), t.ID)); err != nil {
			return err
		}
	}
	if t.LeaseHolder != "" {
		if err := del(tx.Bucket(bucketLeases), leaseKey(t.LeaseUntil, t.ID)); err != nil {
			return err
		}
	}
	if !t.WakeAt.IsZero() {
		if err := del(tx.Bucket(bucketWake), wakeKey(t.WakeAt, t.ID)); err != nil {
			return err
		}
	}
	if err := del(tx.Bucket(bucketActive), id); err != nil {
		return err
	}
	return addCount(tx, t.Status, -1)
}

// reindex moves the index entries of t (the record after a write) that the
// write changed, as ch reports: status (by_status, active, counters,
// history), expiry, lease and wake.
func reindex(tx *bolt.Tx, t *store.Task, ch store.Changes) error {
	if ch.StatusChanged {
		prev := *t
		prev.Status = ch.PrevStatus
		if err := del(tx.Bucket(bucketByStatus), statusKey(&prev)); err != nil {
			return err
		}
		if err := put(tx.Bucket(bucketByStatus), statusKey(t), empty); err != nil {
			return err
		}
		if err := addCount(tx, ch.PrevStatus, -1); err != nil {
			return err
		}
		if err := addCount(tx, t.Status, 1); err != nil {
			return err
		}
		if err := put(tx.Bucket(bucketHistory), []byte(t.ID), encodeHistory(t.History)); err != nil {
			return err
		}
		if t.Status.Terminal() {
			if err := del(tx.Bucket(bucketActive), []byte(t.ID)); err != nil {
				return err
			}
		}
	}
	if ch.ExpiryChanged {
		expiry := tx.Bucket(bucketExpiry)
		if !ch.PrevExpiresAt.IsZero() {
			if err := del(expiry, expiryKey(ch.PrevExpiresAt.UnixNano(), t.ID)); err != nil {
				return err
			}
		}
		if !t.ExpiresAt.IsZero() {
			if err := put(expiry, expiryKey(t.ExpiresAt.UnixNano(), t.ID), empty); err != nil {
				return err
			}
		}
	}
	if ch.LeaseChanged {
		leases := tx.Bucket(bucketLeases)
		if ch.PrevLeaseHolder != "" {
			if err := del(leases, leaseKey(ch.PrevLeaseUntil, t.ID)); err != nil {
				return err
			}
		}
		if t.LeaseHolder != "" {
			if err := put(leases, leaseKey(t.LeaseUntil, t.ID), empty); err != nil {
				return err
			}
		}
	}
	if ch.WakeChanged {
		wake := tx.Bucket(bucketWake)
		if !ch.PrevWakeAt.IsZero() {
			if err := del(wake, wakeKey(ch.PrevWakeAt, t.ID)); err != nil {
				return err
			}
		}
		if !t.WakeAt.IsZero() {
			if err := put(wake, wakeKey(t.WakeAt, t.ID), empty); err != nil {
				return err
			}
		}
	}
	return nil
}
