package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
)

// A server that requires bearer tokens (example 62's serve -tokens) is
// reachable with -token, TASKBRIDGE_TOKEN or -header; without a token, or
// with a wrong one, the CLI says the credentials were refused (exit 3),
// not that the server cannot be reached.
func TestTokenReachesAnAuthenticatedServer(t *testing.T) {
	useHistory(t)
	url := clitest.ReleaseWithTokens(t, map[string]string{"tok-a": "alice", "tok-b": "bob"})

	for _, dialect := range []string{"auto", "core", "extension"} {
		code, out, errOut := cli(t, "", "-url", url, "-dialect", dialect, "tools")
		require.Equal(t, exitUnreachable, code, out)
		require.Equal(t, "taskbridge: the server refused the credentials (HTTP 401 Unauthorized): pass -token TOKEN (or set TASKBRIDGE_TOKEN), or -header for other credentials\n", errOut, dialect)
		require.NotContains(t, errOut, "is this the server's MCP endpoint")
	}
	code, _, errOut := cli(t, "", "-url", url, "-token", "wrong", "tools")
	require.Equal(t, exitUnreachable, code)
	require.Contains(t, errOut, "the server refused the credentials (HTTP 401 Unauthorized): check the token given with -token")
	code, out, _ := cli(t, "", "-url", url, "-json", "info")
	require.Equal(t, exitUnreachable, code)
	line := jsonLines(t, out)[0]
	require.Equal(t, true, line["unauthorized"])
	require.EqualValues(t, 401, line["httpStatus"])

	code, out, errOut = cli(t, "", "-url", url, "-token", "tok-a", "tools")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "generate_report")
	code, out, errOut = cli(t, "", "-url", url, "-header", "Authorization=Bearer tok-a", "-header", "X-Trace=1", "tools")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "generate_report")

	// The environment variable, and a whole task's life with it.
	t.Setenv(EnvToken, "tok-a")
	code, out, errOut = cli(t, "", "-url", url, "call", "-detach", "generate_report", "topic=auth", "seconds=30")
	require.Equal(t, exitOK, code, errOut)
	id := strings.Fields(out)[0]
	code, out, errOut = cli(t, "", "-url", url, "-dialect", "core", "tasks", "list")
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, id+`\s+working\s+generate_report`, out)
	// Bob cannot see alice's task: the server says not found.
	code, out, _ = cli(t, "", "-url", url, "-token", "tok-b", "tasks", "get", id)
	require.Equal(t, exitFailed, code)
	require.Contains(t, out, "error:")
	code, out, errOut = cli(t, "", "-url", url, "tasks", "cancel", id)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "cancelled")

	// Bad -header values and -token with -stdio are usage errors.
	for _, args := range [][]string{
		{"-url", url, "-header", "novalue", "tools"},
		{"-stdio", "srv", "-token", "x", "tools"},
		{"-token", "x", "ui", "--", "srv"},
	} {
		code, _, errOut := cli(t, "", args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}
}

// ui refuses to start on refused credentials with the same message.
func TestUIReportsRefusedCredentials(t *testing.T) {
	url := clitest.ReleaseWithTokens(t, map[string]string{"tok-a": "alice"})
	code, _, errOut := cli(t, "", "ui", url)
	require.Equal(t, exitUnreachable, code)
	require.Contains(t, errOut, "the server refused the credentials (HTTP 401 Unauthorized): pass -token")
	code, _, errOut = cli(t, "", "ui", "-token", "nope", url)
	require.Equal(t, exitUnreachable, code)
	require.Contains(t, errOut, "check the token given with -token")
}
