package apicheck

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoDeprecatedNames checks that no library package keeps a
// Deprecated: name: the module has never been tagged, so a name no
// release promised is deleted, not deprecated (CHANGELOG.md lists the
// removals). Remove this test with the first tagged release.
func TestNoDeprecatedNames(t *testing.T) {
	s, err := Load(context.Background(), moduleRoot(t))
	require.NoError(t, err)
	var found []string
	for _, p := range s.Packages {
		names, err := Deprecated(p.Dir)
		require.NoError(t, err)
		for _, n := range names {
			found = append(found, p.ImportPath+" "+n)
		}
	}
	if len(found) > 0 {
		t.Fatalf("%d deprecated names: delete them (the module has no tagged release) and list them with their replacements in CHANGELOG.md:\n\t%s",
			len(found), strings.Join(found, "\n\t"))
	}
}
