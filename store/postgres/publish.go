package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotifierApplicationName is the application_name of the connection that
// sends a Store's change notifications, so that an operator can tell it
// apart in pg_stat_activity.
const NotifierApplicationName = "taskbridge-notifier"

const (
	// maxPayload is the largest NOTIFY payload PostgreSQL accepts (it must
	// be shorter than 8000 bytes).
	maxPayload = 7999
	// maxQueued bounds the changes waiting to be sent. Beyond it (the
	// database has been unreachable for a while) the oldest are dropped:
	// subscribers poll, and they Resync when their own connection drops.
	maxQueued = 100_000
	// sendTimeout bounds one send (connect, NOTIFY, commit).
	sendTimeout = 10 * time.Second
	// closeFlushTimeout bounds the last send of Close.
	closeFlushTimeout = 2 * time.Second
)

// publisher sends the change notifications of one Store, after the writes
// commit. A write reserves a slot for its change while it still holds the
// task's row lock (before its COMMIT), and marks the slot ready once the
// commit returned, or cancels it when the commit failed; reserving never
// waits for the database. One goroutine sends every ready change in one
// round trip, on a connection of its own: packed into as few payloads as
// the size limit allows, several payloads in one transaction.
//
// The order is per task: writers of one task reserve their slots in
// commit order (the row lock admits the next writer only after the
// previous one committed), and a ready change waits while an earlier slot
// of the same task is still pending. Changes of other tasks do not wait
// for each other. A failed send is retried, after a reconnect and a
// backoff, ahead of anything queued since.
type publisher struct {
	s *Store

	mu       sync.Mutex
	queue    []*slot // reserved changes not yet sent, in reservation order
	stopping bool
	wake     chan struct{} // capacity 1: a slot was resolved, or stop
	done     chan struct{} // closed when run returns
	// stopped is cancelled by stop, to cut a backoff short.
	stopped    context.Context
	cancelStop context.CancelFunc

	conn *pgx.Conn // owned by run

	// Counters, for tests.
	records, roundTrips atomic.Uint64
}

// slot is one reserved change.
type slot struct {
	key    string // the task id
	record string // "version|status|hex(id)", or "seq|hex(id)" for an append
	events bool   // an append: sent on the events channel
	state  slotState
}

type slotState uint8

const (
	slotPending slotState = iota
	slotReady
	slotCancelled
)

func newPublisher(s *Store) *publisher {
	p := &publisher{s: s, wake: make(chan struct{}, 1), done: make(chan struct{})}
	p.stopped, p.cancelStop = context.WithCancel(context.Background())
	go p.run()
	return p
}

// reserve queues a pending change of task key (an append to its log
// when events is set). The caller must resolve it with commit or cancel.
func (p *publisher) reserve(key, record string, events bool) *slot {
	sl := &slot{key: key, record: record, events: events}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		sl.state = slotCancelled
		return sl
	}
	p.queue = append(p.queue, sl)
	p.trim()
	return sl
}

// resolveFor marks sl ready when *err is nil and cancels it otherwise; for
// a defer after reserve.
func (p *publisher) resolveFor(sl *slot, err *error) {
	if *err == nil {
		p.commit(sl)
	} else {
		p.cancel(sl)
	}
}

// commit marks sl ready to send.
func (p *publisher) commit(sl *slot) { p.resolve(sl, slotReady) }

// cancel drops sl: its write did not commit (or may not have).
func (p *publisher) cancel(sl *slot) { p.resolve(sl, slotCancelled) }

func (p *publisher) resolve(sl *slot, st slotState) {
	p.mu.Lock()
	if sl.state == slotPending {
		sl.state = st
	}
	p.mu.Unlock()
	p.signal()
}

// trim drops the oldest resolved slots beyond maxQueued. The caller holds
// mu.
func (p *publisher) trim() {
	excess := len(p.queue) - maxQueued
	if excess <= 0 {
		return
	}
	kept := p.queue[:0]
	for _, sl := range p.queue {
		if excess > 0 && sl.state != slotPending {
			excess--
			continue
		}
		kept = append(kept, sl)
	}
	clear(p.queue[len(kept):])
	p.queue = kept
}

func (p *publisher) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// stop sends what is ready (within closeFlushTimeout), closes the
// connection and waits for the goroutine. Changes reserved later, or
// still pending, are dropped. Call it when no write is in flight.
func (p *publisher) stop() {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	p.cancelStop()
	p.signal()
	<-p.done
}

// sendable splits queue into the slots to send now, in order (every ready
// slot no pending slot of its task precedes), and the slots to keep
// (pending ones, and ready ones behind a pending one of their task), in
// order. Cancelled slots go.
func sendable(queue []*slot) (ready, rest []*slot) {
	var blocked map[string]bool
	for _, sl := range queue {
		switch {
		case sl.state == slotCancelled:
		case sl.state == slotPending:
			if blocked == nil {
				blocked = make(map[string]bool)
			}
			blocked[sl.key] = true
			rest = append(rest, sl)
		case blocked[sl.key]:
			rest = append(rest, sl)
		default:
			ready = append(ready, sl)
		}
	}
	return ready, rest
}

func (p *publisher) run() {
	defer close(p.done)
	defer p.closeConn()
	var retry backoff
	for {
		p.mu.Lock()
		var batch []*slot
		for {
			batch, p.queue = sendable(p.queue)
			if len(batch) > 0 || p.stopping {
				break
			}
			p.mu.Unlock()
			<-p.wake
			p.mu.Lock()
		}
		stopping := p.stopping
		if stopping && len(batch) == 0 {
			p.queue = nil // pending at Close: none when no write is in flight
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		timeout := sendTimeout
		if stopping {
			timeout = closeFlushTimeout
		}
		err := p.send(batch, timeout)
		if err == nil {
			retry.reset()
			continue
		}
		p.closeConn()
		if stopping {
			p.s.log.Warn("postgres: change notifications lost while closing", "schema", p.s.schema, "changes", len(batch), "err", err)
			continue
		}
		delay := retry.next()
		p.s.log.Warn("postgres: sending change notifications failed; retrying", "schema", p.s.schema,
			"changes", len(batch), "err", err, "retry_in", delay)
		// Ahead of everything else: they were the oldest ready slots, so
		// the order per task holds.
		p.mu.Lock()
		p.queue = append(batch, p.queue...)
		p.trim()
		p.mu.Unlock()
		sleep(p.stopped, delay) // stop cuts it short
	}
}

// send delivers batch in one statement and round trip: one NOTIFY, or
// several in one transaction (PostgreSQL queues a transaction's
// notifications in the order they were made and delivers them at its
// commit). The changes go
// on the store's channel, the appends on its events channel, each in the
// batch's order.
func (p *publisher) send(batch []*slot, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if p.conn == nil {
		conn, err := p.s.connect(ctx, NotifierApplicationName)
		if err != nil {
			return err
		}
		p.conn = conn
	}
	var changes, appends []string
	for _, sl := range batch {
		if sl.events {
			appends = append(appends, sl.record)
		} else {
			changes = append(changes, sl.record)
		}
	}
	type notification struct{ channel, payload string }
	var all []notification
	for _, pl := range pack(changes) {
		all = append(all, notification{p.s.channel, pl})
	}
	for _, pl := range pack(appends) {
		all = append(all, notification{p.s.eventsChannel, pl})
	}
	var err error
	if len(all) == 1 {
		_, err = p.conn.Exec(ctx, "SELECT pg_notify($1, $2)", all[0].channel, all[0].payload)
	} else {
		// One statement, its own implicit transaction: the notifications
		// are made in the arrays' order (unnest's rows, scanned in
		// order) and delivered at its commit, as BEGIN, one pg_notify
		// each and COMMIT would, in one statement instead of n+2.
		channels, payloads := make([]string, len(all)), make([]string, len(all))
		for i, n := range all {
			channels[i], payloads[i] = n.channel, n.payload
		}
		_, err = p.conn.Exec(ctx, "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS n(c, p)", channels, payloads)
		if err == nil && p.conn.PgConn().TxStatus() != 'I' {
			err = errors.New("the notifications' transaction did not commit")
		}
	}
	if err != nil {
		return err
	}
	p.records.Add(uint64(len(batch)))
	p.roundTrips.Add(1)
	return nil
}

func (p *publisher) closeConn() {
	if p.conn != nil {
		_ = p.conn.Close(context.Background())
		p.conn = nil
	}
}

// pack joins records with newlines into as few payloads as maxPayload
// allows, keeping their order. A record is far shorter than maxPayload
// (an id is at most store.MaxIDBytes, hex-encoded).
func pack(records []string) []string {
	var (
		out []string
		b   strings.Builder
	)
	for _, r := range records {
		if b.Len() > 0 && b.Len()+1+len(r) > maxPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(r)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}
