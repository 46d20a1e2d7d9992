package integration

// Owners and durability for every client: without authentication the task
// id is the capability, so a client that reconnects, or finds the server
// restarted, reads its tasks back by id; with bearer tokens, one user's
// tasks stay invisible to another in every method, both dialects, across
// restarts; and one anonymous client cannot fill the server for everyone.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
)

var (
	binMu    sync.Mutex
	binCache = map[string]string{}
	binDir   string
)

// exampleBinary builds an example's main package once per test binary.
func exampleBinary(t *testing.T, pkg string) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if bin, ok := binCache[pkg]; ok {
		return bin
	}
	if binDir == "" {
		d, err := os.MkdirTemp("", "taskbridge-it-bin-")
		require.NoError(t, err)
		binDir = d
	}
	bin := filepath.Join(binDir, filepath.Base(pkg))
	args := []string{"build", "-o", bin}
	if relRace {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, pkg)...)
	build.Dir = ".."
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build %s: %s", pkg, out)
	binCache[pkg] = bin
	return bin
}

// proc is a server process on a fixed store file.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	exited chan struct{}
	log    lockedBuffer
}

// startProc runs bin with args (ADDR in args is replaced by a free
// loopback address), in a directory of its own, and waits until it
// accepts connections.
func startProc(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	return startProcAt(t, crashFreeAddr(t), bin, env, args...)
}

// startProcAt is startProc with ADDR replaced by addr (a process started
// again on the address of one killed, say).
func startProcAt(t *testing.T, addr, bin string, env []string, args ...string) *proc {
	t.Helper()
	full := make([]string, len(args))
	for i, a := range args {
		if a == "ADDR" {
			a = addr
		}
		full[i] = a
	}
	p := &proc{t: t, url: "http://" + addr + "/mcp", exited: make(chan struct{})}
	p.cmd = exec.Command(bin, full...)
	p.cmd.Dir = t.TempDir() // a default path (the README's commands name none) stays out of the source tree
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.kill)
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited: %s", bin, p.log.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "%s did not start: %s", bin, p.log.String())
		time.Sleep(20 * time.Millisecond)
	}
}

// kill SIGKILLs the process and waits for it to be gone.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// runTS runs a node script and returns its step lines by name.
func runTS(t *testing.T, script string, args ...string) map[string]map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", nodeArgs(t, script, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	steps := map[string]map[string]any{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		steps[m["step"].(string)] = m
	}
	require.NotContains(t, steps, "watchdog", "%s", out)
	return steps
}

// TestTypeScriptAnonymousTasksSurviveReconnectAndRestart: the TypeScript
// SDK client, core dialect, no authentication (its default) creates a task,
// closes its session, and reads the task back by id from a new session; the
// same after the server process is SIGKILLed and restarted on the same
// file. tasks/list shows only the new session's own tasks (none).
func TestTypeScriptAnonymousTasksSurviveReconnectAndRestart(t *testing.T) {
	modules := nodeModules(t)
	script := filepath.Join(modules, "..", "ts-reconnect.mjs")
	bin := exampleBinary(t, "./examples/conformance")
	db := filepath.Join(t.TempDir(), "tasks.db")
	srv := startProc(t, bin, nil, "-http", "ADDR", "-db", db)

	created := runTS(t, script, srv.url, "create", "0.2")
	require.Equal(t, true, created["create"]["ok"], "%v", created)
	quick := created["create"]["taskId"].(string)
	firstSession := created["create"]["sessionId"].(string)

	read := runTS(t, script, srv.url, "read", quick)
	for _, s := range []string{"getTask", "getTaskResult", "listTasks"} {
		require.Equal(t, true, read[s]["ok"], "%s from a new session: %v", s, read[s])
	}
	require.NotEqual(t, firstSession, read["getTask"]["sessionId"], "a new session")
	require.Equal(t, "completed", read["getTask"]["status"])
	require.Equal(t, `Computation "reconnect" completed after 0.2 seconds. Result: 42.`, read["getTaskResult"]["text"])
	require.Equal(t, quick, read["getTaskResult"]["relatedTask"])
	require.Empty(t, read["listTasks"]["ids"], "tasks/list shows this session's tasks only")

	// A task still running when the server is killed (slow_compute is
	// retryable: it runs again after the restart).
	created = runTS(t, script, srv.url, "create", "1")
	slow := created["create"]["taskId"].(string)
	srv.kill()
	srv = startProc(t, bin, nil, "-http", "ADDR", "-db", db)
	for _, id := range []string{quick, slow} {
		read = runTS(t, script, srv.url, "read", id)
		require.Equal(t, true, read["getTask"]["ok"], "after a restart: %v", read["getTask"])
		require.Equal(t, true, read["getTaskResult"]["ok"], "after a restart: %v", read["getTaskResult"])
		require.Equal(t, id, read["getTaskResult"]["relatedTask"])
		require.Contains(t, read["getTaskResult"]["text"], "Result: 42.")
	}
}

// TestTokenOwnersAcrossRestarts: example 62 with two bearer tokens. Alice's
// tool task and workflow task are not found for Bob in any method, in both
// dialects, before and after a SIGKILL and restart; Alice still reaches
// them.
func TestTokenOwnersAcrossRestarts(t *testing.T) {
	bin := exampleBinary(t, "./examples/62_tasks_workflow")
	db := filepath.Join(t.TempDir(), "tasks.db")
	env := []string{"TASKBRIDGE_TOKENS=tok-a=alice,tok-b=bob"}
	srv := startProc(t, bin, env, "serve", "-http", "ADDR", "-db", db)
	ctx := relCtx(t, 2*time.Minute)
	hc := newRelHTTPClient(4)

	aliceCore := newRelClient(srv.url, hc, relCore, "tok-a")
	require.NoError(t, aliceCore.initialize(ctx))
	tool := relTaskID(aliceCore.must(t, ctx, "tools/call", map[string]any{"name": "generate_report", "arguments": map[string]any{"topic": "x"}, "task": map[string]any{}}))
	require.NotEmpty(t, tool)
	wf := relHandoff(t, aliceCore.must(t, ctx, "prompts/get", map[string]any{"name": "release_notes", "arguments": map[string]any{"repo": "r"}})).TaskID

	check := func(url string) {
		t.Helper()
		for _, d := range []relDialect{relCore, relExt} {
			bob := newRelClient(url, hc, d, "tok-b")
			alice := newRelClient(url, hc, d, "tok-a")
			if d == relCore {
				require.NoError(t, bob.initialize(ctx))
				require.NoError(t, alice.initialize(ctx))
			}
			methods := []string{"tasks/get", "tasks/cancel"}
			if d == relCore {
				methods = append(methods, "tasks/result")
			}
			for _, id := range []string{tool, wf} {
				for _, m := range methods {
					rep, err := bob.call(ctx, m, map[string]any{"taskId": id})
					require.NoError(t, err)
					require.NotNil(t, rep.Err, "%s %s of alice's task by bob (%s): %v", d, m, id, rep)
					require.EqualValues(t, mcptask.CodeInvalidParams, rep.Err.Code)
				}
				got := alice.must(t, ctx, "tasks/get", map[string]any{"taskId": id})
				require.Equal(t, id, got["taskId"], "alice reads her task (%s)", d)
			}
			rep, err := bob.call(ctx, "tools/call", map[string]any{"name": "review_notes", "arguments": map[string]any{"draft": "d", "feedback": "f", "approved": true},
				"_meta": map[string]any{"_task_id": wf}})
			require.NoError(t, err)
			require.NotNil(t, rep.Err, "bob continues alice's workflow (%s)", d)
			require.Contains(t, rep.Err.Message, "unknown workflow task")
			rep, err = bob.call(ctx, "prompts/get", map[string]any{"name": "release_notes", "_meta": map[string]any{"_task_id": wf}})
			require.NoError(t, err)
			require.NotNil(t, rep.Err, "bob resumes alice's workflow (%s)", d)
			if d == relCore {
				list := bob.must(t, ctx, "tasks/list", map[string]any{})
				require.Empty(t, list["tasks"])
			}
		}
	}
	check(srv.url)
	srv.kill()
	srv = startProc(t, bin, env, "serve", "-http", "ADDR", "-db", db)
	check(srv.url)
	// Alice lists her tasks from a brand-new session after the restart.
	again := newRelClient(srv.url, hc, relCore, "tok-a")
	require.NoError(t, again.initialize(ctx))
	list := again.must(t, ctx, "tasks/list", map[string]any{})
	require.Len(t, list["tasks"], 2)
	// And she finishes her workflow.
	rep := again.must(t, ctx, "tools/call", map[string]any{"name": "review_notes", "arguments": map[string]any{"draft": "d", "feedback": "f", "approved": true},
		"_meta": map[string]any{"_task_id": wf}})
	require.Equal(t, "completed", rep["_meta"].(map[string]any)[mcptask.MetaWorkflow].(map[string]any)["status"])
}

// TestStatelessFloodIsBoundedPerAddress: stateless (extension) requests
// from one address are capped; a client from another address still gets
// its tasks created.
func TestStatelessFloodIsBoundedPerAddress(t *testing.T) {
	s := newRelServer(t, relServerOptions{cfg: taskrouter.Options{MaxPendingPerSource: 4}})
	ctx := relCtx(t, time.Minute)
	flood := newRelClient(s.url, newRelHTTPClient(4), relExt, "")
	refused := 0
	for i := range 10 {
		rep, err := flood.call(ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"label": fmt.Sprint("f", i), "ms": 60000}})
		require.NoError(t, err)
		if rep.Err != nil {
			require.EqualValues(t, mcptask.CodeTooManyTasks, rep.Err.Code)
			require.Contains(t, rep.Err.Message, "from this address")
			refused++
		}
	}
	require.Equal(t, 6, refused)
	// Another address (127.0.0.2 is loopback too on Linux).
	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	rep, err := newRelClient(s.url, other, relExt, "").call(ctx, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{"label": "other", "ms": 1}})
	require.NoError(t, err)
	require.Nil(t, rep.Err, "another address is not refused: %v", rep)
	require.NotEmpty(t, relTaskID(rep.Map()))
}
