package main

// End-to-end tests of `taskbridge ui`: the real taskbridge binary in a
// tmux session of a fixed 80x24 size, against the real example servers
// (example 62 over HTTP and over stdio, the conformance server over HTTP),
// driven with send-keys and read with capture-pane.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/cmd/taskbridge/internal/history"
)

// envRequireTmux makes a missing tmux a test failure instead of a skip
// (scripts/test sets it, so CI never skips these tests silently).
const envRequireTmux = "TASKBRIDGE_REQUIRE_TMUX"

func needTmux(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("tmux")
	if err == nil {
		return path
	}
	if os.Getenv(envRequireTmux) == "1" {
		t.Fatalf("tmux is required (%s=1) but not installed: %v", envRequireTmux, err)
	}
	t.Skipf("tmux is not installed; the terminal UI end-to-end tests need it (scripts/test installs it and sets %s=1)", envRequireTmux)
	return ""
}

// binaries are built once for every end-to-end test.
var binaries struct {
	once sync.Once
	dir  string
	err  error
}

// build builds taskbridge, example 62 and the conformance server and
// returns the directory holding them.
func build(t *testing.T) string {
	t.Helper()
	binaries.once.Do(func() {
		dir, err := os.MkdirTemp("", "taskbridge-e2e-")
		if err != nil {
			binaries.err = err
			return
		}
		binaries.dir = dir
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		args := []string{"build", "-o", dir + string(filepath.Separator)}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "github.com/taskbridge/taskbridge/cmd/taskbridge",
			"github.com/taskbridge/taskbridge/examples/62_tasks_workflow",
			"github.com/taskbridge/taskbridge/examples/conformance")
		cmd := exec.CommandContext(ctx, "go", args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			binaries.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, binaries.err)
	return binaries.dir
}

func TestMain(m *testing.M) {
	// The task history of every CLI run and UI of the tests goes to a
	// directory of their own, never the user's.
	state, err := os.MkdirTemp("", "taskbridge-state-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_STATE_HOME", state)
	os.Unsetenv(history.EnvPath)
	os.Unsetenv(EnvToken)
	code := m.Run()
	if binaries.dir != "" {
		_ = os.RemoveAll(binaries.dir)
	}
	_ = os.RemoveAll(state)
	os.Exit(code)
}

var servingRe = regexp.MustCompile(`(http://127\.0\.0\.1:\d+/mcp)`)

// startServer runs a server binary that prints its URL on stderr (it
// listens on 127.0.0.1:0) and returns the URL.
func startServer(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "TASKBRIDGE_POLL_INTERVAL=100ms")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := servingRe.FindString(sc.Text()); m != "" {
				select {
				case found <- m:
				default:
				}
			}
		}
	}()
	select {
	case url := <-found:
		return url
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not say where it listens", bin)
	}
	return ""
}

// tmuxUI is a program running in a detached tmux session of its own
// server (socket), 80x24.
type tmuxUI struct {
	t      *testing.T
	tmux   string
	sock   string
	errLog string
}

const (
	uiWait = 30 * time.Second
	uiCols = 80
	uiRows = 24
)

// startUI runs argv in tmux, with a task history of its own. The shell
// wrapper reports the exit status on the screen and keeps the pane open,
// so a crash is visible to waitFor.
func startUI(t *testing.T, argv ...string) *tmuxUI {
	t.Helper()
	return startUIEnv(t, []string{history.EnvPath + "=" + filepath.Join(t.TempDir(), "history")}, argv...)
}

// startUIEnv is startUI with environment variables (K=V) of its own.
func startUIEnv(t *testing.T, env []string, argv ...string) *tmuxUI {
	t.Helper()
	dir := t.TempDir()
	u := &tmuxUI{t: t, tmux: needTmux(t), sock: filepath.Join(dir, "tmux.sock"), errLog: filepath.Join(dir, "stderr.log")}
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	script := fmt.Sprintf("%s 2>%s; echo EXITED $?; sleep 600", strings.Join(quoted, " "), u.errLog)
	args := []string{"-f", "/dev/null", "new-session", "-d", "-s", "ui", "-x", fmt.Sprint(uiCols), "-y", fmt.Sprint(uiRows),
		"env", "TERM=xterm-256color", "NO_COLOR=1"}
	args = append(append(args, env...), "sh", "-c", script)
	u.run(args...)
	t.Cleanup(func() { _ = exec.Command(u.tmux, "-S", u.sock, "kill-server").Run() })
	return u
}

func (u *tmuxUI) run(args ...string) string {
	u.t.Helper()
	out, err := exec.Command(u.tmux, append([]string{"-S", u.sock}, args...)...).CombinedOutput()
	require.NoError(u.t, err, "tmux %v: %s", args, out)
	return string(out)
}

// keys sends named keys (Enter, Tab, Down, C-s, or single characters).
func (u *tmuxUI) keys(ks ...string) {
	u.t.Helper()
	for _, k := range ks {
		u.run("send-keys", "-t", "ui", k)
	}
}

// text types text literally.
func (u *tmuxUI) text(s string) {
	u.t.Helper()
	u.run("send-keys", "-t", "ui", "-l", s)
}

func (u *tmuxUI) screen() string {
	u.t.Helper()
	return u.run("capture-pane", "-p", "-t", "ui")
}

// waitFor polls the screen until it shows every one of texts.
func (u *tmuxUI) waitFor(texts ...string) string {
	u.t.Helper()
	return u.until(fmt.Sprintf("%q", texts), func(s string) bool { return shows(s, texts) })
}

// until polls the screen until ok accepts it (what says what for).
func (u *tmuxUI) until(what string, ok func(screen string) bool) string {
	u.t.Helper()
	deadline := time.Now().Add(uiWait)
	for {
		s := u.screen()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			logs, _ := os.ReadFile(u.errLog)
			u.t.Fatalf("waited %v for %s; the screen shows:\n%s\nstderr:\n%s", uiWait, what, s, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shows reports whether screen shows every one of texts.
func shows(screen string, texts []string) bool {
	for _, want := range texts {
		if !strings.Contains(screen, want) {
			return false
		}
	}
	return true
}

// selectRow moves the selection down until the list's cursor (›) is on
// name, as a user would.
func (u *tmuxUI) selectRow(name string) {
	u.t.Helper()
	u.waitFor(name)
	for range 30 {
		if strings.Contains(u.screen(), "› "+name) {
			return
		}
		u.keys("Down")
		time.Sleep(50 * time.Millisecond)
	}
	u.waitFor("› " + name)
}

// checkSize checks that every line of a screen fits 80 columns and that
// the UI uses all 24 rows.
func checkSize(t *testing.T, screen string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(screen, "\n"), "\n")
	require.Len(t, lines, uiRows, screen)
	for _, l := range lines {
		require.LessOrEqual(t, len([]rune(l)), uiCols, l)
	}
}

// quit presses q and waits for a clean exit.
func (u *tmuxUI) quit() {
	u.t.Helper()
	u.keys("q")
	u.waitFor("EXITED 0")
}

func TestUIEndToEndHTTP(t *testing.T) {
	needTmux(t)
	dir := build(t)
	url := startServer(t, filepath.Join(dir, "62_tasks_workflow"), "serve", "-http", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "e2e.db"))
	ui := startUI(t, filepath.Join(dir, "taskbridge"), "ui", url)

	s := ui.waitFor("[1 Tools]", "taskbridge-example-62 0.2.0 · extension", "generate_report", "? help  q quit")
	checkSize(t, s)
	require.Contains(t, s, "── "+url+" ")

	// The Tasks tab, empty for now.
	ui.keys("3")
	ui.waitFor("[3 Tasks]", "No tasks yet", "has no tasks/list")

	// Start a task from the Tools tab.
	ui.keys("1")
	ui.selectRow("generate_report")
	ui.keys("Enter")
	ui.waitFor("Call generate_report", "topic*")
	ui.text("e2e")
	ui.keys("Tab")
	ui.text("1")
	ui.keys("Enter")
	s = ui.waitFor("[3 Tasks (1)]", "generate_report")
	require.Regexp(t, `generate_report\s+(● working|✓ completed)`, s)
	s = ui.waitFor("✓ completed", `Report on "e2e" is ready.`, "✓ 1 done")
	checkSize(t, s)

	// Follow the release_notes workflow from the Prompts tab.
	ui.keys("2")
	ui.waitFor("[2 Prompts]")
	ui.selectRow("release_notes ") // not release_notes_plain
	ui.keys("Enter")
	ui.waitFor("Get prompt release_notes", "repo*")
	ui.text("taskbridge")
	ui.keys("C-s")
	s = ui.waitFor("Workflow release_notes", "waiting for you · needs approved, feedback")
	require.Regexp(t, `✓ fetch\s+fetch_changes\s+done`, s)
	ui.keys("Enter")
	s = ui.waitFor("Step review: call review_notes", "◆approved*", "◆feedback*")
	checkSize(t, s)
	ui.text("yes")
	ui.keys("Tab")
	ui.text("Looks good")
	ui.keys("C-s")
	ui.waitFor(`"yes" is not valid: want boolean: true or false`)
	ui.keys("C-u")
	ui.text("true")
	ui.keys("C-s")
	s = ui.waitFor("✓ workflow completed: 4 step(s) done")
	require.Regexp(t, `✓ publish\s+publish_notes\s+done`, s)
	ui.keys("3")
	ui.waitFor("release_notes", "✓ 2 done")

	ui.quit()
}

func TestUIEndToEndStdio(t *testing.T) {
	needTmux(t)
	dir := build(t)
	ui := startUI(t, filepath.Join(dir, "taskbridge"), "ui", "-dialect", "core", "--",
		filepath.Join(dir, "62_tasks_workflow"), "serve", "-stdio", "-db", filepath.Join(t.TempDir(), "stdio.db"))
	s := ui.waitFor("[1 Tools]", "taskbridge-example-62 0.2.0 · core", "generate_report")
	require.Contains(t, s, "62_tasks_workflow serve -stdio")
	ui.selectRow("generate_report")
	ui.keys("Enter")
	ui.waitFor("Call generate_report")
	ui.text("stdio")
	ui.keys("Tab")
	ui.text("0.2")
	ui.keys("Enter")
	s = ui.waitFor("✓ completed", `Report on "stdio" is ready.`)
	checkSize(t, s)
	ui.keys("r")
	ui.waitFor("tasks/list: 1 task(s) of this session, 0 new")
	ui.quit()
}

func TestUIEndToEndConformanceServer(t *testing.T) {
	needTmux(t)
	dir := build(t)
	url := startServer(t, filepath.Join(dir, "conformance"), "-http", "127.0.0.1:0")
	ui := startUI(t, filepath.Join(dir, "taskbridge"), "ui", url)
	s := ui.waitFor("[1 Tools]", "taskbridge-conformance", "slow_compute", "confirm_delete")
	require.Regexp(t, `greet\s+forbidden`, s)
	require.Regexp(t, `failing_job\s+required`, s)
	ui.selectRow("slow_compute")
	ui.waitFor("runs as: task (taskSupport optional)")
	ui.keys("Enter")
	ui.waitFor("Call slow_compute", "seconds")
	// Fields in the order the tool declares them: seconds, label.
	ui.text("0.5")
	ui.keys("Tab")
	ui.text("e2e")
	ui.keys("Enter")
	s = ui.waitFor("slow_compute", "✓ completed", `Computation "e2e" completed after 0.5 seconds`)
	checkSize(t, s)
	ui.quit()
}

// The UI against example 62 serving with bearer tokens: -token gets in,
// and the Tasks tab starts with the tasks the CLI started (the task
// history), named by their tool and workflow.
func TestUIEndToEndTokenAndHistory(t *testing.T) {
	needTmux(t)
	dir := build(t)
	url := startServer(t, filepath.Join(dir, "62_tasks_workflow"), "serve", "-http", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "auth.db"), "-tokens", "tok-a=alice")
	hist := filepath.Join(t.TempDir(), "history")
	t.Setenv(history.EnvPath, hist)
	code, out, errOut := cli(t, "", "-url", url, "-token", "tok-a", "call", "-detach", "generate_report", "topic=bg", "seconds=60")
	require.Equal(t, exitOK, code, errOut)
	id := strings.Fields(out)[0]
	code, _, errOut = cli(t, "", "-url", url, "-token", "tok-a", "prompt", "release_notes", "repo=taskbridge")
	require.Equal(t, exitOK, code, errOut)

	ui := startUIEnv(t, []string{history.EnvPath + "=" + hist}, filepath.Join(dir, "taskbridge"), "ui", "-token", "tok-a", url)
	ui.waitFor("[1 Tools]", "generate_report", "● 2 working")
	ui.keys("3")
	s := ui.waitFor("[3 Tasks (2)]", "release_notes")
	checkSize(t, s)
	require.Regexp(t, id[:8]+`\s+generate_report\s+● working`, s)
	require.NotContains(t, s, "No tasks yet")
	ui.keys("Up") // the newest task is selected: the workflow
	ui.waitFor("› " + id[:8])
	ui.keys("c")
	ui.waitFor("Cancel task " + id[:8])
	ui.keys("y")
	ui.waitFor("⊘ cancelled", "⊘ 1 cancelled")
	ui.quit()

	// Without the token the UI does not start, and says why.
	ui = startUIEnv(t, []string{history.EnvPath + "=" + hist}, filepath.Join(dir, "taskbridge"), "ui", url)
	ui.waitFor("EXITED 3")
	logs, err := os.ReadFile(ui.errLog)
	require.NoError(t, err)
	require.Contains(t, string(logs), "the server refused the credentials (HTTP 401 Unauthorized): pass -token")
}

// The help text's examples name tools and prompts example 62 has.
func TestHelpExamplesNameExample62(t *testing.T) {
	dir := build(t)
	url := startServer(t, filepath.Join(dir, "62_tasks_workflow"), "serve", "-http", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "help.db"))
	code, tools, errOut := cli(t, "", "-url", url, "tools")
	require.Equal(t, exitOK, code, errOut)
	_, examples, ok := strings.Cut(usage, "Examples:")
	require.True(t, ok)
	calls := regexp.MustCompile(`\scall (?:-\S+ )*([a-z_]+)`).FindAllStringSubmatch(examples, -1)
	require.GreaterOrEqual(t, len(calls), 3)
	for _, m := range calls {
		require.Regexp(t, `(?m)^`+m[1]+`\s`, tools, "help example calls %s", m[1])
	}
	prompts := regexp.MustCompile(`\sprompt ([a-z_]+)`).FindAllStringSubmatch(examples, -1)
	require.NotEmpty(t, prompts)
	for _, m := range prompts {
		code, _, errOut := cli(t, "", "-url", url, "prompt", m[1], "repo=taskbridge")
		require.Equal(t, exitOK, code, "help example prompt %s: %s", m[1], errOut)
	}
}

// The UI follows example 62's release_train (a flaky service): the Prompts
// tab nests the child workflow's review under the step that started it,
// performs it on the child task through the form, then shows the train
// failing and what it rolled back, last deploy first; the Tasks tab sums
// it up with the builds item by item.
func TestUIEndToEndReleaseTrain(t *testing.T) {
	needTmux(t)
	dir := build(t)
	url := startServer(t, filepath.Join(dir, "62_tasks_workflow"), "serve", "-http", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "train.db"))
	ui := startUI(t, filepath.Join(dir, "taskbridge"), "ui", url)
	ui.waitFor("[1 Tools]", "generate_report")
	ui.keys("2")
	ui.selectRow("release_train")
	ui.keys("Enter")
	ui.waitFor("Get prompt release_train", "repo*", "services*")
	ui.text("acme/shop")
	ui.keys("Tab")
	ui.text("api,flaky-web")
	ui.keys("C-s")
	s := ui.waitFor("Workflow release_train", "→ notes/review")
	checkSize(t, s)
	require.Regexp(t, `✓ build +\(for-each\) +done · 2 item\(s\)`, s)
	require.Regexp(t, `· notes +\(child workflow\) waiting for you, below · task [0-9a-f]{8}`, s)
	require.Regexp(t, `› +→ notes/review +review_notes +waiting for you · needs approved, feedback`, s)
	require.Regexp(t, `· deploy +\(for-each\) +pending \(server\)`, s)
	require.Contains(t, s, `(a step of child workflow "release_notes", task`, "the selected entry's sentence")

	ui.keys("Enter")
	ui.waitFor("Step notes/review: call review_notes", "◆approved*", "◆feedback*")
	ui.text("true")
	ui.keys("Tab")
	ui.text("ship it")
	ui.keys("C-s")
	s = ui.waitFor("✗ failed", "undone after the failure, last first:", "✓ deploy[1]", "✓ deploy[0]")
	checkSize(t, s)
	require.Regexp(t, `✓ deploy\[1\] +rollback_service +undone\n +✓ deploy\[0\] +rollback_service +undone`, s)
	require.Regexp(t, `· smoke +\(for-each\) +not done \(workflow failed\)`, s)
	require.Contains(t, s, `step "smoke[1]" ran 3 time(s)`)

	ui.keys("3")
	s = ui.waitFor("[3 Tasks", "progress: 3/4 steps done")
	require.Regexp(t, `build: 2 item\(s\): \{"artifact":"acme/shop/api@`, s)
	require.Contains(t, s, "  undone after the failure, last first:\n    ✓ deploy[1] undone · ✓ deploy[0] undone")
	ui.quit()
}
