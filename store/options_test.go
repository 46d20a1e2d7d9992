package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOptions(t *testing.T) {
	o := NewOptions()
	require.Equal(t, Limits{}.WithDefaults(), o.Limits)
	require.NotNil(t, o.Now)

	at := time.Unix(5, 0)
	clock := func() time.Time { return at }
	o = NewOptions(WithLimits(Limits{MaxResultBytes: 3}), WithClock(clock), WithClock(nil), nil)
	require.Equal(t, 3, o.Limits.MaxResultBytes)
	require.Equal(t, DefaultMaxVariableBytes, o.Limits.MaxVariableBytes, "zero fields take the defaults")
	require.Equal(t, at, o.Now(), "a nil clock is ignored")

	var raw Options
	raw.Apply(WithLimits(Limits{MaxVariableBytes: 1}))
	require.Equal(t, Limits{MaxVariableBytes: 1}, raw.Limits, "Apply does not resolve defaults")
	require.Nil(t, raw.Now)
}
