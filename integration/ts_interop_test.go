package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/examples/conformance/conftools"
	"github.com/taskbridge/taskbridge/store/bboltstore"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// tsStep is one JSON line printed by node/ts-core-client.mjs.
type tsStep map[string]any

// TestTypeScriptCoreClient lets the official TypeScript SDK 1.x client
// (client.experimental.tasks, @modelcontextprotocol/sdk 1.32.2) drive the
// conformance tools over Streamable HTTP in the 2025-11-25 core-tasks
// dialect, and checks every step as the TS client sees it.
func TestTypeScriptCoreClient(t *testing.T) {
	nodeModules(t)
	script, err := filepath.Abs(filepath.Join("node", "ts-core-client.mjs"))
	require.NoError(t, err)

	url := startConformanceServer(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", nodeArgs(t, script, url)...)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(), "TS_WIRE_LOG=1") // HTTP bodies on stderr, shown on failure
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	runErr := cmd.Run()
	t.Logf("TypeScript client ran for %s", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("TypeScript client stdout:\n%s", stdout.String())
			t.Logf("TypeScript client stderr (wire log):\n%s", stderr.String())
		}
	})
	require.NoError(t, ctx.Err(), "TypeScript client timed out")

	steps := map[string]tsStep{}
	sc := bufio.NewScanner(bytes.NewReader(stdout.Bytes()))
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var s tsStep
		require.NoError(t, json.Unmarshal([]byte(line), &s), "not a JSON step line: %s", line)
		name, _ := s["step"].(string)
		require.NotEmpty(t, name, "step line without a name: %s", line)
		steps[name] = s
	}
	require.NoError(t, sc.Err())
	require.NotContains(t, steps, "watchdog", "TypeScript client hung")
	require.NoError(t, runErr, "TypeScript client exited with an error")

	hexID := regexp.MustCompile(`^[0-9a-f]{32}$`)

	t.Run("connect", func(t *testing.T) {
		s := mustStep(t, steps, "connect")
		require.Equal(t, "2025-11-25", s.str("protocolVersion"), s)
		require.NotEmpty(t, s.str("sessionId"), "a 2025-11-25 client gets a stateful session: %v", s)
		tasks := s.obj("serverCapabilities.tasks")
		require.NotNil(t, tasks, "no tasks capability: %v", s)
		require.NotNil(t, s.get("serverCapabilities.tasks.list"), s)
		require.NotNil(t, s.get("serverCapabilities.tasks.cancel"), s)
		require.NotNil(t, s.get("serverCapabilities.tasks.requests.tools.call"), s)
	})

	t.Run("listTools", func(t *testing.T) {
		s := mustStep(t, steps, "listTools")
		want := map[string]string{
			"greet":               "forbidden",
			"slow_compute":        "optional",
			"failing_job":         "required",
			"protocol_error_job":  "required",
			"confirm_delete":      "required",
			"multi_input":         "required",
			"test_tool_with_task": "required",
		}
		for name, support := range want {
			require.Equal(t, support, s.get("taskSupport."+name), "taskSupport of %s: %v", name, s)
			require.Equal(t, support != "forbidden", s.get("isToolTask."+name), "client.isToolTask(%s): %v", name, s)
		}
	})

	t.Run("streamOptional", func(t *testing.T) {
		s := mustStep(t, steps, "streamOptional")
		types := s.strs("types")
		require.GreaterOrEqual(t, len(types), 2, s)
		require.Equal(t, "taskCreated", types[0], "first message: %v", s)
		require.Equal(t, "result", types[len(types)-1], "last message: %v", s)
		for _, ty := range types[1 : len(types)-1] {
			require.Equal(t, "taskStatus", ty, s)
		}
		require.Regexp(t, hexID, s.str("taskId"), s)
		require.Equal(t, "working", s.get("createdTask.status"), s)
		require.Equal(t, 60000.0, s.get("createdTask.ttl"), "requested ttl reported back: %v", s)
		require.Equal(t, false, s.get("isError"), s)
		require.Equal(t, `Computation "ts" completed after 1 seconds. Result: 42.`, s.str("text"), s)
		require.Equal(t, s.str("taskId"), s.get("result._meta.io\\.modelcontextprotocol/related-task.taskId"), s)
	})

	t.Run("streamFailing", func(t *testing.T) {
		s := mustStep(t, steps, "streamFailing")
		types := s.strs("types")
		require.NotEmpty(t, types, s)
		require.Equal(t, "taskCreated", types[0], "callToolStream must create a task for a required tool: %v", s)
		id := s.str("taskId")
		require.Regexp(t, hexID, id, s)
		// The stream itself: TS SDK 1.32.2 requestStream() never calls
		// tasks/result for a failed task; it ends the stream with its own
		// McpError(-32603, "Task <id> failed") (shared/protocol.js).
		require.Equal(t, "error", s.str("finalType"), s)
		require.Equal(t, -32603.0, s.get("finalError.code"), s)
		// The isError tool result reaches the TS client through the task API.
		require.Equal(t, "failed", s.get("taskAfter.status"), s)
		require.Equal(t, "simulated failure: job crashed", s.get("taskAfter.statusMessage"), s)
		require.Nil(t, s.get("taskResultError"), s)
		require.Equal(t, true, s.get("taskResult.isError"), "tasks/result must return the isError CallToolResult: %v", s)
		require.Equal(t, "simulated failure: job crashed", s.get("taskResult.text"), s)
		require.Equal(t, id, s.get("taskResult.meta.io\\.modelcontextprotocol/related-task.taskId"), s)
	})

	t.Run("streamBadArguments", func(t *testing.T) {
		s := mustStep(t, steps, "streamBadArguments")
		require.Equal(t, "error", s.str("finalType"), s)
		require.Equal(t, -32602.0, s.get("finalError.code"), s)
		require.Contains(t, s.get("finalError.message"), `invalid arguments for tool "slow_compute"`, s)
		require.Empty(t, s.get("taskId"), "no task for bad arguments: %v", s)
	})
	t.Run("streamProtocolError", func(t *testing.T) {
		s := mustStep(t, steps, "streamProtocolError")
		types := s.strs("types")
		require.NotEmpty(t, types, s)
		require.Equal(t, "taskCreated", types[0], s)
		require.Equal(t, "error", s.str("finalType"), s)
		require.Equal(t, -32603.0, s.get("finalError.code"), s)
		require.Equal(t, "failed", s.get("taskAfter.status"), s)
		require.Equal(t, "internal error: simulated protocol error: server internal failure", s.get("taskAfter.statusMessage"), s)
		// tasks/result replays the real JSON-RPC error.
		require.Nil(t, s.get("taskResult"), "tasks/result returned a result instead of the error: %v", s)
		require.Equal(t, -32603.0, s.get("taskResultError.code"), s)
		require.Contains(t, s.get("taskResultError.error"), "internal error: simulated protocol error: server internal failure", s)
	})

	t.Run("getTask", func(t *testing.T) {
		s := mustStep(t, steps, "getTask")
		require.Equal(t, mustStep(t, steps, "streamOptional").str("taskId"), s.get("task.taskId"), s)
		require.Equal(t, "completed", s.get("task.status"), s)
		require.Equal(t, true, s.get("hasTtl"), s)
		require.Equal(t, 60000.0, s.get("task.ttl"), s)
		require.Equal(t, 1000.0, s.get("task.pollInterval"), s)
		require.NotEmpty(t, s.get("task.createdAt"), s)
		require.NotEmpty(t, s.get("task.lastUpdatedAt"), s)
	})

	t.Run("getTaskResult", func(t *testing.T) {
		s := mustStep(t, steps, "getTaskResult")
		require.Equal(t, `Computation "ts" completed after 1 seconds. Result: 42.`, s.str("text"), s)
		require.Equal(t, false, s.get("isError"), s)
		require.Equal(t, mustStep(t, steps, "streamOptional").str("taskId"), s.get("meta.io\\.modelcontextprotocol/related-task.taskId"), s)
	})

	t.Run("listTasks", func(t *testing.T) {
		s := mustStep(t, steps, "listTasks")
		require.Equal(t, 60.0, s.get("created"), s)
		require.Greater(t, s.get("pages"), 1.0, "60+ tasks must span more than one page: %v", s)
		require.Equal(t, 50.0, s.get("pageSizes.0"), "first page: %v", s)
		require.Equal(t, true, s.get("endedWithoutCursor"), s)
		require.Equal(t, 0.0, s.get("duplicates"), s)
		require.Equal(t, true, s.get("allCreatedSeen"), "missing: %v", s.get("missing"))
		require.GreaterOrEqual(t, s.get("total"), 60.0, s)
	})

	t.Run("listTasksBadCursor", func(t *testing.T) {
		s := mustFailStep(t, steps, "listTasksBadCursor")
		require.Equal(t, -32602.0, s.get("code"), s)
	})

	t.Run("cancel", func(t *testing.T) {
		s := mustStep(t, steps, "cancel")
		require.Equal(t, "working", s.get("createdStatus"), s)
		require.Equal(t, "cancelled", s.get("cancelStatus"), s)
		require.Equal(t, "cancelled", s.get("statusAfter"), s)
		require.Nil(t, s.get("secondCancel"), "second cancel succeeded: %v", s)
		require.Equal(t, -32602.0, s.get("secondCancelError.code"), s)
	})

	t.Run("getUnknown", func(t *testing.T) {
		s := mustFailStep(t, steps, "getUnknown")
		require.Equal(t, -32602.0, s.get("code"), s)
	})

	t.Run("streamElicitation", func(t *testing.T) {
		s := mustStep(t, steps, "streamElicitation")
		types := s.strs("types")
		require.NotEmpty(t, types, s)
		require.Equal(t, "taskCreated", types[0], s)
		require.Equal(t, "result", types[len(types)-1], s)
		require.Contains(t, s.strs("statuses"), "input_required", s)
		require.Equal(t, "deleted 'a.txt'", s.str("text"), s)
		require.Equal(t, "Delete 'a.txt'?", s.get("elicitations.0.message"), s)
		require.Equal(t, s.str("taskId"), s.get("elicitations.0.meta.io\\.modelcontextprotocol/related-task.taskId"), s)
	})
}

// startConformanceServer serves the conformance tools, backed by bbolt,
// over Streamable HTTP on 127.0.0.1 and returns the endpoint URL.
func startConformanceServer(t *testing.T) string {
	t.Helper()
	st, err := bboltstore.Open(filepath.Join(t.TempDir(), "tasks.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	_, router, err := conftools.NewServer(st, &taskrouter.Options{PollInterval: time.Second, DefaultTTL: 5 * time.Minute})
	require.NoError(t, err)
	require.NoError(t, router.Start(context.Background()))
	t.Cleanup(func() { _ = router.Close() })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/mcp", router.HTTPHandler(nil))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String() + "/mcp"
}

func mustStep(t *testing.T, steps map[string]tsStep, name string) tsStep {
	t.Helper()
	s, ok := steps[name]
	require.True(t, ok, "step %q did not report", name)
	require.Equal(t, true, s["ok"], "step %q failed: %v", name, s)
	return s
}

// mustFailStep returns a step that is expected to end in a JSON-RPC error.
func mustFailStep(t *testing.T, steps map[string]tsStep, name string) tsStep {
	t.Helper()
	s, ok := steps[name]
	require.True(t, ok, "step %q did not report", name)
	require.Equal(t, false, s["ok"], "step %q unexpectedly succeeded: %v", name, s)
	return s
}

// get walks a dotted path ("a.b.0.c"; a literal dot is written "\.").
func (s tsStep) get(path string) any {
	var cur any = map[string]any(s)
	for _, key := range splitPath(path) {
		switch v := cur.(type) {
		case map[string]any:
			cur = v[key]
		case []any:
			i := -1
			for j := range v {
				if key == strconv.Itoa(j) {
					i = j
				}
			}
			if i < 0 {
				return nil
			}
			cur = v[i]
		default:
			return nil
		}
	}
	return cur
}

func (s tsStep) str(path string) string {
	v, _ := s.get(path).(string)
	return v
}

func (s tsStep) obj(path string) map[string]any {
	v, _ := s.get(path).(map[string]any)
	return v
}

func (s tsStep) strs(path string) []string {
	var out []string
	arr, _ := s.get(path).([]any)
	for _, v := range arr {
		str, _ := v.(string)
		out = append(out, str)
	}
	return out
}

func splitPath(path string) []string {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(path); i++ {
		switch {
		case path[i] == '\\' && i+1 < len(path):
			i++
			cur.WriteByte(path[i])
		case path[i] == '.':
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(path[i])
		}
	}
	return append(parts, cur.String())
}
