package obstest_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// harnesses are the module's test harnesses that are packages of their
// own (so that several packages' tests can share them) but must stay out
// of every build that is not a test: they import testing and testify.
var harnesses = []string{
	"github.com/taskbridge/taskbridge/internal/obstest",
	"github.com/taskbridge/taskbridge/internal/pgtest",
}

// TestOnlyTestsImportHarnesses checks the import graph: no package of the
// module, other than the harnesses themselves, depends on a harness
// outside its _test.go files (go list -deps of every non-test package).
func TestOnlyTestsImportHarnesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the whole module")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	golist := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", append([]string{"list"}, args...)...)
		cmd.Dir = root
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list %v: %v\n%s", args, err, ee.Stderr)
		}
		require.NoError(t, err)
		return string(out)
	}
	var roots []string
	for _, p := range strings.Fields(golist("./...")) {
		if !slices.Contains(harnesses, p) {
			roots = append(roots, p)
		}
	}
	require.NotEmpty(t, roots)
	// Every package those build, each with what it imports (outside its
	// tests).
	var offenders []string
	out := golist(append([]string{"-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, roots...)...)
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		if len(fields) == 0 || slices.Contains(harnesses, fields[0]) {
			continue
		}
		for _, imp := range fields[1:] {
			if slices.Contains(harnesses, imp) {
				offenders = append(offenders, fields[0]+" imports "+imp)
			}
		}
	}
	require.Empty(t, offenders, "test harnesses are imported from _test.go files only")
}
