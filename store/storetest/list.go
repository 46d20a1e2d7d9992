package storetest

// Owner-scoped listing, pagination and cursors.

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

// testListHeadersOnly checks that HeadersOnly leaves out variables, result,
// error and history, and nothing else.
func testListHeadersOnly(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	task := newTask("h1", "owner", t0)
	task.Variables = map[string]json.RawMessage{"k": json.RawMessage(`{"v":1}`)}
	task.Labels = map[string]string{"kind": "tool"}
	mustCreate(t, s, task)
	_, err := s.Update(ctx, "h1", store.Update{Status: mcptask.StatusFailed, Result: json.RawMessage(`{"r":1}`),
		Error: &mcptask.ErrorInfo{Code: -32603, Message: "boom"}})
	require.NoError(t, err)
	full, err := s.List(ctx, store.ListOptions{Owner: "owner"})
	require.NoError(t, err)
	head, err := s.List(ctx, store.ListOptions{Owner: "owner", HeadersOnly: true})
	require.NoError(t, err)
	require.Len(t, full.Tasks, 1)
	require.Len(t, head.Tasks, 1)
	f, h := full.Tasks[0], head.Tasks[0]
	require.NotEmpty(t, f.Variables)
	require.NotEmpty(t, f.Result)
	require.NotNil(t, f.Error)
	require.Len(t, f.History, 2, "a full listing has the history")
	require.Empty(t, h.Variables)
	require.Empty(t, h.Result)
	require.Nil(t, h.Error)
	require.Nil(t, h.History)
	f.Variables, f.Result, f.Error, f.History = nil, nil, nil, nil
	h.Variables = nil
	require.Equal(t, f, h, "everything else is the same")
}

func testListScoping(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	// Owners that are prefixes of each other or contain separators.
	owners := []string{"a", "a\x00", "a\x00b", "ab", "b", "\x00", "a\xff"}
	want := map[string][]string{}
	n := 0
	for round := range 4 {
		for _, owner := range owners {
			n++
			id := fmt.Sprintf("%d-%q", round, owner)
			mustCreate(t, s, newTask(id, owner, t0.Add(time.Duration(n)*time.Millisecond)))
			want[owner] = append(want[owner], id)
		}
	}
	for _, owner := range owners {
		for _, limit := range []int{1, 3, 0} {
			all, _ := listAll(t, s, owner, limit)
			require.Equal(t, want[owner], ids(all), "owner %q limit %d", owner, limit)
			for _, task := range all {
				require.Equal(t, owner, task.Owner)
			}
		}
	}
	page, err := s.List(ctx, store.ListOptions{Owner: "nobody"})
	require.NoError(t, err)
	require.Empty(t, page.Tasks)
	require.Empty(t, page.NextCursor)

	page, err = s.List(ctx, store.ListOptions{Owner: strings.Repeat("o", store.MaxOwnerBytes+1)})
	require.NoError(t, err)
	require.Empty(t, page.Tasks)

	_, err = s.List(ctx, store.ListOptions{})
	require.ErrorIs(t, err, store.ErrInvalid, "an owner is required")
}

func testPagination(t *testing.T, o opener) {
	s := o.open(t)
	n := 3000
	if testing.Short() {
		n = 600
	}
	// Ids are not in creation order, and creation times repeat so that ids
	// break ties.
	tasks := make([]*store.Task, 0, n)
	for i := range n {
		id := fmt.Sprintf("p-%05d", (i*7919)%n)
		tasks = append(tasks, newTask(id, "pager", t0.Add(time.Duration(i%(n/4))*time.Millisecond)))
	}
	// Another owner's tasks interleave in the index.
	for i := range 50 {
		tasks = append(tasks, newTask(fmt.Sprintf("other-%d", i), "pager2", t0.Add(time.Duration(i)*time.Millisecond)))
	}
	createMany(t, t.Context(), s, tasks, 32)

	expected := slices.Clone(tasks[:n])
	slices.SortFunc(expected, comparePos)
	wantIDs := ids(expected)

	for _, limit := range []int{100, 0, store.MaxPageSize + 1, 7} {
		all, pages := listAll(t, s, "pager", limit)
		require.Equal(t, wantIDs, ids(all), "limit %d: every task exactly once, in (createdAt, id) order", limit)
		size := store.PageLimit(limit)
		require.Equal(t, (n+size-1)/size, pages, "limit %d", limit)
		for i, task := range all {
			require.True(t, task.CreatedAt.Equal(expected[i].CreatedAt))
		}
	}
	all, _ := listAll(t, s, "pager2", 10)
	require.Len(t, all, 50)
}

func testCursorWrongOwner(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	a := twoPages(t, s, "A")
	twoPages(t, s, "B")
	_, err := s.List(ctx, store.ListOptions{Owner: "B", Cursor: a.NextCursor})
	require.ErrorIs(t, err, store.ErrInvalidCursor)
	_, err = s.List(ctx, store.ListOptions{Owner: "A\x00", Cursor: a.NextCursor})
	require.ErrorIs(t, err, store.ErrInvalidCursor)
	page, err := s.List(ctx, store.ListOptions{Owner: "A", Cursor: a.NextCursor, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []string{"A-1"}, ids(page.Tasks))

	// A cursor from another store (another key) is rejected too.
	other := o.open(t)
	twoPages(t, other, "A")
	_, err = other.List(ctx, store.ListOptions{Owner: "A", Cursor: a.NextCursor})
	require.ErrorIs(t, err, store.ErrInvalidCursor)
}

func testCursorGarbage(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	good := twoPages(t, s, "A").NextCursor
	bad := []string{
		"!", "====", "a", "AAAA", "not a cursor", good + "=", good + "A", good[:len(good)-1],
		good[:len(good)/2], good[1:], " " + good, good + "\n", strings.Repeat("A", store.MaxCursorLen+4),
		good + strings.Repeat("A", 600), "\x00\xff", strings.ToUpper(good),
	}
	raw, err := base64Decode(good)
	require.NoError(t, err)
	for i := range raw {
		for bit := range 8 {
			flipped := slices.Clone(raw)
			flipped[i] ^= 1 << bit
			bad = append(bad, base64Encode(flipped))
		}
	}
	bad = append(bad, base64Encode(raw[:len(raw)-1]), base64Encode(append(slices.Clone(raw), 0)), base64Encode(nil))
	for _, c := range bad {
		if c == good || c == "" { // "" asks for the first page
			continue
		}
		page, err := s.List(ctx, store.ListOptions{Owner: "A", Cursor: c})
		require.ErrorIs(t, err, store.ErrInvalidCursor, "cursor %q", c)
		require.Empty(t, page.Tasks)
	}
	_, err = s.List(ctx, store.ListOptions{Owner: "A", Cursor: good})
	require.NoError(t, err, "the good cursor still works")
}

func testCursorAfterDelete(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	for i := range 6 {
		mustCreate(t, s, newTask(fmt.Sprintf("d-%d", i), "A", t0.Add(time.Duration(i)*time.Second)))
	}
	page, err := s.List(ctx, store.ListOptions{Owner: "A", Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"d-0", "d-1"}, ids(page.Tasks))
	// Delete the task the cursor points at and the one after it.
	require.NoError(t, s.Delete(ctx, "d-1"))
	require.NoError(t, s.Delete(ctx, "d-2"))
	next, err := s.List(ctx, store.ListOptions{Owner: "A", Cursor: page.NextCursor, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"d-3", "d-4"}, ids(next.Tasks))
	last, err := s.List(ctx, store.ListOptions{Owner: "A", Cursor: next.NextCursor, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"d-5"}, ids(last.Tasks))
	require.Empty(t, last.NextCursor)

	// A cursor past every remaining task gives an empty last page.
	for _, id := range []string{"d-3", "d-4", "d-5"} {
		require.NoError(t, s.Delete(ctx, id))
	}
	empty, err := s.List(ctx, store.ListOptions{Owner: "A", Cursor: page.NextCursor})
	require.NoError(t, err)
	require.Empty(t, empty.Tasks)
	require.Empty(t, empty.NextCursor)
}
