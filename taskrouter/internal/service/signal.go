package service

import "time"

// A Signal is a test signal of a service: the service sends on it when
// something a test waits for happened (a sweep deleted tasks, a lease was
// lost). It does nothing until a test calls Init, so production code pays
// one nil check; it never blocks the service (a signal nobody reads is
// dropped once 256 are pending).
type Signal[T any] struct {
	ch chan T
}

// Init turns the signal on; call it before the service starts.
func (s *Signal[T]) Init() { s.ch = make(chan T, 256) }

// Send signals v, if the signal is on.
func (s *Signal[T]) Send(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// C is the channel the signals arrive on (nil before Init).
func (s *Signal[T]) C() <-chan T { return s.ch }

// Wait returns the next signal, or false after timeout.
func (s *Signal[T]) Wait(timeout time.Duration) (T, bool) {
	select {
	case v := <-s.ch:
		return v, true
	case <-time.After(timeout):
		var zero T
		return zero, false
	}
}
