// Package storetest is the conformance suite for store.Store
// implementations.
//
// A backend's tests call Run with a function that opens a fresh, empty
// store, and durable backends also call RunDurable with a function that
// opens (or reopens) the store kept at a path:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return memory.New() })
//	}
//
// Every subtest opens its own store and closes it when it ends (a second
// Close returning store.ErrClosed is ignored). The suite checks the
// invariants documented in package store: round trips of every field,
// uniqueness, validation, the status state machine, compare-and-swap,
// variable and label merges, size limits (at the default Limits), deep
// copies, owner-scoped pagination with authenticated cursors, the expiry
// and active indexes, concurrent writers without lost updates, and
// ErrClosed after Close. RunDurable checks that everything, including
// cursors, survives a close and reopen.
//
// The suite uses the default store.Limits: open must not configure smaller
// or larger limits. Under testing.Short the largest workloads are scaled
// down.
//
// BenchCreateComplete, BenchGet and BenchListPage are shared benchmark
// bodies for backends' benchmarks.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/store"
)

// t0 is the base creation time of the suite's tasks: in a non-UTC zone and
// with nanoseconds, to exercise normalization.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.FixedZone("X", 2*3600+30*60))

var allStatuses = []store.Status{
	store.StatusWorking, store.StatusInputRequired,
	store.StatusCompleted, store.StatusFailed, store.StatusCancelled,
}

// newTask returns a minimal valid task.
func newTask(id, owner string, at time.Time) *store.Task {
	return &store.Task{
		ID:        id,
		Owner:     owner,
		Status:    store.StatusWorking,
		CreatedAt: at,
		Request:   store.Request{Method: "tools/call", Name: "echo"},
	}
}

// fullTask returns a task with every field set.
func fullTask(id, owner string) *store.Task {
	return &store.Task{
		ID:            id,
		Owner:         owner,
		Status:        store.StatusInputRequired,
		StatusMessage: "waiting for the user ✓",
		CreatedAt:     t0,
		TTL:           90 * time.Minute,
		ExpiresAt:     t0.Add(-time.Hour), // ignored: the store computes it
		PollInterval:  2500 * time.Millisecond,
		Request: store.Request{
			Method:    "tools/call",
			Name:      "summarize",
			Arguments: json.RawMessage(`{ "text": "héllo <b>", "n": [1, 2.50, null] }`),
		},
		Labels: map[string]string{"dialect": "2025-11-25", "kind": "tool"},
		Variables: map[string]json.RawMessage{
			"question": json.RawMessage(`"What now?"`),
			"obj":      json.RawMessage(` {"a" : [true, false]} `),
			"dropped":  json.RawMessage(` null `),
		},
		Version: 42, // ignored: the store sets 1
	}
}

func jsonString(n int) json.RawMessage {
	if n < 2 {
		n = 2
	}
	return json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`)
}

func strPtr(s string) *string { return &s }

type opener func(t *testing.T) store.Store

func (o opener) open(t *testing.T) store.Store {
	t.Helper()
	s := o(t)
	require.NotNil(t, s)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustCreate(t *testing.T, s store.Store, task *store.Task) *store.Task {
	t.Helper()
	got, err := s.Create(t.Context(), task)
	require.NoError(t, err)
	return got
}

func mustGet(t *testing.T, s store.Store, id string) *store.Task {
	t.Helper()
	got, err := s.Get(t.Context(), id)
	require.NoError(t, err)
	return got
}

func mustUpdate(t *testing.T, s store.Store, id string, u store.Update) *store.Task {
	t.Helper()
	got, err := s.Update(t.Context(), id, u)
	require.NoError(t, err)
	return got
}

func ids(tasks []*store.Task) []string {
	out := make([]string, len(tasks))
	for i, t := range tasks {
		out[i] = t.ID
	}
	return out
}

// createMany creates tasks concurrently (so that group-committing backends
// batch them) and fails t on the first error.
func createMany(tb testing.TB, ctx context.Context, s store.Store, tasks []*store.Task, workers int) {
	tb.Helper()
	work := make(chan *store.Task)
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for task := range work {
				if _, err := s.Create(ctx, task); err != nil {
					errc <- fmt.Errorf("create %s: %w", task.ID, err)
					for range work { // drain
					}
					return
				}
			}
		}()
	}
	for _, task := range tasks {
		work <- task
	}
	close(work)
	wg.Wait()
	close(errc)
	for err := range errc {
		tb.Fatal(err)
	}
}

// listAll pages through owner's tasks and returns them and the number of
// pages.
func listAll(t *testing.T, s store.Store, owner string, limit int) ([]*store.Task, int) {
	t.Helper()
	var all []*store.Task
	cursor := ""
	pages := 0
	for {
		page, err := s.List(t.Context(), store.ListOptions{Owner: owner, Cursor: cursor, Limit: limit})
		require.NoError(t, err)
		pages++
		want := store.PageLimit(limit)
		require.LessOrEqual(t, len(page.Tasks), want)
		if page.NextCursor != "" {
			require.Len(t, page.Tasks, want, "a page with a next cursor is full")
		}
		all = append(all, page.Tasks...)
		if page.NextCursor == "" {
			return all, pages
		}
		cursor = page.NextCursor
		require.Less(t, pages, 100000, "pagination does not terminate")
	}
}

func comparePos(a, b *store.Task) int {
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// Run runs the conformance suite. open must return a new, empty store with
// default limits each time it is called.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	o := opener(open)
	t.Run("CreateGetRoundTrip", func(t *testing.T) { testRoundTrip(t, o) })
	t.Run("CreateDuplicate", func(t *testing.T) { testDuplicate(t, o) })
	t.Run("CreateInvalid", func(t *testing.T) { testCreateInvalid(t, o) })
	t.Run("NotFound", func(t *testing.T) { testNotFound(t, o) })
	t.Run("Transitions", func(t *testing.T) { testTransitions(t, o) })
	t.Run("CompareAndSwap", func(t *testing.T) { testCAS(t, o) })
	t.Run("Variables", func(t *testing.T) { testVariables(t, o) })
	t.Run("Labels", func(t *testing.T) { testLabels(t, o) })
	t.Run("ResultAndError", func(t *testing.T) { testResultAndError(t, o) })
	t.Run("SizeLimits", func(t *testing.T) { testSizeLimits(t, o) })
	t.Run("ReturnsCopies", func(t *testing.T) { testCopies(t, o) })
	t.Run("ListOwnerScoping", func(t *testing.T) { testListScoping(t, o) })
	t.Run("ListHeadersOnly", func(t *testing.T) { testListHeadersOnly(t, o) })
	t.Run("ListPagination", func(t *testing.T) { testPagination(t, o) })
	t.Run("CursorWrongOwner", func(t *testing.T) { testCursorWrongOwner(t, o) })
	t.Run("CursorGarbage", func(t *testing.T) { testCursorGarbage(t, o) })
	t.Run("CursorAfterDelete", func(t *testing.T) { testCursorAfterDelete(t, o) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, o) })
	t.Run("Expired", func(t *testing.T) { testExpired(t, o) })
	t.Run("MoveExpiry", func(t *testing.T) { testMoveExpiry(t, o) })
	t.Run("Active", func(t *testing.T) { testActive(t, o) })
	t.Run("ContextCancelled", func(t *testing.T) { testContext(t, o) })
	t.Run("ConcurrentWriters", func(t *testing.T) { testConcurrent(t, o) })
	t.Run("Closed", func(t *testing.T) { testClosed(t, o) })
}

func testRoundTrip(t *testing.T, o opener) {
	s := o.open(t)
	in := fullTask("rt-1", "alice")
	before := in.Clone()
	created := mustCreate(t, s, in)
	require.Equal(t, before, in, "Create must not modify its argument")

	require.Equal(t, "rt-1", created.ID)
	require.Equal(t, "alice", created.Owner)
	require.Equal(t, store.StatusInputRequired, created.Status)
	require.Equal(t, in.StatusMessage, created.StatusMessage)
	require.True(t, created.CreatedAt.Equal(t0), "CreatedAt %v", created.CreatedAt)
	require.True(t, created.UpdatedAt.Equal(t0), "UpdatedAt defaults to CreatedAt, got %v", created.UpdatedAt)
	require.Equal(t, 90*time.Minute, created.TTL)
	require.True(t, created.ExpiresAt.Equal(t0.Add(90*time.Minute)), "ExpiresAt %v", created.ExpiresAt)
	require.Equal(t, 2500*time.Millisecond, created.PollInterval)
	require.Equal(t, in.Request.Method, created.Request.Method)
	require.Equal(t, in.Request.Name, created.Request.Name)
	require.Equal(t, string(in.Request.Arguments), string(created.Request.Arguments), "arguments are stored byte for byte")
	require.Equal(t, in.Labels, created.Labels)
	require.Len(t, created.Variables, 2, "a null variable is not stored")
	require.Equal(t, `"What now?"`, string(created.Variables["question"]))
	require.Equal(t, ` {"a" : [true, false]} `, string(created.Variables["obj"]), "values are stored byte for byte")
	require.Nil(t, created.Result)
	require.Nil(t, created.Error)
	require.Equal(t, uint64(1), created.Version)

	got := mustGet(t, s, "rt-1")
	require.Equal(t, created, got)

	// Explicit UpdatedAt, no TTL, odd bytes in owner and id.
	owner := "own\x00er\xff\xfe/é"
	in2 := newTask("id\x00\xffé", owner, t0)
	in2.UpdatedAt = t0.Add(time.Second)
	created2 := mustCreate(t, s, in2)
	require.True(t, created2.UpdatedAt.Equal(t0.Add(time.Second)))
	require.True(t, created2.ExpiresAt.IsZero(), "no TTL, no ExpiresAt")
	require.Zero(t, created2.TTL)
	got2 := mustGet(t, s, in2.ID)
	require.Equal(t, created2, got2)
	require.Equal(t, owner, got2.Owner)
	page, err := s.List(t.Context(), store.ListOptions{Owner: owner})
	require.NoError(t, err)
	require.Equal(t, []string{in2.ID}, ids(page.Tasks))

	// A task created with a result and an error keeps them.
	in3 := newTask("rt-3", "alice", t0.Add(time.Millisecond))
	in3.Result = json.RawMessage(`{"partial": true}`)
	in3.Error = &store.ErrorInfo{Code: -32000, Message: "x", Data: json.RawMessage(`[1]`)}
	created3 := mustCreate(t, s, in3)
	require.Equal(t, created3, mustGet(t, s, "rt-3"))
	require.Equal(t, `{"partial": true}`, string(created3.Result))
}

func testDuplicate(t *testing.T, o opener) {
	s := o.open(t)
	first := mustCreate(t, s, newTask("dup", "alice", t0))
	again := newTask("dup", "bob", t0.Add(time.Hour))
	again.StatusMessage = "second"
	_, err := s.Create(t.Context(), again)
	require.ErrorIs(t, err, store.ErrExists)
	require.Equal(t, first, mustGet(t, s, "dup"), "the original is untouched")
	page, err := s.List(t.Context(), store.ListOptions{Owner: "bob"})
	require.NoError(t, err)
	require.Empty(t, page.Tasks, "no index entry for the rejected create")
}

func testCreateInvalid(t *testing.T, o opener) {
	s := o.open(t)
	cases := map[string]func(*store.Task){
		"empty id":               func(x *store.Task) { x.ID = "" },
		"id too long":            func(x *store.Task) { x.ID = strings.Repeat("i", store.MaxIDBytes+1) },
		"empty owner":            func(x *store.Task) { x.Owner = "" },
		"owner too long":         func(x *store.Task) { x.Owner = strings.Repeat("o", store.MaxOwnerBytes+1) },
		"empty status":           func(x *store.Task) { x.Status = "" },
		"bogus status":           func(x *store.Task) { x.Status = "sleeping" },
		"completed status":       func(x *store.Task) { x.Status = store.StatusCompleted },
		"failed status":          func(x *store.Task) { x.Status = store.StatusFailed },
		"cancelled status":       func(x *store.Task) { x.Status = store.StatusCancelled },
		"zero CreatedAt":         func(x *store.Task) { x.CreatedAt = time.Time{} },
		"CreatedAt out of range": func(x *store.Task) { x.CreatedAt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) },
		"negative TTL":           func(x *store.Task) { x.TTL = -time.Second },
		"negative poll":          func(x *store.Task) { x.PollInterval = -time.Second },
		"invalid variable JSON":  func(x *store.Task) { x.Variables = map[string]json.RawMessage{"v": json.RawMessage(`{nope`)} },
		"empty variable value":   func(x *store.Task) { x.Variables = map[string]json.RawMessage{"v": {}} },
		"empty variable name":    func(x *store.Task) { x.Variables = map[string]json.RawMessage{"": json.RawMessage(`1`)} },
		"invalid arguments JSON": func(x *store.Task) { x.Request.Arguments = json.RawMessage(`{"a":`) },
		"invalid result JSON":    func(x *store.Task) { x.Result = json.RawMessage(`tru`) },
		"invalid error data":     func(x *store.Task) { x.Error = &store.ErrorInfo{Code: 1, Data: json.RawMessage(`[`)} },
		"empty label name":       func(x *store.Task) { x.Labels = map[string]string{"": "v"} },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			task := newTask("bad", "alice", t0)
			mutate(task)
			_, err := s.Create(t.Context(), task)
			require.ErrorIs(t, err, store.ErrInvalid)
			if task.ID != "" {
				_, err = s.Get(t.Context(), task.ID)
				require.ErrorIs(t, err, store.ErrNotFound, "nothing was written")
			}
		})
	}
	_, err := s.Create(t.Context(), nil)
	require.ErrorIs(t, err, store.ErrInvalid)
	active, err := s.Active(t.Context())
	require.NoError(t, err)
	require.Empty(t, active)
}

func testNotFound(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	mustCreate(t, s, newTask("present", "alice", t0))
	for _, id := range []string{"missing", "", "present\x00", strings.Repeat("z", 100000)} {
		_, err := s.Get(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.Update(ctx, id, store.Update{StatusMessage: strPtr("x")})
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, s.Delete(ctx, id), store.ErrNotFound)
	}
}

func testTransitions(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	n := 0
	// setup creates a task and brings it to status from.
	setup := func(from store.Status) *store.Task {
		n++
		id := fmt.Sprintf("tr-%d", n)
		cur := mustCreate(t, s, newTask(id, "alice", t0.Add(time.Duration(n))))
		if from != store.StatusWorking {
			cur = mustUpdate(t, s, id, store.Update{Status: from})
		}
		require.Equal(t, from, cur.Status)
		return cur
	}
	for _, from := range allStatuses {
		for _, to := range allStatuses {
			t.Run(fmt.Sprintf("%s->%s", from, to), func(t *testing.T) {
				cur := setup(from)
				got, err := s.Update(ctx, cur.ID, store.Update{Status: to, StatusMessage: strPtr("moved")})
				if store.CanTransition(from, to) {
					require.NoError(t, err)
					require.Equal(t, to, got.Status)
					require.Equal(t, "moved", got.StatusMessage)
					require.Equal(t, cur.Version+1, got.Version)
					require.Equal(t, got, mustGet(t, s, cur.ID))
					return
				}
				require.Error(t, err)
				var te *store.TransitionError
				require.ErrorAs(t, err, &te)
				require.Equal(t, cur.ID, te.ID)
				require.Equal(t, from, te.From)
				require.Equal(t, to, te.To)
				require.ErrorIs(t, err, store.ErrInvalidTransition)
				require.Equal(t, from.Terminal(), errors.Is(err, store.ErrTerminal))
				require.Nil(t, got)
				require.Equal(t, cur, mustGet(t, s, cur.ID), "nothing written")
			})
		}
	}
	// Terminal tasks accept no update at all, even one without a status.
	for _, from := range allStatuses {
		if !from.Terminal() {
			continue
		}
		t.Run(fmt.Sprintf("%s->(no status)", from), func(t *testing.T) {
			cur := setup(from)
			updates := []store.Update{
				{},
				{StatusMessage: strPtr("late")},
				{Variables: map[string]json.RawMessage{"v": json.RawMessage(`1`)}},
				{Labels: map[string]string{"l": "v"}},
				{Result: json.RawMessage(`{}`)},
				{IfVersion: cur.Version, StatusMessage: strPtr("cas")},
			}
			for _, u := range updates {
				_, err := s.Update(ctx, cur.ID, u)
				var te *store.TransitionError
				require.ErrorAs(t, err, &te)
				require.Equal(t, from, te.From)
				require.Equal(t, from, te.To)
				require.ErrorIs(t, err, store.ErrInvalidTransition)
				require.ErrorIs(t, err, store.ErrTerminal)
			}
			require.Equal(t, cur, mustGet(t, s, cur.ID), "nothing written")
		})
	}
	// Non-terminal tasks accept updates without a status.
	t.Run("working->(no status)", func(t *testing.T) {
		cur := setup(store.StatusWorking)
		got := mustUpdate(t, s, cur.ID, store.Update{StatusMessage: strPtr("50%")})
		require.Equal(t, store.StatusWorking, got.Status)
		require.Equal(t, "50%", got.StatusMessage)
		require.Equal(t, cur.Version+1, got.Version)
	})
	t.Run("unknown status", func(t *testing.T) {
		cur := setup(store.StatusWorking)
		_, err := s.Update(ctx, cur.ID, store.Update{Status: "paused"})
		require.ErrorIs(t, err, store.ErrInvalidTransition)
		require.NotErrorIs(t, err, store.ErrTerminal)
		require.Equal(t, cur, mustGet(t, s, cur.ID))
	})
}

func testCAS(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	mustCreate(t, s, newTask("cas", "alice", t0))
	v2 := mustUpdate(t, s, "cas", store.Update{IfVersion: 1, Variables: map[string]json.RawMessage{"n": json.RawMessage(`1`)}})
	require.Equal(t, uint64(2), v2.Version)

	for _, stale := range []uint64{1, 3, 1 << 60} {
		_, err := s.Update(ctx, "cas", store.Update{
			IfVersion:     stale,
			Status:        store.StatusCompleted,
			StatusMessage: strPtr("stale"),
			Variables:     map[string]json.RawMessage{"n": json.RawMessage(`99`), "m": json.RawMessage(`1`)},
			Labels:        map[string]string{"x": "y"},
			Result:        json.RawMessage(`{"stale":true}`),
		})
		require.ErrorIs(t, err, store.ErrConflict)
		require.Equal(t, v2, mustGet(t, s, "cas"), "a conflicting update writes nothing")
	}
	active, err := s.Active(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"cas"}, ids(active))

	v3 := mustUpdate(t, s, "cas", store.Update{IfVersion: 2, Status: store.StatusCompleted})
	require.Equal(t, uint64(3), v3.Version)
	require.Equal(t, `1`, string(v3.Variables["n"]))
	// IfVersion 0 means unconditional (here rejected only because terminal).
	_, err = s.Update(ctx, "cas", store.Update{})
	require.ErrorIs(t, err, store.ErrTerminal)
}

func testVariables(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	task := newTask("vars", "alice", t0)
	task.Variables = map[string]json.RawMessage{
		"a": json.RawMessage(`1`),
		"b": json.RawMessage(`"two"`),
		"c": json.RawMessage(`{"three": 3}`),
	}
	mustCreate(t, s, task)

	got := mustUpdate(t, s, "vars", store.Update{Variables: map[string]json.RawMessage{
		"a":       json.RawMessage(`null`),
		"b":       json.RawMessage(" \n\tnull \r\n"), // whitespace around null still deletes
		"d":       json.RawMessage(`[ 4, "four" ]`),
		"missing": json.RawMessage(`null`), // deleting a missing variable is a no-op
		"c":       json.RawMessage(`{"three": 33}`),
	}})
	require.Equal(t, map[string]json.RawMessage{
		"c": json.RawMessage(`{"three": 33}`),
		"d": json.RawMessage(`[ 4, "four" ]`),
	}, got.Variables)
	require.Equal(t, uint64(2), got.Version)
	require.Equal(t, got, mustGet(t, s, "vars"))

	// Not null: strings and values that merely contain null are kept.
	got = mustUpdate(t, s, "vars", store.Update{Variables: map[string]json.RawMessage{
		"e": json.RawMessage(`"null"`),
		"f": json.RawMessage(`[null]`),
	}})
	require.Equal(t, `"null"`, string(got.Variables["e"]))
	require.Equal(t, `[null]`, string(got.Variables["f"]))

	// Invalid JSON writes nothing, not even the valid variables.
	before := mustGet(t, s, "vars")
	for _, bad := range []json.RawMessage{json.RawMessage(`{"x":`), json.RawMessage(``), json.RawMessage(`nul`), json.RawMessage(`1 2`)} {
		_, err := s.Update(ctx, "vars", store.Update{Variables: map[string]json.RawMessage{
			"ok":  json.RawMessage(`true`),
			"bad": bad,
		}})
		require.ErrorIs(t, err, store.ErrInvalid, "value %q", bad)
	}
	_, err := s.Update(ctx, "vars", store.Update{Variables: map[string]json.RawMessage{"": json.RawMessage(`1`)}})
	require.ErrorIs(t, err, store.ErrInvalid)
	require.Equal(t, before, mustGet(t, s, "vars"))

	// Deleting everything leaves no variables.
	del := map[string]json.RawMessage{}
	for k := range before.Variables {
		del[k] = json.RawMessage(`null`)
	}
	got = mustUpdate(t, s, "vars", store.Update{Variables: del})
	require.Empty(t, got.Variables)
	require.Empty(t, mustGet(t, s, "vars").Variables)

	// And variables can be added again.
	got = mustUpdate(t, s, "vars", store.Update{Variables: map[string]json.RawMessage{"z": json.RawMessage(`0`)}})
	require.Equal(t, map[string]json.RawMessage{"z": json.RawMessage(`0`)}, mustGet(t, s, "vars").Variables)
	require.Equal(t, got, mustGet(t, s, "vars"))
}

func testLabels(t *testing.T, o opener) {
	s := o.open(t)
	task := newTask("labels", "alice", t0)
	task.Labels = map[string]string{"a": "1", "b": "2", "empty": ""}
	created := mustCreate(t, s, task)
	require.Equal(t, map[string]string{"a": "1", "b": "2"}, created.Labels, "an empty label is not stored")

	got := mustUpdate(t, s, "labels", store.Update{Labels: map[string]string{"a": "", "b": "22", "c": "3", "nope": ""}})
	require.Equal(t, map[string]string{"b": "22", "c": "3"}, got.Labels)
	require.Equal(t, got, mustGet(t, s, "labels"))

	got = mustUpdate(t, s, "labels", store.Update{Labels: map[string]string{"b": "", "c": ""}})
	require.Empty(t, got.Labels)
	require.Empty(t, mustGet(t, s, "labels").Labels)

	_, err := s.Update(t.Context(), "labels", store.Update{Labels: map[string]string{"": "x"}})
	require.ErrorIs(t, err, store.ErrInvalid)
}

func testResultAndError(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	for i, id := range []string{"ok", "fail", "cancel"} {
		mustCreate(t, s, newTask(id, "alice", t0.Add(time.Duration(i))))
	}

	result := json.RawMessage(`{"content": [{"type": "text", "text": "done"}], "isError": false}`)
	got := mustUpdate(t, s, "ok", store.Update{Status: store.StatusCompleted, Result: result, StatusMessage: strPtr("done")})
	require.Equal(t, store.StatusCompleted, got.Status)
	require.Equal(t, string(result), string(got.Result))
	require.Nil(t, got.Error)
	require.Equal(t, got, mustGet(t, s, "ok"))

	e := &store.ErrorInfo{Code: -32603, Message: "internal error", Data: json.RawMessage(`{"detail": "boom"}`)}
	got = mustUpdate(t, s, "fail", store.Update{Status: store.StatusFailed, Error: e})
	require.Equal(t, store.StatusFailed, got.Status)
	require.Equal(t, e, got.Error)
	require.Nil(t, got.Result)
	e.Message = "mutated by the caller"
	require.Equal(t, "internal error", mustGet(t, s, "fail").Error.Message, "the store keeps its own copy")
	require.Equal(t, got, mustGet(t, s, "fail"))

	got = mustUpdate(t, s, "cancel", store.Update{Status: store.StatusCancelled, Error: &store.ErrorInfo{Code: -32800, Message: "cancelled"}})
	require.Equal(t, &store.ErrorInfo{Code: -32800, Message: "cancelled"}, got.Error)
	require.Equal(t, got, mustGet(t, s, "cancel"))

	// Invalid result JSON is rejected and nothing is written.
	mustCreate(t, s, newTask("bad", "alice", t0.Add(time.Hour)))
	before := mustGet(t, s, "bad")
	for _, u := range []store.Update{
		{Status: store.StatusCompleted, Result: json.RawMessage(`{"a":}`)},
		{Status: store.StatusCompleted, Result: json.RawMessage{}},
		{Status: store.StatusFailed, Error: &store.ErrorInfo{Code: 1, Message: "m", Data: json.RawMessage(`{`)}},
	} {
		_, err := s.Update(ctx, "bad", u)
		require.ErrorIs(t, err, store.ErrInvalid)
	}
	require.Equal(t, before, mustGet(t, s, "bad"))
	active, err := s.Active(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"bad"}, ids(active))
}

func testSizeLimits(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	requireTooLarge := func(t *testing.T, err error, what string, limit int) {
		t.Helper()
		require.ErrorIs(t, err, store.ErrTooLarge)
		require.Contains(t, err.Error(), what, "the error names what was too large")
		require.Contains(t, err.Error(), strconv.Itoa(limit), "the error names the limit")
	}

	t.Run("arguments", func(t *testing.T) {
		task := newTask("args", "alice", t0)
		task.Request.Arguments = jsonString(store.DefaultMaxArgumentsBytes + 1)
		_, err := s.Create(ctx, task)
		requireTooLarge(t, err, "arguments", store.DefaultMaxArgumentsBytes)
		_, err = s.Get(ctx, "args")
		require.ErrorIs(t, err, store.ErrNotFound)
		task.Request.Arguments = jsonString(store.DefaultMaxArgumentsBytes)
		mustCreate(t, s, task)
	})
	t.Run("variable on create", func(t *testing.T) {
		task := newTask("var-create", "alice", t0)
		task.Variables = map[string]json.RawMessage{"big": jsonString(store.DefaultMaxVariableBytes + 1)}
		_, err := s.Create(ctx, task)
		requireTooLarge(t, err, "big", store.DefaultMaxVariableBytes)
		_, err = s.Get(ctx, "var-create")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("variables total on create", func(t *testing.T) {
		task := newTask("vars-create", "alice", t0)
		task.Variables = map[string]json.RawMessage{}
		for i := range 5 {
			task.Variables[fmt.Sprintf("v%d", i)] = jsonString(900 << 10)
		}
		_, err := s.Create(ctx, task)
		requireTooLarge(t, err, "variables", store.DefaultMaxVariablesBytes)
		_, err = s.Get(ctx, "vars-create")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
	t.Run("variables on update", func(t *testing.T) {
		task := newTask("vars-update", "alice", t0)
		task.Variables = map[string]json.RawMessage{}
		for i := range 4 {
			task.Variables[fmt.Sprintf("v%d", i)] = jsonString(1000 << 10)
		}
		mustCreate(t, s, task) // 4,096,000 + names: just under 4 MiB
		before := mustGet(t, s, "vars-update")

		_, err := s.Update(ctx, "vars-update", store.Update{Variables: map[string]json.RawMessage{"one": jsonString(store.DefaultMaxVariableBytes + 1)}})
		requireTooLarge(t, err, "one", store.DefaultMaxVariableBytes)
		_, err = s.Update(ctx, "vars-update", store.Update{
			Status:    store.StatusInputRequired,
			Variables: map[string]json.RawMessage{"more": jsonString(200 << 10), "small": json.RawMessage(`1`)},
		})
		requireTooLarge(t, err, "variables", store.DefaultMaxVariablesBytes)
		require.Equal(t, before, mustGet(t, s, "vars-update"), "nothing written")

		// Replacing a value counts the new size, not the sum: this fits.
		got := mustUpdate(t, s, "vars-update", store.Update{Variables: map[string]json.RawMessage{"v0": jsonString(1000 << 10)}})
		require.Equal(t, before.Version+1, got.Version)
		// Deleting makes room in the same update.
		got = mustUpdate(t, s, "vars-update", store.Update{Variables: map[string]json.RawMessage{
			"v0": json.RawMessage(`null`), "more": jsonString(200 << 10),
		}})
		require.Len(t, got.Variables, 4)
	})
	t.Run("result", func(t *testing.T) {
		mustCreate(t, s, newTask("result", "alice", t0))
		before := mustGet(t, s, "result")
		_, err := s.Update(ctx, "result", store.Update{Status: store.StatusCompleted, Result: jsonString(store.DefaultMaxResultBytes + 1)})
		requireTooLarge(t, err, "result", store.DefaultMaxResultBytes)
		require.Equal(t, before, mustGet(t, s, "result"), "nothing written (still working)")

		task := newTask("result-create", "alice", t0)
		task.Result = jsonString(store.DefaultMaxResultBytes + 1)
		_, err = s.Create(ctx, task)
		requireTooLarge(t, err, "result", store.DefaultMaxResultBytes)
	})
	t.Run("error data", func(t *testing.T) {
		mustCreate(t, s, newTask("errdata", "alice", t0))
		before := mustGet(t, s, "errdata")
		_, err := s.Update(ctx, "errdata", store.Update{Status: store.StatusFailed, Error: &store.ErrorInfo{
			Code: -1, Message: "m", Data: jsonString(store.DefaultMaxResultBytes + 1),
		}})
		requireTooLarge(t, err, "error data", store.DefaultMaxResultBytes)
		require.Equal(t, before, mustGet(t, s, "errdata"), "nothing written")
		got := mustUpdate(t, s, "errdata", store.Update{Status: store.StatusFailed, Error: &store.ErrorInfo{
			Code: -1, Message: "m", Data: jsonString(1 << 10),
		}})
		require.Len(t, got.Error.Data, 1<<10)
	})
}

// scribble mutates every mutable part of a returned task.
func scribble(x *store.Task) {
	x.Status = "scribbled"
	x.StatusMessage = "scribbled"
	x.Version = 999
	if len(x.Request.Arguments) > 0 {
		x.Request.Arguments[0] = 'X'
	}
	for k := range x.Labels {
		x.Labels[k] = "scribbled"
	}
	if x.Labels != nil {
		x.Labels["new"] = "x"
	}
	for _, v := range x.Variables {
		if len(v) > 0 {
			v[0] = 'X'
		}
	}
	if x.Variables != nil {
		x.Variables["new"] = json.RawMessage(`1`)
	}
	if len(x.Result) > 0 {
		x.Result[0] = 'X'
	}
	if x.Error != nil {
		x.Error.Message = "scribbled"
		if len(x.Error.Data) > 0 {
			x.Error.Data[0] = 'X'
		}
	}
}

func testCopies(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	in := fullTask("copy", "alice")
	created := mustCreate(t, s, in)
	want := created.Clone()
	scribble(in)
	scribble(created)
	require.Equal(t, want, mustGet(t, s, "copy"), "mutating Create's argument or result")

	got := mustGet(t, s, "copy")
	scribble(got)
	require.Equal(t, want, mustGet(t, s, "copy"), "mutating Get's result")

	u := store.Update{
		Variables: map[string]json.RawMessage{"u": json.RawMessage(`"u"`)},
		Labels:    map[string]string{"l": "v"},
	}
	updated := mustUpdate(t, s, "copy", u)
	want = updated.Clone()
	scribble(updated)
	u.Variables["u"][1] = 'Z'
	u.Labels["l"] = "changed"
	require.Equal(t, want, mustGet(t, s, "copy"), "mutating Update's argument or result")

	page, err := s.List(ctx, store.ListOptions{Owner: "alice"})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 1)
	scribble(page.Tasks[0])
	active, err := s.Active(ctx)
	require.NoError(t, err)
	require.Len(t, active, 1)
	scribble(active[0])
	expired, err := s.Expired(ctx, t0.Add(24*time.Hour), 10)
	require.NoError(t, err)
	require.Len(t, expired, 1)
	scribble(expired[0])
	require.Equal(t, want, mustGet(t, s, "copy"), "mutating List, Active or Expired results")

	res := json.RawMessage(`{"r": 1}`)
	e := &store.ErrorInfo{Code: 1, Message: "m", Data: json.RawMessage(`{"d": 1}`)}
	done := mustUpdate(t, s, "copy", store.Update{Status: store.StatusFailed, Result: res, Error: e})
	want = done.Clone()
	res[0] = 'X'
	e.Data[0] = 'X'
	scribble(done)
	require.Equal(t, want, mustGet(t, s, "copy"), "mutating the result and error passed to Update")
}

// testListHeadersOnly checks that HeadersOnly leaves out variables, result
// and error, and nothing else.
func testListHeadersOnly(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	task := newTask("h1", "owner", t0)
	task.Variables = map[string]json.RawMessage{"k": json.RawMessage(`{"v":1}`)}
	task.Labels = map[string]string{"kind": "tool"}
	mustCreate(t, s, task)
	_, err := s.Update(ctx, "h1", store.Update{Status: store.StatusFailed, Result: json.RawMessage(`{"r":1}`),
		Error: &store.ErrorInfo{Code: -32603, Message: "boom"}})
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
	require.Empty(t, h.Variables)
	require.Empty(t, h.Result)
	require.Nil(t, h.Error)
	f.Variables, f.Result, f.Error = nil, nil, nil
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

func twoPages(t *testing.T, s store.Store, owner string) (first store.Page) {
	t.Helper()
	for i := range 3 {
		mustCreate(t, s, newTask(fmt.Sprintf("%s-%d", owner, i), owner, t0.Add(time.Duration(i)*time.Second)))
	}
	page, err := s.List(t.Context(), store.ListOptions{Owner: owner, Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, page.NextCursor)
	return page
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

func testDelete(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	task := fullTask("del", "alice")
	mustCreate(t, s, task)
	mustUpdate(t, s, "del", store.Update{Result: json.RawMessage(`{"r":1}`)})
	keep := newTask("keep", "alice", t0.Add(time.Second))
	keep.TTL = time.Minute
	mustCreate(t, s, keep)

	require.NoError(t, s.Delete(ctx, "del"))
	_, err := s.Get(ctx, "del")
	require.ErrorIs(t, err, store.ErrNotFound)
	page, err := s.List(ctx, store.ListOptions{Owner: "alice"})
	require.NoError(t, err)
	require.Equal(t, []string{"keep"}, ids(page.Tasks))
	expired, err := s.Expired(ctx, t0.Add(1000*time.Hour), 100)
	require.NoError(t, err)
	require.Equal(t, []string{"keep"}, ids(expired))
	active, err := s.Active(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"keep"}, ids(active))
	require.ErrorIs(t, s.Delete(ctx, "del"), store.ErrNotFound)

	// The id can be reused; nothing of the old task remains.
	fresh := mustCreate(t, s, newTask("del", "bob", t0))
	require.Equal(t, uint64(1), fresh.Version)
	got := mustGet(t, s, "del")
	require.Empty(t, got.Variables)
	require.Nil(t, got.Result)
	require.Empty(t, got.Labels)
	page, err = s.List(ctx, store.ListOptions{Owner: "alice"})
	require.NoError(t, err)
	require.Equal(t, []string{"keep"}, ids(page.Tasks))

	// Terminal tasks are deleted from every index too.
	mustUpdate(t, s, "keep", store.Update{Status: store.StatusCompleted})
	require.NoError(t, s.Delete(ctx, "keep"))
	expired, err = s.Expired(ctx, t0.Add(1000*time.Hour), 100)
	require.NoError(t, err)
	require.Empty(t, expired)
}

func testExpired(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	ttls := map[string]time.Duration{"t10": 10 * time.Second, "t5": 5 * time.Second, "t20": 20 * time.Second, "none": 0, "t1": time.Second, "t5b": 5 * time.Second}
	for id, ttl := range ttls {
		task := newTask(id, "alice", t0)
		task.TTL = ttl
		mustCreate(t, s, task)
	}
	// A created-later task with a shorter TTL expires in ExpiresAt order.
	late := newTask("late", "alice", t0.Add(time.Second))
	late.TTL = 500 * time.Millisecond
	mustCreate(t, s, late)
	mustUpdate(t, s, "t1", store.Update{Status: store.StatusCompleted}) // terminal tasks still expire

	check := func(now time.Time, limit int, want ...string) {
		t.Helper()
		got, err := s.Expired(ctx, now, limit)
		require.NoError(t, err)
		if len(want) == 0 {
			require.Empty(t, got)
			return
		}
		require.Equal(t, want, ids(got), "Expired(t0+%v, %d)", now.Sub(t0), limit)
		for _, task := range got {
			require.False(t, task.ExpiresAt.After(now))
		}
	}
	check(t0, 10)
	check(t0.Add(999*time.Millisecond), 10)
	check(t0.Add(time.Second), 10, "t1")                   // at ExpiresAt exactly
	check(t0.Add(1500*time.Millisecond), 10, "t1", "late") // soonest first
	check(t0.Add(10*time.Second), 10, "t1", "late", "t5", "t5b", "t10")
	check(t0.Add(10*time.Second), 2, "t1", "late")                       // limit
	check(t0.Add(time.Hour), 0, "t1", "late", "t5", "t5b", "t10", "t20") // default limit
	check(t0.Add(100*365*24*time.Hour), 100, "t1", "late", "t5", "t5b", "t10", "t20")
	check(t0.Add(-time.Hour), 100)
}

func testMoveExpiry(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	expired := func(now time.Time) []string {
		t.Helper()
		got, err := s.Expired(ctx, now, 100)
		require.NoError(t, err)
		return ids(got)
	}
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	ttl := newTask("ttl", "alice", t0)
	ttl.TTL = time.Minute
	mustCreate(t, s, ttl)
	mustCreate(t, s, newTask("forever", "alice", t0))
	require.Equal(t, []string{"ttl"}, expired(t0.Add(time.Hour)))

	// Later: the old index entry goes, the new one counts.
	got := mustUpdate(t, s, "ttl", store.Update{ExpiresAt: at(2 * time.Hour)})
	require.True(t, got.ExpiresAt.Equal(t0.Add(2*time.Hour)))
	require.Equal(t, time.Minute, got.TTL, "TTL is left as it was")
	require.Equal(t, got, mustGet(t, s, "ttl"))
	require.Empty(t, expired(t0.Add(time.Hour)))
	require.Equal(t, []string{"ttl"}, expired(t0.Add(2*time.Hour)))

	// A task without a TTL can be given an expiry, together with a
	// terminal status (an expired task kept readable for a grace period).
	got = mustUpdate(t, s, "forever", store.Update{Status: store.StatusFailed, ExpiresAt: at(30 * time.Minute)})
	require.Zero(t, got.TTL)
	require.Equal(t, []string{"forever", "ttl"}, expired(t0.Add(3*time.Hour)), "soonest first")

	// The zero time removes the expiry.
	got = mustUpdate(t, s, "ttl", store.Update{ExpiresAt: &time.Time{}})
	require.True(t, got.ExpiresAt.IsZero())
	require.Equal(t, []string{"forever"}, expired(t0.Add(1000*time.Hour)))

	// A rejected update does not move the expiry.
	_, err := s.Update(ctx, "forever", store.Update{ExpiresAt: at(time.Hour * 50)})
	require.ErrorIs(t, err, store.ErrTerminal)
	_, err = s.Update(ctx, "ttl", store.Update{IfVersion: 1, ExpiresAt: at(time.Second)})
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = s.Update(ctx, "ttl", store.Update{ExpiresAt: &time.Time{}, Variables: map[string]json.RawMessage{"x": json.RawMessage(`{`)}})
	require.ErrorIs(t, err, store.ErrInvalid)
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err = s.Update(ctx, "ttl", store.Update{ExpiresAt: &far})
	require.ErrorIs(t, err, store.ErrInvalid)
	require.Equal(t, []string{"forever"}, expired(t0.Add(1000*time.Hour)))

	// Delete removes the moved entry.
	require.NoError(t, s.Delete(ctx, "forever"))
	require.Empty(t, expired(t0.Add(1000*time.Hour)))
	mustUpdate(t, s, "ttl", store.Update{ExpiresAt: at(time.Second)})
	require.NoError(t, s.Delete(ctx, "ttl"))
	require.Empty(t, expired(t0.Add(1000*time.Hour)))
}

func testActive(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	check := func(want ...string) {
		t.Helper()
		got, err := s.Active(ctx)
		require.NoError(t, err)
		if len(want) == 0 {
			require.Empty(t, got)
			return
		}
		require.ElementsMatch(t, want, ids(got))
		for _, task := range got {
			require.False(t, task.Status.Terminal())
			require.Equal(t, task, mustGet(t, s, task.ID))
		}
	}
	check()
	for i := range 6 {
		task := newTask(fmt.Sprintf("a%d", i), fmt.Sprintf("owner%d", i%2), t0.Add(time.Duration(i)))
		if i%3 == 0 {
			task.Status = store.StatusInputRequired
		}
		mustCreate(t, s, task)
	}
	check("a0", "a1", "a2", "a3", "a4", "a5")
	mustUpdate(t, s, "a0", store.Update{Status: store.StatusCompleted})
	mustUpdate(t, s, "a1", store.Update{Status: store.StatusFailed})
	check("a2", "a3", "a4", "a5")
	mustUpdate(t, s, "a2", store.Update{Status: store.StatusInputRequired})
	mustUpdate(t, s, "a3", store.Update{Status: store.StatusWorking})
	mustUpdate(t, s, "a4", store.Update{StatusMessage: strPtr("still going")})
	check("a2", "a3", "a4", "a5")
	mustUpdate(t, s, "a2", store.Update{Status: store.StatusCancelled})
	_, err := s.Update(ctx, "a0", store.Update{Status: store.StatusWorking})
	require.ErrorIs(t, err, store.ErrTerminal)
	check("a3", "a4", "a5")
	require.NoError(t, s.Delete(ctx, "a4"))
	check("a3", "a5")
	mustUpdate(t, s, "a3", store.Update{Status: store.StatusCompleted})
	mustUpdate(t, s, "a5", store.Update{Status: store.StatusCompleted})
	check()
}

func testContext(t *testing.T, o opener) {
	s := o.open(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Create(ctx, newTask("ctx", "alice", t0))
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Get(t.Context(), "ctx")
	require.ErrorIs(t, err, store.ErrNotFound, "a cancelled create writes nothing")
	mustCreate(t, s, newTask("ctx", "alice", t0))
	_, err = s.Update(ctx, "ctx", store.Update{Status: store.StatusCompleted})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, store.StatusWorking, mustGet(t, s, "ctx").Status)
	require.ErrorIs(t, s.Delete(ctx, "ctx"), context.Canceled)
	mustGet(t, s, "ctx")
}

func testConcurrent(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	writers, ops := 32, 50
	if testing.Short() {
		writers, ops = 8, 20
	}
	mustCreate(t, s, newTask("shared", "alice", t0))

	var wg sync.WaitGroup
	errc := make(chan error, writers)
	var incs, merges [64]int // per writer, written only by that writer
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- func() error {
				own := fmt.Sprintf("own-%02d", w)
				if _, err := s.Create(ctx, newTask(own, fmt.Sprintf("w%d", w%4), t0.Add(time.Duration(w)))); err != nil {
					return err
				}
				for i := 1; i < ops; i++ {
					if i%2 == 0 {
						// Compare-and-swap increment of a shared counter.
						for {
							cur, err := s.Get(ctx, "shared")
							if err != nil {
								return err
							}
							n := 0
							if v, ok := cur.Variables["n"]; ok {
								if err := json.Unmarshal(v, &n); err != nil {
									return err
								}
							}
							_, err = s.Update(ctx, "shared", store.Update{
								IfVersion: cur.Version,
								Variables: map[string]json.RawMessage{"n": json.RawMessage(strconv.Itoa(n + 1))},
							})
							if errors.Is(err, store.ErrConflict) {
								continue
							}
							if err != nil {
								return err
							}
							incs[w]++
							break
						}
						continue
					}
					// Unconditional merges into the shared task and into
					// the writer's own task.
					v := json.RawMessage(strconv.Itoa(i))
					if _, err := s.Update(ctx, "shared", store.Update{Variables: map[string]json.RawMessage{fmt.Sprintf("w%02d", w): v}}); err != nil {
						return err
					}
					merges[w]++
					status := store.StatusWorking
					if i%3 == 0 {
						status = store.StatusInputRequired
					}
					if _, err := s.Update(ctx, own, store.Update{Status: status, Variables: map[string]json.RawMessage{"i": v}}); err != nil {
						return err
					}
				}
				_, err := s.Update(ctx, own, store.Update{Status: store.StatusCompleted, Result: json.RawMessage(`{"w":` + strconv.Itoa(w) + `}`)})
				return err
			}()
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}

	totalIncs, totalMerges := 0, 0
	for w := range writers {
		totalIncs += incs[w]
		totalMerges += merges[w]
	}
	shared := mustGet(t, s, "shared")
	require.Equal(t, strconv.Itoa(totalIncs), string(shared.Variables["n"]), "no lost increments")
	require.Equal(t, uint64(1+totalIncs+totalMerges), shared.Version, "every write bumped the version once")
	lastOdd := ops - 1
	if lastOdd%2 == 0 {
		lastOdd--
	}
	for w := range writers {
		require.Equal(t, strconv.Itoa(lastOdd), string(shared.Variables[fmt.Sprintf("w%02d", w)]), "no lost merges")
		own := mustGet(t, s, fmt.Sprintf("own-%02d", w))
		require.Equal(t, store.StatusCompleted, own.Status)
		require.Equal(t, strconv.Itoa(lastOdd), string(own.Variables["i"]))
		require.Equal(t, uint64(1+ops/2+1), own.Version, "create, one update per odd step, completion")
	}
	active, err := s.Active(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"shared"}, ids(active))
	total := 0
	for w := range 4 {
		all, _ := listAll(t, s, fmt.Sprintf("w%d", w), 3)
		total += len(all)
	}
	require.Equal(t, writers, total)
}

func testClosed(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	mustCreate(t, s, newTask("x", "alice", t0))
	require.NoError(t, s.Close())
	_, err := s.Create(ctx, newTask("y", "alice", t0))
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = s.Get(ctx, "x")
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = s.Update(ctx, "x", store.Update{Status: store.StatusCompleted})
	require.ErrorIs(t, err, store.ErrClosed)
	require.ErrorIs(t, s.Delete(ctx, "x"), store.ErrClosed)
	_, err = s.List(ctx, store.ListOptions{Owner: "alice"})
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = s.Expired(ctx, t0, 10)
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = s.Active(ctx)
	require.ErrorIs(t, err, store.ErrClosed)
	require.ErrorIs(t, s.Close(), store.ErrClosed)
}
