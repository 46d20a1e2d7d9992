package main

import (
	"bufio"
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/internal/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m) // runs the tests, then stops PostgreSQL if a test started it
}

// buildExample builds the example's binary for a test that runs it.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ex62")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// A -db file in a directory that does not exist gets its directory, as a
// host's config on a fresh machine needs (the README's names
// ~/.taskbridge/example.db): serve over stdio answers a host, and the
// store and the ledger are in the new directory. A directory that cannot
// be one (a file is in the way) is named in the error.
func TestMissingDBDirectoryIsCreated(t *testing.T) {
	bin := buildExample(t)
	db := filepath.Join(t.TempDir(), "fresh-home", ".taskbridge", "example.db")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.Command(bin, "serve", "-stdio", "-db", db)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	tools, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	require.NotEmpty(t, tools.Tools)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "release_notes", Arguments: map[string]any{"repo": "acme"}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%v", res.Content)
	require.NoError(t, cs.Close())
	require.FileExists(t, db)
	require.FileExists(t, db+".published")

	blocked := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocked, nil, 0o600))
	for _, args := range [][]string{
		{"serve", "-stdio", "-db", filepath.Join(blocked, "tasks.db")},
		{"serve", "-http", "127.0.0.1:0", "-db", filepath.Join(blocked, "tasks.db")},
		{"-db", filepath.Join(blocked, "tasks.db")},
	} {
		var out, errOut bytes.Buffer
		err := run(args, &out, &errOut)
		require.ErrorContains(t, err, "-db "+filepath.Join(blocked, "tasks.db")+": "+blocked+" is not a directory", "%v", args)
		require.NotContains(t, err.Error(), ".published")
	}
}

// serve on PostgreSQL logs its DSN without the password, and keeps the
// publication ledger in the state directory, not in the working
// directory.
func TestServeOnPostgreSQL(t *testing.T) {
	dsn := pgtest.DSN(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "s3cret-pw") // trust auth ignores it
	bin := buildExample(t)
	work, state := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "-http", "127.0.0.1:0", "-db", u.String())
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+state)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var serving string
	var seen []string
	sc := bufio.NewScanner(stderr)
	for serving == "" && sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.HasPrefix(sc.Text(), "serving ") {
			serving = sc.Text()
		}
	}
	require.NotEmpty(t, serving, "serve said: %q", seen)
	require.NotContains(t, serving, "s3cret-pw")
	require.Contains(t, serving, "postgres:xxxxx@")
	entries, err := os.ReadDir(work)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing lands in the working directory")
	require.FileExists(t, filepath.Join(state, "taskbridge", "example-62.published"))
}
