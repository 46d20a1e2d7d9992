package builder_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/store"
	"github.com/taskbridge/taskbridge/store/bboltstore"
)

// mappedKiB returns the resident kilobytes of this process's mappings of
// path (from /proc/self/smaps).
func mappedKiB(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	require.NoError(t, err)
	defer f.Close()
	total, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) >= 5 && strings.Contains(fields[0], "-") {
			in = strings.HasSuffix(line, path)
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			n, err := strconv.Atoi(strings.Fields(line)[1])
			require.NoError(t, err)
			total += n
		}
	}
	require.NoError(t, sc.Err())
	return total
}

// TestBuildPrefaultsBboltFromEnvironment: TASKBRIDGE_BBOLT_PREFAULT=1
// maps the whole file resident at Build (the store's pages are faulted in
// before anything reads them); without it only what Open reads is.
func TestBuildPrefaultsBboltFromEnvironment(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("prefaulting is Linux only (MAP_POPULATE)")
	}
	path := filepath.Join(t.TempDir(), "big.db")
	st, err := bboltstore.Open(path, nil)
	require.NoError(t, err)
	ctx := context.Background()
	big := json.RawMessage(`"` + strings.Repeat("x", 50_000) + `"`)
	for i := range 200 { // ~10 MB of variables
		id := fmt.Sprintf("t%03d", i)
		_, err := st.Create(ctx, &store.Task{ID: id, Owner: "o", Status: mcptask.StatusWorking, CreatedAt: time.Now()})
		require.NoError(t, err)
		_, err = st.Update(ctx, id, store.Update{Variables: map[string]json.RawMessage{"v": big}})
		require.NoError(t, err)
	}
	require.NoError(t, st.Close())
	fi, err := os.Stat(path)
	require.NoError(t, err)
	fileKiB := int(fi.Size() / 1024)

	t.Setenv(builder.EnvDB, path)
	open := func(v string) int {
		t.Setenv(builder.EnvBboltPrefault, v)
		srv, err := builder.New("t", "1").Build(ctx)
		require.NoError(t, err)
		defer srv.Close()
		return mappedKiB(t, path)
	}
	on, off := open("1"), open("0")
	t.Logf("file %d KiB: resident %d KiB prefaulted, %d KiB by default", fileKiB, on, off)
	require.GreaterOrEqual(t, on, fileKiB*9/10, "prefaulted: the file is resident")
	require.Less(t, off, fileKiB/2, "default: only the pages Open reads")

	t.Setenv(builder.EnvBboltPrefault, "sometimes")
	_, err = builder.New("t", "1").Build(ctx)
	require.ErrorContains(t, err, builder.EnvBboltPrefault)
	require.ErrorContains(t, err, `"sometimes"`)

	// The option given in code, without the environment.
	srv, err := builder.New("t", "1").WithoutEnv().WithDB(path).WithBboltOptions(bboltstore.Options{Prefault: true}).Build(ctx)
	require.NoError(t, err)
	defer srv.Close()
	require.GreaterOrEqual(t, mappedKiB(t, path), fileKiB*9/10)
}
