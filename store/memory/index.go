package memory

import (
	"cmp"
	"crypto/rand"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The ordered indexes of the store (see the package comment).

// pos is a task's position in an ordered index: a Unix-nanosecond time and
// the task id.
type pos struct {
	at int64
	id string
}

func comparePos(a, b pos) int {
	if c := cmp.Compare(a.at, b.at); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

// Store is an in-memory task store. The zero value is not usable; call New.
type Store struct {
	limits store.Limits
	now    func() time.Time
	codec  *store.CursorCodec

	mu        sync.RWMutex
	closed    bool
	tasks     map[string]*store.Task
	byOwner   map[string][]pos         // sorted by (CreatedAt, id)
	byStatus  map[mcptask.Status][]pos // sorted by (CreatedAt, id)
	byName    map[string][]pos         // by Request.Name, sorted by (CreatedAt, id)
	expiry    []pos                    // sorted by (ExpiresAt, id); tasks with an ExpiresAt
	leases    []pos                    // sorted by (LeaseUntil, id); tasks with a LeaseHolder
	wake      []pos                    // sorted by (WakeAt, id); tasks with a WakeAt
	counts    map[mcptask.Status]int
	logs      map[string]*eventLog            // by task id; a task without events has none
	queues    map[string]*queue               // by queue name (queues.go); made on first use
	schedules map[string]*schedule            // by schedule name (schedules.go); made on first use
	replicas  map[string]*store.ReplicaRecord // by replica (replicas.go); made on first use
}

var _ store.Store = (*Store)(nil)

// New returns an empty store configured by opts: the settings every
// backend shares (its limits and clock; the memory store has no others).
// A nil opts means the defaults.
func New(opts *store.Options) *Store {
	o := opts.WithDefaults()
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand.Read never fails (it crashes the program instead)
	return &Store{
		limits:   o.Limits,
		now:      o.Now,
		codec:    store.NewCursorCodec(key),
		tasks:    make(map[string]*store.Task),
		byOwner:  make(map[string][]pos),
		byStatus: make(map[mcptask.Status][]pos),
		byName:   make(map[string][]pos),
		counts:   store.NewCounts(),
		logs:     make(map[string]*eventLog),
	}
}

func insertPos(s []pos, p pos) []pos {
	i, _ := slices.BinarySearchFunc(s, p, comparePos)
	return slices.Insert(s, i, p)
}

func removePos(s []pos, p pos) []pos {
	i, found := slices.BinarySearchFunc(s, p, comparePos)
	if !found {
		return s
	}
	return slices.Delete(s, i, i+1)
}

// addTo and removeFrom keep a map of sorted index slices, dropping empty
// slices so that the map does not grow with every owner or name ever seen.
func addTo[K comparable](m map[K][]pos, k K, p pos) { m[k] = insertPos(m[k], p) }

func removeFrom[K comparable](m map[K][]pos, k K, p pos) {
	if idx := removePos(m[k], p); len(idx) == 0 {
		delete(m, k)
	} else {
		m[k] = idx
	}
}

func createdPos(t *store.Task) pos { return pos{at: t.CreatedAt.UnixNano(), id: t.ID} }
func expiryPos(t *store.Task) pos  { return pos{at: t.ExpiresAt.UnixNano(), id: t.ID} }
func leasePos(t *store.Task) pos   { return pos{at: t.LeaseUntil.UnixNano(), id: t.ID} }
func wakePos(t *store.Task) pos    { return pos{at: t.WakeAt.UnixNano(), id: t.ID} }

// index adds every index entry of t; unindex removes them. The caller holds
// mu for writing.
func (s *Store) index(t *store.Task) {
	p := createdPos(t)
	addTo(s.byOwner, t.Owner, p)
	addTo(s.byStatus, t.Status, p)
	addTo(s.byName, t.Request.Name, p)
	if !t.ExpiresAt.IsZero() {
		s.expiry = insertPos(s.expiry, expiryPos(t))
	}
	if t.LeaseHolder != "" {
		s.leases = insertPos(s.leases, leasePos(t))
	}
	if !t.WakeAt.IsZero() {
		s.wake = insertPos(s.wake, wakePos(t))
	}
	s.counts[t.Status]++
}

func (s *Store) unindex(t *store.Task) {
	p := createdPos(t)
	removeFrom(s.byOwner, t.Owner, p)
	removeFrom(s.byStatus, t.Status, p)
	removeFrom(s.byName, t.Request.Name, p)
	if !t.ExpiresAt.IsZero() {
		s.expiry = removePos(s.expiry, expiryPos(t))
	}
	if t.LeaseHolder != "" {
		s.leases = removePos(s.leases, leasePos(t))
	}
	if !t.WakeAt.IsZero() {
		s.wake = removePos(s.wake, wakePos(t))
	}
	s.counts[t.Status]--
}

// reindex moves t's entries in the indexes a write changed, as reported by
// ch (t is the record after the write).
func (s *Store) reindex(t *store.Task, ch store.Changes) {
	if ch.StatusChanged {
		p := createdPos(t)
		removeFrom(s.byStatus, ch.PrevStatus, p)
		addTo(s.byStatus, t.Status, p)
		s.counts[ch.PrevStatus]--
		s.counts[t.Status]++
	}
	if ch.ExpiryChanged {
		if !ch.PrevExpiresAt.IsZero() {
			s.expiry = removePos(s.expiry, pos{at: ch.PrevExpiresAt.UnixNano(), id: t.ID})
		}
		if !t.ExpiresAt.IsZero() {
			s.expiry = insertPos(s.expiry, expiryPos(t))
		}
	}
	if ch.LeaseChanged {
		if ch.PrevLeaseHolder != "" {
			s.leases = removePos(s.leases, pos{at: ch.PrevLeaseUntil.UnixNano(), id: t.ID})
		}
		if t.LeaseHolder != "" {
			s.leases = insertPos(s.leases, leasePos(t))
		}
	}
	if ch.WakeChanged {
		if !ch.PrevWakeAt.IsZero() {
			s.wake = removePos(s.wake, pos{at: ch.PrevWakeAt.UnixNano(), id: t.ID})
		}
		if !t.WakeAt.IsZero() {
			s.wake = insertPos(s.wake, wakePos(t))
		}
	}
}
