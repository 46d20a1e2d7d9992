package taskrouter

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// woken reports whether c was closed.
func woken(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestFeedEchoWakesNoOne: on a shared store a version this router wrote
// wakes its waiters when written; the change feed's echo of it wakes no
// one again, while another process's newer version, a deletion, or an
// echo the router forgot still wake them.
func TestFeedEchoWakesNoOne(t *testing.T) {
	var w watches
	c := w.watch("t")
	w.wakeOwn("t", 5)
	require.True(t, woken(c), "the write wakes its waiters")

	c = w.watch("t")
	w.wakeFeed("t", 5)
	require.False(t, woken(c), "the echo of the write wakes no one")
	w.wakeFeed("t", 6)
	require.True(t, woken(c), "another process's version wakes them")

	c = w.watch("t")
	w.wakeOwn("t", 7)
	require.True(t, woken(c))
	c = w.watch("t")
	w.wakeFeed("t", 0)
	require.True(t, woken(c), "a deletion wakes them")

	c = w.watch("u")
	w.wakeFeed("u", 3)
	require.True(t, woken(c), "a change of a task this router never wrote wakes them")

	for i := range maxOwn + 1 {
		w.wakeOwn(string(rune('a'+i%26))+string(rune(i)), 1)
	}
	require.LessOrEqual(t, len(w.own), maxOwn)
}
