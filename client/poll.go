package client

import (
	"time"
)

// poller computes polling delays: the server's suggested interval (or
// Options.PollInterval), bounded by Min/MaxPollInterval, growing by half
// after each poll that saw no change up to five times the base.
type poller struct {
	c     *Client
	basis time.Duration
	delay time.Duration
}

func newPoller(c *Client, t *Task) *poller {
	p := &poller{c: c}
	p.base(t)
	p.delay = p.basis
	return p
}

// base updates the base interval from the task's suggestion.
func (p *poller) base(t *Task) {
	d := t.PollInterval
	if d <= 0 {
		d = p.c.opts.PollInterval
	}
	p.basis = p.clamp(d)
}

func (p *poller) clamp(d time.Duration) time.Duration {
	return min(max(d, p.c.opts.MinPollInterval), p.c.opts.MaxPollInterval)
}

// next returns the delay before the next poll.
func (p *poller) next(changed bool) time.Duration {
	if changed {
		p.delay = p.basis
		return p.delay
	}
	p.delay = p.clamp(min(p.delay+p.delay/2, 5*p.basis))
	if p.delay < p.basis {
		p.delay = p.basis
	}
	return p.delay
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(d)
}
