package gcpolicy

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestApply(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	t.Setenv("GOGC", "150")
	require.Equal(t, "150", Apply())
	require.Equal(t, 100, debug.SetGCPercent(100), "an operator's GOGC is left alone")
}
