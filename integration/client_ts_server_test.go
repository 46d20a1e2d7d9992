package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/client"
)

// lockedBuffer is a bytes.Buffer safe for a writer process and a reading
// test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startTSTaskServer runs node/ts-task-server.mjs (the TypeScript SDK's own
// task server) and returns its endpoint and its stderr (the wire log).
func startTSTaskServer(t *testing.T) (string, *lockedBuffer) {
	t.Helper()
	nodeModules(t)
	script, err := filepath.Abs(filepath.Join("node", "ts-task-server.mjs"))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "node", nodeArgs(t, script)...)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(), "TS_WIRE_LOG=1", "TS_POLL_MS=200")
	cmd.WaitDelay = 5 * time.Second
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() || os.Getenv("TS_DUMP_WIRE") != "" {
			t.Logf("TypeScript task server stderr (wire log):\n%s", stderr.String())
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = bufio.NewReader(stdout).WriteTo(bufioDiscard{})
	}()
	select {
	case line, ok := <-lines:
		require.True(t, ok, "the TypeScript server exited before listening: %s", stderr.String())
		var hello struct {
			Port int `json:"port"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &hello), "first line: %s", line)
		require.NotZero(t, hello.Port)
		return fmt.Sprintf("http://127.0.0.1:%d/mcp", hello.Port), stderr
	case <-time.After(30 * time.Second):
		t.Fatalf("the TypeScript server did not start: %s", stderr.String())
	}
	return "", nil
}

type bufioDiscard struct{}

func (bufioDiscard) Write(p []byte) (int, error) { return len(p), nil }

func tsText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// TestClientAgainstTypeScriptTaskServer runs taskbridge's Go client against
// a task server built only from the TypeScript SDK 1.32.2
// (McpServer + InMemoryTaskStore + registerToolTask), over Streamable HTTP
// in Auto mode: the server does not answer server/discover, so the client
// initializes at 2025-11-25 and speaks core tasks.
func TestClientAgainstTypeScriptTaskServer(t *testing.T) {
	url, wire := startTSTaskServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	var asked []string
	var askedMu sync.Mutex
	c, err := client.Dial(ctx, client.HTTPTransport(url, nil), &client.Options{
		InputHandler: func(ctx context.Context, taskID string, req client.InputRequest) (json.RawMessage, error) {
			p, err := req.Elicitation()
			if err != nil {
				return nil, err
			}
			askedMu.Lock()
			asked = append(asked, taskID+": "+p.Message)
			askedMu.Unlock()
			return json.Marshal(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}})
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	t.Run("dial", func(t *testing.T) {
		require.Equal(t, mcptask.Core, c.Dialect())
		require.Equal(t, mcptask.CoreVersion, c.ProtocolVersion())
		require.Equal(t, client.Support{Core: true, List: true, Cancel: true, ToolsCall: true}, c.ServerTasks())
		require.Equal(t, "ts-task-server", c.ServerInfo().Name)
		// Wire evidence: server/discover was refused (no session), then
		// initialize.
		require.Eventually(t, func() bool {
			w := wire.String()
			return strings.Contains(w, `"method":"server/discover"`) && strings.Contains(w, "No valid session ID provided")
		}, 30*time.Second, 10*time.Millisecond, "the server/discover probe and its refusal are in the wire log")
	})

	t.Run("tools", func(t *testing.T) {
		tools, err := c.Tools(ctx)
		require.NoError(t, err)
		got := map[string]mcptask.TaskSupport{}
		for _, tl := range tools {
			got[tl.Name] = tl.TaskSupport
		}
		require.Equal(t, map[string]mcptask.TaskSupport{
			"slow": mcptask.TaskOptional, "fail": mcptask.TaskRequired, "confirm": mcptask.TaskRequired, "echo": mcptask.TaskForbidden,
		}, got)
	})

	var slowID string
	t.Run("callTool", func(t *testing.T) {
		var events []client.Event
		for ev, err := range c.CallTool(ctx, "slow", map[string]any{"ms": 300, "label": "a"}, &client.CallOptions{TTL: time.Minute}) {
			require.NoError(t, err)
			events = append(events, ev)
		}
		require.GreaterOrEqual(t, len(events), 3)
		created := events[0]
		require.Equal(t, client.EventCreated, created.Kind)
		slowID = created.Task.ID
		require.Len(t, slowID, 32)
		require.Equal(t, mcptask.StatusWorking, created.Task.Status)
		require.Equal(t, time.Minute, *created.Task.TTL)
		require.Equal(t, 200*time.Millisecond, created.Task.PollInterval)
		last := events[len(events)-1]
		require.Equal(t, client.EventResult, last.Kind)
		require.Equal(t, "slow a done after 300ms", tsText(last.Result))
		require.Equal(t, mcptask.StatusCompleted, last.Task.Status)
		rt, ok := last.Result.Meta["io.modelcontextprotocol/related-task"].(map[string]any)
		require.True(t, ok, "tasks/result carries the related-task _meta: %v", last.Result.Meta)
		require.Equal(t, slowID, rt["taskId"])
	})

	t.Run("getTask", func(t *testing.T) {
		task, err := c.GetTask(ctx, slowID)
		require.NoError(t, err)
		require.Equal(t, mcptask.StatusCompleted, task.Status)
		require.Equal(t, time.Minute, *task.TTL)
		require.False(t, task.CreatedAt.IsZero())
		require.True(t, !task.LastUpdatedAt.Before(task.CreatedAt))
	})

	t.Run("taskResult", func(t *testing.T) {
		raw, err := c.TaskResult(ctx, slowID)
		require.NoError(t, err)
		var res mcp.CallToolResult
		require.NoError(t, json.Unmarshal(raw, &res))
		require.Equal(t, "slow a done after 300ms", tsText(&res))

		// The TS server's tasks/result wakes up by sleeping the task's
		// pollInterval (200ms here), so a result is seen up to one interval
		// late; ours is woken by the status change. (Logged, not asserted:
		// timing is the bench's business.)
		id := startTSTask(t, ctx, c, "slow", map[string]any{"ms": 50})
		start := time.Now()
		raw, err = c.TaskResult(ctx, id)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &res))
		require.Equal(t, "slow task done after 50ms", tsText(&res))
		t.Logf("tasks/result for a 50ms task returned after %s (the TS server polls its store every 200ms)", time.Since(start).Round(time.Millisecond))
	})

	t.Run("failedTool", func(t *testing.T) {
		var statuses []mcptask.Status
		var res *mcp.CallToolResult
		for ev, err := range c.CallTool(ctx, "fail", nil, nil) {
			require.NoError(t, err)
			if ev.Kind == client.EventStatus {
				statuses = append(statuses, ev.Task.Status)
			}
			if ev.Kind == client.EventResult {
				res = ev.Result
			}
		}
		require.NotNil(t, res)
		require.True(t, res.IsError)
		require.Equal(t, "it broke", tsText(res))
		require.Equal(t, []mcptask.Status{mcptask.StatusFailed}, statuses)
	})

	t.Run("elicitation", func(t *testing.T) {
		var sawInput, sawInputRequired bool
		var res *mcp.CallToolResult
		var id string
		for ev, err := range c.CallTool(ctx, "confirm", map[string]any{"filename": "a.txt"}, nil) {
			require.NoError(t, err)
			switch ev.Kind {
			case client.EventCreated:
				id = ev.Task.ID
				// The TS store hands back the live task object, so the
				// CreateTaskResult already shows the status the work set
				// before the reply was written (input_required).
				sawInputRequired = ev.Task.Status == mcptask.StatusInputRequired
			case client.EventInput:
				sawInput = true
			case client.EventStatus:
				sawInputRequired = sawInputRequired || ev.Task.Status == mcptask.StatusInputRequired
			case client.EventResult:
				res = ev.Result
			}
		}
		require.NotNil(t, res)
		require.Equal(t, "deleted 'a.txt'", tsText(res))
		require.True(t, sawInput, "the elicitation arrived on the tasks/result stream")
		require.True(t, sawInputRequired)
		askedMu.Lock()
		require.Equal(t, []string{id + ": Delete 'a.txt'?"}, asked)
		askedMu.Unlock()
	})

	t.Run("listTasks", func(t *testing.T) {
		created := map[string]bool{}
		for range 12 {
			created[startTSTask(t, ctx, c, "slow", map[string]any{"ms": 0})] = true
		}
		seen := map[string]bool{}
		for task, err := range c.ListTasks(ctx) {
			require.NoError(t, err)
			require.False(t, seen[task.ID], "listed twice: %s", task.ID)
			seen[task.ID] = true
		}
		for id := range created {
			require.True(t, seen[id], "task %s not listed", id)
		}
		// The TS store pages by 10: the 12 tasks needed more than one page.
		// The wire log is the server's stderr, which arrives through a pipe
		// after the replies: wait for it rather than race it.
		require.Eventually(t, func() bool {
			return strings.Count(wire.String(), `"method":"tasks/list"`) >= 2
		}, 30*time.Second, 10*time.Millisecond, "tasks/list was sent once: the listing did not page")
	})

	t.Run("cancel", func(t *testing.T) {
		id := startTSTask(t, ctx, c, "slow", map[string]any{"ms": 700, "label": "doomed"})
		task, err := c.CancelTask(ctx, id)
		require.NoError(t, err)
		require.Equal(t, mcptask.StatusCancelled, task.Status)
		require.Equal(t, "Client cancelled task execution.", task.StatusMessage)

		_, err = c.CancelTask(ctx, id)
		require.ErrorIs(t, err, client.ErrTerminal)
		var re *client.RPCError
		require.ErrorAs(t, err, &re)
		require.EqualValues(t, -32602, re.Code)
		require.Contains(t, re.Message, "Cannot cancel task in terminal status")

		// tasks/result of a cancelled task: the TS server has no stored
		// result and answers an internal error; the client reports
		// ErrCancelled because tasks/get says cancelled.
		_, err = c.TaskResult(ctx, id)
		require.ErrorIs(t, err, client.ErrCancelled)
		require.Contains(t, err.Error(), "has no result stored")

		// Cancel does not stop the work: it runs on and its late result is
		// refused by the store.
		require.Eventually(t, func() bool {
			return strings.Contains(wire.String(), "task "+id+": work ended after the task was already terminal")
		}, 30*time.Second, 20*time.Millisecond)
	})

	t.Run("errors", func(t *testing.T) {
		_, err := c.GetTask(ctx, "0123456789abcdef0123456789abcdef")
		require.ErrorIs(t, err, client.ErrNotFound)
		_, err = c.CancelTask(ctx, "0123456789abcdef0123456789abcdef")
		require.ErrorIs(t, err, client.ErrNotFound)

		for _, err := range c.CallTool(ctx, "echo", map[string]any{"text": "x"}, nil) {
			require.ErrorIs(t, err, client.ErrCapability)
		}
		res, err := c.CallToolAndWait(ctx, "echo", map[string]any{"text": "plain"}, &client.CallOptions{AllowPlain: true})
		require.NoError(t, err)
		require.Equal(t, "plain", tsText(res))
	})
}

func startTSTask(t *testing.T, ctx context.Context, c *client.Client, name string, args any) string {
	t.Helper()
	for ev, err := range c.CallTool(ctx, name, args, nil) {
		require.NoError(t, err)
		require.Equal(t, client.EventCreated, ev.Kind)
		return ev.Task.ID
	}
	t.Fatal("no task created")
	return ""
}
