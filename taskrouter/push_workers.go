package taskrouter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
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
// receiver (the URL's scheme and host) has MaxConcurrentPerReceiver, and
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

// deliveryPool is the attempts running and each receiver's state. Its
// lock is a leaf.
type deliveryPool struct {
	max, perReceiver  int
	cooldown, coolMax time.Duration
	busyWait          time.Duration
	mu                sync.Mutex
	running           int
	receivers         map[string]*receiver
	ctx               context.Context
	cancel            context.CancelFunc
	wg                sync.WaitGroup
}

// receiver is one receiver's attempts and circuit.
type receiver struct {
	running   int
	missed    int           // attempts in a row not answered
	openUntil time.Time     // the circuit is open before it
	cooldown  time.Duration // its next opening's length
	probing   bool          // the circuit let one attempt through: the others wait for its outcome
}

func (p *deliveryPool) init(o PushOptions) {
	p.max, p.perReceiver = o.MaxConcurrent, o.MaxConcurrentPerReceiver
	p.cooldown, p.coolMax = o.RetryBase, o.RetryMax
	p.busyWait = min(o.Timeout, 2*time.Second)
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
		return false, now.Add(p.busyWait), fmt.Sprintf("%s is being tried again after leaving attempts unanswered", key)
	case rc.running >= p.perReceiver:
		return false, now.Add(p.busyWait), fmt.Sprintf("%s has %d attempts running (taskrouter.PushOptions.MaxConcurrentPerReceiver)", key, rc.running)
	case p.running >= p.max:
		return false, now.Add(p.busyWait), fmt.Sprintf("%d delivery attempts are running (taskrouter.PushOptions.MaxConcurrent)", p.running)
	}
	if rc.missed >= circuitAfter {
		rc.probing = true // half open: this attempt's outcome decides
	}
	rc.running++
	p.running++
	return true, time.Time{}, ""
}

// release ends an attempt to receiver key: answered or not (a timeout, no
// connection), at now.
func (p *deliveryPool) release(key string, answered bool, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running--
	rc := p.receivers[key]
	if rc == nil {
		return
	}
	rc.running--
	wasProbe := rc.probing
	rc.probing = false
	if answered {
		rc.missed, rc.openUntil, rc.cooldown = 0, time.Time{}, p.cooldown
	} else {
		rc.missed++
		if rc.missed >= circuitAfter && (wasProbe || rc.openUntil.IsZero()) {
			rc.openUntil = now.Add(rc.cooldown)
			rc.cooldown = min(2*rc.cooldown, p.coolMax)
		}
	}
	if rc.running == 0 && rc.missed == 0 {
		delete(p.receivers, key) // nothing to remember
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
