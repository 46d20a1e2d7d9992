package dashboard

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFormTokenOK: a cancel or rerun form's token is the viewer's own,
// compared in constant time (hmac.Equal); another viewer's token, a
// token one byte off, a prefix and an empty token are refused.
func TestFormTokenOK(t *testing.T) {
	d := &Dashboard{}
	copy(d.secret[:], "a secret of the dashboard's own.")
	alice, bob := Viewer{Name: "alice", Owner: "user:alice", CanCancel: true}, Viewer{Name: "bob", Owner: "user:bob", CanCancel: true}
	tok := d.csrfToken(alice)
	require.True(t, d.formTokenOK(alice, tok))
	off := []byte(tok)
	off[len(off)-1] ^= 1
	for _, bad := range []string{"", d.csrfToken(bob), string(off), tok[:len(tok)-1], tok + "x"} {
		require.False(t, d.formTokenOK(alice, bad), "%q", bad)
	}
}
