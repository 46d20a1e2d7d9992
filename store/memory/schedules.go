package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// schedule is what the store keeps of one schedule: its record and its
// fires by time (Unix nanoseconds).
type schedule struct {
	rec   *store.ScheduleRecord
	fires map[int64]store.Fire
}

func compareStrings(a, b string) int { return strings.Compare(a, b) }

// Schedule returns a copy of a schedule's record; see store.Schedules.
func (s *Store) Schedule(ctx context.Context, name string) (*store.ScheduleRecord, error) {
	return locked(ctx, s, false, func() (*store.ScheduleRecord, error) {
		sc := s.schedules[name]
		if sc == nil || sc.rec == nil {
			return nil, fmt.Errorf("%w: schedule %s", store.ErrNotFound, name)
		}
		return store.CloneSchedule(sc.rec), nil
	})
}

// SaveSchedule writes a schedule's record and its new fires in one step;
// see store.Schedules.
func (s *Store) SaveSchedule(ctx context.Context, rec *store.ScheduleRecord, fires []store.Fire) (*store.ScheduleRecord, error) {
	if err := store.CheckSchedule(rec, fires); err != nil {
		return nil, err
	}
	return locked(ctx, s, true, func() (*store.ScheduleRecord, error) {
		if s.schedules == nil {
			s.schedules = map[string]*schedule{}
		}
		sc := s.schedules[rec.Name]
		switch {
		case rec.Version == 0 && sc != nil && sc.rec != nil:
			return nil, fmt.Errorf("%w: schedule %s", store.ErrExists, rec.Name)
		case rec.Version != 0 && (sc == nil || sc.rec == nil):
			return nil, fmt.Errorf("%w: schedule %s", store.ErrNotFound, rec.Name)
		case rec.Version != 0 && sc.rec.Version != rec.Version:
			return nil, fmt.Errorf("%w: schedule %s is at version %d, not %d", store.ErrConflict, rec.Name, sc.rec.Version, rec.Version)
		}
		if sc == nil {
			sc = &schedule{fires: map[int64]store.Fire{}}
		}
		for _, f := range fires {
			if _, ok := sc.fires[f.At.UnixNano()]; ok {
				return nil, fmt.Errorf("%w: schedule %s already fired at %v", store.ErrExists, rec.Name, f.At)
			}
		}
		stored, fs := store.PrepareSchedule(rec, fires, s.now())
		for _, f := range fs {
			sc.fires[f.At.UnixNano()] = f
		}
		all := make([]store.Fire, 0, len(sc.fires))
		for _, f := range sc.fires {
			all = append(all, f)
		}
		for _, at := range store.PruneFires(all) {
			delete(sc.fires, at.UnixNano())
		}
		sc.rec = stored
		s.schedules[rec.Name] = sc
		return store.CloneSchedule(stored), nil
	})
}

// Fires returns a schedule's fires, newest first; see store.Schedules.
func (s *Store) Fires(ctx context.Context, name string, limit int) ([]store.Fire, error) {
	limit = store.PageLimit(limit)
	return locked(ctx, s, false, func() ([]store.Fire, error) {
		sc := s.schedules[name]
		if sc == nil {
			return nil, nil
		}
		out := make([]store.Fire, 0, len(sc.fires))
		for _, f := range sc.fires {
			out = append(out, f)
		}
		slices.SortFunc(out, func(a, b store.Fire) int { return b.At.Compare(a.At) })
		if len(out) > limit {
			out = out[:limit]
		}
		return out, nil
	})
}

// StartFire marks a fire started; see store.Schedules.
func (s *Store) StartFire(ctx context.Context, name string, at time.Time) error {
	_, err := locked(ctx, s, true, func() (struct{}, error) {
		sc := s.schedules[name]
		if sc == nil {
			return struct{}{}, fmt.Errorf("%w: schedule %s has no fire at %v", store.ErrNotFound, name, at)
		}
		f, ok := sc.fires[at.UnixNano()]
		if !ok {
			return struct{}{}, fmt.Errorf("%w: schedule %s has no fire at %v", store.ErrNotFound, name, at)
		}
		f.Started = true
		sc.fires[at.UnixNano()] = f
		return struct{}{}, nil
	})
	return err
}
