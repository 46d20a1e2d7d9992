package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskbridge/taskbridge/store"
)

// DefaultSchema is the schema the tables live in unless Options.Schema
// says otherwise.
const DefaultSchema = "taskbridge"

// Options configure Open; nil means the defaults.
type Options struct {
	// Options are the settings every backend shares: its limits and its
	// clock.
	store.Options
	// Schema is the PostgreSQL schema that holds the store's tables
	// ("" means DefaultSchema). Open creates it when missing. Stores on
	// different schemas of one database are independent, change feed
	// included.
	Schema string
	// Logger reports unusual events (a lost change-feed connection); nil
	// discards them.
	Logger *slog.Logger
	// MaxConns is the size of the connection pool (zero: pgxpool's, the
	// larger of 4 and the number of CPUs, unless the DSN sets
	// pool_max_conns). The change notifier holds one more connection of
	// its own (opened at the first write), and each Subscribe one more.
	MaxConns int32
}

// resolved returns o (nil: the defaults) with its defaults filled in, or
// an error naming the field that cannot work.
func (o *Options) resolved() (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	if r.MaxConns < 0 {
		return r, fmt.Errorf("postgres: %w: MaxConns is negative (%d)", store.ErrInvalid, r.MaxConns)
	}
	r.Options = r.Options.WithDefaults()
	if r.Schema == "" {
		r.Schema = DefaultSchema
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	return r, nil
}

// Store is a task store on PostgreSQL. It is safe for concurrent use, and
// several Stores (in one or many processes) may share one schema.
type Store struct {
	pool    *pgxpool.Pool
	connCfg *pgx.ConnConfig // for the change feed's own connections
	schema  string
	channel string // the changes' NOTIFY channel
	// eventsChannel carries the event appends, for SubscribeEvents only:
	// a replica of an older version, which does not LISTEN on it, never
	// sees a record it cannot read.
	eventsChannel string
	sql           statements
	codec         *store.CursorCodec
	limits        store.Limits
	now           func() time.Time
	log           *slog.Logger

	closed atomic.Bool
	subsMu sync.Mutex
	subs   map[*subscription]struct{}

	pub   *publisher // sends the change notifications after commit
	stats writeStats
	wire  *wireCounter // every connection's tracer
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.EventNotifier = (*Store)(nil)
	_ store.Shared        = (*Store)(nil)
)

// Open connects to the database at dsn (a PostgreSQL URL or key=value
// string, as pgx accepts), creates or migrates the schema (see the package
// documentation) and returns the store. ctx bounds the connection and the
// migration only. A nil opts means the defaults; a field that cannot work
// fails Open, named.
func Open(ctx context.Context, dsn string, opts *Options) (*Store, error) {
	o, err := opts.resolved()
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse dsn: %w", err)
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	wire := &wireCounter{}
	cfg.ConnConfig.Tracer = wire
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	quoted := pgx.Identifier{o.Schema}.Sanitize()
	var key []byte
	err = pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		var err error
		key, err = migrate(ctx, c.Conn(), o.Schema, quoted)
		return err
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open schema %s: %w", o.Schema, err)
	}
	// Count from here: the schema's creation or migration is Open's, not
	// the store's work.
	wire.statements.Store(0)
	wire.roundTrips.Store(0)
	s := &Store{
		pool:    pool,
		connCfg: cfg.ConnConfig.Copy(),
		schema:  o.Schema,
		channel: channelName("taskbridge:", o.Schema),
		// A name of its own, not a prefix of the other.
		eventsChannel: channelName("taskbridge-events:", o.Schema),
		sql:           newStatements(quoted),
		codec:         store.NewCursorCodec(key),
		limits:        o.Limits,
		now:           o.Now,
		log:           o.Logger,
		subs:          make(map[*subscription]struct{}),
		wire:          wire,
	}
	s.pub = newPublisher(s)
	return s, nil
}

// channelName is a LISTEN/NOTIFY channel of a schema: prefix and the
// schema, or a hash of it when that would pass PostgreSQL's 63-byte
// identifier limit.
func channelName(prefix, schema string) string {
	ch := prefix + schema
	if len(ch) > 63 {
		sum := sha256.Sum256([]byte(schema))
		ch = prefix + hex.EncodeToString(sum[:16])
	}
	return ch
}

// Shared reports true: other processes may use the same schema at the same
// time (see store.Shared).
func (s *Store) Shared() bool { return true }

// Schema returns the schema the store's tables live in.
func (s *Store) Schema() string { return s.schema }

// Close ends every subscription, closes the connection pool (waiting for
// the writes in flight to finish), then sends the change notifications
// still queued (waiting at most two seconds) and closes the notifier's
// connection. Every later call, including Close, fails with
// store.ErrClosed.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return store.ErrClosed
	}
	s.subsMu.Lock()
	subs := make([]*subscription, 0, len(s.subs))
	for sub := range s.subs {
		subs = append(subs, sub)
	}
	s.subsMu.Unlock()
	for _, sub := range subs {
		sub.stop()
	}
	s.pool.Close()
	s.pub.stop()
	return nil
}

// begin checks ctx and the closed flag before an operation.
func (s *Store) begin(ctx context.Context) (context.Context, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctx.Err(); err != nil {
		return ctx, err
	}
	if s.closed.Load() {
		return ctx, store.ErrClosed
	}
	return ctx, nil
}

// fail wraps a database error for op; after Close it is store.ErrClosed,
// and a context error is returned as is.
func (s *Store) fail(op string, err error) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// statements are the store's SQL, with the schema filled in.
type statements struct {
	insert, get, lock, list, listHeaders, expired, leases, due, active string
	getTail, headerTail, insertEvent, insertEvents, dropEvents, events string
	delete, renew, counts, count                                       string
	setVars, deleteVars                                                string
	quoted                                                             string
}

// expand fills the quoted schema into a statement.
func expand(sql, quoted string) string { return strings.ReplaceAll(sql, "{s}", quoted) }

// Column lists. headerCols are the header (no variables, result, error or
// history); fullCols add the rest, the variables as two arrays sorted by
// name.
const (
	headerCols = `t.id, t.owner, t.status, t.status_message, t.created_at, t.updated_at, t.ttl, t.expires_at,
	t.poll_interval, t.method, t.name, t.arguments, t.label_keys, t.label_values, t.version,
	t.lease_holder, t.lease_epoch, t.lease_until, t.wake_at`
	fullCols = headerCols + `, t.result, t.has_error, t.error_code, t.error_message, t.error_data,
	t.history_status, t.history_message, t.history_at,
	ARRAY(SELECT v.name FROM {s}.task_vars v WHERE v.task_id = t.id ORDER BY v.name),
	ARRAY(SELECT v.value FROM {s}.task_vars v WHERE v.task_id = t.id ORDER BY v.name)`
	insertCols = `id, owner, status, status_message, created_at, updated_at, ttl, expires_at, poll_interval,
	method, name, arguments, label_keys, label_values, version, lease_holder, lease_epoch, lease_until, wake_at,
	history_status, history_message, history_at, result, has_error, error_code, error_message, error_data`
	// tailJoin adds the Seq and End of a task's newest event (NULLs for
	// none) to a query of tasks t: the log's tail, where an append goes.
	tailJoin = ` LEFT JOIN LATERAL (SELECT e.seq, e.pos + octet_length(e.type) + coalesce(octet_length(e.data), 0) AS end_pos
	FROM {s}.task_events e WHERE e.task_id = t.id ORDER BY e.seq DESC LIMIT 1) l ON true`
)

func newStatements(quoted string) statements {
	x := func(sql string) string { return expand(sql, quoted) }
	return statements{
		quoted: quoted,
		insert: x(`INSERT INTO {s}.tasks (` + insertCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27)`),
		get:    x(`SELECT ` + fullCols + ` FROM {s}.tasks t WHERE t.id = $1`),
		// The lock of modify, apart from its read: a statement that waits
		// for a row lock sees the locked row as its holder committed it,
		// but the rest (variables, events) as they were when it started.
		lock:        x(`SELECT 1 FROM {s}.tasks WHERE id = $1 FOR UPDATE`),
		getTail:     x(`SELECT ` + fullCols + `, l.seq, l.end_pos FROM {s}.tasks t` + tailJoin + ` WHERE t.id = $1`),
		headerTail:  x(`SELECT ` + headerCols + `, l.seq, l.end_pos FROM {s}.tasks t` + tailJoin + ` WHERE t.id = $1`),
		insertEvent: x(`INSERT INTO {s}.task_events (task_id, seq, pos, at, type, data) VALUES ($1, $2, $3, $4, $5, $6)`),
		insertEvents: x(`INSERT INTO {s}.task_events (task_id, seq, pos, at, type, data)
	SELECT $1, s, p, a, t, d FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::text[], $6::bytea[]) AS x(s, p, a, t, d)`),
		// The oldest events the caps drop (store.AppendPlan): Seq below $2,
		// or placed before $3. The first event placed at $3 or later is
		// found walking the task's events from the oldest, so both parts
		// read only the events dropped, and one more.
		dropEvents: x(`DELETE FROM {s}.task_events WHERE task_id = $1 AND seq < GREATEST($2::bigint,
	(SELECT e.seq FROM {s}.task_events e WHERE e.task_id = $1 AND e.pos >= $3 ORDER BY e.seq LIMIT 1))`),
		// One statement, one snapshot: the bounds and the page agree. No
		// row: no task.
		events: x(`SELECT (SELECT min(e.seq) FROM {s}.task_events e WHERE e.task_id = t.id),
	(SELECT max(e.seq) FROM {s}.task_events e WHERE e.task_id = t.id), p.seq, p.at, p.type, p.data
	FROM {s}.tasks t LEFT JOIN LATERAL (SELECT e.seq, e.at, e.type, e.data FROM {s}.task_events e
	WHERE e.task_id = t.id AND e.seq > $2 ORDER BY e.seq LIMIT $3) p ON true WHERE t.id = $1 ORDER BY p.seq`),
		list: x(`SELECT ` + fullCols + ` FROM {s}.tasks t WHERE t.owner = $1 AND (t.created_at, t.id) > ($2, $3)
	ORDER BY t.created_at, t.id LIMIT $4`),
		listHeaders: x(`SELECT ` + headerCols + ` FROM {s}.tasks t WHERE t.owner = $1 AND (t.created_at, t.id) > ($2, $3)
	ORDER BY t.created_at, t.id LIMIT $4`),
		expired: x(`SELECT ` + fullCols + ` FROM {s}.tasks t WHERE t.expires_at IS NOT NULL AND t.expires_at <= $1
	ORDER BY t.expires_at, t.id LIMIT $2`),
		leases: x(`SELECT ` + fullCols + ` FROM {s}.tasks t WHERE t.lease_holder IS NOT NULL AND t.lease_until <= $1
	ORDER BY t.lease_until, t.id LIMIT $2`),
		// The predicates of the partial index tasks_wake, so that it
		// serves the whole query.
		due: x(`SELECT ` + fullCols + ` FROM {s}.tasks t WHERE t.wake_at IS NOT NULL AND t.status IN ('working', 'input_required')
	AND t.wake_at <= $1 ORDER BY t.wake_at, t.id LIMIT $2`),
		active: x(`SELECT ` + fullCols + ` FROM {s}.tasks t WHERE t.status IN ('working', 'input_required')
	ORDER BY t.created_at, t.id`),
		// The counter goes with the row, in one statement; no row means
		// no task.
		delete: x(`WITH d AS (DELETE FROM {s}.tasks WHERE id = $1 RETURNING status),
	c AS (UPDATE {s}.task_counts k SET n = k.n - 1 FROM d WHERE k.status = d.status AND k.shard = $2)
	SELECT d.status FROM d`),
		renew: x(`UPDATE {s}.tasks SET lease_until = $3
	WHERE id = ANY($1) AND lease_holder = $2 AND status IN ('working', 'input_required') RETURNING id`),
		counts: x(`SELECT status, sum(n)::bigint FROM {s}.task_counts GROUP BY status`),
		count:  x(`UPDATE {s}.task_counts SET n = n + $3 WHERE status = $1 AND shard = $2`),
		setVars: x(`INSERT INTO {s}.task_vars (task_id, name, value) SELECT $1, n, v FROM unnest($2::bytea[], $3::bytea[]) AS x(n, v)
	ON CONFLICT (task_id, name) DO UPDATE SET value = EXCLUDED.value`),
		deleteVars: x(`DELETE FROM {s}.task_vars WHERE task_id = $1 AND name = ANY($2::bytea[])`),
	}
}
