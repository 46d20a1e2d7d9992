package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// Queues. A queue bounds how much of some work runs at once, across every
// process that shares the store: at most Concurrency holders in all, at
// most PerKey holders per key (a repository, a customer), at most Rate
// grants per Period, in the order of Priority then arrival. An entry is
// one start that asks for a place: it waits, then is granted a place,
// which it holds until it is dequeued. The store keeps the entries and
// decides the grants in the same transaction as the change that frees or
// asks for a place (Queues.Enqueue, Queues.Dequeue), so limits hold across
// replicas and restarts; the rules are QueueTx's, the same in every
// backend. An entry whose task has ended or is gone holds nothing: a
// backend drops it when it next reads its queue, so a task cancelled or
// expired while it held a place never keeps it.

// QueueEntry is one start on a queue: waiting for a place, or holding one
// (GrantedAt set).
type QueueEntry struct {
	// Queue is the queue's name (1 to MaxNameBytes bytes).
	Queue string
	// ID names the entry in its queue (1 to MaxQueueIDBytes bytes): the
	// engine uses the task id, or the task id, "#" and a step's path.
	ID string
	// TaskID is the task whose work the entry is; an entry whose task has
	// ended or is gone holds no place and is dropped.
	TaskID string
	// Key is the concurrency key the per-key limit counts (at most
	// MaxNameBytes bytes; "" is a key like any other).
	Key string
	// Priority orders the waiting entries: higher first, then arrival.
	Priority int
	// Seq is the order of arrival in the queue, assigned by the store.
	Seq uint64
	// EnqueuedAt is when the entry arrived (the operation's now).
	EnqueuedAt time.Time
	// NotBefore, when set, is the earliest time the entry may be granted
	// (a debounced start waits for its window to pass).
	NotBefore time.Time
	// GrantedAt is when the entry was granted its place; zero while it
	// waits.
	GrantedAt time.Time
}

// Granted reports whether the entry holds a place.
func (e QueueEntry) Granted() bool { return !e.GrantedAt.IsZero() }

// QueueLimits are a queue's limits, passed with every operation (the
// engine's definition of the queue; replicas running the same code pass
// the same). Zero fields mean no bound.
type QueueLimits struct {
	// Concurrency bounds the entries holding a place at once.
	Concurrency int
	// PerKey bounds the entries of one key holding a place at once.
	PerKey int
	// Rate bounds the grants in any window of Period (Period must be
	// set with it).
	Rate   int
	Period time.Duration
	// Debounce, when set, makes a new entry replace the waiting entries
	// of its key (QueueResult.Replaced) and wait this long before it may
	// be granted: of starts close together, the last one runs.
	Debounce time.Duration
}

// Why an entry waits (QueueResult.Reason).
const (
	// QueueWaitKey: its key holds PerKey places.
	QueueWaitKey = "key"
	// QueueWaitConcurrency: the queue holds Concurrency places.
	QueueWaitConcurrency = "concurrency"
	// QueueWaitRate: Rate grants happened in the last Period.
	QueueWaitRate = "rate"
	// QueueWaitDebounce: its debounce window has not passed.
	QueueWaitDebounce = "debounce"
	// QueueWaitOrder: entries before it (a higher priority, an earlier
	// arrival) take the places there are.
	QueueWaitOrder = "order"
	// QueueWaitBusy: the entry only looked again while another operation
	// was deciding its queue's grants (a shared store: another replica);
	// that operation, which sees the entry, grants it if it can.
	QueueWaitBusy = "busy"
)

// QueueResult is what a queue operation did and where the entry it named
// stands.
type QueueResult struct {
	// Entry is the entry Enqueue named, as stored after the operation
	// (granted or waiting); zero for Dequeue.
	Entry QueueEntry
	// Reason says why Entry still waits (QueueWaitKey, ...); "" when it
	// holds a place.
	Reason string
	// Ahead counts the waiting entries that go before Entry for the
	// limit that holds it back (its key's for QueueWaitKey, all
	// otherwise).
	Ahead int
	// Holders are (up to MaxQueueHolders of) the entries holding the
	// places that Entry waits for.
	Holders []QueueEntry
	// Granted are the entries the operation granted a place (Entry among
	// them when it was): the caller wakes their tasks.
	Granted []QueueEntry
	// Replaced are the waiting entries a debounced Enqueue removed.
	Replaced []QueueEntry
	// Next is the earliest time the clock alone may grant a waiting entry
	// (a rate window or a debounce window ends); zero for none.
	Next time.Time
}

// QueueCount is how many entries of one queue wait and hold places.
type QueueCount struct {
	Queue   string
	Waiting int
	Holding int
}

// Queue limits on identifiers.
const (
	// MaxQueueIDBytes bounds QueueEntry.ID (a task id and a step path).
	MaxQueueIDBytes = 2 * MaxIDBytes
	// MaxQueueHolders bounds QueueResult.Holders.
	MaxQueueHolders = 5
)

// QueueState is what a backend keeps of a queue beside its entries: the
// arrival counter and the times of its latest grants (the rate limit's
// window).
type QueueState struct {
	// Seq is the last QueueEntry.Seq handed out.
	Seq uint64
	// Starts are the latest grant times, oldest first; at most the
	// largest Rate the queue was used with.
	Starts []time.Time
}

// CheckQueueEntry validates an entry given to Queues.Enqueue and its
// limits (ErrInvalid, ErrTooLarge).
func CheckQueueEntry(e QueueEntry, lim QueueLimits, now time.Time) error {
	switch {
	case e.Queue == "":
		return invalid("queue entry without a queue name")
	case len(e.Queue) > MaxNameBytes:
		return tooLarge("queue name", len(e.Queue), MaxNameBytes)
	case e.ID == "":
		return invalid("queue entry without an id")
	case len(e.ID) > MaxQueueIDBytes:
		return tooLarge("queue entry id", len(e.ID), MaxQueueIDBytes)
	case e.TaskID == "":
		return invalid("queue entry %q without a task id", e.ID)
	case len(e.TaskID) > MaxIDBytes:
		return tooLarge("queue entry task id", len(e.TaskID), MaxIDBytes)
	case len(e.Key) > MaxNameBytes:
		return tooLarge("queue key", len(e.Key), MaxNameBytes)
	}
	return checkQueueCall(e.Queue, lim, now)
}

// CheckQueueTask checks the task an Enqueue names, as the backend read it
// in the operation's transaction (nil: not found): ErrNotFound, or
// ErrTerminal when it has ended.
func CheckQueueTask(id string, t *Task) error {
	switch {
	case t == nil:
		return fmt.Errorf("%w: %s (the queue entry's task)", ErrNotFound, id)
	case t.Status.Terminal():
		return fmt.Errorf("%w: task %s is %s (the queue entry's task)", ErrTerminal, id, t.Status)
	}
	return nil
}

// CheckQueueCall validates the arguments of Queues.Dequeue (ErrInvalid).
func CheckQueueCall(queue, id string, lim QueueLimits, now time.Time) error {
	if id == "" {
		return invalid("dequeue without an entry id")
	}
	return checkQueueCall(queue, lim, now)
}

func checkQueueCall(queue string, lim QueueLimits, now time.Time) error {
	switch {
	case queue == "":
		return invalid("queue operation without a queue name")
	case lim.Concurrency < 0, lim.PerKey < 0, lim.Rate < 0, lim.Period < 0, lim.Debounce < 0:
		return invalid("queue %q: negative limits %+v", queue, lim)
	case lim.Rate > 0 && lim.Period <= 0:
		return invalid("queue %q: a rate of %d needs a period", queue, lim.Rate)
	case lim.Rate > maxQueueRate:
		return invalid("queue %q: a rate of %d is above the most the store tracks, %d", queue, lim.Rate, maxQueueRate)
	case now.IsZero() || !ValidTime(now):
		return invalid("queue operation time %v out of range", now)
	}
	return nil
}

// maxQueueRate bounds QueueLimits.Rate: the store keeps one time per
// grant in the window.
const maxQueueRate = 100000

// QueueTx is one queue operation on a backend's copy of a queue, read in
// the operation's transaction: its state and its entries. A backend loads
// State, puts the entries of active tasks in Entries and the ids of the
// others in Deleted, calls Enqueue or Dequeue, then writes Put (entries
// new or changed), deletes Deleted, and writes State when StateChanged.
// The rules are here, so every backend decides alike.
type QueueTx struct {
	Name    string
	State   QueueState
	Entries []QueueEntry
	// Put are the entries to write (new, or granted now).
	Put []QueueEntry
	// Deleted are the ids of entries to delete.
	Deleted []string
	// StateChanged reports that State must be written.
	StateChanged bool
}

// Enqueue adds e (unless an entry of its id is there: then it only looks
// again) and grants what the limits allow; see Queues.Enqueue. Call
// CheckQueueEntry first.
func (q *QueueTx) Enqueue(e QueueEntry, lim QueueLimits, now time.Time) QueueResult {
	var res QueueResult
	i := slices.IndexFunc(q.Entries, func(x QueueEntry) bool { return x.ID == e.ID })
	if i < 0 {
		if lim.Debounce > 0 {
			kept := q.Entries[:0]
			for _, x := range q.Entries {
				if !x.Granted() && x.Key == e.Key {
					res.Replaced = append(res.Replaced, x)
					q.Deleted = append(q.Deleted, x.ID)
					continue
				}
				kept = append(kept, x)
			}
			q.Entries = kept
			e.NotBefore = now.Add(lim.Debounce)
		} else {
			e.NotBefore = time.Time{}
		}
		q.State.Seq++
		q.StateChanged = true
		e.Seq, e.EnqueuedAt, e.GrantedAt = q.State.Seq, now.UTC(), time.Time{}
		if !e.NotBefore.IsZero() {
			e.NotBefore = e.NotBefore.UTC()
		}
		q.Entries = append(q.Entries, e)
		q.Put = append(q.Put, e)
	}
	q.dispatch(lim, now, &res)
	res.Entry, _ = q.entry(e.ID)
	if !res.Entry.Granted() {
		q.explain(lim, now, &res)
	}
	return res
}

// Dequeue removes entry id (a place it held frees; nothing happens when
// there is none) and grants what the limits allow; see Queues.Dequeue.
func (q *QueueTx) Dequeue(id string, lim QueueLimits, now time.Time) QueueResult {
	var res QueueResult
	if i := slices.IndexFunc(q.Entries, func(x QueueEntry) bool { return x.ID == id }); i >= 0 {
		q.Entries = slices.Delete(q.Entries, i, i+1)
		q.Deleted = append(q.Deleted, id)
	}
	q.dispatch(lim, now, &res)
	return res
}

// entry returns the entry of id.
func (q *QueueTx) entry(id string) (QueueEntry, bool) {
	for _, x := range q.Entries {
		if x.ID == id {
			return x, true
		}
	}
	return QueueEntry{}, false
}

// waitOrder orders waiting entries: higher priority first, then arrival.
func waitOrder(a, b QueueEntry) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	return cmp.Compare(a.Seq, b.Seq)
}

// SortQueue orders entries as Queues.QueueEntries returns them: the
// holders by grant time (then arrival), then the waiting entries in the
// order they are granted.
func SortQueue(entries []QueueEntry) {
	slices.SortFunc(entries, func(a, b QueueEntry) int {
		switch {
		case a.Granted() && !b.Granted():
			return -1
		case !a.Granted() && b.Granted():
			return 1
		case a.Granted():
			if c := a.GrantedAt.Compare(b.GrantedAt); c != 0 {
				return c
			}
			return cmp.Compare(a.Seq, b.Seq)
		}
		return waitOrder(a, b)
	})
}

// window drops the grant times older than the rate's period and reports
// how many remain.
func (q *QueueTx) window(lim QueueLimits, now time.Time) int {
	if lim.Rate <= 0 {
		if len(q.State.Starts) > 0 {
			q.State.Starts, q.StateChanged = nil, true
		}
		return 0
	}
	cut := 0
	for cut < len(q.State.Starts) && !q.State.Starts[cut].After(now.Add(-lim.Period)) {
		cut++
	}
	if cut > 0 {
		q.State.Starts, q.StateChanged = slices.Clone(q.State.Starts[cut:]), true
	}
	return len(q.State.Starts)
}

// dispatch grants waiting entries in order while the limits allow: an
// entry whose debounce window is still open, or whose key is full, is
// passed over; a full queue or a spent rate stops the grants.
func (q *QueueTx) dispatch(lim QueueLimits, now time.Time, res *QueueResult) {
	held, perKey := 0, map[string]int{}
	var waiting []int
	for i, x := range q.Entries {
		if x.Granted() {
			held++
			perKey[x.Key]++
		} else {
			waiting = append(waiting, i)
		}
	}
	slices.SortFunc(waiting, func(a, b int) int { return waitOrder(q.Entries[a], q.Entries[b]) })
	started := q.window(lim, now)
	for _, i := range waiting {
		x := &q.Entries[i]
		if x.NotBefore.After(now) {
			res.Next = earliest(res.Next, x.NotBefore)
			continue
		}
		if lim.Concurrency > 0 && held >= lim.Concurrency {
			break
		}
		if lim.Rate > 0 && started >= lim.Rate {
			res.Next = earliest(res.Next, q.State.Starts[0].Add(lim.Period))
			break
		}
		if lim.PerKey > 0 && perKey[x.Key] >= lim.PerKey {
			continue
		}
		x.GrantedAt = now.UTC()
		held++
		perKey[x.Key]++
		if lim.Rate > 0 {
			q.State.Starts = append(q.State.Starts, x.GrantedAt)
			if len(q.State.Starts) > lim.Rate {
				q.State.Starts = q.State.Starts[len(q.State.Starts)-lim.Rate:]
			}
			q.StateChanged = true
			started++
		}
		q.Put = append(q.Put, *x)
		res.Granted = append(res.Granted, *x)
	}
}

// explain fills why res.Entry still waits, how many go before it and who
// holds the places it waits for.
func (q *QueueTx) explain(lim QueueLimits, now time.Time, res *QueueResult) {
	e := res.Entry
	held, keyHeld := 0, 0
	for _, x := range q.Entries {
		if x.Granted() {
			held++
			if x.Key == e.Key {
				keyHeld++
			}
		}
	}
	holders := func(sameKey bool) {
		for _, x := range q.Entries {
			if x.Granted() && (!sameKey || x.Key == e.Key) && len(res.Holders) < MaxQueueHolders {
				res.Holders = append(res.Holders, x)
			}
		}
		SortQueue(res.Holders)
	}
	ahead := func(sameKey bool) int {
		n := 0
		for _, x := range q.Entries {
			if !x.Granted() && x.ID != e.ID && (!sameKey || x.Key == e.Key) && waitOrder(x, e) < 0 {
				n++
			}
		}
		return n
	}
	switch {
	case e.NotBefore.After(now):
		res.Reason = QueueWaitDebounce
	case lim.PerKey > 0 && keyHeld >= lim.PerKey:
		res.Reason, res.Ahead = QueueWaitKey, ahead(true)
		holders(true)
	case lim.Concurrency > 0 && held >= lim.Concurrency:
		res.Reason, res.Ahead = QueueWaitConcurrency, ahead(false)
		holders(false)
	case lim.Rate > 0 && len(q.State.Starts) >= lim.Rate:
		res.Reason, res.Ahead = QueueWaitRate, ahead(false)
	default:
		res.Reason, res.Ahead = QueueWaitOrder, ahead(false)
	}
}

func earliest(cur, t time.Time) time.Time {
	if cur.IsZero() || t.Before(cur) {
		return t
	}
	return cur
}

// CountQueue counts the waiting and holding entries of a queue.
func CountQueue(name string, entries []QueueEntry) QueueCount {
	c := QueueCount{Queue: name}
	for _, e := range entries {
		if e.Granted() {
			c.Holding++
		} else {
			c.Waiting++
		}
	}
	return c
}

// Queues is the part of Store that keeps queue entries (see QueueTx for
// the rules). Every operation is one transaction: a queue's operations are
// serialized, across replicas on a shared store, so its limits hold
// exactly.
type Queues interface {
	// Enqueue adds e to its queue (its Seq, EnqueuedAt, NotBefore and
	// GrantedAt are the store's), unless an entry of e.ID is there
	// already: then nothing is added (Priority and Key stay as stored)
	// and the call only looks again. Either way it grants the waiting
	// entries the limits allow, in order, and returns where e stands
	// (QueueResult). With lim.Debounce, a new entry replaces the waiting
	// entries of its key. Entries of tasks that are not active (ended or
	// gone) are dropped first. It fails with ErrInvalid or ErrTooLarge
	// for a bad entry or limits, ErrNotFound when e's task does not
	// exist and ErrTerminal when it has ended (nothing is written).
	Enqueue(ctx context.Context, e QueueEntry, lim QueueLimits, now time.Time) (QueueResult, error)
	// Dequeue removes entry id from queue (freeing the place it held; a
	// missing entry is no error) and grants what the limits allow then
	// (QueueResult.Granted).
	Dequeue(ctx context.Context, queue, id string, lim QueueLimits, now time.Time) (QueueResult, error)
	// QueueEntries returns the entries of queue whose tasks are active:
	// the holders first (by grant time), then the waiting entries in the
	// order they are granted (SortQueue). An unknown queue has none.
	QueueEntries(ctx context.Context, queue string) ([]QueueEntry, error)
	// QueueCounts counts the entries of every queue that has any (of
	// active tasks), by queue name.
	QueueCounts(ctx context.Context) ([]QueueCount, error)
}
