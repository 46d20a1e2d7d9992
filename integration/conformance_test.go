package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/pgtest"
	"github.com/taskbridge/taskbridge/internal/rrproxy"
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

// TestConformanceTasksScenariosOnReplicas runs the same ten scenarios
// against two replicas of examples/conformance (real processes, one
// PostgreSQL database) behind the round-robin proxy (internal/rrproxy):
// each request of a scenario may land on either replica, the way a load
// balancer spreads them.
func TestConformanceTasksScenariosOnReplicas(t *testing.T) {
	modules := nodeModules(t)
	script := filepath.Join(modules, "@modelcontextprotocol", "conformance", "dist", "index.js")
	bin := exampleBinary(t, "./examples/conformance")
	dsn := pgtest.DSN(t)
	var procs []*proc
	var backends []string
	for _, name := range []string{"r1", "r2"} {
		p := startProc(t, bin, []string{"TASKBRIDGE_REPLICA_ID=" + name, "TASKBRIDGE_LEASE_DURATION=2s", "TASKBRIDGE_CHANGE_POLL_INTERVAL=200ms"},
			"-http", "ADDR", "-db", dsn, "-v")
		procs = append(procs, p)
		backends = append(backends, strings.TrimSuffix(p.url, "/mcp"))
	}
	px, err := rrproxy.Listen("", backends...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = px.Close() })
	url := px.URL + "/mcp"

	passed := regexp.MustCompile(`Passed: (\d+)/(\d+), 0 failed`)
	for _, scenario := range conformanceScenarios {
		t.Run(scenario, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", nodeArgs(t, script, "server", "--url", url, "--scenario", scenario)...)
			cmd.Dir = t.TempDir()
			out, err := cmd.CombinedOutput()
			if t.Failed() || err != nil || !passed.Match(out) {
				for i, p := range procs {
					t.Logf("log of replica r%d:\n%s", i+1, p.log.String())
				}
			}
			require.NoError(t, err, "conformance %s failed:\n%s", scenario, out)
			require.Regexp(t, passed, string(out), "no passing summary:\n%s", out)
		})
	}
	served := px.Served()
	require.Positive(t, served[0], "r1 served requests")
	require.Positive(t, served[1], "r2 served requests")
	t.Logf("requests served by r1, r2: %v", served)
}
