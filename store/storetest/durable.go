package storetest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

var cursorB64 = base64.RawURLEncoding

func base64Decode(s string) ([]byte, error) { return cursorB64.DecodeString(s) }
func base64Encode(b []byte) string          { return cursorB64.EncodeToString(b) }

// RunDurable runs the persistence tests. open must open the store kept at
// path, creating it when the file does not exist; the suite closes each
// store before it reopens the same path. Subtests run in parallel, each
// with its own path, so open must be safe for concurrent use.
func RunDurable(t *testing.T, open func(t *testing.T, path string) store.Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, open func(t *testing.T, path string) store.Store)
	}{
		{"Reopen", testReopen},
		{"StatusUpdateKeepsVariablesAndResult", testKeepsVarsAndResult},
		{"CreatedTerminal", testReopenCreatedTerminal},
		{"Wake", testReopenWake},
		{"Events", testReopenEvents},
		{"Queues", testReopenQueues},
		{"Schedules", testReopenSchedules},
		{"Replicas", testReopenReplicas},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // every subtest uses its own path
			tc.fn(t, open)
		})
	}
}

func openAt(t *testing.T, open func(t *testing.T, path string) store.Store, path string) store.Store {
	t.Helper()
	s := open(t, path)
	require.NotNil(t, s)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type listing struct {
	cursor string
	page   store.Page
}

type queryPage struct {
	q    store.Query
	page store.Page
}

// snapshot is everything observable about a store's contents.
type snapshot struct {
	tasks    map[string]*store.Task
	active   []*store.Task
	expired  []*store.Task
	leases   []*store.Task
	due      []*store.Task
	counts   map[mcptask.Status]int
	listings map[string][]listing
	queries  []queryPage
}

// snapshotQueries are the queries a snapshot pages through, two tasks a
// page, keeping every cursor.
var snapshotQueries = []store.Query{
	{},
	{Owner: "alice"},
	{Statuses: []mcptask.Status{mcptask.StatusInputRequired, mcptask.StatusWorking}},
	{Name: "echo", Statuses: []mcptask.Status{mcptask.StatusCompleted}},
}

func takeSnapshot(t *testing.T, s store.Store, ids []string, owners []string) snapshot {
	t.Helper()
	ctx := t.Context()
	snap := snapshot{tasks: map[string]*store.Task{}, listings: map[string][]listing{}}
	for _, id := range ids {
		task, err := s.Get(ctx, id)
		if err == nil {
			snap.tasks[id] = task
		} else {
			require.ErrorIs(t, err, store.ErrNotFound)
		}
	}
	var err error
	snap.active, err = s.Active(ctx)
	require.NoError(t, err)
	snap.expired, err = s.Expired(ctx, t0.Add(100*365*24*time.Hour), store.MaxPageSize)
	require.NoError(t, err)
	snap.leases, err = s.ExpiredLeases(ctx, t0.Add(100*365*24*time.Hour), store.MaxPageSize)
	require.NoError(t, err)
	snap.due, err = s.Due(ctx, t0.Add(100*365*24*time.Hour), store.MaxPageSize)
	require.NoError(t, err)
	snap.counts, err = s.Counts(ctx)
	require.NoError(t, err)
	for _, q := range snapshotQueries {
		q.Limit = 2
		for {
			page, err := s.Query(ctx, q)
			require.NoError(t, err)
			snap.queries = append(snap.queries, queryPage{q: q, page: page})
			if page.NextCursor == "" {
				break
			}
			q.Cursor = page.NextCursor
		}
	}
	for _, owner := range owners {
		cursor := ""
		for {
			page, err := s.List(ctx, store.ListOptions{Owner: owner, Cursor: cursor, Limit: 2})
			require.NoError(t, err)
			snap.listings[owner] = append(snap.listings[owner], listing{cursor: cursor, page: page})
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
	}
	return snap
}

func testReopen(t *testing.T, open func(t *testing.T, path string) store.Store) {
	path := filepath.Join(t.TempDir(), "tasks.db")
	s := openAt(t, open, path)

	oddOwner := "bob\x00\xff"
	mustCreate(t, s, fullTask("full", "alice"))
	mustUpdate(t, s, "full", store.Update{
		Variables: map[string]json.RawMessage{"question": json.RawMessage(`null`), "answer": json.RawMessage(` 42 `)},
		Labels:    map[string]string{"kind": "", "retry": "3"},
	})
	plain := newTask("plain", "alice", t0.Add(time.Second))
	plain.PollInterval = time.Second
	mustCreate(t, s, plain)
	for i, st := range []mcptask.Status{mcptask.StatusCompleted, mcptask.StatusFailed, mcptask.StatusCancelled, mcptask.StatusInputRequired} {
		id := fmt.Sprintf("s-%s", st)
		task := newTask(id, "alice", t0.Add(time.Duration(i+2)*time.Second))
		task.TTL = time.Duration(i+1) * time.Hour
		task.Variables = map[string]json.RawMessage{"i": json.RawMessage(fmt.Sprint(i))}
		mustCreate(t, s, task)
		u := store.Update{Status: st, StatusMessage: strPtr(string(st))}
		switch st {
		case mcptask.StatusCompleted:
			u.Result = json.RawMessage(`{"content": [], "structuredContent": {"x": "é\u00e9"}}`)
		case mcptask.StatusFailed:
			u.Error = &mcptask.ErrorInfo{Code: -32001, Message: "bad \xff bytes", Data: json.RawMessage(`{"retry": false}`)}
		}
		mustUpdate(t, s, id, u)
	}
	mustCreate(t, s, newTask("odd", oddOwner, t0))
	big := newTask("big", oddOwner, t0.Add(time.Minute))
	big.Variables = map[string]json.RawMessage{"blob": jsonString(store.DefaultMaxVariableBytes)}
	mustCreate(t, s, big)
	grace := t0.Add(5 * time.Hour)
	mustUpdate(t, s, "plain", store.Update{ExpiresAt: &grace}) // a moved expiry
	mustCreate(t, s, newTask("deleted", "alice", t0.Add(time.Hour)))
	require.NoError(t, s.Delete(t.Context(), "deleted"))
	// Leases: one created held, one claimed twice (epoch 2) and renewed,
	// one released.
	mustCreate(t, s, leasedTask("leased", "replica-a", t0.Add(time.Minute)))
	mustCreate(t, s, newTask("claimed", oddOwner, t0.Add(2*time.Minute)))
	_, err := s.Claim(t.Context(), "claimed", "replica-a", t0, t0.Add(time.Minute))
	require.NoError(t, err)
	_, err = s.Claim(t.Context(), "claimed", "replica-b\x00", t0.Add(time.Minute), t0.Add(2*time.Minute))
	require.NoError(t, err)
	renewed, err := s.Renew(t.Context(), "replica-b\x00", t0.Add(3*time.Minute), []string{"claimed", "leased"})
	require.NoError(t, err)
	require.Equal(t, []string{"claimed"}, renewed)
	mustCreate(t, s, leasedTask("released", "replica-a", t0.Add(time.Minute)))
	mustUpdate(t, s, "released", store.Update{ReleaseLease: true, Status: mcptask.StatusInputRequired, StatusMessage: strPtr("asked")})

	allIDs := []string{"full", "plain", "s-completed", "s-failed", "s-cancelled", "s-input_required", "odd", "big", "deleted", "leased", "claimed", "released"}
	owners := []string{"alice", oddOwner}
	before := takeSnapshot(t, s, allIDs, owners)
	require.Len(t, before.tasks, len(allIDs)-1)
	require.Len(t, before.listings["alice"], 4)
	require.NoError(t, s.Close())

	s2 := openAt(t, open, path)
	after := takeSnapshot(t, s2, allIDs, owners)
	require.Equal(t, before.tasks, after.tasks)
	require.Equal(t, before.active, after.active)
	require.Equal(t, before.expired, after.expired)
	require.Equal(t, before.leases, after.leases)
	require.Equal(t, []string{"leased", "claimed"}, ids(after.leases))
	require.Equal(t, before.due, after.due)
	require.Equal(t, []string{"full"}, ids(after.due))
	require.Equal(t, uint64(2), after.tasks["claimed"].LeaseEpoch)
	require.Len(t, after.tasks["released"].History, 2)
	require.Equal(t, before.counts, after.counts)
	require.Equal(t, map[mcptask.Status]int{mcptask.StatusWorking: 5, mcptask.StatusInputRequired: 3,
		mcptask.StatusCompleted: 1, mcptask.StatusFailed: 1, mcptask.StatusCancelled: 1}, after.counts)
	require.Equal(t, before.listings, after.listings)
	require.Equal(t, before.queries, after.queries)
	// Old query cursors still decode and resume where they did.
	for _, qp := range before.queries {
		page, err := s2.Query(t.Context(), qp.q)
		require.NoError(t, err)
		require.Equal(t, qp.page, page)
	}
	// Old cursors still decode and resume where they did.
	for owner, ls := range before.listings {
		for _, l := range ls {
			page, err := s2.List(t.Context(), store.ListOptions{Owner: owner, Cursor: l.cursor, Limit: 2})
			require.NoError(t, err)
			require.Equal(t, l.page, page)
		}
	}

	// A fence from before the restart still holds, and the lease can be
	// taken over after it.
	fence := after.tasks["claimed"].Fence()
	mustUpdate(t, s2, "claimed", store.Update{Fence: &fence, StatusMessage: strPtr("still mine")})
	_, err = s2.Claim(t.Context(), "claimed", "replica-c", t0.Add(2*time.Minute), t0.Add(time.Hour))
	require.ErrorIs(t, err, store.ErrLeased)
	taken, err := s2.Claim(t.Context(), "claimed", "replica-c", t0.Add(3*time.Minute), t0.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, uint64(3), taken.LeaseEpoch)
	_, err = s2.Update(t.Context(), "claimed", store.Update{Fence: &fence})
	require.ErrorIs(t, err, store.ErrFenced)

	// Writing continues from the stored versions.
	got := mustUpdate(t, s2, "plain", store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`1`)})
	require.Equal(t, before.tasks["plain"].Version+1, got.Version)
	mustCreate(t, s2, newTask("deleted", "carol", t0))
	require.NoError(t, s2.Delete(t.Context(), "big"))
	require.NoError(t, s2.Close())

	s3 := openAt(t, open, path)
	require.Equal(t, got, mustGet(t, s3, "plain"))
	require.Equal(t, "carol", mustGet(t, s3, "deleted").Owner)
	require.Equal(t, taken, mustGet(t, s3, "claimed"))
	_, err = s3.Get(t.Context(), "big")
	require.ErrorIs(t, err, store.ErrNotFound)
	active, err := s3.Active(t.Context())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"full", "s-input_required", "odd", "deleted", "leased", "claimed", "released"}, ids(active))
	counts, err := s3.Counts(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[mcptask.Status]int{mcptask.StatusWorking: 4, mcptask.StatusInputRequired: 3,
		mcptask.StatusCompleted: 2, mcptask.StatusFailed: 1, mcptask.StatusCancelled: 1}, counts,
		"plain completed, big deleted, deleted re-created")
}

func testKeepsVarsAndResult(t *testing.T, open func(t *testing.T, path string) store.Store) {
	path := filepath.Join(t.TempDir(), "tasks.db")
	s := openAt(t, open, path)
	task := newTask("keep", "alice", t0)
	task.Variables = map[string]json.RawMessage{
		"a": json.RawMessage(`{"deep": [1, 2, 3]}`),
		"b": jsonString(64 << 10),
	}
	mustCreate(t, s, task)
	withResult := mustUpdate(t, s, "keep", store.Update{Result: json.RawMessage(`{"partial": "yes"}`)})

	got := mustUpdate(t, s, "keep", store.Update{Status: mcptask.StatusInputRequired})
	require.Equal(t, withResult.Variables, got.Variables)
	require.Equal(t, withResult.Result, got.Result)
	got = mustUpdate(t, s, "keep", store.Update{StatusMessage: strPtr("hm"), Labels: map[string]string{"x": "y"}})
	require.Equal(t, withResult.Variables, got.Variables)
	require.Equal(t, withResult.Result, got.Result)
	got = mustUpdate(t, s, "keep", store.Update{Status: mcptask.StatusCompleted})
	require.Equal(t, withResult.Variables, got.Variables)
	require.Equal(t, string(withResult.Result), string(got.Result), "completing without a result keeps the stored one")
	require.Equal(t, got, mustGet(t, s, "keep"))
	require.NoError(t, s.Close())

	s2 := openAt(t, open, path)
	reread := mustGet(t, s2, "keep")
	require.Equal(t, got, reread)
	require.Equal(t, withResult.Variables, reread.Variables)
	require.Equal(t, string(withResult.Result), string(reread.Result))
	require.Equal(t, mcptask.StatusCompleted, reread.Status)
	require.Equal(t, "hm", reread.StatusMessage)
	require.Equal(t, uint64(5), reread.Version)
}

// testReopenCreatedTerminal checks that tasks created in a terminal status
// come back whole after a reopen, stay out of the active index, keep their
// counts and expiry, and still refuse every update.
func testReopenCreatedTerminal(t *testing.T, open func(t *testing.T, path string) store.Store) {
	path := filepath.Join(t.TempDir(), "tasks.db")
	s := openAt(t, open, path)
	mustCreate(t, s, newTask("live", "alice", t0.Add(-time.Second)))
	ended := endedTasks("alice", t0)
	allIDs := []string{"live"}
	for _, in := range ended {
		mustCreate(t, s, in)
		allIDs = append(allIDs, in.ID)
	}
	before := takeSnapshot(t, s, allIDs, []string{"alice"})
	require.Len(t, before.tasks, 4)
	require.Equal(t, []string{"live"}, ids(before.active))
	require.Equal(t, []string{"ended-failed", "ended-completed"}, ids(before.expired))
	require.NoError(t, s.Close())

	s2 := openAt(t, open, path)
	after := takeSnapshot(t, s2, allIDs, []string{"alice"})
	require.Equal(t, before, after)
	require.Equal(t, map[mcptask.Status]int{mcptask.StatusWorking: 1, mcptask.StatusInputRequired: 0,
		mcptask.StatusCompleted: 1, mcptask.StatusFailed: 1, mcptask.StatusCancelled: 1}, after.counts)
	for _, in := range ended {
		got := after.tasks[in.ID]
		require.Equal(t, in.Status, got.Status)
		require.Len(t, got.History, 1)
		_, err := s2.Update(t.Context(), in.ID, store.Update{Status: mcptask.StatusWorking})
		require.ErrorIs(t, err, store.ErrTerminal)
		_, err = s2.Update(t.Context(), in.ID, store.Update{StatusMessage: strPtr("x")})
		require.ErrorIs(t, err, store.ErrTerminal)
		_, err = s2.Claim(t.Context(), in.ID, "h", t0, t0.Add(time.Minute))
		require.ErrorIs(t, err, store.ErrTerminal)
	}
	require.Equal(t, after.tasks, takeSnapshot(t, s2, allIDs, nil).tasks, "refused writes leave them as they were")
}

// testReopenWake checks that wake-ups survive a reopen: set on create,
// moved, cleared, dropped by a terminal move and by a delete; the wake
// index comes back as it was and keeps working.
func testReopenWake(t *testing.T, open func(t *testing.T, path string) store.Store) {
	path := filepath.Join(t.TempDir(), "tasks.db")
	s := openAt(t, open, path)
	mustCreate(t, s, wakeTask("created", t0.Add(3*time.Second)))
	mustCreate(t, s, wakeTask("moved", t0.Add(time.Hour)))
	mustUpdate(t, s, "moved", store.Update{WakeAt: at(time.Second)})
	mustCreate(t, s, newTask("set", "alice", t0.Add(time.Millisecond)))
	mustUpdate(t, s, "set", store.Update{WakeAt: at(2 * time.Second), Status: mcptask.StatusInputRequired})
	mustCreate(t, s, wakeTask("cleared", t0.Add(time.Second)))
	mustUpdate(t, s, "cleared", store.Update{WakeAt: &time.Time{}})
	mustCreate(t, s, wakeTask("ended", t0.Add(time.Second)))
	mustUpdate(t, s, "ended", store.Update{Status: mcptask.StatusCompleted, Result: json.RawMessage(`1`)})
	mustCreate(t, s, wakeTask("deleted", t0.Add(time.Second)))
	require.NoError(t, s.Delete(t.Context(), "deleted"))
	mustCreate(t, s, wakeTask("tie", t0.Add(time.Second)))
	allIDs := []string{"created", "moved", "set", "cleared", "ended", "deleted", "tie"}
	before := takeSnapshot(t, s, allIDs, []string{"alice"})
	require.Equal(t, []string{"moved", "tie", "set", "created"}, ids(before.due))
	require.NoError(t, s.Close())

	s2 := openAt(t, open, path)
	after := takeSnapshot(t, s2, allIDs, []string{"alice"})
	require.Equal(t, before, after)
	require.True(t, after.tasks["cleared"].WakeAt.IsZero())
	require.True(t, after.tasks["ended"].WakeAt.IsZero())
	requireDue(t, s2, t0.Add(time.Second), 10, "moved", "tie")

	// The index keeps working from where it was.
	mustUpdate(t, s2, "tie", store.Update{WakeAt: at(time.Hour)})
	mustUpdate(t, s2, "created", store.Update{Status: mcptask.StatusFailed, Error: &mcptask.ErrorInfo{Code: 1, Message: "m"}})
	mustUpdate(t, s2, "cleared", store.Update{WakeAt: at(0)})
	require.NoError(t, s2.Delete(t.Context(), "moved"))
	requireDue(t, s2, t0.Add(time.Minute), 10, "cleared", "set")
	require.NoError(t, s2.Close())

	s3 := openAt(t, open, path)
	requireDue(t, s3, t0.Add(2*time.Hour), 10, "cleared", "set", "tie")
}
