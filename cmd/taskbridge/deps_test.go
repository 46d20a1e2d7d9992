package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// No package of the CLI (the binary, the TUI, their helpers) depends on an
// example or on the testing packages: the servers the tests talk to live
// in internal/tests/clitest, which only _test.go files import.
func TestCLIDependsOnNoExample(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/taskbridge/taskbridge/cmd/taskbridge/internal/tui", "go list ran on the CLI's packages")
	for _, d := range deps {
		require.NotContains(t, d, "/examples/", "a package of the CLI depends on %s", d)
		require.NotEqual(t, "testing", d, "a package of the CLI depends on testing")
		require.NotContains(t, d, "internal/tests/")
	}
}
