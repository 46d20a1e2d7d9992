package taskrouter

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitFor clamps task_result's wait_seconds before any arithmetic.
func TestWaitForClamps(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	const deadline = 25 * time.Second
	for _, c := range []struct {
		in   *float64
		want time.Duration
		err  string
	}{
		{nil, deadline, ""},
		{f(0), 0, ""},
		{f(1.5), 1500 * time.Millisecond, ""},
		{f(25), deadline, ""},
		{f(1e11), deadline, ""},
		{f(1e308), deadline, ""},
		{f(math.Inf(1)), deadline, ""},
		{f(math.MaxInt64), deadline, ""},
		{f(-1), 0, "negative"},
		{f(math.Inf(-1)), 0, "negative"},
		{f(math.NaN()), 0, "not a number"},
	} {
		got, err := waitFor(deadline, c.in)
		if c.err != "" {
			require.ErrorContains(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.want, got)
	}
	got, err := waitFor(-1, f(1e308))
	require.NoError(t, err)
	require.Equal(t, DefaultHostDeadline, got, "the host deadline off: the default bounds the wait")
}
