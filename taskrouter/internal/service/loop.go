package service

import (
	"context"
	"sync"
	"time"
)

// A Loop is the timer loop of a periodic service: it runs a round, waits
// for the time the round asks for (or for a Poke), and runs the next
// round, until Stop. Rounds never overlap, and a round in progress
// finishes before Stop returns; the wait is measured from the end of a
// round (a slow round delays the next instead of piling rounds up). The
// zero value is ready; a Loop runs once (Start after Stop does nothing).
type Loop struct {
	mu      sync.Mutex
	poke    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	stopped bool
}

// Start runs round in a goroutine, the first time after first, then each
// time after the wait the previous round returned. The rounds get ctx
// without its cancellation: a round runs to its end (Stop waits for it).
func (l *Loop) Start(ctx context.Context, first time.Duration, round func(ctx context.Context) (next time.Duration)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil || l.stopped {
		return
	}
	l.init()
	l.done = make(chan struct{})
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer close(l.done)
		timer := time.NewTimer(first)
		defer timer.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-timer.C:
			case <-l.poke:
			}
			wait := round(ctx)
			timer.Reset(max(wait, 0))
		}
	}()
}

// Every is a round function for work that runs every d.
func Every(d time.Duration, work func(ctx context.Context)) func(context.Context) time.Duration {
	return func(ctx context.Context) time.Duration {
		work(ctx)
		return d
	}
}

func (l *Loop) init() {
	if l.poke == nil {
		l.poke = make(chan struct{}, 1)
		l.stop = make(chan struct{})
	}
}

// Poke makes the loop run its next round now (or, during a round, right
// after it). It never blocks.
func (l *Loop) Poke() {
	l.mu.Lock()
	l.init()
	poke := l.poke
	l.mu.Unlock()
	select {
	case poke <- struct{}{}:
	default:
	}
}

// Stop ends the loop and waits for a round in progress.
func (l *Loop) Stop() {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.stopped = true
	l.init()
	close(l.stop)
	done := l.done
	l.mu.Unlock()
	if done != nil {
		<-done
	}
}
