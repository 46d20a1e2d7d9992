package main

import (
	"context"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
)

func TestStoreCheck(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tasks.db")
	st, err := bboltstore.Open(path, nil)
	require.NoError(t, err)
	for i := range 50 {
		_, err := st.Create(context.Background(), &store.Task{ID: fmt.Sprintf("task-%d", i), Owner: "o", CreatedAt: time.Now(), Status: mcptask.StatusWorking, Labels: map[string]string{"name": "x"}})
		require.NoError(t, err)
	}

	// A file a running store holds is refused (after the lock timeout),
	// not read under its feet.
	code, out, _ := cli(t, "", "store", "check", path)
	require.Equal(t, exitFailed, code)
	require.Contains(t, out, "the file is open in a store")
	require.NoError(t, st.Close())

	code, out, _ = cli(t, "", "store", "check", path)
	require.Equal(t, exitOK, code)
	require.Equal(t, path+": ok\n", out)
	code, out, _ = cli(t, "", "-json", "store", "check", path)
	require.Equal(t, exitOK, code)
	require.Equal(t, []map[string]any{{"event": "store", "path": path, "ok": true}}, jsonLines(t, out))

	// Cut the file into its pages: corrupt, exit 1, the reason on stderr.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	bad := filepath.Join(dir, "bad.db")
	require.NoError(t, os.WriteFile(bad, data[:len(data)/3], 0o600))
	code, out, errOut := cli(t, "", "store", "check", bad)
	require.Equal(t, exitFailed, code)
	require.Equal(t, bad+": corrupt\n", out)
	require.Contains(t, errOut, "store file "+bad+" is corrupt")
	code, out, _ = cli(t, "", "-json", "store", "check", bad)
	require.Equal(t, exitFailed, code)
	lines := jsonLines(t, out)
	require.Len(t, lines, 1)
	require.Equal(t, false, lines[0]["ok"])
	require.Contains(t, lines[0]["error"], "is corrupt")

	// Usage errors.
	for _, args := range [][]string{{"store"}, {"store", "check"}, {"store", "fix", path}, {"store", "check", filepath.Join(dir, "missing.db")}} {
		code, _, errOut := cli(t, "", args...)
		require.Equal(t, exitUsage, code, "%v", args)
		require.Contains(t, errOut, "store", "%v", args)
	}
}
