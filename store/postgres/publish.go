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
// commit. Writers hand it one record each (publish, which never blocks on
// the database); one goroutine sends everything queued in one round trip
// on a connection of its own: the records packed into as few payloads as
// the size limit allows, several payloads in one transaction. Records
// leave in the order they were handed over, so a task's changes, which
// its writers hand over in commit order (see keyLocks), are sent in commit
// order. A failed send is retried, after a reconnect and a backoff, ahead
// of anything queued since.
type publisher struct {
	s *Store

	mu       sync.Mutex
	queue    []string // records not yet sent, oldest first
	stopping bool
	wake     chan struct{} // capacity 1: something was queued, or stop
	done     chan struct{} // closed when run returns

	conn *pgx.Conn // owned by run

	// Counters, for tests and logs.
	records, roundTrips, dropped atomic.Uint64
}

func newPublisher(s *Store) *publisher {
	p := &publisher{s: s, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go p.run()
	return p
}

// publish queues one record: "version|status|hex(id)".
func (p *publisher) publish(record string) {
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		p.dropped.Add(1)
		return
	}
	p.queue = append(p.queue, record)
	if n := len(p.queue) - maxQueued; n > 0 {
		p.queue = append(p.queue[:0], p.queue[n:]...)
		p.dropped.Add(uint64(n))
	}
	p.mu.Unlock()
	p.signal()
}

func (p *publisher) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// stop sends what is queued (within closeFlushTimeout), closes the
// connection and waits for the goroutine. Records published later are
// dropped.
func (p *publisher) stop() {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	p.signal()
	<-p.done
}

func (p *publisher) run() {
	defer close(p.done)
	defer p.closeConn()
	delay := time.Duration(0)
	for {
		p.mu.Lock()
		for len(p.queue) == 0 && !p.stopping {
			p.mu.Unlock()
			<-p.wake
			p.mu.Lock()
		}
		batch, stopping := p.queue, p.stopping
		p.queue = nil
		p.mu.Unlock()
		if len(batch) == 0 {
			return // stopping, nothing left
		}
		timeout := sendTimeout
		if stopping {
			timeout = closeFlushTimeout
		}
		err := p.send(batch, timeout)
		if err == nil {
			delay = 0
			continue
		}
		p.closeConn()
		if stopping {
			p.dropped.Add(uint64(len(batch)))
			p.s.log.Warn("postgres: change notifications lost while closing", "schema", p.s.schema, "changes", len(batch), "err", err)
			continue
		}
		delay = min(max(2*delay, minReconnectDelay), maxReconnectDelay)
		p.s.log.Warn("postgres: sending change notifications failed; retrying", "schema", p.s.schema,
			"changes", len(batch), "err", err, "retry_in", delay)
		p.mu.Lock()
		p.queue = append(batch, p.queue...)
		if n := len(p.queue) - maxQueued; n > 0 {
			p.queue = p.queue[n:]
			p.dropped.Add(uint64(n))
		}
		p.mu.Unlock()
		p.sleep(delay)
	}
}

// sleep waits for d, or less when stop is called.
func (p *publisher) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return
		case <-p.wake:
			p.mu.Lock()
			stopping := p.stopping
			p.mu.Unlock()
			if stopping {
				return
			}
		}
	}
}

// send delivers batch in one round trip: one NOTIFY, or several in one
// transaction (PostgreSQL queues a transaction's notifications in the
// order they were made and delivers them at its commit).
func (p *publisher) send(batch []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if p.conn == nil {
		conn, err := p.s.connect(ctx, NotifierApplicationName)
		if err != nil {
			return err
		}
		p.conn = conn
	}
	payloads := pack(batch)
	var err error
	if len(payloads) == 1 {
		_, err = p.conn.Exec(ctx, "SELECT pg_notify($1, $2)", p.s.channel, payloads[0])
	} else {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		for _, pl := range payloads {
			b.Queue("SELECT pg_notify($1, $2)", p.s.channel, pl)
		}
		b.Queue("COMMIT")
		err = p.conn.SendBatch(ctx, b).Close()
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

// keyLocks serializes this process's writes of one task id, from before a
// write touches the database until its change is published, so that the
// changes of a task are published in commit order. (The row lock orders
// the commits; without this, two writers could hand their changes over in
// the other order.) A write always takes its key lock before a pool
// connection and holds one key at a time, so waiting for it cannot
// deadlock with a wait inside the database.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// lock locks id and returns the unlock function.
func (k *keyLocks) lock(id string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = make(map[string]*keyLock)
	}
	l := k.m[id]
	if l == nil {
		l = &keyLock{}
		k.m[id] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.m, id)
		}
		k.mu.Unlock()
	}
}
