package main

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// ui's argument errors and an unreachable server end before the UI
// starts, with the CLI's exit statuses.
func TestUIArgumentsAndUnreachableServer(t *testing.T) {
	for _, args := range [][]string{
		{"ui"},
		{"ui", "http://a/mcp", "http://b/mcp"},
		{"ui", "--"},
		{"ui", "-dialect", "klingon", "http://127.0.0.1:1/mcp"},
		{"ui", "-nope"},
	} {
		code, _, errOut := cli(t, "", args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "taskbridge help", args)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String() + "/mcp"
	require.NoError(t, ln.Close())
	code, _, errOut := cli(t, "", "ui", url)
	require.Equal(t, exitUnreachable, code)
	require.Equal(t, "taskbridge: cannot reach "+url+": connection refused — is the server running?\n", errOut)
	code, _, errOut = cli(t, "", "ui", "--", "/nonexistent/server", "-stdio")
	require.Equal(t, exitUnreachable, code)
	require.Contains(t, errOut, "cannot run /nonexistent/server -stdio:")
}

func TestUITarget(t *testing.T) {
	for _, tc := range []struct {
		args []string
		g    globals
		want target
	}{
		{[]string{"http://h/mcp"}, globals{}, target{url: "http://h/mcp"}},
		{[]string{"-dialect", "core", "http://h/mcp"}, globals{}, target{url: "http://h/mcp"}},
		{[]string{"--", "srv", "-stdio"}, globals{}, target{argv: []string{"srv", "-stdio"}}},
		{[]string{"-dialect", "core", "--", "srv"}, globals{}, target{argv: []string{"srv"}}},
		{nil, globals{url: "http://g/mcp"}, target{url: "http://g/mcp"}},
		{nil, globals{stdio: "srv -x"}, target{argv: []string{"srv", "-x"}}},
	} {
		fs := newUIFlags(&tc.g)
		require.NoError(t, fs.Parse(tc.args))
		got, err := uiTarget(tc.g, tc.args, fs.Args())
		require.NoError(t, err, tc.args)
		require.Equal(t, tc.want, got, tc.args)
	}
}
