package main

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
)

// sawWriter is an output that closes seen once want was written.
type sawWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newSawWriter(want string) *sawWriter { return &sawWriter{want: want, seen: make(chan struct{})} }

func (w *sawWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *sawWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

var createdRe = regexp.MustCompile(`created ([0-9a-f]{32})`)

// Ctrl-C while call watches a task ends the CLI with 130 and says that
// the task goes on, and how to wait for it or cancel it; the task is
// still running.
func TestInterruptedCallSaysTheTaskGoesOn(t *testing.T) {
	useHistory(t)
	url := clitest.Release(t)
	for _, dialect := range []string{"core", "extension"} {
		t.Run(dialect, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			out, errOut := newSawWriter("created "), &bytes.Buffer{}
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, []string{"-url", url, "-dialect", dialect, "call", "generate_report", "topic=ctrl-c", "seconds=30"}, strings.NewReader(""), out, errOut)
			}()
			select {
			case <-out.seen:
			case <-time.After(15 * time.Second):
				t.Fatalf("no task was created: %s", out.String())
			}
			cancel(errInterrupted) // what main does on SIGINT
			code := <-done
			require.Equal(t, exitInterrupted, code, errOut.String())
			id := createdRe.FindStringSubmatch(out.String())[1]
			require.Equal(t, "taskbridge: interrupted: task "+id+" is still running on the server; wait with `taskbridge -url "+url+
				" tasks result "+id+"`, cancel with `taskbridge -url "+url+" tasks cancel "+id+"`\n", errOut.String())
			require.NotContains(t, errOut.String(), "context canceled")

			code, got, _ := cli(t, "", "-url", url, "tasks", "get", id)
			require.Equal(t, exitOK, code)
			require.Contains(t, got, "working")
			code, _, _ = cli(t, "", "-url", url, "tasks", "cancel", id)
			require.Equal(t, exitOK, code)
		})
	}
}

// -timeout running out while call watches: exit 124 and the same advice.
// The timeouts leave room to connect and (for call) create the task on a
// loaded machine: one that runs out before is another message (the
// server did not answer in time), not the one tested here.
func TestTimeoutSaysTheTaskGoesOn(t *testing.T) {
	useHistory(t)
	url := clitest.Release(t)
	code, out, errOut := cli(t, "", "-url", url, "-timeout", "3s", "call", "generate_report", "topic=slow", "seconds=30")
	require.Equal(t, exitTimeout, code, out)
	id := createdRe.FindStringSubmatch(out)[1]
	require.Contains(t, errOut, "taskbridge: timed out (-timeout): task "+id+" is still running on the server; wait with `taskbridge -url "+url+" tasks result "+id+"`")
	require.NotContains(t, errOut, "deadline exceeded")
	// tasks result waits too: the same advice when it runs out.
	code, _, errOut = cli(t, "", "-url", url, "-timeout", "1s", "tasks", "result", id)
	require.Equal(t, exitTimeout, code)
	require.Contains(t, errOut, "task "+id+" is still running on the server")
	code, out, _ = cli(t, "", "-url", url, "-json", "-timeout", "1s", "tasks", "result", id)
	require.Equal(t, exitTimeout, code)
	line := jsonLines(t, out)[0]
	require.Equal(t, "interrupted", line["event"])
	require.Equal(t, id, line["taskId"])
	require.Equal(t, true, line["timeout"])
}

// -detach over -stdio would leave the task to a server that dies with
// the CLI: it is refused before the server is started.
func TestDetachOverStdioIsRefused(t *testing.T) {
	code, _, errOut := cli(t, "", "-stdio", "/nonexistent/server -stdio", "call", "-detach", "generate_report", "topic=x")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "call -detach needs a server that outlives this command: over -stdio the server is this command's child and stops when it exits")
	require.NotContains(t, errOut, "cannot run", "refused before the server starts")
}

// The real binary, interrupted with SIGINT as a terminal's Ctrl-C does.
func TestCtrlCOnTheBinary(t *testing.T) {
	dir := build(t)
	url := startServer(t, filepath.Join(dir, "62_tasks_workflow"), "serve", "-http", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "sig.db"))
	cmd := exec.Command(filepath.Join(dir, "taskbridge"), "-url", url, "call", "generate_report", "topic=sig", "seconds=30")
	cmd.Env = append(cmd.Environ(), "TASKBRIDGE_HISTORY="+filepath.Join(t.TempDir(), "history"))
	out := newSawWriter("created ")
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &errOut
	require.NoError(t, cmd.Start())
	select {
	case <-out.seen:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("no task was created: %s %s", out.String(), errOut.String())
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitInterrupted, ee.ExitCode(), errOut.String())
	id := createdRe.FindStringSubmatch(out.String())[1]
	require.Contains(t, errOut.String(), "interrupted: task "+id+" is still running on the server")
	code, got, _ := cli(t, "", "-url", url, "tasks", "get", id)
	require.Equal(t, exitOK, code)
	require.Contains(t, got, "working")
}

// Ctrl-C while prompt -follow waits for an answer ends the question at
// once (it does not wait for a line of input) and names the workflow
// task, which goes on.
func TestInterruptWhileAskingNamesTheWorkflow(t *testing.T) {
	useHistory(t)
	url := clitest.Release(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stdin, never := io.Pipe() // no answer ever comes
	defer never.Close()
	var out bytes.Buffer
	errOut := newSawWriter("approved <")
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-url", url, "prompt", "release_notes", "repo=taskbridge", "-follow"}, stdin, &out, errOut)
	}()
	select {
	case <-errOut.seen:
	case <-time.After(15 * time.Second):
		t.Fatalf("no question was asked: %s", errOut.String())
	}
	cancel(errInterrupted)
	var code int
	select {
	case code = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the CLI still waits for an answer after Ctrl-C")
	}
	require.Equal(t, exitInterrupted, code, errOut.String())
	id := regexp.MustCompile(`task ([0-9a-f]{32})`).FindStringSubmatch(out.String())[1]
	require.Contains(t, errOut.String(), "taskbridge: interrupted: task "+id+" is still running on the server")
	code, got, _ := cli(t, "", "-url", url, "tasks", "get", id)
	require.Equal(t, exitOK, code)
	require.Contains(t, got, "working")
}
