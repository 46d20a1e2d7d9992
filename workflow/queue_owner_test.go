package workflow

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQueuePriorityExtremes: a priority is clamped to ±2^30 before it
// becomes an integer, so 1e308 sorts above -5 (a float64 beyond the int
// range has no integer value: it used to wrap to the lowest int); NaN
// and what is no number are 0.
func TestQueuePriorityExtremes(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want int
	}{
		{`1e308`, maxPriority},
		{`-1e308`, -maxPriority},
		{`9223372036854775807`, maxPriority},
		{`-9223372036854775808`, -maxPriority},
		{`1073741824`, maxPriority},
		{`1073741823`, maxPriority - 1},
		{`-5`, -5},
		{`2.9`, 2},
		{`-2.9`, -2},
		{`"1e308"`, maxPriority},
		{`"1e999"`, maxPriority}, // beyond float64: ErrRange, +Inf
		{`"-1e999"`, -maxPriority},
		{`"Inf"`, maxPriority},
		{`"NaN"`, 0},
		{`" 7 "`, 7},
		{`"seven"`, 0},
		{`null`, 0},
		{`true`, 0},
		{`{"p":1}`, 0},
	} {
		require.Equal(t, c.want, priorityOf(json.RawMessage(c.raw)), c.raw)
	}
	require.Greater(t, priorityOf(json.RawMessage(`1e308`)), priorityOf(json.RawMessage(`-5`)))
}
