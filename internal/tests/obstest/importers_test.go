package obstest_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The module's test harnesses are packages of their own (so that several
// packages' tests can share them) that must stay out of every build that
// is not a test: they import testing and testify. They are the packages
// under internal/tests/, and internal/pgtest (which stays beside
// internal/pgserver because store/postgres's tests import it).
const (
	testsRoom = "github.com/taskbridge/taskbridge/internal/tests/"
	pgtest    = "github.com/taskbridge/taskbridge/internal/pgtest"
)

func isHarness(p string) bool { return strings.HasPrefix(p, testsRoom) || p == pgtest }

// TestHarnessesStayTests checks the import graph: no package of the
// module, other than the harnesses themselves, depends on a harness
// outside its _test.go files, and no harness depends on an example (go
// list -deps of every non-test package).
func TestHarnessesStayTests(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the whole module")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
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
	var roots, harnesses []string
	for _, p := range strings.Fields(golist("./...")) {
		if isHarness(p) {
			harnesses = append(harnesses, p)
		} else {
			roots = append(roots, p)
		}
	}
	require.NotEmpty(t, roots)
	require.Contains(t, harnesses, testsRoom+"obstest")
	require.Contains(t, harnesses, testsRoom+"clitest")
	for _, dep := range strings.Fields(golist(append([]string{"-deps"}, harnesses...)...)) {
		require.NotContains(t, dep, "/examples/", "a test harness depends on an example")
	}
	// Every package those build, each with what it imports (outside its
	// tests).
	var offenders []string
	out := golist(append([]string{"-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, roots...)...)
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		if len(fields) == 0 || isHarness(fields[0]) {
			continue
		}
		for _, imp := range fields[1:] {
			if isHarness(imp) {
				offenders = append(offenders, fields[0]+" imports "+imp)
			}
		}
	}
	require.Empty(t, offenders, "test harnesses are imported from _test.go files only")
}
