package bboltstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/store"
	bolt "go.etcd.io/bbolt"
)

// List returns one page of an owner's tasks in (CreatedAt, id) order; see
// store.Store. It seeks the owner index, so a cursor whose task was deleted
// since stays valid: the listing resumes after its position.
func (s *Store) List(ctx context.Context, opts store.ListOptions) (store.Page, error) {
	if opts.Owner == "" {
		return store.Page{}, fmt.Errorf("%w: List needs an owner", store.ErrInvalid)
	}
	limit := store.PageLimit(opts.Limit)
	var seek []byte
	if opts.Cursor != "" {
		at, id, err := s.codec.Decode(opts.Owner, opts.Cursor)
		if err != nil {
			return store.Page{}, err
		}
		seek = ownerKey(opts.Owner, at.UnixNano(), id)
	}
	if len(opts.Owner) > store.MaxOwnerBytes {
		// No such task can exist, and the 2-byte length prefix could not
		// represent the owner.
		if err := s.view(ctx, func(*bolt.Tx) error { return nil }); err != nil {
			return store.Page{}, err
		}
		return store.Page{}, nil
	}
	prefix := ownerPrefix(opts.Owner)
	var page store.Page
	err := s.view(ctx, func(tx *bolt.Tx) error {
		page = store.Page{}
		c := tx.Bucket(bucketByOwner).Cursor()
		var k []byte
		if seek != nil {
			k, _ = c.Seek(seek)
			if bytes.Equal(k, seek) {
				k, _ = c.Next()
			}
		} else {
			k, _ = c.Seek(prefix)
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if len(page.Tasks) == limit {
				last := page.Tasks[len(page.Tasks)-1]
				page.NextCursor = s.codec.Encode(opts.Owner, last.CreatedAt, last.ID)
				break
			}
			if len(k) < len(prefix)+8 {
				return fmt.Errorf("%w: short owner index key", errCorrupt)
			}
			load := loadTask
			if opts.HeadersOnly {
				load = loadHeader
			}
			t, err := load(tx, k[len(prefix)+8:])
			if err != nil {
				return fmt.Errorf("owner index: %w", err)
			}
			page.Tasks = append(page.Tasks, t)
		}
		return nil
	})
	if err != nil {
		return store.Page{}, err
	}
	return page, nil
}

// Expired returns up to limit tasks whose ExpiresAt is at or before now,
// soonest first, reading the expiry index; see store.Store. A limit of zero
// or less means store.DefaultPageSize; it is capped at store.MaxPageSize.
func (s *Store) Expired(ctx context.Context, now time.Time, limit int) ([]*store.Task, error) {
	return s.timeIndex(ctx, bucketExpiry, now, limit)
}

// Due returns up to limit tasks whose WakeAt is at or before now, soonest
// first, reading the wake index; see store.Store. Only tasks that are not
// terminal have a WakeAt (and so a wake entry).
func (s *Store) Due(ctx context.Context, now time.Time, limit int) ([]*store.Task, error) {
	return s.timeIndex(ctx, bucketWake, now, limit)
}

// timeIndex reads up to limit full tasks from an index keyed by time|id
// (expiry, leases, wake) whose time is at or before now, soonest first.
func (s *Store) timeIndex(ctx context.Context, bucket []byte, now time.Time, limit int) ([]*store.Task, error) {
	limit = store.PageLimit(limit)
	var out []*store.Task
	err := s.view(ctx, func(tx *bolt.Tx) error {
		out = nil
		c := tx.Bucket(bucket).Cursor()
		for k, _ := c.First(); k != nil && len(out) < limit; k, _ = c.Next() {
			if len(k) < 8 {
				return fmt.Errorf("%w: short %s key", errCorrupt, bucket)
			}
			if time.Unix(0, keyNanos(k)).After(now) {
				break
			}
			t, err := loadTask(tx, k[8:])
			if err != nil {
				return fmt.Errorf("%s index: %w", bucket, err)
			}
			out = append(out, t)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Active returns every non-terminal task, ordered by (CreatedAt, id),
// reading the active index; see store.Store.
func (s *Store) Active(ctx context.Context) ([]*store.Task, error) {
	var out []*store.Task
	err := s.view(ctx, func(tx *bolt.Tx) error {
		out = nil
		c := tx.Bucket(bucketActive).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			t, err := loadTask(tx, k)
			if err != nil {
				return fmt.Errorf("active index: %w", err)
			}
			out = append(out, t)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *store.Task) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}
