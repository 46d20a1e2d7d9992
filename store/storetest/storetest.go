// Package storetest is the conformance suite for store.Store
// implementations.
//
// A backend's tests call Run with a function that opens a fresh, empty
// store, and durable backends also call RunDurable with a function that
// opens (or reopens) the store kept at a path:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return memory.New(nil) })
//	}
//
// Every subtest opens its own store, closes it when it ends (a second
// Close returning store.ErrClosed is ignored) and runs in parallel with the
// other subtests. The suite checks the
// invariants documented in package store: round trips of every field,
// uniqueness, validation, the status state machine, compare-and-swap,
// variable and label merges, size limits (at the default Limits), deep
// copies, owner-scoped pagination with authenticated cursors, the expiry
// and active indexes, concurrent writers without lost updates, ErrClosed
// after Close, leases (claims, renewals, fenced updates, the lease index,
// racing claims, the order of an update's checks on an ended task),
// operator queries with their filter-bound cursors and scan budget, status
// counts, the status history, tasks created in a terminal status,
// wake-ups (WakeAt, Update.WakeAt and the wake index behind Due, under
// concurrent writers too), and the event logs (numbering, the store's
// status events, appends in the write they report, pure appends, caps,
// reads, deletes, concurrent appenders), queues (grants in order within
// the per-key, global and rate limits, priorities, debounce, entries of
// ended tasks, exact limits under racing callers) and schedules (records
// written compare-and-swap with their fires, once per time, start marks,
// caps, one winner among racing writers) and the replicas' registry
// (heartbeats merged per replica, keys kept across other keys, stops,
// forgetting, concurrent heartbeats). When the store implements the
// optional store.Notifier, Run also checks its change feed (every
// version-bumping write and every delete delivered after it committed,
// one task's changes in commit order, no renewals, stop waiting for a
// running callback, Close ending subscriptions), and when it implements
// store.EventNotifier, that SubscribeEvents delivers the appends and
// Subscribe does not; RunNotifierResync checks the Resync after a lost
// connection, which only the backend can provoke. RunDurable checks that
// everything, including cursors, leases, counts, history, wake-ups, event
// logs, tasks created ended, queues, schedules and the replicas'
// registry, survives a close and reopen.
//
// The suite uses the default store.Limits: open must not configure smaller
// or larger limits. Under testing.Short the largest workloads are scaled
// down.
//
// QueueRace races queue callers over stores that share one database (two
// replicas of a shared backend; Run calls it with one store).
//
// BenchCreateComplete, BenchUpdates, BenchGet, BenchListPage and
// BenchQueryPage (over the tasks PreloadQuery writes) are shared benchmark
// bodies for backends' benchmarks.
package storetest

import (
	"testing"

	"github.com/taskbridge/taskbridge/store"
)

// Run runs the conformance suite. open must return a new, empty store with
// default limits each time it is called; it is called from parallel
// subtests, so it must be safe for concurrent use.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	o := opener(open)
	for _, tc := range suite {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // every subtest opens its own store
			tc.fn(t, o)
		})
	}
}

// suite lists Run's subtests, grouped by the file that holds them.
var suite = []struct {
	name string
	fn   func(t *testing.T, o opener)
}{
	// crud.go
	{"CreateGetRoundTrip", testRoundTrip},
	{"CreateDuplicate", testDuplicate},
	{"CreateInvalid", testCreateInvalid},
	{"NotFound", testNotFound},
	{"ResultAndError", testResultAndError},
	{"ReturnsCopies", testCopies},
	{"Delete", testDelete},
	// terminal.go
	{"CreateTerminal", testCreateTerminal},
	// transitions.go
	{"Transitions", testTransitions},
	{"CompareAndSwap", testCAS},
	// variables.go
	{"Variables", testVariables},
	{"Labels", testLabels},
	{"SizeLimits", testSizeLimits},
	// list.go
	{"ListOwnerScoping", testListScoping},
	{"ListHeadersOnly", testListHeadersOnly},
	{"ListPagination", testPagination},
	{"CursorWrongOwner", testCursorWrongOwner},
	{"CursorGarbage", testCursorGarbage},
	{"CursorAfterDelete", testCursorAfterDelete},
	// expiry.go
	{"Expired", testExpired},
	{"MoveExpiry", testMoveExpiry},
	{"Active", testActive},
	// concurrency.go
	{"ContextCancelled", testContext},
	{"ConcurrentWriters", testConcurrent},
	{"Closed", testClosed},
	// leases.go
	{"LeaseOnCreate", testLeaseCreate},
	{"Claim", testClaim},
	{"Renew", testRenew},
	{"FencedUpdate", testFence},
	{"FencedUpdateOfEndedTask", testFencedEnded},
	{"TerminalClearsLease", testTerminalClearsLease},
	{"ExpiredLeases", testExpiredLeases},
	{"ConcurrentClaims", testConcurrentClaims},
	// query.go
	{"Query", testQuery},
	{"QueryCursors", testQueryCursors},
	{"QueryScanBudget", testQueryScanBudget},
	// counts.go
	{"Counts", testCounts},
	// history.go
	{"History", testHistory},
	// wake.go
	{"WakeOnCreate", testWakeCreate},
	{"WakeUpdate", testWakeUpdate},
	{"Due", testDue},
	{"WakeClearedByTerminal", testWakeTerminal},
	{"WakeDelete", testWakeDelete},
	{"WakeConcurrent", testWakeConcurrent},
	// events.go
	{"EventsOnCreate", testEventsCreate},
	{"EventsUpdate", testEventsUpdate},
	{"EventsStatusMessageCut", testEventsStatusMessageCut},
	{"EventsAppendOnly", testEventsAppendOnly},
	{"EventsAtomic", testEventsAtomic},
	{"EventsCaps", testEventsCaps},
	{"EventsRead", testEventsRead},
	{"EventsDelete", testEventsDelete},
	{"EventsConcurrent", testEventsConcurrent},
	// queues.go
	{"QueueBasics", testQueueBasics},
	{"QueuePerKey", testQueuePerKey},
	{"QueueConcurrencyAndPriority", testQueueConcurrencyAndPriority},
	{"QueueRate", testQueueRate},
	{"QueueDebounce", testQueueDebounce},
	{"QueueEndedTasks", testQueueEndedTasks},
	{"QueueInvalid", testQueueInvalid},
	{"QueueConcurrent", testQueueConcurrent},
	// schedules.go
	{"ScheduleRecord", testScheduleRecord},
	{"ScheduleFires", testScheduleFires},
	{"ScheduleFirePrune", testScheduleFirePrune},
	{"ScheduleRace", testScheduleRace},
	// replicas.go
	{"ReplicaHeartbeat", testReplicaHeartbeat},
	{"ReplicaInvalid", testReplicaInvalid},
	{"ReplicaConcurrent", testReplicaConcurrent},
	// notifier.go: skipped unless the store implements store.Notifier
	{"NotifierChanges", testNotifierChanges},
	{"NotifierOrder", testNotifierOrder},
	{"NotifierStop", testNotifierStop},
	{"NotifierEvents", testNotifierEvents},
}
