package postgres

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskbridge/taskbridge/store"
)

// ListenerApplicationName is the application_name of the connections that
// Subscribe holds, so that an operator can tell them apart in
// pg_stat_activity.
const ListenerApplicationName = "taskbridge-listener"

// Backoff of the change feed's reconnection attempts.
const (
	minReconnectDelay = 50 * time.Millisecond
	maxReconnectDelay = 5 * time.Second
	connectTimeout    = 10 * time.Second
)

// subscription is one Subscribe: a goroutine that owns a LISTEN connection.
type subscription struct {
	s      *Store
	fn     func(store.Change)
	events bool // SubscribeEvents: the appends too
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Subscribe calls fn for the writes committed to the store's schema by
// any process, soon after they commit; see store.Notifier and the package
// documentation for what is guaranteed. It connects and LISTENs before it
// returns, so that every write committed after Subscribe returns is
// delivered (unless its process dies before it notifies). A payload may
// carry several changes; fn gets them one by one, in order. The
// subscription holds a connection of its own (outside the
// pool, named ListenerApplicationName); when that connection is lost it
// reconnects with exponential backoff (50ms to 5s) and then calls fn with
// store.Change{Resync: true}.
func (s *Store) Subscribe(ctx context.Context, fn func(store.Change)) (stop func(), err error) {
	return s.subscribe(ctx, fn, false)
}

// subscribe is Subscribe, and SubscribeEvents when events is set.
func (s *Store) subscribe(ctx context.Context, fn func(store.Change), events bool) (stop func(), err error) {
	ctx, err = s.begin(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := s.listen(ctx, events)
	if err != nil {
		return nil, s.fail("subscribe", err)
	}
	sub := &subscription{s: s, fn: fn, events: events, done: make(chan struct{})}
	sub.ctx, sub.cancel = context.WithCancel(context.Background())
	s.subsMu.Lock()
	if s.closed.Load() {
		s.subsMu.Unlock()
		_ = conn.Close(context.Background())
		return nil, store.ErrClosed
	}
	s.subs[sub] = struct{}{}
	s.subsMu.Unlock()
	go sub.run(conn)
	return sub.stop, nil
}

// connect opens a connection of its own (outside the pool), named app in
// pg_stat_activity.
func (s *Store) connect(ctx context.Context, app string) (*pgx.Conn, error) {
	cfg := s.connCfg.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = app
	return pgx.ConnectConfig(ctx, cfg)
}

// listen opens a connection and LISTENs on the store's channel, and on
// its events channel too when events is set.
func (s *Store) listen(ctx context.Context, events bool) (*pgx.Conn, error) {
	conn, err := s.connect(ctx, ListenerApplicationName)
	if err != nil {
		return nil, err
	}
	sql := "LISTEN " + pgx.Identifier{s.channel}.Sanitize()
	if events {
		sql += "; LISTEN " + pgx.Identifier{s.eventsChannel}.Sanitize()
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// stop ends the subscription and waits for its goroutine.
func (sub *subscription) stop() {
	sub.once.Do(func() {
		sub.cancel()
		<-sub.done
		sub.s.subsMu.Lock()
		delete(sub.s.subs, sub)
		sub.s.subsMu.Unlock()
	})
}

func (sub *subscription) run(conn *pgx.Conn) {
	defer close(sub.done)
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	for {
		n, err := conn.WaitForNotification(sub.ctx)
		if err != nil {
			if sub.ctx.Err() != nil {
				return
			}
			sub.s.log.Warn("postgres: change feed connection lost; reconnecting", "schema", sub.s.schema, "err", err)
			_ = conn.Close(context.Background())
			if conn = sub.reconnect(); conn == nil {
				return
			}
			sub.fn(store.Change{Resync: true})
			continue
		}
		parse := parseRecord
		if n.Channel == sub.s.eventsChannel {
			parse = parseEventRecord
		}
		for record := range strings.SplitSeq(n.Payload, "\n") {
			c, err := parse(record)
			if err != nil {
				sub.s.log.Warn("postgres: ignoring a malformed change notification", "schema", sub.s.schema, "err", err)
				continue
			}
			sub.fn(c)
		}
	}
}

// reconnect retries listen until it works (returning the connection) or
// the subscription ends (returning nil).
func (sub *subscription) reconnect() *pgx.Conn {
	var retry backoff
	delay := retry.next()
	for {
		if !sleep(sub.ctx, delay) {
			return nil
		}
		ctx, cancel := context.WithTimeout(sub.ctx, connectTimeout)
		conn, err := sub.s.listen(ctx, sub.events)
		cancel()
		if err == nil {
			sub.s.log.Info("postgres: change feed reconnected", "schema", sub.s.schema)
			return conn
		}
		if sub.ctx.Err() != nil {
			return nil
		}
		delay = retry.next()
		sub.s.log.Warn("postgres: change feed reconnect failed", "schema", sub.s.schema, "err", err, "retry_in", delay)
	}
}
