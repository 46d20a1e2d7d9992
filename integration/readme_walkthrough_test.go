package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
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
	"github.com/taskbridge/taskbridge/internal/tests/pushtest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/push"
)

// readmeBlock returns the lines of README's code block that follows the
// marker comment naming test.
func readmeBlock(t *testing.T, test string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(raw), "<!-- walkthrough: "+test+" runs this block -->")
	require.True(t, ok, "README has no block marked for %s", test)
	_, after, ok = strings.Cut(after, "```sh\n")
	require.True(t, ok)
	block, _, ok := strings.Cut(after, "\n```")
	require.True(t, ok)
	return strings.Split(block, "\n")
}

// shellWords splits a command line as sh does for the README's lines:
// words apart by spaces, '...' quoting, and a # comment ending it.
func shellWords(line string) (words []string, comment string) {
	var cur strings.Builder
	in, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '\'':
			quoted, in = true, true
		case c == '#' && !in:
			return words, strings.TrimSpace(line[i+1:])
		case c == ' ':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, ""
}

// matches reports whether out holds want, "…" standing for any text and
// TASK for task.
func matches(out, want, task string) bool {
	at := 0
	for _, part := range strings.Split(strings.ReplaceAll(want, "TASK", task), "…") {
		i := strings.Index(out[at:], part)
		if i < 0 {
			return false
		}
		at += i + len(part)
	}
	return true
}

var (
	readmeExit   = regexp.MustCompile(`exit status (\d+)`)
	readmePush   = regexp.MustCompile(`"type":"([a-z_]+)", "status":"([a-z_]+)"`)
	readmeFired  = regexp.MustCompile(`task ([0-9a-f]{32}) started`)
	readmeWaitMs = regexp.MustCompile(`"statusMessage":"(.*?) …"`)
)

// TestREADMEScheduledApproval runs README's walk-through of a scheduled
// workflow that waits for a person, as written: example 62 serves with
// its schedule and a push webhook; the CLI fires the schedule, the push
// arrives (input_required), the CLI answers (the workflow completes,
// pushed), a second run is rejected: it ends failed on every face (the
// CLI's exit status, the push, tasks/get in both dialects, tasks/result,
// the dashboard).
func TestREADMEScheduledApproval(t *testing.T) {
	lines := readmeBlock(t, "TestREADMEScheduledApproval")
	server := exampleBinary(t, "./examples/62_tasks_workflow")
	cli := exampleBinary(t, "./cmd/taskbridge")
	rc := pushtest.New(t)
	secret := push.NewSecret()
	addr := crashFreeAddr(t)
	base := "http://" + addr
	subst := func(w string) string {
		w = strings.ReplaceAll(w, "http://127.0.0.1:9000/in", rc.URL)
		return strings.ReplaceAll(w, "127.0.0.1:8080", addr)
	}
	deliveries := func(task string) []*push.Delivery {
		var out []*push.Delivery
		for _, r := range rc.Got() {
			if d := pushtest.Verified(t, secret, r); d.Task.TaskID == task {
				out = append(out, d)
			}
		}
		return out
	}
	waitPush := func(task, typ, status string) *push.Delivery {
		t.Helper()
		var got []*push.Delivery
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			got = deliveries(task)
			for _, d := range got {
				if string(d.Type) == typ && string(d.Task.Status) == status {
					return d
				}
			}
		}
		t.Fatalf("no push %s/%s of task %s; got %d deliveries", typ, status, task, len(got))
		return nil
	}

	var task, out string
	var exit int
	ran := 0
	for _, line := range lines {
		switch {
		case strings.HasPrefix(line, "$ go run ./examples/62_tasks_workflow "):
			words, _ := shellWords(strings.TrimPrefix(line, "$ go run ./examples/62_tasks_workflow "))
			for i := range words {
				words[i] = subst(words[i])
			}
			for i, w := range words {
				if w == "-http" {
					words[i+1] = "ADDR"
				}
			}
			startProcAt(t, addr, server, []string{"TASKBRIDGE_PUSH_SECRET=" + secret}, words...)
		case strings.HasPrefix(line, "$ taskbridge "):
			words, _ := shellWords(strings.TrimPrefix(line, "$ taskbridge "))
			for i := range words {
				words[i] = subst(strings.ReplaceAll(words[i], "TASK", task))
			}
			cmd := exec.Command(cli, words...)
			cmd.Env = append(os.Environ(), "TASKBRIDGE_HISTORY=off")
			var buf bytes.Buffer
			cmd.Stdout, cmd.Stderr = &buf, &buf
			err := cmd.Run()
			exit = 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				exit = ee.ExitCode()
			} else {
				require.NoError(t, err)
			}
			out = buf.String()
			if m := readmeFired.FindStringSubmatch(out); m != nil {
				task = m[1] // the run the next lines are about
			}
			ran++
		case strings.HasPrefix(line, "# "):
			if m := readmeExit.FindStringSubmatch(line); m != nil {
				want, _ := strconv.Atoi(m[1])
				require.Equal(t, want, exit, "%s\n%s", line, out)
			}
			if m := readmePush.FindStringSubmatch(line); m != nil {
				d := waitPush(task, m[1], m[2])
				if w := readmeWaitMs.FindStringSubmatch(line); w != nil {
					var msg string
					require.NoError(t, json.Unmarshal([]byte(`"`+w[1]+`"`), &msg))
					require.True(t, strings.HasPrefix(d.Task.StatusMessage, msg), "%q", d.Task.StatusMessage)
				}
			}
		case strings.TrimSpace(line) != "":
			require.True(t, matches(out, strings.TrimSpace(line), task), "the README says %q; the command printed:\n%s", line, out)
		}
	}
	require.Equal(t, 5, ran, "every command of the block ran")

	// The rejected run (the last task) on the faces the block names.
	var core mcptask.CoreTask
	require.NoError(t, coreConnAs(t, base+"/mcp", nil, "ops-token").Call(relCtx(t, time.Minute), "tasks/get", map[string]any{"taskId": task}, &core))
	require.Equal(t, mcptask.StatusFailed, core.Status)
	ext := newRelClient(base+"/mcp", newRelHTTPClient(2), relExt, "ops-token").must(t, relCtx(t, time.Minute), "tasks/get", map[string]any{"taskId": task})
	require.Equal(t, "completed", ext["status"], "the extension keeps failed for JSON-RPC errors")
	require.Equal(t, true, ext["result"].(map[string]any)["isError"])
	req, err := http.NewRequest(http.MethodGet, base+"/dashboard/tasks/"+task, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer admin-token")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(page), `<span class="badge s-failed">failed</span>`)
	require.Contains(t, string(page), "Result (isError: the work failed)")
}
