package taskrouter

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestHeldTasksShareTheirOwnerAndSource: the tasks a source holds keep
// one copy of its owner and source strings between them (a workflow
// waiting for days keeps its admission), not each request's.
func TestHeldTasksShareTheirOwnerAndSource(t *testing.T) {
	r := &Router{quotas: newQuotas(Options{MaxPending: 10, MaxPendingPerOwner: 10, MaxPendingPerSource: 10, MaxConcurrent: 1, MaxConcurrentSteps: 1})}
	r.runs.byID = map[string]*run{}
	r.door = door{runs: &r.runs, quotas: &r.quotas}
	copyOf := func(s string) string { return string(append([]byte(nil), s...)) }
	for _, id := range []string{"a", "b"} {
		require.NoError(t, r.door.admitTask(id, admission{owner: copyOf("user:alice"), source: copyOf("session:s1")}, false))
	}
	a, b := r.quotas.held["a"], r.quotas.held["b"]
	require.Equal(t, "session:s1", b.source)
	require.Same(t, unsafe.StringData(a.source), unsafe.StringData(b.source))
	require.Same(t, unsafe.StringData(a.owner), unsafe.StringData(b.owner))
	r.quotas.releaseTask("a")
	r.quotas.releaseTask("b")
	require.Empty(t, r.quotas.sources)
	require.Empty(t, r.quotas.owners)
	require.Zero(t, r.quotas.pending)
}
