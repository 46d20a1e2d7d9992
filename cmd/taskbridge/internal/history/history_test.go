package history

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecordKeepsWhatIsKnown(t *testing.T) {
	h := Open(filepath.Join(t.TempDir(), "state", "history"), 0)
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, h.Record(Entry{ID: "a", Server: "http://s/mcp", Name: "generate_report", Kind: KindTool, Created: created}))
	require.NoError(t, h.Record(Entry{ID: "b", Server: "http://s/mcp", Name: "release_notes", Kind: KindWorkflow, Created: created.Add(time.Minute)}))
	require.NoError(t, h.Record(Entry{ID: "a", Server: "http://other/mcp", Name: "x", Kind: KindTool}))
	// Opened again by id, without a name: the name and creation time stay.
	require.NoError(t, h.Record(Entry{ID: "a", Server: "http://s/mcp", Created: created.Add(time.Hour)}))

	got, err := h.List("http://s/mcp")
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "a", got[0].ID, "oldest created first")
	require.Equal(t, "generate_report", got[0].Name)
	require.Equal(t, KindTool, got[0].Kind)
	require.True(t, got[0].Created.Equal(created))
	require.False(t, got[0].Seen.IsZero())
	require.Equal(t, "release_notes", got[1].Name)

	e, ok, err := h.Lookup("http://s/mcp", "b")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, KindWorkflow, e.Kind)
	_, ok, err = h.Lookup("http://s/mcp", "zzz")
	require.NoError(t, err)
	require.False(t, ok)

	all, err := h.List("")
	require.NoError(t, err)
	require.Len(t, all, 3)

	// The file is JSON lines a person can read.
	raw, err := os.ReadFile(h.Path())
	require.NoError(t, err)
	require.Contains(t, string(raw), `"name":"release_notes"`)
}

func TestForget(t *testing.T) {
	h := Open(filepath.Join(t.TempDir(), "history"), 0)
	for _, id := range []string{"a", "b", "c"} {
		require.NoError(t, h.Record(Entry{ID: id, Server: "s1"}))
		require.NoError(t, h.Record(Entry{ID: id, Server: "s2"}))
	}
	n, err := h.Forget("s1", "a", "nope")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = h.Forget("", "b")
	require.NoError(t, err)
	require.Equal(t, 2, n, "every server's b")
	n, err = h.Forget("s2")
	require.NoError(t, err)
	require.Equal(t, 2, n, "all of s2: a and c")
	left, err := h.List("")
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, Entry{ID: "c", Server: "s1"}, Entry{ID: left[0].ID, Server: left[0].Server})
}

func TestCapDropsTheLeastRecentlySeen(t *testing.T) {
	h := Open(filepath.Join(t.TempDir(), "history"), 3)
	for i := range 5 {
		require.NoError(t, h.Record(Entry{ID: fmt.Sprint(i), Server: "s"}))
	}
	// Seeing 2 again makes it the most recent: 3 goes next.
	require.NoError(t, h.Record(Entry{ID: "2", Server: "s"}))
	require.NoError(t, h.Record(Entry{ID: "5", Server: "s"}))
	got, err := h.List("s")
	require.NoError(t, err)
	var ids []string
	for _, e := range got {
		ids = append(ids, e.ID)
	}
	require.ElementsMatch(t, []string{"2", "4", "5"}, ids)
}

// Several processes (here: several History values on one file, each
// taking the file lock) recording at once lose no entry.
func TestConcurrentWritersLoseNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := Open(path, 0)
			for i := range 10 {
				assert.NoError(t, h.Record(Entry{ID: fmt.Sprintf("%d-%d", w, i), Server: "s"}))
			}
		}()
	}
	wg.Wait()
	got, err := Open(path, 0).List("s")
	require.NoError(t, err)
	require.Len(t, got, 40)
}

func TestOffAndDefaultPath(t *testing.T) {
	var off *History
	require.NoError(t, off.Record(Entry{ID: "a", Server: "s"}))
	got, err := off.List("")
	require.NoError(t, err)
	require.Empty(t, got)

	t.Setenv(EnvPath, "off")
	require.Nil(t, Default())
	t.Setenv(EnvPath, "/tmp/x/history")
	p, err := DefaultPath()
	require.NoError(t, err)
	require.Equal(t, "/tmp/x/history", p)
	t.Setenv(EnvPath, "")
	t.Setenv("XDG_STATE_HOME", "/state")
	p, err = DefaultPath()
	require.NoError(t, err)
	require.Equal(t, filepath.Join("/state", "taskbridge", "history"), p)
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/me")
	p, err = DefaultPath()
	require.NoError(t, err)
	require.Equal(t, "/home/me/.local/state/taskbridge/history", p)
}

func TestUnreadableLinesAreSkipped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history")
	require.NoError(t, os.WriteFile(path, []byte("not json\n{\"id\":\"a\",\"server\":\"s\"}\n{}\n"), 0o600))
	got, err := Open(path, 0).List("")
	require.NoError(t, err)
	require.Len(t, got, 1)
}
