package taskrouter

import (
	"sync"
	"sync/atomic"
	"time"
)

// Task handlers, and the fast path's calls on stdio and in-memory
// connections (shim.go), run on goroutines that are reused. A task
// handler's call through the SDK's tool dispatch goes deep (JSON decoding,
// input schema validation), and a new goroutine starts with a small stack
// that has to grow, by copying, two or three times on every task: about a
// tenth of the server's CPU at 64 clients (a fifth of a plain call's on a
// connection). A goroutine that ran one keeps its grown stack for the
// next, for a while: an idle one ends after workerIdle, so an idle server
// holds none.

const (
	maxIdleWorkers = 64
	workerIdle     = 2 * time.Second
)

type workers struct {
	mu     sync.Mutex
	idle   []chan func()
	closed bool
	live   atomic.Int32  // workers running or idle
	idleT  time.Duration // how long an idle worker stays: workerIdle when zero (tests set it)
}

// run runs f on an idle worker, or a new one.
func (w *workers) run(f func()) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 && !w.closed {
		ch := w.idle[n-1]
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		ch <- f
		return
	}
	w.mu.Unlock()
	w.live.Add(1)
	go w.loop(make(chan func(), 1), f)
}

func (w *workers) loop(ch chan func(), f func()) {
	defer w.live.Add(-1)
	var timer *time.Timer
	for f != nil {
		f()
		f = nil
		w.mu.Lock()
		if w.closed || len(w.idle) >= maxIdleWorkers {
			w.mu.Unlock()
			return
		}
		w.idle = append(w.idle, ch)
		stay := w.idleT
		w.mu.Unlock()
		if stay == 0 {
			stay = workerIdle
		}
		if timer == nil {
			timer = time.NewTimer(stay)
		} else {
			timer.Reset(stay)
		}
		select {
		case f = <-ch:
			timer.Stop()
		case <-timer.C:
			if w.leave(ch) {
				return
			}
			f = <-ch // taken just now: its work is on the way
		}
	}
}

// leave takes an idle worker off the list; false when run took it first.
func (w *workers) leave(ch chan func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, c := range w.idle {
		if c == ch {
			w.idle = append(w.idle[:i], w.idle[i+1:]...)
			return true
		}
	}
	return false
}

// close ends the idle workers; workers running a handler end after it.
func (w *workers) close() {
	w.mu.Lock()
	w.closed = true
	idle := w.idle
	w.idle = nil
	w.mu.Unlock()
	for _, ch := range idle {
		ch <- nil
	}
}
