package filelock_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/filelock"
)

// TestLockExcludes: a second holder of the same file (another open file,
// as another process would have) waits until the first releases it.
func TestLockExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	a, err := os.Create(path)
	require.NoError(t, err)
	defer a.Close()
	b, err := os.Open(path)
	require.NoError(t, err)
	defer b.Close()

	unlockA, err := filelock.Lock(a)
	require.NoError(t, err)
	got := make(chan func(), 1)
	go func() {
		unlockB, err := filelock.Lock(b)
		if err == nil {
			got <- unlockB
		}
	}()
	select {
	case <-got:
		t.Fatal("the second lock was granted while the first was held")
	case <-time.After(100 * time.Millisecond):
	}
	unlockA()
	select {
	case unlockB := <-got:
		unlockB()
	case <-time.After(30 * time.Second):
		t.Fatal("the second lock was not granted after the first was released")
	}
}
