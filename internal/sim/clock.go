package sim

import (
	"sync"
	"time"
)

// Clock is the simulated clock: the engine (taskrouter.Options.Now), the
// store (store.Options.Now) and the tools read it, and only the simulation
// (or a test kit's caller) moves it. Its zero value is not usable; use
// NewClock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Epoch is where a simulation's clock starts: a fixed instant, so that a
// replayed seed sees the same times.
var Epoch = time.Date(2030, time.January, 7, 9, 0, 0, 0, time.UTC)

// NewClock returns a clock that reads start until it is moved.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t; a time before the clock's is ignored (time
// never goes back).
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t
	}
	c.mu.Unlock()
}

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
