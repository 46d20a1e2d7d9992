package postgres

import (
	"context"
	"time"
)

// The waiting of the change feed's two loops (the publisher resending
// after a failed send, a subscription reconnecting after a lost
// connection), written once.

// backoff spaces the attempts to reach the database again after a
// failure: minReconnectDelay first, then twice the previous delay, at most
// maxReconnectDelay. The zero value is ready; reset it after a success.
type backoff struct{ last time.Duration }

// next returns the delay before the next attempt.
func (b *backoff) next() time.Duration {
	b.last = min(max(2*b.last, minReconnectDelay), maxReconnectDelay)
	return b.last
}

// reset starts the next failure's delays over from minReconnectDelay.
func (b *backoff) reset() { b.last = 0 }

// sleep waits for d or until ctx is done, and reports whether all of d
// passed (false: ctx ended first).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
