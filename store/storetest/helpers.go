package storetest

// Shared fixtures and helpers of the suite.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// t0 is the base creation time of the suite's tasks: in a non-UTC zone and
// with nanoseconds, to exercise normalization.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.FixedZone("X", 2*3600+30*60))

var allStatuses = []mcptask.Status{
	mcptask.StatusWorking, mcptask.StatusInputRequired,
	mcptask.StatusCompleted, mcptask.StatusFailed, mcptask.StatusCancelled,
}

// newTask returns a minimal valid task.
func newTask(id, owner string, at time.Time) *store.Task {
	return &store.Task{
		ID:        id,
		Owner:     owner,
		Status:    mcptask.StatusWorking,
		CreatedAt: at,
		Request:   store.Request{Method: "tools/call", Name: "echo"},
	}
}

// fullTask returns a task with every field set.
func fullTask(id, owner string) *store.Task {
	return &store.Task{
		ID:            id,
		Owner:         owner,
		Status:        mcptask.StatusInputRequired,
		StatusMessage: "waiting for the user ✓",
		CreatedAt:     t0,
		TTL:           90 * time.Minute,
		ExpiresAt:     t0.Add(-time.Hour), // ignored: the store computes it
		WakeAt:        t0.Add(45 * time.Minute),
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
