package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/taskbridge/taskbridge/store"
)

// The replicas' registry: a row per replica in {s}.replicas, its record
// JSON, merged under the row's lock (store.MergeHeartbeat) so that two
// heartbeats of one name never lose each other's keys.

// Heartbeat records a replica's heartbeat; see store.ReplicaRegistry.
func (s *Store) Heartbeat(ctx context.Context, hb store.Heartbeat) error {
	if err := store.CheckHeartbeat(hb); err != nil {
		return err
	}
	return s.inTx(ctx, "heartbeat "+hb.Replica, func(tx pgx.Tx) error {
		id := []byte(hb.Replica)
		var old *store.ReplicaRecord
		var raw []byte
		switch err := tx.QueryRow(ctx, `SELECT record FROM `+s.sql.quoted+`.replicas WHERE id = $1 FOR UPDATE`, id).Scan(&raw); {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			old = &store.ReplicaRecord{}
			if err := json.Unmarshal(raw, old); err != nil {
				return fmt.Errorf("postgres: replica %q record: %w", hb.Replica, err)
			}
		}
		rec := store.MergeHeartbeat(old, hb)
		raw, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+s.sql.quoted+`.replicas (id, seen_at, record) VALUES ($1, $2, $3)
	ON CONFLICT (id) DO UPDATE SET seen_at = EXCLUDED.seen_at, record = EXCLUDED.record`, id, rec.SeenAt.UnixNano(), raw); err != nil {
			return err
		}
		if !hb.Forget.IsZero() {
			if _, err := tx.Exec(ctx, `DELETE FROM `+s.sql.quoted+`.replicas WHERE seen_at < $1`, hb.Forget.UnixNano()); err != nil {
				return err
			}
		}
		return nil
	})
}

// Replicas returns every replica's record; see store.ReplicaRegistry.
func (s *Store) Replicas(ctx context.Context) ([]store.ReplicaRecord, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT record FROM `+s.sql.quoted+`.replicas ORDER BY id`)
	if err != nil {
		return nil, s.fail("replicas", err)
	}
	defer rows.Close()
	var out []store.ReplicaRecord
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, s.fail("replicas", err)
		}
		var rec store.ReplicaRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, fmt.Errorf("postgres: replica record: %w", err)
		}
		out = append(out, store.CloneReplica(rec))
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("replicas", err)
	}
	return out, nil
}
