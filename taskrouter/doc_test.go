package taskrouter

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocFileMap: doc.go's "# Files" section names every file of the
// package (tests aside), and every file it names exists; package
// internal/wire's doc.go does the same for its files.
func TestDocFileMap(t *testing.T) {
	for _, dir := range []string{".", "internal/wire"} {
		t.Run(dir, func(t *testing.T) {
			doc, err := os.ReadFile(filepath.Join(dir, "doc.go"))
			require.NoError(t, err)
			_, files, ok := strings.Cut(string(doc), "// # Files")
			require.True(t, ok, "%s/doc.go has a # Files section", dir)
			named := map[string]bool{}
			for _, m := range regexp.MustCompile(`\b([a-z0-9_]+\.go)\b`).FindAllStringSubmatch(files, -1) {
				named[m[1]] = true
			}
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			have := map[string]bool{}
			for _, e := range entries {
				n := e.Name()
				if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") || n == "doc.go" {
					continue
				}
				have[n] = true
				require.True(t, named[n], "%s/doc.go's file map does not name %s", dir, n)
			}
			for n := range named {
				require.True(t, have[n], "%s/doc.go's file map names %s, which does not exist", dir, n)
			}
		})
	}
}
