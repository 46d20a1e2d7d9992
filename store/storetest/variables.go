package storetest

// Variables, labels and size limits.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

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
			Status:    mcptask.StatusInputRequired,
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
		_, err := s.Update(ctx, "result", store.Update{Status: mcptask.StatusCompleted, Result: jsonString(store.DefaultMaxResultBytes + 1)})
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
		_, err := s.Update(ctx, "errdata", store.Update{Status: mcptask.StatusFailed, Error: &mcptask.ErrorInfo{
			Code: -1, Message: "m", Data: jsonString(store.DefaultMaxResultBytes + 1),
		}})
		requireTooLarge(t, err, "error data", store.DefaultMaxResultBytes)
		require.Equal(t, before, mustGet(t, s, "errdata"), "nothing written")
		got := mustUpdate(t, s, "errdata", store.Update{Status: mcptask.StatusFailed, Error: &mcptask.ErrorInfo{
			Code: -1, Message: "m", Data: jsonString(1 << 10),
		}})
		require.Len(t, got.Error.Data, 1<<10)
	})
}
