package integration

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/examples/conformance/conftools"
	bboltstore "github.com/taskbridge/taskbridge/store/bbolt"
	"github.com/taskbridge/taskbridge/taskrouter"
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

	st, err := bboltstore.Open(filepath.Join(t.TempDir(), "tasks.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	_, router, err := conftools.NewServer(taskrouter.Config{Store: st, PollInterval: time.Second, DefaultTTL: 5 * time.Minute})
	require.NoError(t, err)
	require.NoError(t, router.Start(context.Background()))
	t.Cleanup(func() { _ = router.Close() })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/mcp", router.HTTPHandler(nil))
	hs := &http.Server{Handler: mux}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	url := "http://" + ln.Addr().String() + "/mcp"

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
