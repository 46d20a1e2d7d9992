package bboltstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/taskbridge/taskbridge/store"
)

// Schedules live in the schedules bucket (schema 5): one nested bucket
// per schedule name, holding its record (store.ScheduleRecord, JSON) under
// scheduleRecordKey and its fires (store.Fire, JSON) in the nested bucket
// scheduleFiresKey, keyed by their time (timeKey: in time order).

var (
	scheduleRecordKey = []byte("record")
	scheduleFiresKey  = []byte("fires")
)

func readRecord(b *bolt.Bucket, name string) (*store.ScheduleRecord, error) {
	if b == nil {
		return nil, nil
	}
	v := b.Get(scheduleRecordKey)
	if v == nil {
		return nil, nil
	}
	var rec store.ScheduleRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, fmt.Errorf("schedule %q record: %w", name, err)
	}
	return &rec, nil
}

// Schedule returns a schedule's record; see store.Schedules.
func (s *Store) Schedule(ctx context.Context, name string) (*store.ScheduleRecord, error) {
	var rec *store.ScheduleRecord
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		rec, err = readRecord(tx.Bucket(bucketSchedules).Bucket([]byte(name)), name)
		return err
	})
	if err == nil && rec == nil {
		err = fmt.Errorf("%w: schedule %s", store.ErrNotFound, name)
	}
	return rec, err
}

// SaveSchedule writes a schedule's record and its new fires in one
// transaction; see store.Schedules.
func (s *Store) SaveSchedule(ctx context.Context, rec *store.ScheduleRecord, fires []store.Fire) (*store.ScheduleRecord, error) {
	if err := store.CheckSchedule(rec, fires); err != nil {
		return nil, err
	}
	var stored *store.ScheduleRecord
	err := s.submit(ctx, func(tx *bolt.Tx) error {
		stored = nil
		sb := tx.Bucket(bucketSchedules).Bucket([]byte(rec.Name))
		cur, err := readRecord(sb, rec.Name)
		if err != nil {
			return err
		}
		switch {
		case rec.Version == 0 && cur != nil:
			return fmt.Errorf("%w: schedule %s", store.ErrExists, rec.Name)
		case rec.Version != 0 && cur == nil:
			return fmt.Errorf("%w: schedule %s", store.ErrNotFound, rec.Name)
		case rec.Version != 0 && cur.Version != rec.Version:
			return fmt.Errorf("%w: schedule %s is at version %d, not %d", store.ErrConflict, rec.Name, cur.Version, rec.Version)
		}
		if sb != nil {
			if fb := sb.Bucket(scheduleFiresKey); fb != nil {
				for _, f := range fires {
					if fb.Get(timeKey(f.At.UnixNano())) != nil {
						return fmt.Errorf("%w: schedule %s already fired at %v", store.ErrExists, rec.Name, f.At)
					}
				}
			}
		}
		next, fs := store.PrepareSchedule(rec, fires, s.now())
		if sb == nil {
			if sb, err = tx.Bucket(bucketSchedules).CreateBucket([]byte(rec.Name)); err != nil {
				return &writeError{err}
			}
		}
		fb, err := sb.CreateBucketIfNotExists(scheduleFiresKey)
		if err != nil {
			return &writeError{err}
		}
		for _, f := range fs {
			if err := putJSON(fb, timeKey(f.At.UnixNano()), f); err != nil {
				return err
			}
		}
		if err := pruneFires(fb, rec.Name); err != nil {
			return err
		}
		if err := putJSON(sb, scheduleRecordKey, next); err != nil {
			return err
		}
		stored = next
		return nil
	})
	if err != nil {
		return nil, err
	}
	return store.CloneSchedule(stored), nil
}

// pruneFires drops the started fires beyond store.MaxFires.
func pruneFires(fb *bolt.Bucket, name string) error {
	if fb.Stats().KeyN <= store.MaxFires {
		return nil
	}
	all, err := readFires(fb, name, 0)
	if err != nil {
		return err
	}
	for _, at := range store.PruneFires(all) {
		if err := del(fb, timeKey(at.UnixNano())); err != nil {
			return err
		}
	}
	return nil
}

// readFires reads up to limit fires (0: all), newest first.
func readFires(fb *bolt.Bucket, name string, limit int) ([]store.Fire, error) {
	var out []store.Fire
	c := fb.Cursor()
	for k, v := c.Last(); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Prev() {
		var f store.Fire
		if err := json.Unmarshal(v, &f); err != nil {
			return nil, fmt.Errorf("schedule %q fire: %w", name, err)
		}
		out = append(out, f)
	}
	return out, nil
}

func putJSON(b *bolt.Bucket, k []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return put(b, k, raw)
}

// Fires returns a schedule's fires, newest first; see store.Schedules.
func (s *Store) Fires(ctx context.Context, name string, limit int) ([]store.Fire, error) {
	limit = store.PageLimit(limit)
	var out []store.Fire
	err := s.view(ctx, func(tx *bolt.Tx) error {
		sb := tx.Bucket(bucketSchedules).Bucket([]byte(name))
		if sb == nil || sb.Bucket(scheduleFiresKey) == nil {
			return nil
		}
		var err error
		out, err = readFires(sb.Bucket(scheduleFiresKey), name, limit)
		return err
	})
	return out, err
}

// StartFire marks a fire started; see store.Schedules.
func (s *Store) StartFire(ctx context.Context, name string, at time.Time) error {
	return s.submit(ctx, func(tx *bolt.Tx) error {
		missing := fmt.Errorf("%w: schedule %s has no fire at %v", store.ErrNotFound, name, at)
		sb := tx.Bucket(bucketSchedules).Bucket([]byte(name))
		if sb == nil || sb.Bucket(scheduleFiresKey) == nil || !store.ValidTime(at) {
			return missing
		}
		fb := sb.Bucket(scheduleFiresKey)
		k := timeKey(at.UnixNano())
		v := fb.Get(k)
		if v == nil {
			return missing
		}
		var f store.Fire
		if err := json.Unmarshal(v, &f); err != nil {
			return fmt.Errorf("schedule %q fire: %w", name, err)
		}
		if f.Started {
			return nil
		}
		f.Started = true
		return putJSON(fb, k, f)
	})
}
