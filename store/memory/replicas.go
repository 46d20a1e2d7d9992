package memory

import (
	"context"
	"slices"
	"strings"

	"github.com/taskbridge/taskbridge/store"
)

// Heartbeat records a replica's heartbeat; see store.ReplicaRegistry.
func (s *Store) Heartbeat(ctx context.Context, hb store.Heartbeat) error {
	if err := store.CheckHeartbeat(hb); err != nil {
		return err
	}
	_, err := locked(ctx, s, true, func() (struct{}, error) {
		if s.replicas == nil {
			s.replicas = map[string]*store.ReplicaRecord{}
		}
		s.replicas[hb.Replica] = store.MergeHeartbeat(s.replicas[hb.Replica], hb)
		for id, rec := range s.replicas {
			if store.Forgotten(rec, hb.Forget) {
				delete(s.replicas, id)
			}
		}
		return struct{}{}, nil
	})
	return err
}

// Replicas returns every replica's record; see store.ReplicaRegistry.
func (s *Store) Replicas(ctx context.Context) ([]store.ReplicaRecord, error) {
	return locked(ctx, s, false, func() ([]store.ReplicaRecord, error) {
		out := make([]store.ReplicaRecord, 0, len(s.replicas))
		for _, rec := range s.replicas {
			out = append(out, store.CloneReplica(*rec))
		}
		slices.SortFunc(out, func(a, b store.ReplicaRecord) int { return strings.Compare(a.ID, b.ID) })
		return out, nil
	})
}
