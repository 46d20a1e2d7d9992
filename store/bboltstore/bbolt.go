package bboltstore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/taskbridge/taskbridge/store"
)

// Bucket and meta key names.
var (
	bucketTasks   = []byte("tasks")
	bucketVars    = []byte("vars")
	bucketResults = []byte("results")
	bucketByOwner = []byte("by_owner")
	bucketExpiry  = []byte("expiry")
	bucketActive  = []byte("active")
	bucketMeta    = []byte("meta")
	// Added by schema 2.
	bucketByStatus = []byte("by_status")
	bucketByName   = []byte("by_name")
	bucketLeases   = []byte("leases")
	bucketHistory  = []byte("history")
	// Added by schema 3.
	bucketWake = []byte("wake")
	// Added by schema 4.
	bucketEvents = []byte("events")
	// Schema 5: the engine's queues (queues.go) and schedules
	// (schedules.go).
	bucketQueues    = []byte("queues")
	bucketSchedules = []byte("schedules")
	// Schema 6: the replicas' registry (replicas.go).
	bucketReplicas = []byte("replicas")

	metaSchema    = []byte("schema")
	metaCursorKey = []byte("cursor_key")
	// metaMigrated records how far a schema 1 -> 2 migration got (the last
	// task id it indexed), so that an interrupted one resumes.
	metaMigrated = []byte("migrated_through")

	allBuckets = [][]byte{bucketTasks, bucketVars, bucketResults, bucketByOwner, bucketExpiry, bucketActive,
		bucketMeta, bucketByStatus, bucketByName, bucketLeases, bucketHistory, bucketWake, bucketEvents,
		bucketQueues, bucketSchedules, bucketReplicas}
)

// SchemaVersion is the on-disk layout version stored in the meta bucket.
// Open upgrades a file of schema 1 to 5 (see migrate.go) and refuses any
// other version.
const SchemaVersion = 6

// bucketSchema returns the schema version that added bucket name: 1 for
// the original buckets.
func bucketSchema(name []byte) byte {
	switch string(name) {
	case string(bucketByStatus), string(bucketByName), string(bucketLeases), string(bucketHistory):
		return 2
	case string(bucketWake):
		return 3
	case string(bucketEvents):
		return 4
	case string(bucketQueues), string(bucketSchedules):
		return 5
	case string(bucketReplicas):
		return 6
	}
	return 1
}

const (
	// maxBatch caps the number of operations committed in one transaction.
	maxBatch = 512
	// DefaultCommitWindow is how long a busy batch stays open for more
	// writes by default: not at all (see Options.CommitWindow).
	DefaultCommitWindow = time.Duration(0)
	// CommitWindowFrom is how many writes must be waiting at once for the
	// commit window to open.
	CommitWindowFrom = 8
	// DefaultOpenTimeout is how long Open waits for the file lock.
	DefaultOpenTimeout = time.Second
	cursorKeyLen       = 32
)

// Store is a task store on a bbolt file. It is safe for concurrent use.
type Store struct {
	db     *bolt.DB
	path   string
	limits store.Limits
	now    func() time.Time
	log    *slog.Logger
	codec  *store.CursorCodec

	// closeMu guards closed and sending on ops: senders hold it shared,
	// Close takes it exclusively to close ops.
	closeMu    sync.RWMutex
	closed     bool
	closedFlag atomic.Bool // for the lock-free check in readers
	ops        chan *op
	done       chan struct{} // closed when the committer exits
	window     time.Duration // the commit window (Options.CommitWindow)

	stats struct {
		commits, commitNanos, opsCommitted, opsFailed, maxBatch, commitErrors, retries atomic.Uint64
		// Write counters for tests: headers, variable values and result
		// records written.
		headerWrites, varWrites, resultWrites atomic.Uint64
	}
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the store file at path and starts its
// committer. It fails with a clear error, after the open timeout, when
// another Store (in this or another process) holds the file, and with an
// error matching ErrCorrupt (never a panic) when the file is damaged in a
// way bbolt notices while opening. A file of an older schema is upgraded
// in place (see migrate.go). A nil opts means the defaults; a field that
// cannot work fails Open, named.
func Open(path string, opts *Options) (*Store, error) {
	o, err := opts.resolved()
	if err != nil {
		return nil, err
	}
	db, file, err := openBolt(path, &bolt.Options{
		Timeout:      o.OpenTimeout,
		NoSync:       o.NoSync,
		FreelistType: bolt.FreelistMapType,
		MmapFlags:    mmapFlags(o.Prefault),
	})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("bboltstore: open %s: the file is locked by another open store (waited %v for the lock): %w", path, o.OpenTimeout, err)
		}
		return nil, err
	}
	var (
		cursorKey []byte
		schema    byte
	)
	err = guard(path, func() error {
		return db.Update(func(tx *bolt.Tx) error {
			for _, name := range allBuckets {
				if _, err := tx.CreateBucketIfNotExists(name); err != nil {
					return err
				}
			}
			meta := tx.Bucket(bucketMeta)
			v := meta.Get(metaSchema)
			switch {
			case v == nil && isEmpty(tx.Bucket(bucketTasks)):
				// A new file.
				schema = SchemaVersion
				if err := meta.Put(metaSchema, []byte{SchemaVersion}); err != nil {
					return err
				}
			case v == nil:
				return &CorruptError{Path: path, Detail: "tasks without a schema version"}
			case len(v) == 1 && v[0] >= 1 && v[0] <= SchemaVersion:
				schema = v[0]
			default:
				return fmt.Errorf("unsupported schema version %v (want %d)", v, SchemaVersion)
			}
			if k := meta.Get(metaCursorKey); k != nil {
				if len(k) != cursorKeyLen {
					return &CorruptError{Path: path, Detail: fmt.Sprintf("cursor key of %d bytes", len(k))}
				}
				cursorKey = slices.Clone(k)
				return nil
			}
			cursorKey = make([]byte, cursorKeyLen)
			if _, err := rand.Read(cursorKey); err != nil {
				return err
			}
			return meta.Put(metaCursorKey, cursorKey)
		})
	})
	if err == nil && schema < SchemaVersion {
		err = guard(path, func() error { return migrate(db, schema, o.Logger) })
	}
	if err != nil {
		_ = closeQuietly(db, file)
		var ce *CorruptError
		if errors.As(err, &ce) {
			return nil, err
		}
		return nil, fmt.Errorf("bboltstore: open %s: %w", path, err)
	}
	s := &Store{
		db:     db,
		path:   path,
		limits: o.Limits,
		now:    o.Now,
		log:    o.Logger,
		codec:  store.NewCursorCodec(cursorKey),
		ops:    make(chan *op, maxBatch),
		window: o.CommitWindow,
		done:   make(chan struct{}),
	}
	go s.commitLoop()
	return s, nil
}

// Close stops accepting writes (they fail with store.ErrClosed), finishes
// every queued write, and closes the file. Every later call, including
// Close, fails with store.ErrClosed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return store.ErrClosed
	}
	s.closed = true
	s.closedFlag.Store(true)
	close(s.ops)
	s.closeMu.Unlock()
	<-s.done
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("bboltstore: close: %w", err)
	}
	return nil
}

// writeError marks an error that happened while an operation was writing,
// after its validation passed: the transaction may hold part of its writes.
type writeError struct{ err error }

// Error implements error.
func (e *writeError) Error() string { return "bboltstore: write: " + e.err.Error() }

// Unwrap returns the underlying bbolt error.
func (e *writeError) Unwrap() error { return e.err }

func put(b *bolt.Bucket, k, v []byte) error {
	if err := b.Put(k, v); err != nil {
		return &writeError{err}
	}
	return nil
}

func del(b *bolt.Bucket, k []byte) error {
	if err := b.Delete(k); err != nil {
		return &writeError{err}
	}
	return nil
}

// empty is the value of index entries.
var empty = []byte{}

func notFound(id string) error { return fmt.Errorf("%w: %s", store.ErrNotFound, id) }

func ctxOrBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// view runs a read-only transaction. A panic inside bbolt (a damaged page
// it reads lazily) becomes an error matching ErrCorrupt.
func (s *Store) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctxOrBackground(ctx).Err(); err != nil {
		return err
	}
	if s.closedFlag.Load() {
		return store.ErrClosed
	}
	err := guard(s.path, func() error { return s.db.View(fn) })
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return store.ErrClosed
	}
	return err
}

func isEmpty(b *bolt.Bucket) bool {
	k, _ := b.Cursor().First()
	return k == nil
}

// loadHeader reads a task without its variables, result, error and
// history.
func loadHeader(tx *bolt.Tx, id []byte) (*store.Task, error) {
	h := tx.Bucket(bucketTasks).Get(id)
	if h == nil {
		return nil, notFound(string(id))
	}
	t, err := decodeHeader(h)
	if err != nil {
		return nil, fmt.Errorf("task %q header: %w", id, err)
	}
	return t, nil
}

// loadTask reads the full task id (header, variables, result, history) in
// tx.
func loadTask(tx *bolt.Tx, id []byte) (*store.Task, error) {
	t, err := loadHeader(tx, id)
	if err != nil {
		return nil, err
	}
	if vb := tx.Bucket(bucketVars).Bucket(id); vb != nil {
		c := vb.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v == nil {
				continue // not ours
			}
			if t.Variables == nil {
				t.Variables = make(map[string]json.RawMessage)
			}
			t.Variables[string(k)] = append(make([]byte, 0, len(v)), v...)
		}
	}
	if r := tx.Bucket(bucketResults).Get(id); r != nil {
		if err := decodeResult(r, t); err != nil {
			return nil, fmt.Errorf("task %q result: %w", id, err)
		}
	}
	if h := tx.Bucket(bucketHistory).Get(id); h != nil {
		if t.History, err = decodeHistory(h); err != nil {
			return nil, fmt.Errorf("task %q history: %w", id, err)
		}
	}
	return t, nil
}

// Create stores a new task; see store.Store.
func (s *Store) Create(ctx context.Context, t *store.Task) (*store.Task, error) {
	rec, err := store.PrepareCreate(t, s.limits)
	if err != nil {
		return nil, err
	}
	events := rec.Events
	rec.Events = nil
	id := []byte(rec.ID)
	hdr := encodeHeader(rec)
	res := encodeResult(rec)
	hist := encodeHistory(rec.History)
	err = s.submit(ctx, func(tx *bolt.Tx) error {
		tasks := tx.Bucket(bucketTasks)
		if tasks.Get(id) != nil {
			return fmt.Errorf("%w: %s", store.ErrExists, rec.ID)
		}
		// First: it reads (a stray log would fail it) before it writes.
		if err := appendEvents(tx, rec.ID, events, s.limits); err != nil {
			return err
		}
		if err := put(tasks, id, hdr); err != nil {
			return err
		}
		s.stats.headerWrites.Add(1)
		if len(rec.Variables) > 0 {
			vb, err := tx.Bucket(bucketVars).CreateBucketIfNotExists(id)
			if err != nil {
				return &writeError{err}
			}
			for k, v := range rec.Variables {
				if err := put(vb, []byte(k), v); err != nil {
					return err
				}
				s.stats.varWrites.Add(1)
			}
		}
		if res != nil {
			if err := put(tx.Bucket(bucketResults), id, res); err != nil {
				return err
			}
			s.stats.resultWrites.Add(1)
		}
		if err := put(tx.Bucket(bucketHistory), id, hist); err != nil {
			return err
		}
		return indexTask(tx, rec)
	})
	if err != nil {
		return nil, err
	}
	// rec is this call's own copy (PrepareCreate cloned t), and the
	// committer is done with it: no copy of it is needed.
	return rec, nil
}

// Get returns the task; see store.Store.
func (s *Store) Get(ctx context.Context, id string) (*store.Task, error) {
	var t *store.Task
	err := s.view(ctx, func(tx *bolt.Tx) error {
		if id == "" {
			return notFound(id)
		}
		var err error
		t, err = loadTask(tx, []byte(id))
		return err
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Update applies u atomically; see store.Store. Only what changes is
// written: the header always, the variables named in u, the result record
// when u sets a result or an error, the history when the status changes,
// the index entries the update moves, and the events it appends. A pure
// append reads the header only and writes the events only.
func (s *Store) Update(ctx context.Context, id string, u store.Update) (*store.Task, error) {
	p, err := store.PrepareUpdate(u, s.limits)
	if err != nil {
		return nil, err
	}
	key := []byte(id)
	var out *store.Task
	err = s.submit(ctx, func(tx *bolt.Tx) error {
		out = nil
		if id == "" {
			return notFound(id)
		}
		load := loadTask
		if p.AppendOnly() {
			load = loadHeader
		}
		t, err := load(tx, key)
		if err != nil {
			return err
		}
		ch, err := p.Apply(t, s.now())
		if err != nil {
			return err
		}
		// Validation is over; from here on only writes.
		if err := appendEvents(tx, id, ch.Events, s.limits); err != nil {
			return err
		}
		if ch.AppendOnly {
			out = t
			return nil
		}
		if err := put(tx.Bucket(bucketTasks), key, encodeHeader(t)); err != nil {
			return err
		}
		s.stats.headerWrites.Add(1)
		if len(ch.SetVariables) > 0 || len(ch.DeletedVariables) > 0 {
			vars := tx.Bucket(bucketVars)
			vb, err := vars.CreateBucketIfNotExists(key)
			if err != nil {
				return &writeError{err}
			}
			for _, k := range ch.DeletedVariables {
				if err := del(vb, []byte(k)); err != nil {
					return err
				}
			}
			for _, k := range ch.SetVariables {
				if err := put(vb, []byte(k), t.Variables[k]); err != nil {
					return err
				}
				s.stats.varWrites.Add(1)
			}
			if k, _ := vb.Cursor().First(); k == nil {
				if err := vars.DeleteBucket(key); err != nil {
					return &writeError{err}
				}
			}
		}
		if ch.ResultChanged {
			if err := put(tx.Bucket(bucketResults), key, encodeResult(t)); err != nil {
				return err
			}
			s.stats.resultWrites.Add(1)
		}
		if err := reindex(tx, t, ch); err != nil {
			return err
		}
		out = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Delete removes a task and its index entries; see store.Store.
func (s *Store) Delete(ctx context.Context, id string) error {
	key := []byte(id)
	return s.submit(ctx, func(tx *bolt.Tx) error {
		if id == "" {
			return notFound(id)
		}
		t, err := loadHeader(tx, key)
		if err != nil {
			return err
		}
		if err := del(tx.Bucket(bucketTasks), key); err != nil {
			return err
		}
		vars := tx.Bucket(bucketVars)
		if vars.Bucket(key) != nil {
			if err := vars.DeleteBucket(key); err != nil {
				return &writeError{err}
			}
		}
		if err := del(tx.Bucket(bucketResults), key); err != nil {
			return err
		}
		if err := del(tx.Bucket(bucketHistory), key); err != nil {
			return err
		}
		if err := deleteEvents(tx, id); err != nil {
			return err
		}
		return unindexTask(tx, t)
	})
}
