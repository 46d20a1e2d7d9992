package store

import (
	"context"
	"maps"
	"time"
)

// Replicas. Every process that runs an engine on a store says in the
// store, by heartbeat, which work it can run: keys its components give
// (the workflow bridge gives one per workflow version it serves). The
// engine reads this registry before it claims a task that needs a key: a
// process that does not serve the key leaves the task to a live one that
// does, and a task whose key no live process serves can tell since when
// none has. The registry keeps, per replica, its latest heartbeat, whether
// that heartbeat said it stops, and, per key it ever listed, the time of
// its latest heartbeat that listed it: what a replica served survives its
// restart under the same name with other keys. The rules are
// MergeHeartbeat's, the same in every backend.

// Heartbeat is one heartbeat of a replica (ReplicaRegistry.Heartbeat).
type Heartbeat struct {
	// Replica names the process: its lease holder name (1 to
	// MaxHolderBytes bytes).
	Replica string
	// Serves are the keys it serves now (each 1 to MaxNameBytes bytes,
	// at most MaxServes of them).
	Serves []string
	// At is the heartbeat's time, on the engine's clock (ValidTime).
	At time.Time
	// Stopped says that the replica stops (it closes gracefully): from At
	// on it is not live, without waiting for its heartbeats to age.
	Stopped bool
	// Forget, when set, drops the records of replicas whose latest
	// heartbeat is before it, and the keys of a record last listed before
	// it.
	Forget time.Time
}

// ReplicaRecord is what the registry keeps of one replica.
type ReplicaRecord struct {
	// ID is the replica's name (Heartbeat.Replica).
	ID string
	// SeenAt is the time of its latest heartbeat.
	SeenAt time.Time
	// Stopped reports that its latest heartbeat said it stops.
	Stopped bool
	// Serves maps every key it listed to the time of its latest
	// heartbeat that listed it: SeenAt for the keys it serves now.
	Serves map[string]time.Time
}

// ServesNow reports whether the replica's latest heartbeat listed key.
func (r *ReplicaRecord) ServesNow(key string) bool {
	at, ok := r.Serves[key]
	return ok && at.Equal(r.SeenAt)
}

// MaxServes bounds the keys of one heartbeat.
const MaxServes = 4096

// ReplicaRegistry is the part of Store that keeps the replicas' registry.
type ReplicaRegistry interface {
	// Heartbeat records hb (see MergeHeartbeat) and drops what it
	// forgets, in one write. It fails with ErrInvalid or ErrTooLarge for
	// a heartbeat CheckHeartbeat refuses.
	Heartbeat(ctx context.Context, hb Heartbeat) error
	// Replicas returns every replica's record, by ID.
	Replicas(ctx context.Context) ([]ReplicaRecord, error)
}

// CheckHeartbeat validates a heartbeat (ErrInvalid, ErrTooLarge).
func CheckHeartbeat(hb Heartbeat) error {
	switch {
	case hb.Replica == "":
		return invalid("heartbeat without a replica")
	case len(hb.Replica) > MaxHolderBytes:
		return tooLarge("replica name", len(hb.Replica), MaxHolderBytes)
	case !ValidTime(hb.At):
		return invalid("heartbeat of %q at %v: time out of range", hb.Replica, hb.At)
	case !hb.Forget.IsZero() && !ValidTime(hb.Forget):
		return invalid("heartbeat of %q: forget time %v out of range", hb.Replica, hb.Forget)
	case len(hb.Serves) > MaxServes:
		return tooLarge("heartbeat keys", len(hb.Serves), MaxServes)
	}
	for _, k := range hb.Serves {
		switch {
		case k == "":
			return invalid("heartbeat of %q: empty key", hb.Replica)
		case len(k) > MaxNameBytes:
			return tooLarge("heartbeat key", len(k), MaxNameBytes)
		}
	}
	return nil
}

// MergeHeartbeat returns the record of hb's replica after hb, given its
// record before (nil: none): SeenAt moves to hb.At (never back), Stopped
// is hb's, every key hb lists is served at hb.At, the keys it listed
// before keep their times, and the keys last listed before hb.Forget are
// dropped. Times are in UTC.
func MergeHeartbeat(old *ReplicaRecord, hb Heartbeat) *ReplicaRecord {
	rec := &ReplicaRecord{ID: hb.Replica, Serves: map[string]time.Time{}}
	if old != nil {
		rec.SeenAt = old.SeenAt
		maps.Copy(rec.Serves, old.Serves)
	}
	at := hb.At.UTC()
	if at.After(rec.SeenAt) {
		rec.SeenAt = at
	}
	rec.Stopped = hb.Stopped
	for _, k := range hb.Serves {
		rec.Serves[k] = rec.SeenAt
	}
	if !hb.Forget.IsZero() {
		maps.DeleteFunc(rec.Serves, func(_ string, t time.Time) bool { return t.Before(hb.Forget) })
	}
	return rec
}

// Forgotten reports whether rec is dropped by a heartbeat that forgets
// what was seen before forget.
func Forgotten(rec *ReplicaRecord, forget time.Time) bool {
	return !forget.IsZero() && rec.SeenAt.Before(forget)
}

// CloneReplica returns a deep copy of rec.
func CloneReplica(rec ReplicaRecord) ReplicaRecord {
	rec.Serves = maps.Clone(rec.Serves)
	if rec.Serves == nil {
		rec.Serves = map[string]time.Time{}
	}
	return rec
}
