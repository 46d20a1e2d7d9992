package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The ten tasks-* scenarios of the official MCP conformance suite: the
// standard for the io.modelcontextprotocol/tasks extension dialect.
var conformanceScenarios = []string{
	"tasks-lifecycle",
	"tasks-capability-negotiation",
	"tasks-wire-fields",
	"tasks-request-state-removal",
	"tasks-mrtr-input",
	"tasks-request-headers",
	"tasks-dispatch-and-envelope",
	"tasks-status-notifications",
	"tasks-required-task-error",
	"tasks-mrtr-composition",
}

// TestConformanceTasksScenarios runs the official conformance suite (npm
// @modelcontextprotocol/conformance) against the conformance server, backed
// by bbolt, over Streamable HTTP on 127.0.0.1.
func TestConformanceTasksScenarios(t *testing.T) {
	modules := nodeModules(t)
	script := filepath.Join(modules, "@modelcontextprotocol", "conformance", "dist", "index.js")

	url := startConformanceServer(t)

	passed := regexp.MustCompile(`Passed: (\d+)/(\d+), 0 failed`)
	for _, scenario := range conformanceScenarios {
		t.Run(scenario, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", nodeArgs(t, script, "server", "--url", url, "--scenario", scenario)...)
			cmd.Dir = t.TempDir() // the suite writes results into its working directory
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "conformance %s failed:\n%s", scenario, out)
			require.Regexp(t, passed, string(out), "no passing summary:\n%s", out)
		})
	}
}
