package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOptions(t *testing.T) {
	var none *Options
	o := none.WithDefaults()
	require.Equal(t, Limits{}.WithDefaults(), o.Limits, "nil: the defaults")
	require.NotNil(t, o.Now)

	at := time.Unix(5, 0)
	clock := func() time.Time { return at }
	o = (&Options{Limits: Limits{MaxResultBytes: 3}, Now: clock}).WithDefaults()
	require.Equal(t, 3, o.Limits.MaxResultBytes)
	require.Equal(t, DefaultMaxVariableBytes, o.Limits.MaxVariableBytes, "zero fields take the defaults")
	require.Equal(t, at, o.Now())

	own := Options{Limits: Limits{MaxVariableBytes: 1}}.Merge(&Options{Limits: Limits{MaxResultBytes: 2}, Now: clock})
	require.Equal(t, Limits{MaxVariableBytes: 1}, own.Limits, "a backend's own limits stand")
	require.Equal(t, at, own.Now(), "the shared clock fills a clock left unset")
	require.Equal(t, Options{}, Options{}.Merge(nil))

	type mine struct{ n int }
	b, ok := BackendOptions[*mine](&Options{Backend: []any{"other", &mine{1}, &mine{2}}})
	require.True(t, ok)
	require.Equal(t, 1, b.n, "the first of its type")
	_, ok = BackendOptions[*mine](nil)
	require.False(t, ok)
}
