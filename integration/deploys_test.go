package integration

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Deploys are not crashes: a server stopped gracefully (SIGTERM, as a
// rolling deploy stops it) hands its running steps back, and they run
// again on the next process without counting towards the crash-loop
// limit; a SIGKILL counts. Real processes (integration/testdata/
// versionserver), killed by PID.

// term stops the process with SIGTERM and waits until it is gone.
func (p *proc) term(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit within 30s of SIGTERM: %s", p.log.String())
	}
	require.Contains(t, p.log.String(), "STOPPED gracefully")
}

// abcRunningC starts abc on the process behind c, performs b, and waits
// until the server runs c; it returns the task id.
func abcRunningC(t *testing.T, p *proc) string {
	t.Helper()
	ctx := relCtx(t, time.Minute)
	c := newRelClient(p.url, newRelHTTPClient(2), relExt, "")
	id := relHandoff(t, c.must(t, ctx, "prompts/get", map[string]any{"name": "abc"})).TaskID
	go func() { // b's continuation sets c off; its caller does not wait for c
		_, _ = c.call(ctx, "tools/call", map[string]any{"name": "tb", "arguments": map[string]any{"x": 1, "_task_id": id}})
	}()
	waitRunning(t, p, id)
	return id
}

// waitRunning waits until task id runs step c on p.
func waitRunning(t *testing.T, p *proc, id string) {
	t.Helper()
	ctx := relCtx(t, time.Minute)
	c := newRelClient(p.url, newRelHTTPClient(2), relExt, "")
	require.Eventually(t, func() bool {
		got := c.must(t, ctx, "tasks/get", map[string]any{"taskId": id})
		msg, _ := got["statusMessage"].(string)
		return strings.Contains(msg, `running step "c"`)
	}, 20*time.Second, 20*time.Millisecond, "c never ran: %s", p.log.String())
}

func TestGracefulStopsAreNotCrashes(t *testing.T) {
	bin := exampleBinary(t, "./integration/testdata/versionserver")
	db := filepath.Join(t.TempDir(), "tasks.db")
	args := []string{"-http", "ADDR", "-db", db, "-max-interruptions", "1"}
	p := startProc(t, bin, nil, append(args, "-c-sleep", "1h")...)
	id := abcRunningC(t, p)
	// A rolling deploy: four graceful stops while c runs, more than the
	// crash limit (1) allows crashes.
	for range 4 {
		p.term(t)
		p = startProc(t, bin, nil, append(args, "-c-sleep", "1h")...)
		waitRunning(t, p, id)
	}
	p.term(t)
	p = startProc(t, bin, nil, append(args, "-c-sleep", "0s")...)
	ctx := relCtx(t, time.Minute)
	c := newRelClient(p.url, newRelHTTPClient(2), relExt, "")
	require.Eventually(t, func() bool {
		return c.must(t, ctx, "tasks/get", map[string]any{"taskId": id})["status"] == "completed"
	}, 20*time.Second, 20*time.Millisecond, p.log.String())
	doc := relHandoff(t, c.must(t, ctx, "tools/call", map[string]any{"name": "task_result", "arguments": map[string]any{"task_id": id}}))
	require.Equal(t, "c", doc.CompletedSteps[2].Name)
	require.Equal(t, 6, doc.CompletedSteps[2].Attempts, "five runs cut short by graceful stops, then the one that finished")
	p.kill()

	// Crashes count: with a limit of 1, the second SIGKILL in a row
	// during c makes the server give up on it (handed to the client).
	db = filepath.Join(t.TempDir(), "crash.db")
	args = []string{"-http", "ADDR", "-db", db, "-max-interruptions", "1", "-c-sleep", "1h"}
	p = startProc(t, bin, nil, args...)
	id = abcRunningC(t, p)
	p.kill()
	p = startProc(t, bin, nil, args...)
	waitRunning(t, p, id)
	p.kill()
	p = startProc(t, bin, nil, args...)
	c = newRelClient(p.url, newRelHTTPClient(2), relExt, "")
	require.Eventually(t, func() bool {
		msg, _ := c.must(t, ctx, "tasks/get", map[string]any{"taskId": id})["statusMessage"].(string)
		return strings.Contains(msg, "stopped 2 times in a row while running this step without handing it back")
	}, 20*time.Second, 20*time.Millisecond, p.log.String())
	p.kill()
}
