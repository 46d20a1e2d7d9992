package taskrouter

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// TestRecentKeptUpToItsExpiry: a router on an exclusive store keeps a
// task it ended until its expiry at most, whatever its ttl (a short-lived
// task's tasks/result is read from memory too); on a shared store, never
// within recentMargin of it (another replica's sweeper may delete it
// first).
func TestRecentKeptUpToItsExpiry(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	ended := func(id string, ttl time.Duration) *store.Task {
		return &store.Task{ID: id, Status: mcptask.StatusCompleted, CreatedAt: now, ExpiresAt: now.Add(ttl), Result: json.RawMessage(`{"content":[]}`)}
	}
	for _, shared := range []bool{false, true} {
		r, err := NewRouter(memoryStore(shared), nil)
		require.NoError(t, err)
		r.recent.remember(ended("short", 5*time.Second), now)
		r.recent.remember(ended("minute", time.Minute), now)
		r.recent.remember(ended("long", 10*time.Minute), now)
		if shared {
			require.Nil(t, r.recent.peek("short", now))
			require.Nil(t, r.recent.peek("minute", now))
		} else {
			require.NotNil(t, r.recent.peek("short", now.Add(4*time.Second)))
			require.Nil(t, r.recent.peek("short", now.Add(5*time.Second)), "never past its expiry")
			require.NotNil(t, r.recent.peek("minute", now.Add(9*time.Second)))
		}
		require.NotNil(t, r.recent.peek("long", now.Add(9*time.Second)), "shared %v", shared)
		require.Nil(t, r.recent.peek("long", now.Add(recentFor)), "kept %v at most", recentFor)
	}
}
