package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

func notFound(id string) error { return fmt.Errorf("%w: %s", store.ErrNotFound, id) }

// Create stores a new task; see store.Store. The row, its variables, its
// counter and its first events go in one batch, which PostgreSQL runs as
// one implicit transaction: a duplicate id (the primary key) fails the
// whole batch with store.ErrExists. The change notifications (the change,
// the append) are reserved before the batch and sent once it committed.
func (s *Store) Create(ctx context.Context, t *store.Task) (_ *store.Task, err error) {
	ctx, err = s.begin(ctx)
	if err != nil {
		return nil, err
	}
	rec, err := store.PrepareCreate(t, s.limits)
	if err != nil {
		return nil, err
	}
	plan := s.limits.PlanAppend(0, 0, rec.Events)
	rec.Events = nil
	defer s.stats.failed(&err)
	// An explicit connection, released after the notification is
	// resolved: Close waits for every connection, so the notification of
	// a committed write is always handed over.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, s.fail("create "+rec.ID, err)
	}
	defer conn.Release()
	// No other write of this task can commit before this one: none can
	// see it. So its notification is the task's first.
	sl := s.pub.reserve(rec.ID, record(rec), false)
	defer s.pub.resolveFor(sl, &err)
	esl := s.pub.reserve(rec.ID, eventRecord(rec.ID, plan.Last), true)
	defer s.pub.resolveFor(esl, &err)
	b := &pgx.Batch{}
	b.Queue(s.sql.insert, insertArgs(rec)...)
	if len(rec.Variables) > 0 {
		names := make([]string, 0, len(rec.Variables))
		for k := range rec.Variables {
			names = append(names, k)
		}
		queueSetVars(b, s.sql.setVars, rec, names)
	}
	b.Queue(s.sql.count, string(rec.Status), shard(rec.ID), 1)
	s.queueAppend(b, rec.ID, plan)
	start := time.Now()
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.TableName == "tasks" {
			return nil, fmt.Errorf("%w: %s", store.ErrExists, rec.ID)
		}
		s.stats.commitErrors.Add(1)
		return nil, s.fail("create "+rec.ID, err)
	}
	s.stats.committed(time.Since(start))
	return rec.Clone(), nil
}

// queueSetVars queues the upsert of t's variables named in names.
func queueSetVars(b *pgx.Batch, sql string, t *store.Task, names []string) {
	slices.Sort(names)
	ns := make([][]byte, len(names))
	vs := make([][]byte, len(names))
	for i, k := range names {
		ns[i] = []byte(k)
		vs[i] = []byte(t.Variables[k])
	}
	b.Queue(sql, []byte(t.ID), ns, vs)
}

// Get returns the task; see store.Store.
func (s *Store) Get(ctx context.Context, id string) (*store.Task, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	t, err := scanOne(s.pool.QueryRow(ctx, s.sql.get, []byte(id)), true)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, s.fail("get "+id, err)
	}
	return t, nil
}

// Update applies u atomically; see store.Store. The task row is locked
// (SELECT ... FOR UPDATE) while the shared rules run, so concurrent
// writers from any process are serialized on it, and number their events
// in commit order. A pure append reads the task's header only and writes
// only its events.
func (s *Store) Update(ctx context.Context, id string, u store.Update) (*store.Task, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	p, err := store.PrepareUpdate(u, s.limits)
	if err != nil {
		return nil, err
	}
	read := s.sql.get
	switch {
	case p.AppendOnly():
		read = s.sql.headerTail
	case len(u.Events) > 0 || u.Status != "": // it may append events
		read = s.sql.getTail
	}
	return s.modify(ctx, "update", id, read, func(t *store.Task) (store.Changes, error) {
		return p.Apply(t, s.now())
	})
}

// modify runs fn on the locked task and writes what it changed, in two
// round trips on one connection: BEGIN, the row lock (SELECT ... FOR
// UPDATE) and the read of the task (read: get, getTail or headerTail; a
// statement of its own, so that it sees everything committed before the
// lock was granted), then (after fn, in Go) the writes (row, variables,
// counters, events) and COMMIT. The row lock is held for one round trip.
// When fn fails, nothing is written. The change notifications are
// reserved while the row is locked, so that the task's notifications are
// in commit order, and resolved before the connection goes back to the
// pool.
func (s *Store) modify(ctx context.Context, op, id, read string, fn func(t *store.Task) (store.Changes, error)) (_ *store.Task, err error) {
	defer s.stats.failed(&err)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, s.fail(op+" "+id, err)
	}
	defer release(ctx, conn)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.sql.lock, []byte(id))
	b.Queue(read, []byte(id))
	br := conn.SendBatch(ctx, b)
	_, err = br.Exec()
	if err == nil {
		var one int
		err = br.QueryRow().Scan(&one)
	}
	var (
		t    *store.Task
		last uint64
		end  int64
	)
	if err == nil {
		switch read {
		case s.sql.get:
			t, err = scanOne(br.QueryRow(), true)
		default:
			t, last, end, err = scanTail(br.QueryRow(), read == s.sql.getTail)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, s.fail(op+" "+id, err)
	}
	ch, err := fn(t)
	if err != nil {
		return nil, err
	}
	w := &pgx.Batch{}
	if !ch.AppendOnly {
		sl := s.pub.reserve(id, record(t), false)
		defer s.pub.resolveFor(sl, &err)
		w = s.writes(t, ch)
	}
	if len(ch.Events) > 0 {
		plan := s.limits.PlanAppend(last, end, ch.Events)
		sl := s.pub.reserve(id, eventRecord(id, plan.Last), true)
		defer s.pub.resolveFor(sl, &err)
		s.queueAppend(w, id, plan)
	}
	w.Queue("COMMIT")
	start := time.Now()
	if err := conn.SendBatch(ctx, w).Close(); err != nil {
		s.stats.commitErrors.Add(1)
		return nil, s.fail(op+" "+id, err)
	}
	if st := conn.Conn().PgConn().TxStatus(); st != 'I' {
		s.stats.commitErrors.Add(1)
		return nil, s.fail(op+" "+id, fmt.Errorf("transaction status %q after COMMIT", st))
	}
	s.stats.committed(time.Since(start))
	return t, nil
}

// writes queues the statements that store t after a change described by
// ch: the row (the history only when the status changed, the result and
// error only when they changed), the variables set or deleted, and the
// counters of the old and new status (sorted, so that concurrent writers
// lock counter rows in one order).
func (s *Store) writes(t *store.Task, ch store.Changes) *pgx.Batch {
	keys, values := labelArrays(t)
	args := []any{[]byte(t.ID), string(t.Status), nonNil(t.StatusMessage), t.UpdatedAt.UnixNano(), optNanosArg(t.ExpiresAt),
		keys, values, int64(t.Version), optBytes(t.LeaseHolder), int64(t.LeaseEpoch), optNanosArg(t.LeaseUntil),
		optNanosArg(t.WakeAt)}
	var set strings.Builder
	set.WriteString(`status = $2, status_message = $3, updated_at = $4, expires_at = $5, label_keys = $6,
	label_values = $7, version = $8, lease_holder = $9, lease_epoch = $10, lease_until = $11, wake_at = $12`)
	param := func(name string, v any) {
		args = append(args, v)
		set.WriteString(", " + name + " = $" + strconv.Itoa(len(args)))
	}
	if ch.StatusChanged {
		hs, hm, ha := historyArrays(t)
		param("history_status", hs)
		param("history_message", hm)
		param("history_at", ha)
	}
	if ch.ResultChanged {
		var result []byte
		if t.Result != nil {
			result = []byte(t.Result)
		}
		param("result", result)
		e := errorArgs(t)
		param("has_error", e[0])
		param("error_code", e[1])
		param("error_message", e[2])
		param("error_data", e[3])
	}
	b := &pgx.Batch{}
	b.Queue("UPDATE "+s.sql.quoted+".tasks SET "+set.String()+" WHERE id = $1", args...)
	if len(ch.DeletedVariables) > 0 {
		names := make([][]byte, len(ch.DeletedVariables))
		for i, k := range ch.DeletedVariables {
			names[i] = []byte(k)
		}
		b.Queue(s.sql.deleteVars, []byte(t.ID), names)
	}
	if len(ch.SetVariables) > 0 {
		queueSetVars(b, s.sql.setVars, t, slices.Clone(ch.SetVariables))
	}
	if ch.StatusChanged {
		sh := shard(t.ID)
		deltas := []struct {
			st mcptask.Status
			n  int
		}{{ch.PrevStatus, -1}, {t.Status, 1}}
		if deltas[1].st < deltas[0].st {
			deltas[0], deltas[1] = deltas[1], deltas[0]
		}
		for _, d := range deltas {
			b.Queue(s.sql.count, string(d.st), sh, d.n)
		}
	}
	return b
}

// release gives conn back to the pool, rolling back the transaction a
// write left open (it failed, or ended without writing), even when ctx is
// done: a connection left inside a transaction would be dropped by the
// pool instead. After COMMIT there is none to roll back.
func release(ctx context.Context, conn *pgxpool.Conn) {
	if conn.Conn().PgConn().TxStatus() != 'I' && !conn.Conn().IsClosed() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	conn.Release()
}

// Delete removes a task (its variables go with it: ON DELETE CASCADE) and
// uncounts it; see store.Store. It takes two round trips, like modify:
// BEGIN and the delete (one statement), then, with the change
// notification reserved while the deleted row is still locked, COMMIT.
func (s *Store) Delete(ctx context.Context, id string) (err error) {
	ctx, err = s.begin(ctx)
	if err != nil {
		return err
	}
	defer s.stats.failed(&err)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.fail("delete "+id, err)
	}
	defer release(ctx, conn)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.sql.delete, []byte(id), shard(id))
	br := conn.SendBatch(ctx, b)
	_, err = br.Exec()
	var status string
	if err == nil {
		err = br.QueryRow().Scan(&status)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound(id)
	}
	if err != nil {
		return s.fail("delete "+id, err)
	}
	sl := s.pub.reserve(id, deleteRecord(id, mcptask.Status(status)), false)
	defer s.pub.resolveFor(sl, &err)
	start := time.Now()
	if _, err = conn.Exec(ctx, "COMMIT"); err != nil {
		s.stats.commitErrors.Add(1)
		return s.fail("delete "+id, err)
	}
	if st := conn.Conn().PgConn().TxStatus(); st != 'I' {
		s.stats.commitErrors.Add(1)
		return s.fail("delete "+id, fmt.Errorf("transaction status %q after COMMIT", st))
	}
	s.stats.committed(time.Since(start))
	return nil
}

// List returns one page of an owner's tasks in (CreatedAt, id) order from
// the owner index; see store.Store. A cursor whose task was deleted since
// stays valid: the listing resumes after its position.
func (s *Store) List(ctx context.Context, opts store.ListOptions) (store.Page, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return store.Page{}, err
	}
	if opts.Owner == "" {
		return store.Page{}, fmt.Errorf("%w: List needs an owner", store.ErrInvalid)
	}
	limit := store.PageLimit(opts.Limit)
	at, afterID := int64(math.MinInt64), []byte{}
	if opts.Cursor != "" {
		t, id, err := s.codec.Decode(opts.Owner, opts.Cursor)
		if err != nil {
			return store.Page{}, err
		}
		at, afterID = t.UnixNano(), []byte(id)
	}
	sql := s.sql.list
	if opts.HeadersOnly {
		sql = s.sql.listHeaders
	}
	rows, err := s.pool.Query(ctx, sql, []byte(opts.Owner), at, afterID, limit+1)
	if err != nil {
		return store.Page{}, s.fail("list", err)
	}
	tasks, err := scanAll(rows, !opts.HeadersOnly)
	if err != nil {
		return store.Page{}, s.fail("list", err)
	}
	var page store.Page
	if len(tasks) > limit {
		tasks = tasks[:limit]
		last := tasks[limit-1]
		page.NextCursor = s.codec.Encode(opts.Owner, last.CreatedAt, last.ID)
	}
	page.Tasks = tasks
	return page, nil
}

// Expired returns up to limit tasks whose ExpiresAt is at or before now,
// soonest first, from the expiry index; see store.Store.
func (s *Store) Expired(ctx context.Context, now time.Time, limit int) ([]*store.Task, error) {
	return s.timeIndex(ctx, "expired", s.sql.expired, now, limit)
}

// Due returns up to limit tasks whose WakeAt is at or before now, soonest
// first, from the wake index (tasks_wake, which holds only tasks that are
// not terminal); see store.Store.
func (s *Store) Due(ctx context.Context, now time.Time, limit int) ([]*store.Task, error) {
	return s.timeIndex(ctx, "due", s.sql.due, now, limit)
}

func (s *Store) timeIndex(ctx context.Context, op, sql string, now time.Time, limit int) ([]*store.Task, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, sql, now.UnixNano(), store.PageLimit(limit))
	if err != nil {
		return nil, s.fail(op, err)
	}
	out, err := scanAll(rows, true)
	if err != nil {
		return nil, s.fail(op, err)
	}
	return out, nil
}

// Active returns every non-terminal task, ordered by (CreatedAt, id), from
// the status index; see store.Store.
func (s *Store) Active(ctx context.Context) ([]*store.Task, error) {
	ctx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.sql.active)
	if err != nil {
		return nil, s.fail("active", err)
	}
	out, err := scanAll(rows, true)
	if err != nil {
		return nil, s.fail("active", err)
	}
	return out, nil
}
