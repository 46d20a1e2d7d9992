package sim

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// The store of a simulation. A Disk is what outlives a process: the real
// backend (memory, or bbolt in a temporary directory) and the log of
// every write committed through it. Each process reaches it through a
// Conn of its own, which is where faults are injected: a crash between
// two writes (the Conn refuses that write and everything after it, as a
// process that died would make none; the Disk keeps what was committed),
// one refused write, lost wake-ups (reads of the wake index that find
// nothing). Writes are serialized and observed in commit order, so the
// invariants see every state a task went through.

// Injected errors.
var (
	// ErrCrashed is what a crashed process's Conn answers every call
	// with: nothing it does after the crash reaches the store.
	ErrCrashed = errors.New("sim: the process crashed")
	// ErrRefused is a write the store refused once (an injected fault).
	ErrRefused = errors.New("sim: the store refused the write (injected fault)")
)

// Write is one write committed to a Disk.
type Write struct {
	// Seq numbers the Disk's writes from 1, in commit order.
	Seq uint64
	// Op is the store method: Create, Update, Delete, Claim, Enqueue,
	// Dequeue, SaveSchedule, StartFire.
	Op string
	// ID is the task written (a queue entry's task for queue operations).
	ID string
	// Task is the task as the write left it (Create, Update, Claim).
	Task *store.Task
	// Queue names the queue of Enqueue and Dequeue.
	Queue string
	// Proc is the process that wrote it.
	Proc int
}

// Disk is a simulation's store, shared by its processes.
type Disk struct {
	inner store.Store

	mu    sync.Mutex    // serializes writes and their observation
	seq   atomic.Uint64 // writes committed (read without mu)
	watch func(Write)   // called with mu held, in commit order

	// refused are the tasks a write of which was refused; its lock is a
	// leaf (the watcher's callers take it under their own locks).
	refusedMu sync.Mutex
	refused   map[string]bool
}

// NewDisk wraps st, which it owns from now on (Close closes it).
func NewDisk(st store.Store) *Disk { return &Disk{inner: st, refused: map[string]bool{}} }

// Refused reports whether a write to task id was ever refused (an
// injected fault).
func (d *Disk) Refused(id string) bool {
	d.refusedMu.Lock()
	defer d.refusedMu.Unlock()
	return d.refused[id]
}

// Watch makes fn see every committed write, in commit order, with the
// Disk's write lock held (fn must not write).
func (d *Disk) Watch(fn func(Write)) {
	d.mu.Lock()
	d.watch = fn
	d.mu.Unlock()
}

// Store is the backend itself, for reads that bypass every fault.
func (d *Disk) Store() store.Store { return d.inner }

// Seq is the number of writes committed so far.
func (d *Disk) Seq() uint64 { return d.seq.Load() }

// Close closes the backend.
func (d *Disk) Close() error { return d.inner.Close() }

// commit runs write w (which calls the backend) with the write lock held
// and reports it to the watcher when it succeeded.
func (d *Disk) commit(proc int, op, id string, w func() (*store.Task, string, error)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, queue, err := w()
	if err != nil {
		return err
	}
	seq := d.seq.Add(1)
	if d.watch != nil {
		d.watch(Write{Seq: seq, Op: op, ID: id, Task: t, Queue: queue, Proc: proc})
	}
	return nil
}

// Conn is one process's connection to a Disk: a store.Store whose faults
// the simulation arms.
type Conn struct {
	d    *Disk
	proc int

	mu       sync.Mutex
	dead     bool
	crashIn  int    // >0: the crashIn-th write from now crashes the process, unmade
	refuseIn int    // >0: the refuseIn-th write from now is refused
	loseDue  int    // the next loseDue reads of the wake index find nothing
	onCrash  func() // told once, when an armed crash fires

	busy atomic.Int64 // calls in progress
}

var _ store.Store = (*Conn)(nil)

// Open returns a connection for process proc.
func (d *Disk) Open(proc int) *Conn { return &Conn{d: d, proc: proc} }

// CrashAfter arms a crash: the n-th write from now (n >= 1) is not made,
// and neither is anything after it; onCrash is told once, from the
// writing goroutine (it must not block).
func (c *Conn) CrashAfter(n int, onCrash func()) {
	c.mu.Lock()
	c.crashIn, c.onCrash = max(n, 1), onCrash
	c.mu.Unlock()
}

// Crash kills the connection now: every later call fails with
// ErrCrashed.
func (c *Conn) Crash() {
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
}

// Dead reports whether the connection's process crashed.
func (c *Conn) Dead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// Armed reports whether a crash is armed and has not fired yet.
func (c *Conn) Armed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashIn > 0
}

// RefuseAfter makes the n-th write from now fail once with ErrRefused.
func (c *Conn) RefuseAfter(n int) {
	c.mu.Lock()
	c.refuseIn = max(n, 1)
	c.mu.Unlock()
}

// LoseWakeups makes the next n reads of the wake index (the scheduler's
// rounds) find nothing.
func (c *Conn) LoseWakeups(n int) {
	c.mu.Lock()
	c.loseDue = n
	c.mu.Unlock()
}

// Busy reports whether a call is in progress.
func (c *Conn) Busy() bool { return c.busy.Load() > 0 }

// enter starts a call: ErrCrashed when the process is dead.
func (c *Conn) enter() error {
	c.busy.Add(1)
	if c.Dead() {
		c.busy.Add(-1)
		return ErrCrashed
	}
	return nil
}

func (c *Conn) leave() { c.busy.Add(-1) }

// gate decides the fate of a write about to be made: nil to make it.
func (c *Conn) gate() error {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return ErrCrashed
	}
	if c.crashIn > 0 {
		c.crashIn--
		if c.crashIn == 0 {
			c.dead = true
			tell := c.onCrash
			c.onCrash = nil
			c.mu.Unlock()
			if tell != nil {
				tell()
			}
			return ErrCrashed
		}
	}
	if c.refuseIn > 0 {
		c.refuseIn--
		if c.refuseIn == 0 {
			c.mu.Unlock()
			return ErrRefused
		}
	}
	c.mu.Unlock()
	return nil
}

// write makes one write through the Disk, unless a fault stops it.
func (c *Conn) write(op, id string, w func() (*store.Task, string, error)) error {
	if err := c.enter(); err != nil {
		return err
	}
	defer c.leave()
	if err := c.gate(); err != nil {
		if errors.Is(err, ErrRefused) {
			c.d.refusedMu.Lock()
			c.d.refused[id] = true
			c.d.refusedMu.Unlock()
		}
		return err
	}
	return c.d.commit(c.proc, op, id, w)
}

// read runs a read, unless the process is dead.
func read[T any](c *Conn, r func() (T, error)) (T, error) {
	if err := c.enter(); err != nil {
		var zero T
		return zero, err
	}
	defer c.leave()
	return r()
}

// Create implements store.Store through the Disk.
func (c *Conn) Create(ctx context.Context, t *store.Task) (out *store.Task, err error) {
	err = c.write("Create", t.ID, func() (*store.Task, string, error) {
		out, err = c.d.inner.Create(ctx, t)
		return out, "", err
	})
	return out, err
}

// Get implements store.Store through the Disk.
func (c *Conn) Get(ctx context.Context, id string) (*store.Task, error) {
	return read(c, func() (*store.Task, error) { return c.d.inner.Get(ctx, id) })
}

// Update implements store.Store through the Disk.
func (c *Conn) Update(ctx context.Context, id string, u store.Update) (out *store.Task, err error) {
	if u.AppendOnly() {
		// A log line changes no state the invariants read: it is made
		// (when the process lives) without a place in the write order.
		return read(c, func() (*store.Task, error) { return c.d.inner.Update(ctx, id, u) })
	}
	err = c.write("Update", id, func() (*store.Task, string, error) {
		out, err = c.d.inner.Update(ctx, id, u)
		return out, "", err
	})
	return out, err
}

// Delete implements store.Store through the Disk.
func (c *Conn) Delete(ctx context.Context, id string) error {
	return c.write("Delete", id, func() (*store.Task, string, error) {
		return nil, "", c.d.inner.Delete(ctx, id)
	})
}

// List implements store.Store through the Disk.
func (c *Conn) List(ctx context.Context, opts store.ListOptions) (store.Page, error) {
	return read(c, func() (store.Page, error) { return c.d.inner.List(ctx, opts) })
}

// Expired implements store.Store through the Disk.
func (c *Conn) Expired(ctx context.Context, now time.Time, limit int) ([]*store.Task, error) {
	return read(c, func() ([]*store.Task, error) { return c.d.inner.Expired(ctx, now, limit) })
}

// Active implements store.Store through the Disk.
func (c *Conn) Active(ctx context.Context) ([]*store.Task, error) {
	return read(c, func() ([]*store.Task, error) { return c.d.inner.Active(ctx) })
}

// Due implements store.Store through the Disk.
func (c *Conn) Due(ctx context.Context, now time.Time, limit int) ([]*store.Task, error) {
	return read(c, func() ([]*store.Task, error) {
		c.mu.Lock()
		lose := c.loseDue > 0
		if lose {
			c.loseDue--
		}
		c.mu.Unlock()
		if lose {
			return nil, nil
		}
		return c.d.inner.Due(ctx, now, limit)
	})
}

// Claim implements store.Store through the Disk.
func (c *Conn) Claim(ctx context.Context, id, holder string, now, until time.Time) (out *store.Task, err error) {
	err = c.write("Claim", id, func() (*store.Task, string, error) {
		out, err = c.d.inner.Claim(ctx, id, holder, now, until)
		return out, "", err
	})
	return out, err
}

// Renew implements store.Store through the Disk.
func (c *Conn) Renew(ctx context.Context, holder string, until time.Time, ids []string) ([]string, error) {
	return read(c, func() ([]string, error) { return c.d.inner.Renew(ctx, holder, until, ids) })
}

// ExpiredLeases implements store.Store through the Disk.
func (c *Conn) ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*store.Task, error) {
	return read(c, func() ([]*store.Task, error) { return c.d.inner.ExpiredLeases(ctx, now, limit) })
}

// Query implements store.Store through the Disk.
func (c *Conn) Query(ctx context.Context, q store.Query) (store.Page, error) {
	return read(c, func() (store.Page, error) { return c.d.inner.Query(ctx, q) })
}

// Counts implements store.Store through the Disk.
func (c *Conn) Counts(ctx context.Context) (map[mcptask.Status]int, error) {
	return read(c, func() (map[mcptask.Status]int, error) { return c.d.inner.Counts(ctx) })
}

// Events implements store.Store through the Disk.
func (c *Conn) Events(ctx context.Context, id string, after uint64, limit int) (store.EventPage, error) {
	return read(c, func() (store.EventPage, error) { return c.d.inner.Events(ctx, id, after, limit) })
}

// Enqueue implements store.Store through the Disk.
func (c *Conn) Enqueue(ctx context.Context, e store.QueueEntry, lim store.QueueLimits, now time.Time) (res store.QueueResult, err error) {
	err = c.write("Enqueue", e.TaskID, func() (*store.Task, string, error) {
		res, err = c.d.inner.Enqueue(ctx, e, lim, now)
		return nil, e.Queue, err
	})
	return res, err
}

// Dequeue implements store.Store through the Disk.
func (c *Conn) Dequeue(ctx context.Context, queue, id string, lim store.QueueLimits, now time.Time) (res store.QueueResult, err error) {
	task, _, _ := strings.Cut(id, "#") // a step's entry is "task#path"
	err = c.write("Dequeue", task, func() (*store.Task, string, error) {
		res, err = c.d.inner.Dequeue(ctx, queue, id, lim, now)
		return nil, queue, err
	})
	return res, err
}

// QueueEntries implements store.Store through the Disk.
func (c *Conn) QueueEntries(ctx context.Context, queue string) ([]store.QueueEntry, error) {
	return read(c, func() ([]store.QueueEntry, error) { return c.d.inner.QueueEntries(ctx, queue) })
}

// QueueCounts implements store.Store through the Disk.
func (c *Conn) QueueCounts(ctx context.Context) ([]store.QueueCount, error) {
	return read(c, func() ([]store.QueueCount, error) { return c.d.inner.QueueCounts(ctx) })
}

// Schedule implements store.Store through the Disk.
func (c *Conn) Schedule(ctx context.Context, name string) (*store.ScheduleRecord, error) {
	return read(c, func() (*store.ScheduleRecord, error) { return c.d.inner.Schedule(ctx, name) })
}

// SaveSchedule implements store.Store through the Disk.
func (c *Conn) SaveSchedule(ctx context.Context, rec *store.ScheduleRecord, fires []store.Fire) (out *store.ScheduleRecord, err error) {
	err = c.write("SaveSchedule", rec.Name, func() (*store.Task, string, error) {
		out, err = c.d.inner.SaveSchedule(ctx, rec, fires)
		return nil, "", err
	})
	return out, err
}

// Fires implements store.Store through the Disk.
func (c *Conn) Fires(ctx context.Context, schedule string, limit int) ([]store.Fire, error) {
	return read(c, func() ([]store.Fire, error) { return c.d.inner.Fires(ctx, schedule, limit) })
}

// StartFire implements store.Store through the Disk.
func (c *Conn) StartFire(ctx context.Context, schedule string, at time.Time) error {
	return c.write("StartFire", schedule, func() (*store.Task, string, error) {
		return nil, "", c.d.inner.StartFire(ctx, schedule, at)
	})
}

// Close closes the connection, not the Disk: the next process opens its
// own.
func (c *Conn) Close() error {
	c.Crash()
	return nil
}

// Heartbeat implements store.Store through the Disk. A replica's
// heartbeat comes on its own timer, apart from the plan's operations: it
// is not one of the writes a fault counts (CrashAfter, RefuseAfter), so
// that a plan's faults land where the plan says; a dead process beats no
// more.
func (c *Conn) Heartbeat(ctx context.Context, hb store.Heartbeat) error {
	_, err := read(c, func() (struct{}, error) { return struct{}{}, c.d.inner.Heartbeat(ctx, hb) })
	return err
}

// Replicas implements store.Store through the Disk.
func (c *Conn) Replicas(ctx context.Context) ([]store.ReplicaRecord, error) {
	return read(c, func() ([]store.ReplicaRecord, error) { return c.d.inner.Replicas(ctx) })
}
