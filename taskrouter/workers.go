package taskrouter

import "sync"

// Task handlers run on goroutines that are reused. A task handler's call
// through the SDK's tool dispatch goes deep (JSON decoding, input schema
// validation), and a new goroutine starts with a small stack that has to
// grow, by copying, two or three times on every task: about a tenth of
// the server's CPU at 64 clients. A goroutine that ran a handler keeps its
// grown stack for the next one.

const maxIdleWorkers = 256

type workers struct {
	mu     sync.Mutex
	idle   []chan func()
	closed bool
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
	go w.loop(make(chan func(), 1), f)
}

func (w *workers) loop(ch chan func(), f func()) {
	for f != nil {
		f()
		f = nil
		w.mu.Lock()
		if w.closed || len(w.idle) >= maxIdleWorkers {
			w.mu.Unlock()
			return
		}
		w.idle = append(w.idle, ch)
		w.mu.Unlock()
		f = <-ch
	}
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
