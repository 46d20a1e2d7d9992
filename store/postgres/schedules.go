package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskbridge/taskbridge/store"
)

// Schedules: a record per schedule in {s}.schedules (its version a
// column, the record JSON), written compare-and-swap under its row lock,
// and its fires in {s}.schedule_fires keyed by (schedule, at), inserted in
// the same transaction: of two replicas deciding one firing, the second
// finds the version moved (store.ErrConflict) or the time fired
// (store.ErrExists), and writes nothing.

// Schedule returns a schedule's record; see store.Schedules.
func (s *Store) Schedule(ctx context.Context, name string) (*store.ScheduleRecord, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	var raw []byte
	err = s.pool.QueryRow(ctx, `SELECT record FROM `+s.sql.quoted+`.schedules WHERE name = $1`, []byte(name)).Scan(&raw)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("%w: schedule %s", store.ErrNotFound, name)
	case err != nil:
		return nil, s.fail("schedule "+name, err)
	}
	var rec store.ScheduleRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, fmt.Errorf("postgres: schedule %q record: %w", name, err)
	}
	return &rec, nil
}

// SaveSchedule writes a schedule's record and its new fires in one
// transaction; see store.Schedules.
func (s *Store) SaveSchedule(ctx context.Context, rec *store.ScheduleRecord, fires []store.Fire) (*store.ScheduleRecord, error) {
	if err := store.CheckSchedule(rec, fires); err != nil {
		return nil, err
	}
	var stored *store.ScheduleRecord
	err := s.inTx(ctx, "save schedule "+rec.Name, func(tx pgx.Tx) error {
		stored = nil
		name := []byte(rec.Name)
		next, fs := store.PrepareSchedule(rec, fires, s.now())
		raw, err := json.Marshal(next)
		if err != nil {
			return err
		}
		if rec.Version == 0 {
			tag, err := tx.Exec(ctx, `INSERT INTO `+s.sql.quoted+`.schedules (name, version, record) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING`,
				name, int64(next.Version), raw)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("%w: schedule %s", store.ErrExists, rec.Name)
			}
		} else {
			var version int64
			switch err := tx.QueryRow(ctx, `SELECT version FROM `+s.sql.quoted+`.schedules WHERE name = $1 FOR UPDATE`, name).Scan(&version); {
			case errors.Is(err, pgx.ErrNoRows):
				return fmt.Errorf("%w: schedule %s", store.ErrNotFound, rec.Name)
			case err != nil:
				return err
			case uint64(version) != rec.Version:
				return fmt.Errorf("%w: schedule %s is at version %d, not %d", store.ErrConflict, rec.Name, version, rec.Version)
			}
			if _, err := tx.Exec(ctx, `UPDATE `+s.sql.quoted+`.schedules SET version = $2, record = $3 WHERE name = $1`, name, int64(next.Version), raw); err != nil {
				return err
			}
		}
		for _, f := range fs {
			fraw, err := json.Marshal(f)
			if err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `INSERT INTO `+s.sql.quoted+`.schedule_fires (schedule, at, started, fire) VALUES ($1, $2, false, $3) ON CONFLICT DO NOTHING`,
				name, f.At.UnixNano(), fraw)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("%w: schedule %s already fired at %v", store.ErrExists, rec.Name, f.At)
			}
		}
		if len(fs) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM `+s.sql.quoted+`.schedule_fires WHERE schedule = $1 AND started AND at NOT IN
	(SELECT at FROM `+s.sql.quoted+`.schedule_fires WHERE schedule = $1 ORDER BY at DESC LIMIT $2)`, name, store.MaxFires); err != nil {
				return err
			}
		}
		stored = next
		return nil
	})
	if err != nil {
		return nil, err
	}
	return store.CloneSchedule(stored), nil
}

// Fires returns a schedule's fires, newest first; see store.Schedules.
func (s *Store) Fires(ctx context.Context, name string, limit int) ([]store.Fire, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT started, fire FROM `+s.sql.quoted+`.schedule_fires WHERE schedule = $1 ORDER BY at DESC LIMIT $2`,
		[]byte(name), store.PageLimit(limit))
	if err != nil {
		return nil, s.fail("fires "+name, err)
	}
	defer rows.Close()
	var out []store.Fire
	for rows.Next() {
		var started bool
		var raw []byte
		if err := rows.Scan(&started, &raw); err != nil {
			return nil, s.fail("fires "+name, err)
		}
		var f store.Fire
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, fmt.Errorf("postgres: schedule %q fire: %w", name, err)
		}
		f.Started = started
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("fires "+name, err)
	}
	return out, nil
}

// StartFire marks a fire started; see store.Schedules.
func (s *Store) StartFire(ctx context.Context, name string, at time.Time) (err error) {
	ctx, err = s.begin(ctx)
	if err != nil {
		return err
	}
	defer s.stats.failed(&err)
	if !store.ValidTime(at) {
		return fmt.Errorf("%w: schedule %s has no fire at %v", store.ErrNotFound, name, at)
	}
	start := time.Now()
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.sql.quoted+`.schedule_fires SET started = true WHERE schedule = $1 AND at = $2`, []byte(name), at.UnixNano())
	if err != nil {
		s.stats.commitErrors.Add(1)
		return s.fail("start fire "+name, err)
	}
	s.stats.committed(time.Since(start))
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: schedule %s has no fire at %v", store.ErrNotFound, name, at)
	}
	return nil
}
