package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// nodeModules returns integration/node/node_modules, skipping the test when
// the Node packages are not installed (scripts/test installs them). Under CI
// a missing install fails instead.
func nodeModules(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("node", "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("CI") != "" || os.Getenv("TASKBRIDGE_REQUIRE_NODE") == "1" {
			t.Fatalf("Node packages are not installed in %s: run scripts/test", dir)
		}
		t.Skipf("Node packages are not installed in %s: run scripts/test to install them", dir)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not on PATH: %v", err)
	}
	return dir
}

// nodeArgs prefixes a script with the Node 20 compatibility loader when the
// machine's Node is older than 22 (the conformance bundle needs
// fs.globSync).
func nodeArgs(t *testing.T, script string, args ...string) []string {
	t.Helper()
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), ".", 2)[0])
	var pre []string
	if major < 22 {
		loader, err := filepath.Abs(filepath.Join("node", "node20-compat", "register.mjs"))
		if err != nil {
			t.Fatal(err)
		}
		pre = []string{"--import", loader}
	}
	return append(append(pre, script), args...)
}
