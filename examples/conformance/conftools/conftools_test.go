package conftools

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/store/memory"
)

// TestSlowComputeRejectsOutOfRangeDurations: seconds beyond a day is an
// error (1e18 used to overflow the duration, so the tool completed at once
// claiming to have slept 1e18 seconds); zero completes instantly.
func TestSlowComputeRejectsOutOfRangeDurations(t *testing.T) {
	srv, router, err := NewServer(memory.New(nil), nil)
	require.NoError(t, err)
	require.NoError(t, router.Start(context.Background()))
	t.Cleanup(func() { _ = router.Close() })
	ct, st := mcp.NewInMemoryTransports()
	_, err = srv.Connect(context.Background(), router.Transport(st), nil)
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	for _, secs := range []float64{1e18, 86401} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow_compute", Arguments: map[string]any{"seconds": secs}})
		require.NoError(t, err)
		require.True(t, res.IsError, "seconds %v", secs)
		require.Contains(t, res.Content[0].(*mcp.TextContent).Text, "seconds must be between 0 and 86400")
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow_compute", Arguments: map[string]any{"seconds": 0}})
	require.NoError(t, err)
	require.False(t, res.IsError)
}
