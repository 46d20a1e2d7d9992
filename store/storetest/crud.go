package storetest

// Creating, reading, copying and deleting tasks.

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

func testRoundTrip(t *testing.T, o opener) {
	s := o.open(t)
	in := fullTask("rt-1", "alice")
	before := in.Clone()
	created := mustCreate(t, s, in)
	require.Equal(t, before, in, "Create must not modify its argument")

	require.Equal(t, "rt-1", created.ID)
	require.Equal(t, "alice", created.Owner)
	require.Equal(t, mcptask.StatusInputRequired, created.Status)
	require.Equal(t, in.StatusMessage, created.StatusMessage)
	require.True(t, created.CreatedAt.Equal(t0), "CreatedAt %v", created.CreatedAt)
	require.True(t, created.UpdatedAt.Equal(t0), "UpdatedAt defaults to CreatedAt, got %v", created.UpdatedAt)
	require.Equal(t, 90*time.Minute, created.TTL)
	require.True(t, created.ExpiresAt.Equal(t0.Add(90*time.Minute)), "ExpiresAt %v", created.ExpiresAt)
	require.True(t, created.WakeAt.Equal(t0.Add(45*time.Minute)), "WakeAt %v", created.WakeAt)
	require.Equal(t, time.UTC, created.WakeAt.Location())
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
	in3.Error = &mcptask.ErrorInfo{Code: -32000, Message: "x", Data: json.RawMessage(`[1]`)}
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
		"empty id":              func(x *store.Task) { x.ID = "" },
		"id too long":           func(x *store.Task) { x.ID = strings.Repeat("i", store.MaxIDBytes+1) },
		"empty owner":           func(x *store.Task) { x.Owner = "" },
		"owner too long":        func(x *store.Task) { x.Owner = strings.Repeat("o", store.MaxOwnerBytes+1) },
		"empty status":          func(x *store.Task) { x.Status = "" },
		"bogus status":          func(x *store.Task) { x.Status = "sleeping" },
		"completed, no outcome": func(x *store.Task) { x.Status = mcptask.StatusCompleted },
		"failed, no outcome":    func(x *store.Task) { x.Status = mcptask.StatusFailed },
		"cancelled, no outcome": func(x *store.Task) { x.Status = mcptask.StatusCancelled },
		"completed, empty result": func(x *store.Task) {
			x.Status, x.Result = mcptask.StatusCompleted, json.RawMessage{}
		},
		"completed with a lease": func(x *store.Task) {
			x.Status, x.Result = mcptask.StatusCompleted, json.RawMessage(`{}`)
			x.LeaseHolder, x.LeaseUntil = "replica-a", t0.Add(time.Minute)
		},
		"failed with a lease": func(x *store.Task) {
			x.Status, x.Error = mcptask.StatusFailed, &mcptask.ErrorInfo{Code: -32603, Message: "boom"}
			x.LeaseHolder, x.LeaseUntil = "replica-a", t0.Add(time.Minute)
		},
		"zero CreatedAt":         func(x *store.Task) { x.CreatedAt = time.Time{} },
		"CreatedAt out of range": func(x *store.Task) { x.CreatedAt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) },
		"negative TTL":           func(x *store.Task) { x.TTL = -time.Second },
		"negative poll":          func(x *store.Task) { x.PollInterval = -time.Second },
		"invalid variable JSON":  func(x *store.Task) { x.Variables = map[string]json.RawMessage{"v": json.RawMessage(`{nope`)} },
		"empty variable value":   func(x *store.Task) { x.Variables = map[string]json.RawMessage{"v": {}} },
		"empty variable name":    func(x *store.Task) { x.Variables = map[string]json.RawMessage{"": json.RawMessage(`1`)} },
		"invalid arguments JSON": func(x *store.Task) { x.Request.Arguments = json.RawMessage(`{"a":`) },
		"invalid result JSON":    func(x *store.Task) { x.Result = json.RawMessage(`tru`) },
		"invalid error data":     func(x *store.Task) { x.Error = &mcptask.ErrorInfo{Code: 1, Data: json.RawMessage(`[`)} },
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

func testResultAndError(t *testing.T, o opener) {
	s := o.open(t)
	ctx := t.Context()
	for i, id := range []string{"ok", "fail", "cancel"} {
		mustCreate(t, s, newTask(id, "alice", t0.Add(time.Duration(i))))
	}

	result := json.RawMessage(`{"content": [{"type": "text", "text": "done"}], "isError": false}`)
	got := mustUpdate(t, s, "ok", store.Update{Status: mcptask.StatusCompleted, Result: result, StatusMessage: strPtr("done")})
	require.Equal(t, mcptask.StatusCompleted, got.Status)
	require.Equal(t, string(result), string(got.Result))
	require.Nil(t, got.Error)
	require.Equal(t, got, mustGet(t, s, "ok"))

	e := &mcptask.ErrorInfo{Code: -32603, Message: "internal error", Data: json.RawMessage(`{"detail": "boom"}`)}
	got = mustUpdate(t, s, "fail", store.Update{Status: mcptask.StatusFailed, Error: e})
	require.Equal(t, mcptask.StatusFailed, got.Status)
	require.Equal(t, e, got.Error)
	require.Nil(t, got.Result)
	e.Message = "mutated by the caller"
	require.Equal(t, "internal error", mustGet(t, s, "fail").Error.Message, "the store keeps its own copy")
	require.Equal(t, got, mustGet(t, s, "fail"))

	got = mustUpdate(t, s, "cancel", store.Update{Status: mcptask.StatusCancelled, Error: &mcptask.ErrorInfo{Code: -32800, Message: "cancelled"}})
	require.Equal(t, &mcptask.ErrorInfo{Code: -32800, Message: "cancelled"}, got.Error)
	require.Equal(t, got, mustGet(t, s, "cancel"))

	// Invalid result JSON is rejected and nothing is written.
	mustCreate(t, s, newTask("bad", "alice", t0.Add(time.Hour)))
	before := mustGet(t, s, "bad")
	for _, u := range []store.Update{
		{Status: mcptask.StatusCompleted, Result: json.RawMessage(`{"a":}`)},
		{Status: mcptask.StatusCompleted, Result: json.RawMessage{}},
		{Status: mcptask.StatusFailed, Error: &mcptask.ErrorInfo{Code: 1, Message: "m", Data: json.RawMessage(`{`)}},
	} {
		_, err := s.Update(ctx, "bad", u)
		require.ErrorIs(t, err, store.ErrInvalid)
	}
	require.Equal(t, before, mustGet(t, s, "bad"))
	active, err := s.Active(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"bad"}, ids(active))
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
	due, err := s.Due(ctx, t0.Add(24*time.Hour), 10)
	require.NoError(t, err)
	require.Len(t, due, 1)
	scribble(due[0])
	require.Equal(t, want, mustGet(t, s, "copy"), "mutating List, Active, Expired or Due results")

	res := json.RawMessage(`{"r": 1}`)
	e := &mcptask.ErrorInfo{Code: 1, Message: "m", Data: json.RawMessage(`{"d": 1}`)}
	done := mustUpdate(t, s, "copy", store.Update{Status: mcptask.StatusFailed, Result: res, Error: e})
	want = done.Clone()
	res[0] = 'X'
	e.Data[0] = 'X'
	scribble(done)
	require.Equal(t, want, mustGet(t, s, "copy"), "mutating the result and error passed to Update")
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
	due, err := s.Due(ctx, t0.Add(1000*time.Hour), 100)
	require.NoError(t, err)
	require.Empty(t, due, "the deleted task's wake-up goes with it")
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
	mustUpdate(t, s, "keep", store.Update{Status: mcptask.StatusCompleted})
	require.NoError(t, s.Delete(ctx, "keep"))
	expired, err = s.Expired(ctx, t0.Add(1000*time.Hour), 100)
	require.NoError(t, err)
	require.Empty(t, expired)
}
