// Package service runs the task engine's background work. Each piece of
// it (the scheduler, the ttl sweeper, the lease renewer, the takeover of
// expired leases, the change feed) is a Service: a type with its own
// configuration (defaults, and validation that names the field), Start
// and Stop, and test signals on the service value. One Supervisor, which
// the engine owns, starts the services in order and stops them in
// reverse; the periodic ones share one timer loop (Loop).
//
// River's maintenance services (internal/maintenance, startstop,
// testsignal) are the model. The package knows nothing of tasks: the
// engine's services live in package taskrouter, beside the state they
// work on.
package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A Service is one piece of background work.
type Service interface {
	// Name names the service in errors and logs.
	Name() string
	// Start begins the work and returns once it is under way, or why it
	// could not start. ctx carries values, not the work's lifetime: Stop
	// ends the work.
	Start(ctx context.Context) error
	// Stop ends the work and waits for it: a round in progress finishes
	// first. Stopping a service that is not running does nothing.
	Stop()
}

// A Supervisor starts services and stops them, the last started first.
// Its zero value is ready.
type Supervisor struct {
	mu      sync.Mutex
	running []Service
	stopped bool
}

// ErrStopped is returned by Start once the supervisor was stopped.
var ErrStopped = errors.New("service: the supervisor was stopped")

// Start starts each service in order. When one fails, it stops the ones
// this call started and returns the failure, naming the service.
func (s *Supervisor) Start(ctx context.Context, services ...Service) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	started := 0
	for _, svc := range services {
		if err := svc.Start(ctx); err != nil {
			for i := len(s.running) - 1; i >= len(s.running)-started; i-- {
				s.running[i].Stop()
			}
			s.running = s.running[:len(s.running)-started]
			return fmt.Errorf("starting the %s: %w", svc.Name(), err)
		}
		s.running = append(s.running, svc)
		started++
	}
	return nil
}

// Stop stops every running service, the last started first, and waits
// for each; later Starts fail with ErrStopped.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	running := s.running
	s.running, s.stopped = nil, true
	s.mu.Unlock()
	for i := len(running) - 1; i >= 0; i-- {
		running[i].Stop()
	}
}

// Running returns the names of the running services, in start order.
func (s *Supervisor) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, len(s.running))
	for i, svc := range s.running {
		names[i] = svc.Name()
	}
	return names
}

// Check collects the problems of a service's configuration, each naming
// the service and the field: validate methods call its checks and return
// Err.
type Check struct {
	Service string
	errs    []error
}

// Positive requires d > 0.
func (c *Check) Positive(field string, d time.Duration) {
	if d <= 0 {
		c.Failf(field, "must be positive (got %s)", d)
	}
}

// NotNegative requires d >= 0.
func (c *Check) NotNegative(field string, d time.Duration) {
	if d < 0 {
		c.Failf(field, "is negative (%s)", d)
	}
}

// Count requires n >= 0.
func (c *Check) Count(field string, n int) {
	if n < 0 {
		c.Failf(field, "is negative (%d)", n)
	}
}

// Set requires s != "".
func (c *Check) Set(field, s string) {
	if s == "" {
		c.Failf(field, "is empty")
	}
}

// Failf records that field is wrong, and why.
func (c *Check) Failf(field, format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("taskrouter: %s: %s %s", c.Service, field, fmt.Sprintf(format, args...)))
}

// Err is every problem found, joined; nil when there is none.
func (c *Check) Err() error { return errors.Join(c.errs...) }
