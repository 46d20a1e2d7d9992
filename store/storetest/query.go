package storetest

// Operator queries across owners: filters, newest-first paging, cursors
// bound to the filters, and the per-call scan budget.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// queryAll pages through q and returns every task and the number of pages.
// It checks that no page is larger than the limit.
func queryAll(t *testing.T, s store.Store, q store.Query) ([]*store.Task, int) {
	t.Helper()
	var all []*store.Task
	pages := 0
	for {
		page, err := s.Query(t.Context(), q)
		require.NoError(t, err)
		pages++
		require.LessOrEqual(t, len(page.Tasks), store.PageLimit(q.Limit))
		all = append(all, page.Tasks...)
		if page.NextCursor == "" {
			return all, pages
		}
		q.Cursor = page.NextCursor
		require.Less(t, pages, 100000, "paging does not terminate")
	}
}

// newestFirst orders tasks by (CreatedAt, id) descending, as Query does.
func newestFirst(a, b *store.Task) int { return -comparePos(a, b) }

// headersOf returns t without what Query leaves out.
func headersOf(t *store.Task) *store.Task {
	h := t.Clone()
	h.Variables, h.Result, h.Error, h.History = nil, nil, nil, nil
	return h
}

// queryFixture creates tasks over three owners, three names and every
// status, some sharing a creation time, and returns them as stored.
func queryFixture(t *testing.T, s store.Store) []*store.Task {
	t.Helper()
	owners := []string{"alice", "bob", "carol\x00\xff"}
	names := []string{"echo", "sum", "slow"}
	var out []*store.Task
	for i := range 90 {
		task := newTask(fmt.Sprintf("q-%03d", (i*37)%90), owners[i%3], t0.Add(time.Duration(i/2)*time.Millisecond))
		task.Request.Name = names[(i/3)%3]
		task.Variables = map[string]json.RawMessage{"v": json.RawMessage(`1`)}
		mustCreate(t, s, task)
		u := store.Update{Result: json.RawMessage(`{"r":1}`)}
		switch i % 5 {
		case 1:
			u.Status = mcptask.StatusInputRequired
		case 2:
			u.Status = mcptask.StatusCompleted
		case 3:
			u.Status = mcptask.StatusFailed
		case 4:
			u.Status = mcptask.StatusCancelled
		}
		out = append(out, mustUpdate(t, s, task.ID, u))
	}
	return out
}

func testQuery(t *testing.T, o opener) {
	s := o.open(t)
	all := queryFixture(t, s)
	queries := []store.Query{
		{},
		{Statuses: []mcptask.Status{mcptask.StatusCompleted}},
		{Statuses: []mcptask.Status{mcptask.StatusWorking, mcptask.StatusFailed}},
		{Statuses: []mcptask.Status{mcptask.StatusFailed, mcptask.StatusWorking, mcptask.StatusFailed}},
		{Statuses: store.AllStatuses()},
		{Owner: "alice"},
		{Owner: "carol\x00\xff"},
		{Name: "sum"},
		{Owner: "bob", Name: "echo"},
		{Owner: "alice", Statuses: []mcptask.Status{mcptask.StatusInputRequired}},
		{Name: "slow", Statuses: []mcptask.Status{mcptask.StatusCancelled, mcptask.StatusCompleted}},
		{Owner: "carol\x00\xff", Name: "slow", Statuses: []mcptask.Status{mcptask.StatusWorking}},
		{Owner: "nobody"},
		{Name: "nothing"},
		{Owner: "alic"},
	}
	for _, q := range queries {
		var want []*store.Task
		for _, task := range all {
			if q.Match(task) {
				want = append(want, headersOf(task))
			}
		}
		slices.SortFunc(want, newestFirst)
		for _, limit := range []int{1, 7, 0} {
			q.Limit = limit
			got, _ := queryAll(t, s, q)
			require.Equal(t, ids(want), ids(got), "%+v", q)
			require.Equal(t, want, got, "%+v: headers only, everything else as stored", q)
		}
		// Oldest first: the same tasks in the reverse order.
		slices.Reverse(want)
		q.Oldest = true
		for _, limit := range []int{1, 7, 0} {
			q.Limit = limit
			got, _ := queryAll(t, s, q)
			require.Equal(t, ids(want), ids(got), "%+v", q)
			require.Equal(t, want, got, "%+v: headers only, everything else as stored", q)
		}
	}

	// The oldest working task is the first entry of a one-task page.
	oldest, err := s.Query(t.Context(), store.Query{Statuses: []mcptask.Status{mcptask.StatusWorking}, Oldest: true, Limit: 1})
	require.NoError(t, err)
	require.Len(t, oldest.Tasks, 1)
	for _, task := range all {
		if task.Status == mcptask.StatusWorking {
			require.GreaterOrEqual(t, comparePos(task, oldest.Tasks[0]), 0, "no working task is older")
		}
	}

	// A full page of an unfiltered query comes back whole.
	page, err := s.Query(t.Context(), store.Query{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 10)
	require.NotEmpty(t, page.NextCursor)

	_, err = s.Query(t.Context(), store.Query{Statuses: []mcptask.Status{"sleeping"}})
	require.ErrorIs(t, err, store.ErrInvalid)
	_, err = s.Query(t.Context(), store.Query{Owner: strings.Repeat("o", store.MaxOwnerBytes+1)})
	require.ErrorIs(t, err, store.ErrInvalid)
}

func testQueryCursors(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	queryFixture(t, s)
	q := store.Query{Statuses: []mcptask.Status{mcptask.StatusWorking, mcptask.StatusCompleted}, Owner: "alice", Limit: 2}
	first, err := s.Query(ctx, q)
	require.NoError(t, err)
	require.NotEmpty(t, first.NextCursor)

	// The same filters, listed in another order and with another page size.
	same := store.Query{Statuses: []mcptask.Status{mcptask.StatusCompleted, mcptask.StatusWorking}, Owner: "alice", Limit: 3, Cursor: first.NextCursor}
	_, err = s.Query(ctx, same)
	require.NoError(t, err)

	for _, other := range []store.Query{
		{Statuses: []mcptask.Status{mcptask.StatusWorking}, Owner: "alice"},
		{Statuses: []mcptask.Status{mcptask.StatusWorking, mcptask.StatusCompleted}, Owner: "bob"},
		{Statuses: []mcptask.Status{mcptask.StatusWorking, mcptask.StatusCompleted}, Owner: "alice", Name: "echo"},
		{Owner: "alice"},
		{},
		// The same filters in the other direction.
		{Statuses: []mcptask.Status{mcptask.StatusWorking, mcptask.StatusCompleted}, Owner: "alice", Oldest: true},
	} {
		other.Cursor = first.NextCursor
		_, err := s.Query(ctx, other)
		require.ErrorIs(t, err, store.ErrInvalidCursor, "%+v", other)
	}
	// An oldest-first cursor resumes oldest first, and is refused newest
	// first.
	asc := store.Query{Owner: "bob", Oldest: true, Limit: 4}
	p, err := s.Query(ctx, asc)
	require.NoError(t, err)
	require.Len(t, p.Tasks, 4)
	asc.Cursor = p.NextCursor
	p2, err := s.Query(ctx, asc)
	require.NoError(t, err)
	require.NotEmpty(t, p2.Tasks)
	require.Positive(t, comparePos(p2.Tasks[0], p.Tasks[3]), "the next page is newer")
	_, err = s.Query(ctx, store.Query{Owner: "bob", Cursor: p.NextCursor})
	require.ErrorIs(t, err, store.ErrInvalidCursor)
	// List cursors are not Query cursors, nor the other way round.
	list, err := s.List(ctx, store.ListOptions{Owner: "alice", Limit: 1})
	require.NoError(t, err)
	_, err = s.Query(ctx, store.Query{Owner: "alice", Cursor: list.NextCursor})
	require.ErrorIs(t, err, store.ErrInvalidCursor)
	_, err = s.List(ctx, store.ListOptions{Owner: "alice", Cursor: first.NextCursor})
	require.ErrorIs(t, err, store.ErrInvalidCursor)
	for _, c := range []string{"garbage", first.NextCursor + "A", first.NextCursor[1:]} {
		_, err = s.Query(ctx, store.Query{Statuses: q.Statuses, Owner: "alice", Cursor: c})
		require.ErrorIs(t, err, store.ErrInvalidCursor, c)
	}
	// Another store's cursor.
	other := o.open(t)
	queryFixture(t, other)
	q.Cursor = first.NextCursor
	_, err = other.Query(ctx, q)
	require.ErrorIs(t, err, store.ErrInvalidCursor)

	// Deleting the task a cursor points at keeps the cursor valid.
	unfiltered := store.Query{Limit: 5}
	p1, err := s.Query(ctx, unfiltered)
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, p1.Tasks[4].ID))
	unfiltered.Cursor = p1.NextCursor
	rest, _ := queryAll(t, s, unfiltered)
	require.Len(t, rest, 90-5)
	for _, task := range rest {
		require.Negative(t, comparePos(task, p1.Tasks[4]), "resumes after the cursor position")
	}
}

// testQueryScanBudget makes a query whose driving index holds more entries
// than a call may examine, with the only match behind all of them: paging
// still finds it, in a bounded number of calls.
func testQueryScanBudget(t *testing.T, o opener) {
	s := o.open(t)
	crowd := store.MinQueryScan + 300
	tasks := make([]*store.Task, 0, crowd+1)
	rare := newTask("rare", "crowd", t0)
	rare.Request.Name = "rare"
	tasks = append(tasks, rare)
	for i := range crowd {
		task := newTask(fmt.Sprintf("c-%05d", i), "crowd", t0.Add(time.Duration(i+1)*time.Microsecond))
		task.Request.Name = "common"
		tasks = append(tasks, task)
	}
	createMany(t, t.Context(), s, tasks, 32)

	q := store.Query{Owner: "crowd", Name: "rare", Limit: 10}
	got, pages := queryAll(t, s, q)
	require.Equal(t, []string{"rare"}, ids(got))
	require.LessOrEqual(t, pages, crowd/store.QueryScanBudget(q.Limit)+2, "every call examines up to the budget")

	got, pages = queryAll(t, s, store.Query{Name: "rare"})
	require.Equal(t, []string{"rare"}, ids(got))
	require.Equal(t, 1, pages, "the name index finds it at once")

	got, _ = queryAll(t, s, store.Query{Owner: "crowd", Name: "common", Limit: store.MaxPageSize})
	require.Len(t, got, crowd)
	require.True(t, slices.IsSortedFunc(got, newestFirst))

	// Oldest first: the match is the very first entry, found on page one.
	got, pages = queryAll(t, s, store.Query{Owner: "crowd", Name: "rare", Oldest: true, Limit: 1})
	require.Equal(t, []string{"rare"}, ids(got))
	require.LessOrEqual(t, pages, crowd/store.QueryScanBudget(1)+2)
	first, err := s.Query(t.Context(), store.Query{Owner: "crowd", Name: "rare", Oldest: true, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []string{"rare"}, ids(first.Tasks))
}
