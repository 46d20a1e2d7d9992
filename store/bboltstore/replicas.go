package bboltstore

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/taskbridge/taskbridge/store"
)

// The replicas' registry lives in the replicas bucket (schema 6): one
// record (store.ReplicaRecord, JSON) per replica, keyed by its name. One
// process holds a bbolt file, so the registry holds that process's
// heartbeats and those of the processes that held the file before it:
// what they served, and until when.

func readReplica(v []byte, id []byte) (*store.ReplicaRecord, error) {
	var rec store.ReplicaRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, fmt.Errorf("replica %q record: %w", id, err)
	}
	return &rec, nil
}

// Heartbeat records a replica's heartbeat; see store.ReplicaRegistry.
func (s *Store) Heartbeat(ctx context.Context, hb store.Heartbeat) error {
	if err := store.CheckHeartbeat(hb); err != nil {
		return err
	}
	return s.submit(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketReplicas)
		var old *store.ReplicaRecord
		if v := b.Get([]byte(hb.Replica)); v != nil {
			var err error
			if old, err = readReplica(v, []byte(hb.Replica)); err != nil {
				return err
			}
		}
		if err := putJSON(b, []byte(hb.Replica), store.MergeHeartbeat(old, hb)); err != nil {
			return err
		}
		var drop [][]byte
		err := b.ForEach(func(k, v []byte) error {
			rec, err := readReplica(v, k)
			if err != nil {
				return err
			}
			if store.Forgotten(rec, hb.Forget) {
				drop = append(drop, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range drop {
			if err := del(b, k); err != nil {
				return err
			}
		}
		return nil
	})
}

// Replicas returns every replica's record; see store.ReplicaRegistry.
func (s *Store) Replicas(ctx context.Context) ([]store.ReplicaRecord, error) {
	var out []store.ReplicaRecord
	err := s.view(ctx, func(tx *bolt.Tx) error {
		out = nil
		return tx.Bucket(bucketReplicas).ForEach(func(k, v []byte) error {
			rec, err := readReplica(v, k)
			if err != nil {
				return err
			}
			out = append(out, store.CloneReplica(*rec))
			return nil
		})
	})
	return out, err
}
