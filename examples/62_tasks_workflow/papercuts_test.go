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

// A -db file in a directory that does not exist is named in the error
// (the ledger beside it used to fail first, naming FILE.published).
func TestMissingDBDirectoryNamesTheDatabase(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-dir", "tasks.db")
	for _, args := range [][]string{
		{"serve", "-stdio", "-db", missing},
		{"serve", "-http", "127.0.0.1:0", "-db", missing},
		{"-db", missing},
	} {
		var out, errOut bytes.Buffer
		err := run(args, &out, &errOut)
		require.ErrorContains(t, err, "-db "+missing+": the directory "+filepath.Dir(missing)+" does not exist", "%v", args)
		require.NotContains(t, err.Error(), ".published")
		require.NoFileExists(t, missing+".published")
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
