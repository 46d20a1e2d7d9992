package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/internal/pgtest"
)

// TestReplicasMode builds the example, runs `replicas` (a PostgreSQL, three
// replicas, the proxy), and drives it through the proxy with go-sdk
// clients: tools/list and a plain tools/call work in every session, the
// sessions land on more than one replica, and SIGTERM stops everything
// and reports the requests each replica answered.
func TestReplicasMode(t *testing.T) {
	pgtest.Binaries(t)
	if testing.Short() {
		t.Skip("builds the example and starts PostgreSQL and three servers")
	}
	bin := buildExample(t)
	cmd := exec.Command(bin, "replicas", "-http", "127.0.0.1:0", "-n", "3", "-dashboard-token", "admin-token")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // after a failure; a no-op once it exited
	})

	var proxyURL string
	var printed []string
	deadline := time.After(2 * time.Minute)
	for proxyURL == "" {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "replicas exited before it served:\n%s", stderr.String())
			printed = append(printed, l)
			if m := regexp.MustCompile(`^proxy\s+(http://\S+/mcp)`).FindStringSubmatch(l); m != nil {
				proxyURL = m[1]
			}
		case <-deadline:
			t.Fatalf("no proxy URL within 2 minutes; stdout %q\nstderr:\n%s", printed, stderr.String())
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for i := range 3 {
		c := mcp.NewClient(&mcp.Implementation{Name: fmt.Sprint("client-", i), Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: proxyURL}, nil)
		require.NoError(t, err, "session %d", i)
		tools, err := cs.ListTools(ctx, nil)
		require.NoError(t, err)
		var names []string
		for _, tool := range tools.Tools {
			names = append(names, tool.Name)
		}
		require.Contains(t, names, "fetch_changes")
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fetch_changes", Arguments: map[string]any{"repo": "taskbridge"}})
		require.NoError(t, err)
		require.False(t, res.IsError, "%v", res.Content)
		require.Contains(t, fmt.Sprint(res.StructuredContent), "durable tasks on bbolt")
		require.NoError(t, cs.Close())
	}

	// The dashboard, behind the proxy, with replicas' -dashboard-token.
	base := strings.TrimSuffix(proxyURL, "/mcp")
	for token, want := range map[string]int{"admin-token": http.StatusOK, "": http.StatusUnauthorized} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/dashboard/", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "dashboard with token %q", token)
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	select {
	case err := <-exited:
		require.NoError(t, err, "stderr:\n%s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("replicas did not stop within 30s:\n%s", stderr.String())
	}
	var counts string
	for _, l := range rest {
		if c, ok := strings.CutPrefix(l, "requests per replica: "); ok {
			counts = c
		}
	}
	require.NotEmpty(t, counts, "stdout after SIGTERM: %q", rest)
	t.Logf("requests per replica: %s", counts)
	reached := 0
	for _, part := range strings.Split(counts, ", ") {
		name, n, ok := strings.Cut(part, " ")
		require.True(t, ok, part)
		require.True(t, strings.HasPrefix(name, "replica-"), part)
		if v, err := strconv.Atoi(n); err == nil && v > 0 {
			reached++
		}
	}
	require.GreaterOrEqual(t, reached, 2, "requests reached more than one replica: %s", counts)
	require.Contains(t, stderr.String(), "[replica-3] serving http://127.0.0.1:")
	require.Contains(t, strings.Join(rest, "\n"), "dashboard  "+base+"/dashboard/")
	dir := regexp.MustCompile(`host=([^&\s]+)`).FindStringSubmatch(strings.Join(append(printed, rest...), "\n"))
	require.NotNil(t, dir, "the database line names the socket directory")
	require.NoDirExists(t, strings.ReplaceAll(dir[1], "%2F", "/"), "the data is removed")
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
