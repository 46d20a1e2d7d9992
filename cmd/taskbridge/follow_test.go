package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// arrival is a line a process wrote, with where and when it arrived.
type arrival struct {
	stream string
	line   string
	at     time.Time
}

// arrivals records the lines of a process's stdout and stderr in the order
// they arrive.
type arrivals struct {
	mu    sync.Mutex
	lines []arrival
}

func (a *arrivals) read(stream string, r io.Reader, done *sync.WaitGroup) {
	defer done.Done()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		a.mu.Lock()
		a.lines = append(a.lines, arrival{stream, sc.Text(), time.Now()})
		a.mu.Unlock()
	}
}

// TestCallFollowOnTheBinary: `call generate_report seconds=4 -follow`
// against example 62 prints each section's progress and log line as it
// is written, on stderr (each line starting with "  | "), while the call
// runs: the lines come over seconds, one per section, all before the
// result on stdout, which holds nothing but the call's own lines. With
// -json they are task_event lines on stdout, with the times the server
// wrote them; the first arrives before the last section is written (a
// follow, not a report at the end). No assertion measures a gap in time:
// a busy machine may delay a line or bunch the sections, never reorder
// them.
func TestCallFollowOnTheBinary(t *testing.T) {
	dir := build(t)
	url := startServer(t, filepath.Join(dir, "62_tasks_workflow"), "serve", "-http", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "follow.db"))
	run := func(args ...string) []arrival {
		cmd := exec.Command(filepath.Join(dir, "taskbridge"), append([]string{"-url", url}, args...)...)
		cmd.Env = append(cmd.Environ(), "TASKBRIDGE_HISTORY="+filepath.Join(t.TempDir(), "history"))
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		stderr, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		var a arrivals
		var wg sync.WaitGroup
		wg.Add(2)
		go a.read("stdout", stdout, &wg)
		go a.read("stderr", stderr, &wg)
		wg.Wait()
		require.NoError(t, cmd.Wait())
		return a.lines
	}

	lines := run("call", "generate_report", "topic=live", "seconds=4", "-follow")
	var progress, logs []arrival
	result := -1
	for i, l := range lines {
		switch {
		case l.stream == "stderr" && strings.Contains(l.line, "/4 (") && strings.HasPrefix(l.line, eventPrefix):
			progress = append(progress, l)
		case l.stream == "stderr" && strings.HasPrefix(l.line, eventPrefix+"info: wrote a section of the report"):
			logs = append(logs, l)
		case l.stream == "stdout" && strings.HasPrefix(l.line, "result (task "):
			result = i
		case l.stream == "stdout":
			require.NotContains(t, l.line, eventPrefix, "stdout carries no event line")
		}
	}
	require.Len(t, logs, 4, "%v", lines)
	require.Len(t, progress, 4, "one progress line per second of the report: %v", lines)
	for i, p := range progress {
		require.Equal(t, fmt.Sprintf("%s%d/4 (%d%%) section %d of 4 written", eventPrefix, i+1, 25*(i+1), i+1), p.line)
	}
	require.NotEqual(t, -1, result, "%v", lines)
	require.True(t, lines[result].at.After(logs[3].at) || lines[result].at.Equal(logs[3].at), "every line before the result")

	// -json: task_event lines on stdout, with the times the server wrote
	// them, in order; the first came before the server wrote the last
	// (six sections a second apart: only a client five seconds late
	// could see it otherwise).
	var ats []time.Time
	var firstArrived time.Time
	for _, l := range run("-json", "call", "generate_report", "topic=json", "seconds=6", "-follow") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l.line), &m), "%s: %s", l.stream, l.line)
		if m["event"] == "task_event" && m["type"] == "progress" {
			at, err := time.Parse(time.RFC3339Nano, m["at"].(string))
			require.NoError(t, err)
			if len(ats) == 0 {
				firstArrived = l.at
			}
			ats = append(ats, at)
			require.Equal(t, "stdout", l.stream)
		}
	}
	require.Len(t, ats, 6)
	for i := 1; i < len(ats); i++ {
		require.False(t, ats[i].Before(ats[i-1]), "the sections' times in order: %v", ats)
	}
	require.True(t, firstArrived.Before(ats[len(ats)-1]), "the first section arrived at %v, after the last was written at %v: not followed", firstArrived, ats[len(ats)-1])
}

type loudIn struct {
	Text string `json:"text"`
}

// loudServer serves a workflow whose server step's tool logs as it
// works, then asks the client for a step.
func loudServer(t *testing.T) string {
	t.Helper()
	b := builder.New("loud", "1").WithStore(memory.New(nil)).WithoutEnv().WithRouterOptions(taskrouter.Options{PollInterval: 20 * time.Millisecond})
	builder.Tool(b, &mcp.Tool{Name: "upper"}, func(ctx context.Context, _ *mcp.CallToolRequest, in loudIn) (*mcp.CallToolResult, loudIn, error) {
		taskrouter.Logger(ctx).Info("shouting " + in.Text)
		_ = taskrouter.Progress(ctx, 1, 1, "shouted")
		return nil, loudIn{Text: strings.ToUpper(in.Text)}, nil
	}, nil)
	b.TaskWorkflow(workflow.New("shout", "shout twice").Arg("text", "t", true).Step(
		workflow.Server("one", "upper").Bind("text", workflow.PromptArg("text")),
		workflow.Client("two", "upper").Bind("text", workflow.FromClient("something to shout")),
	))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return clitest.Serve(t, srv.HTTPHandler(nil))
}

// TestPromptFollowPrintsSteps: prompt -follow shows the workflow's steps
// starting and ending and what their tools logged, on stderr: the server
// step's (which ran before the command asked anything), and the client
// step's it performed itself (recorded once the call returned).
func TestPromptFollowPrintsSteps(t *testing.T) {
	useHistory(t)
	url := loudServer(t)
	code, out, errOut := cli(t, "again\n", "-url", url, "prompt", "shout", "text=hi", "-follow")
	require.Equal(t, exitOK, code, errOut)
	var events []string
	for _, l := range strings.Split(errOut, "\n") {
		// (a question answered from a pipe has no newline of its own)
		if _, ev, ok := strings.Cut(l, eventPrefix); ok {
			events = append(events, ev)
		}
	}
	require.Equal(t, []string{
		"step one started", "one: info: shouting hi", "one: 1/1 (100%) shouted", "step one completed",
		`paused: waiting for the client to call tool "upper" for step "two" (with the task id as argument _task_id)`,
		// A client step's attempt is recorded when its call returns; its
		// tool's lines name it all the same.
		"two: info: shouting again", "two: 1/1 (100%) shouted", "step two started", "step two completed",
	}, events, errOut)
	require.NotContains(t, out, eventPrefix)
	require.Contains(t, out, "AGAIN")
}
