package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLimitsWithDefaults(t *testing.T) {
	require.Equal(t, Limits{
		MaxVariableBytes:  DefaultMaxVariableBytes,
		MaxVariablesBytes: DefaultMaxVariablesBytes,
		MaxResultBytes:    DefaultMaxResultBytes,
		MaxArgumentsBytes: DefaultMaxArgumentsBytes,
	}, Limits{}.WithDefaults())
	require.Equal(t, Limits{
		MaxVariableBytes:  1,
		MaxVariablesBytes: DefaultMaxVariablesBytes,
		MaxResultBytes:    3,
		MaxArgumentsBytes: DefaultMaxArgumentsBytes,
	}, Limits{MaxVariableBytes: 1, MaxVariablesBytes: -2, MaxResultBytes: 3}.WithDefaults())
}

func TestHelpers(t *testing.T) {
	for _, v := range []string{"null", " null", "null\n", "\t\r\n null \n"} {
		require.True(t, IsJSONNull(json.RawMessage(v)), "%q", v)
	}
	for _, v := range []string{"", "nul", `"null"`, "[null]", "null null", "Null"} {
		require.False(t, IsJSONNull(json.RawMessage(v)), "%q", v)
	}
	require.Equal(t, DefaultPageSize, PageLimit(0))
	require.Equal(t, DefaultPageSize, PageLimit(-3))
	require.Equal(t, 7, PageLimit(7))
	require.Equal(t, MaxPageSize, PageLimit(MaxPageSize+1))
	require.True(t, ValidTime(time.Unix(0, 0)))
	require.True(t, ValidTime(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.False(t, ValidTime(time.Time{}))
	require.False(t, ValidTime(time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.Equal(t, 6, VariablesSize(map[string]json.RawMessage{"a": json.RawMessage(`1`), "bc": json.RawMessage(`""`)}))
}

func TestApplyUpdateLeavesTaskOnError(t *testing.T) {
	now := time.Unix(100, 0)
	base := &Task{ID: "a", Owner: "o", Status: StatusWorking, Version: 3,
		Variables: map[string]json.RawMessage{"x": json.RawMessage(`1`)}, Labels: map[string]string{"l": "v"}}
	for name, u := range map[string]Update{
		"conflict":   {IfVersion: 2, Status: StatusCompleted, Variables: map[string]json.RawMessage{"x": json.RawMessage(`null`)}},
		"transition": {Status: "nope", Labels: map[string]string{"l": ""}},
		"too large":  {Variables: map[string]json.RawMessage{"y": json.RawMessage(`"` + string(make([]byte, 10)) + `"`)}},
	} {
		task := base.Clone()
		_, err := ApplyUpdate(task, u, Limits{MaxVariablesBytes: 5, MaxVariableBytes: 100}, now)
		require.Error(t, err, name)
		require.Equal(t, base, task, name)
	}
	task := base.Clone()
	ch, err := ApplyUpdate(task, Update{
		IfVersion: 3, Status: StatusCompleted,
		Variables: map[string]json.RawMessage{"x": json.RawMessage(` null `), "z": json.RawMessage(`2`), "gone": json.RawMessage(`null`)},
		Result:    json.RawMessage(`{}`),
	}, Limits{}, now)
	require.NoError(t, err)
	require.Equal(t, Changes{PrevStatus: StatusWorking, SetVariables: []string{"z"}, DeletedVariables: []string{"x"}, ResultChanged: true}, ch)
	require.Equal(t, uint64(4), task.Version)
	require.Equal(t, now.UTC(), task.UpdatedAt)
	require.Equal(t, map[string]json.RawMessage{"z": json.RawMessage(`2`)}, task.Variables)
}
