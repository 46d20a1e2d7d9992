// Package doctest keeps a package's doc.go true to the package: its file
// map (the "# Files" section) names every file of the package and no file
// that is gone. The taskrouter and workflow packages' tests call it.
package doctest

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var goFile = regexp.MustCompile(`\b([a-z0-9_]+\.go)\b`)

// FileMap fails t unless the "# Files" section of dir/doc.go names every
// non-test Go file of dir (doc.go aside), and names no file dir lacks.
func FileMap(t testing.TB, dir string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(dir, "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	_, files, ok := strings.Cut(string(doc), "// # Files")
	if !ok {
		t.Fatalf("%s/doc.go has no # Files section", dir)
	}
	named := map[string]bool{}
	for _, m := range goFile.FindAllStringSubmatch(files, -1) {
		named[m[1]] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	var missing, gone []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") || n == "doc.go" {
			continue
		}
		have[n] = true
		if !named[n] {
			missing = append(missing, n)
		}
	}
	for n := range named {
		if !have[n] {
			gone = append(gone, n)
		}
	}
	sort.Strings(gone)
	if len(missing) > 0 {
		t.Errorf("%s/doc.go's file map does not name %s", dir, strings.Join(missing, ", "))
	}
	if len(gone) > 0 {
		t.Errorf("%s/doc.go's file map names %s, which the package does not have", dir, strings.Join(gone, ", "))
	}
}
