package main

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/internal/tests/pushtest"
	"github.com/taskbridge/taskbridge/mcptask"
)

// TestServePush: serve -push sends every task's end to the URL, signed
// with the secret it printed; without -push-secret it makes one.
func TestServePush(t *testing.T) {
	rc := pushtest.New(t)
	bin := buildExample(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "-http", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "tasks.db"),
		"-push", rc.URL, "-push-events", "terminal")
	cmd.Env = append(cmd.Environ(), "TASKBRIDGE_PUSH_SECRET=")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var secret, endpoint string
	sc := bufio.NewScanner(stderr)
	for endpoint == "" && sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "push: terminal of every task to "+rc.URL+", signed with secret "); ok {
			secret = rest
		}
		if rest, ok := strings.CutPrefix(line, "serving "); ok {
			endpoint = strings.Fields(rest)[0]
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	require.NotEmpty(t, secret, "serve printed the secret it made")
	require.NotEmpty(t, endpoint)

	c, err := client.Dial(ctx, client.HTTPTransport(endpoint, nil), nil)
	require.NoError(t, err)
	defer c.Close()
	res, err := c.CallToolAndWait(ctx, "generate_report", map[string]any{"topic": "push", "seconds": 0.2}, nil)
	require.NoError(t, err)
	require.False(t, res.IsError)
	d := pushtest.Verified(t, secret, rc.Wait(t, 1)[0])
	require.Equal(t, mcptask.WebhookTerminal, d.Type)
	require.Equal(t, mcptask.StatusCompleted, d.Task.Status)

	var out, errOut strings.Builder
	err = run([]string{"serve", "-http", "127.0.0.1:0", "-push", rc.URL, "-push-events", "sometimes"}, &out, &errOut)
	require.ErrorContains(t, err, `unknown event "sometimes"`)
}
