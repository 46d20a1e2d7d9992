package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sync"
	"time"
)

// The delivery attempts' workers. An attempt never runs on the
// scheduler's wake-ups: the scheduler hands a due delivery to Wake
// (push_deliver.go), which asks the pool for an attempt's place, holds
// the record out of the due index for the attempt (its WakeAt moves past
// the attempt's timeout), starts the attempt on a goroutine of the pool
// and returns; a delivery that gets no place is put off (its WakeAt
// moves, no attempt counted) and says why. So a receiver that accepts
// and never answers holds at most MaxConcurrentPerReceiver connections
// and no wake-up of the scheduler, whatever its number of webhooks and
// deliveries: another owner's timers and deliveries run on time.
//
// A place is refused when MaxConcurrent attempts run, when the
// receiver (the URL's scheme and host) has MaxConcurrentPerReceiver (the
// delivery is put off for twice the receiver's recent answers' latency,
// or, while it answers none, until its oldest attempt times out), and
// while the receiver's circuit is open: after circuitAfter attempts in a
// row that it did not answer (timed out, or no connection), no attempt
// goes to it for a cooldown (RetryBase, doubling at each reopening up to
// RetryMax); then one attempt goes through, whose answer closes the
// circuit (any HTTP answer: a receiver that answers an error is retried
// by its delivery's backoff) or opens it again. The pool's state is the
// process's: each replica keeps its own circuits.

// circuitAfter is how many attempts in a row a receiver leaves unanswered
// before its circuit opens.
const circuitAfter = 3

// Bounds of how long a delivery that found no place is put off.
const (
	minBusyWait = 100 * time.Millisecond
	poolWait    = time.Second // every attempt's place taken
)

// deliveryPool is the attempts running and each receiver's state. Its
// lock is a leaf.
type deliveryPool struct {
	max, perReceiver  int
	cooldown, coolMax time.Duration
	timeout           time.Duration // an attempt's
	mu                sync.Mutex
	running           int
	receivers         map[string]*receiver
	ctx               context.Context
	cancel            context.CancelFunc
	wg                sync.WaitGroup
}

// receiver is one receiver's attempts and circuit.
type receiver struct {
	starts    []time.Time   // of the attempts running
	latency   time.Duration // how long its answers took lately; zero: none yet
	missed    int           // attempts in a row not answered
	openUntil time.Time     // the circuit is open before it
	cooldown  time.Duration // its next opening's length
	probing   bool          // the circuit let one attempt through: the others wait for its outcome
}

func (p *deliveryPool) init(o PushOptions) {
	p.max, p.perReceiver = o.MaxConcurrent, o.MaxConcurrentPerReceiver
	p.cooldown, p.coolMax = o.RetryBase, o.RetryMax
	p.timeout = o.Timeout
	p.receivers = map[string]*receiver{}
	p.ctx, p.cancel = context.WithCancel(context.Background())
}

// stop cuts the attempts running short and waits for them.
func (p *deliveryPool) stop() {
	p.cancel()
	p.wg.Wait()
}

// receiverKey names the receiver of a webhook URL: its scheme and host
// (with its port).
func receiverKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Scheme + "://" + u.Host
}

// busyWait is how long a delivery to rc, which has no place free, is put
// off at now: twice its answers' latency when it answers, else until its
// oldest attempt times out (a receiver that answers nothing frees a place
// no sooner), within [minBusyWait, an attempt's timeout].
func (p *deliveryPool) busyWait(rc *receiver, now time.Time) time.Duration {
	wait := 2 * rc.latency
	if wait == 0 && len(rc.starts) > 0 {
		wait = rc.starts[0].Add(p.timeout).Sub(now)
	}
	return min(max(wait, minBusyWait), p.timeout)
}

// acquire takes an attempt's place for receiver key at now; refused, it
// says when to look again and why.
func (p *deliveryPool) acquire(key string, now time.Time) (ok bool, retry time.Time, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rc := p.receivers[key]
	if rc == nil {
		rc = &receiver{cooldown: p.cooldown}
		p.receivers[key] = rc
	}
	switch {
	case p.ctx.Err() != nil:
		return false, now, "the server is stopping"
	case now.Before(rc.openUntil):
		return false, rc.openUntil, fmt.Sprintf("%s left %d attempts in a row unanswered; no attempt goes to it before %s", key, rc.missed, rc.openUntil.UTC().Format(time.RFC3339))
	case rc.probing:
		return false, now.Add(p.busyWait(rc, now)), fmt.Sprintf("%s is being tried again after leaving attempts unanswered", key)
	case len(rc.starts) >= p.perReceiver:
		return false, now.Add(p.busyWait(rc, now)), fmt.Sprintf("%s has %d attempts running (taskrouter.PushOptions.MaxConcurrentPerReceiver)", key, len(rc.starts))
	case p.running >= p.max:
		return false, now.Add(poolWait), fmt.Sprintf("%d delivery attempts are running (taskrouter.PushOptions.MaxConcurrent)", p.running)
	}
	if rc.missed >= circuitAfter {
		rc.probing = true // half open: this attempt's outcome decides
	}
	rc.starts = append(rc.starts, now)
	p.running++
	return true, time.Time{}, ""
}

// release ends an attempt to receiver key that started at start:
// answered or not (a timeout, no connection), at now.
func (p *deliveryPool) release(key string, start time.Time, answered bool, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running--
	rc := p.receivers[key]
	if rc == nil {
		return
	}
	if i := slices.Index(rc.starts, start); i >= 0 {
		rc.starts = slices.Delete(rc.starts, i, i+1)
	} else if len(rc.starts) > 0 {
		rc.starts = rc.starts[1:]
	}
	wasProbe := rc.probing
	rc.probing = false
	if answered {
		took := max(now.Sub(start), 0)
		if rc.latency == 0 {
			rc.latency = took
		} else {
			rc.latency = (3*rc.latency + took) / 4
		}
		rc.missed, rc.openUntil, rc.cooldown = 0, time.Time{}, p.cooldown
	} else {
		rc.missed++
		if rc.missed >= circuitAfter && (wasProbe || rc.openUntil.IsZero()) {
			rc.openUntil = now.Add(rc.cooldown)
			rc.cooldown = min(2*rc.cooldown, p.coolMax)
		}
	}
	if len(rc.starts) == 0 && rc.missed == 0 && rc.latency < minBusyWait/2 {
		delete(p.receivers, key) // nothing worth remembering
	}
}

// run runs f on a goroutine of the pool, with the pool's context.
func (p *deliveryPool) run(f func(ctx context.Context)) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f(p.ctx)
	}()
}

// unanswered reports an attempt's error that is no answer of the
// receiver: it timed out, or no connection was made.
func unanswered(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	var op *net.OpError
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() ||
		errors.As(err, &op) && op.Op == "dial"
}
