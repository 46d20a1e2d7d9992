package service

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type fake struct {
	name  string
	fail  error
	log   *[]string
	mu    *sync.Mutex
	start int
}

func (f *fake) Name() string { return f.name }
func (f *fake) Start(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.start++
	*f.log = append(*f.log, "start "+f.name)
	return nil
}
func (f *fake) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.log = append(*f.log, "stop "+f.name)
}

// TestSupervisorOrder: services start in order, stop in reverse; a
// failing start stops what that call started and names the service;
// nothing starts after Stop.
func TestSupervisorOrder(t *testing.T) {
	var mu sync.Mutex
	var log []string
	mk := func(name string, fail error) *fake { return &fake{name: name, fail: fail, log: &log, mu: &mu} }
	var s Supervisor
	require.NoError(t, s.Start(t.Context(), mk("feed", nil)))
	err := s.Start(t.Context(), mk("scheduler", nil), mk("sweeper", nil), mk("renewer", errors.New("no")))
	require.ErrorContains(t, err, "starting the renewer: no")
	require.Equal(t, []string{"feed"}, s.Running())
	require.NoError(t, s.Start(t.Context(), mk("scheduler", nil), mk("sweeper", nil)))
	require.Equal(t, []string{"feed", "scheduler", "sweeper"}, s.Running())
	s.Stop()
	require.ErrorIs(t, s.Start(t.Context(), mk("late", nil)), ErrStopped)
	require.Equal(t, []string{"start feed", "start scheduler", "start sweeper", "stop sweeper", "stop scheduler",
		"start scheduler", "start sweeper", "stop sweeper", "stop scheduler", "stop feed"}, log)
}

// TestLoop: rounds run after the wait each returns, a poke runs one at
// once, rounds never overlap, and Stop waits for the round in progress.
func TestLoop(t *testing.T) {
	var l Loop
	var rounds, inRound atomic.Int32
	started := make(chan struct{}, 16)
	release := make(chan struct{})
	l.Start(t.Context(), time.Hour, func(context.Context) time.Duration {
		require.Equal(t, int32(1), inRound.Add(1), "rounds never overlap")
		defer inRound.Add(-1)
		n := rounds.Add(1)
		started <- struct{}{}
		if n == 2 {
			<-release
		}
		return time.Hour
	})
	l.Poke()
	<-started
	l.Poke()
	<-started // the second round blocks until released
	stopped := make(chan struct{})
	go func() { l.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned during a round")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-stopped
	require.Equal(t, int32(2), rounds.Load())
	l.Poke() // after Stop: nothing runs, nothing blocks
	l.Start(t.Context(), 0, func(context.Context) time.Duration { rounds.Add(1); return 0 })
	require.Equal(t, int32(2), rounds.Load())
}

// TestLoopEvery: Every runs its work at every interval.
func TestLoopEvery(t *testing.T) {
	var l Loop
	var n atomic.Int32
	l.Start(t.Context(), time.Millisecond, Every(time.Millisecond, func(context.Context) { n.Add(1) }))
	require.Eventually(t, func() bool { return n.Load() >= 3 }, 30*time.Second, time.Millisecond)
	l.Stop()
}

// TestSignal: a signal does nothing before Init, delivers after it, and
// never blocks its sender.
func TestSignal(t *testing.T) {
	var s Signal[int]
	s.Send(1)
	require.Nil(t, s.C())
	s.Init()
	for i := range 1000 {
		s.Send(i)
	}
	v, ok := s.Wait(30 * time.Second)
	require.True(t, ok)
	require.Equal(t, 0, v)
	for range 255 {
		_, ok = s.Wait(30 * time.Second)
		require.True(t, ok)
	}
	_, ok = s.Wait(10 * time.Millisecond)
	require.False(t, ok, "signals past the buffer were dropped, not blocked on")
}

// TestCheck: every failed check names the service and the field.
func TestCheck(t *testing.T) {
	c := Check{Service: "sweeper"}
	c.Positive("Interval", 0)
	c.NotNegative("Grace", time.Second)
	c.Count("Batch", -1)
	c.Set("Name", "")
	err := c.Err()
	require.ErrorContains(t, err, "taskrouter: sweeper: Interval must be positive (got 0s)")
	require.NotContains(t, err.Error(), "Grace")
	require.ErrorContains(t, err, "taskrouter: sweeper: Batch is negative (-1)")
	require.ErrorContains(t, err, "taskrouter: sweeper: Name is empty")
	require.NoError(t, (&Check{Service: "x"}).Err())
}
