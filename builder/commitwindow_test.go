package builder_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/store/bboltstore"
)

// TestBuildCommitWindowFromEnvironment: TASKBRIDGE_BBOLT_COMMIT_WINDOW
// sets the bbolt store's commit window; a value that is not a duration,
// or is negative, fails Build naming the variable; unset, the store has
// none.
func TestBuildCommitWindowFromEnvironment(t *testing.T) {
	ctx := context.Background()
	t.Setenv(builder.EnvDB, filepath.Join(t.TempDir(), "w.db"))
	window := func() time.Duration {
		srv, err := builder.New("t", "1").Build(ctx)
		require.NoError(t, err)
		defer srv.Close()
		st, ok := srv.Store.(*bboltstore.Store)
		require.True(t, ok, "the default store is bbolt")
		return st.CommitWindow()
	}
	require.Equal(t, time.Duration(0), window())
	t.Setenv(builder.EnvBboltCommitWindow, "2ms")
	require.Equal(t, 2*time.Millisecond, window())
	for _, bad := range []string{"soon", "-1ms", "2"} {
		t.Setenv(builder.EnvBboltCommitWindow, bad)
		_, err := builder.New("t", "1").Build(ctx)
		require.ErrorContains(t, err, builder.EnvBboltCommitWindow, bad)
		require.ErrorContains(t, err, bad)
	}
}
