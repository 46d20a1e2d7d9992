package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/taskbridge/taskbridge/mcptask"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/internal/tests/obstest"
)

// EnvRequireChromium makes a missing Chromium a test failure rather than
// a skip (scripts/test sets it after installing the Debian package).
const EnvRequireChromium = "TASKBRIDGE_REQUIRE_CHROMIUM"

// EnvScreenshots names a directory the browser test writes its screenshots
// to (dashboard.png, dashboard-task.png), for the docs:
//
//	TASKBRIDGE_SCREENSHOTS=$PWD/docs go test -run TestBrowser ./dashboard
const EnvScreenshots = "TASKBRIDGE_SCREENSHOTS"

func chromium(t *testing.T) string {
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "/usr/bin/chromium", "chromium-browser"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(EnvRequireChromium) == "1" {
		t.Fatalf("Chromium is required (%s=1) but not installed: apt-get install -y chromium", EnvRequireChromium)
	}
	t.Skipf("Chromium is not installed (apt-get install -y chromium); set %s=1 to fail instead", EnvRequireChromium)
	return ""
}

// browser starts headless Chromium with a fresh profile and nothing that
// reaches the network.
func browser(t *testing.T) context.Context {
	path := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelB(); cancelA() })
	// The first action starts the browser, which lives as long as the
	// context of that action: use ctx itself, with a watchdog.
	watchdog := time.AfterFunc(30*time.Second, cancelB)
	require.NoError(t, chromedp.Do(ctx), "starting Chromium")
	watchdog.Stop()
	// The cancel button asks for confirmation: accept.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return ctx
}

// run runs actions with a deadline.
func run(t *testing.T, ctx context.Context, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	require.NoError(t, chromedp.Do(c, actions...))
}

// eval evaluates a script expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv(EnvScreenshots)
	if dir == "" {
		return
	}
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
}

// TestBrowser drives the dashboard in headless Chromium: sign in, a task a
// client creates appears within a second without a reload, the cancel
// button stops the task's handler, and the workflow timeline shows each
// step and moves on live when the client performs its step.
func TestBrowser(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, usersOptions())
	c := e.f.Client(t)
	base := e.web.URL + "/dashboard/"

	// Some history first, so the page has something to show.
	for _, text := range []string{"a", "b", "c"} {
		_, err := c.CallToolAndWait(t.Context(), "echo", map[string]any{"text": text}, nil)
		require.NoError(t, err)
	}
	_, _ = c.CallToolAndWait(t.Context(), "fail", map[string]any{"text": "disk full"}, nil)
	_, done := obstest.Handoff(t, c, "v1.2")
	obstest.Finish(t, c, done, nil)

	// Sign in through the form.
	run(t, ctx, 10*time.Second, chromedp.Navigate(base))
	run(t, ctx, 10*time.Second, chromedp.WaitVisible(chromedp.ID("token")))
	run(t, ctx, 10*time.Second, chromedp.SendKeys(chromedp.ID("token"), adminToken), chromedp.Click(chromedp.ID("signin")))
	run(t, ctx, 10*time.Second, chromedp.WaitVisible(chromedp.ID("tasks")))
	run(t, ctx, 10*time.Second, chromedp.WaitVisible(chromedp.CSS(`#live-state[data-state="on"]`)))
	loaded := eval[string](t, ctx, `window.__loaded = Math.random().toString(); window.__loaded`)

	// A task created by a client appears within a second, without reload.
	slow := obstest.Start(t, c, "slow", map[string]any{"text": "long report", "ms": 60000})
	created := time.Now()
	run(t, ctx, time.Second, chromedp.WaitVisible(chromedp.CSS(`tr[data-task-id="`+slow+`"][data-status="working"]`)))
	t.Logf("the new task appeared %s after it was created", time.Since(created).Round(time.Millisecond))
	require.Equal(t, loaded, eval[string](t, ctx, `window.__loaded`), "the page was not reloaded")

	// A workflow waiting for its client step, for the timeline.
	_, waiting := obstest.Handoff(t, c, "v1.3")
	run(t, ctx, 2*time.Second, chromedp.WaitVisible(chromedp.CSS(`tr[data-task-id="`+waiting.TaskID+`"]`)))
	screenshot(t, ctx, "dashboard.png")

	// Cancel through the button: the handler is stopped.
	run(t, ctx, 10*time.Second,
		chromedp.Navigate(base+"tasks/"+slow),
		chromedp.WaitVisible(chromedp.ID("cancel")),
		chromedp.Click(chromedp.ID("cancel")),
		chromedp.WaitVisible(chromedp.CSS(`#task-status .s-cancelled`)),
		chromedp.WaitVisible(chromedp.ID("flash")),
	)
	e.f.Wait(t, slow, mcptask.StatusCancelled)
	select {
	case got := <-e.f.Cancelled:
		require.Equal(t, "long report", got)
	case <-time.After(30 * time.Second):
		t.Fatal("cancelling in the browser did not stop the handler")
	}

	// The workflow timeline shows each step; the client's step turns done
	// live.
	run(t, ctx, 10*time.Second,
		chromedp.Navigate(base+"tasks/"+waiting.TaskID),
		chromedp.WaitVisible(chromedp.ID("timeline")),
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="fetch"][data-state="done"]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="draft"][data-state="done"]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="review"][data-state="waiting"]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="publish"][data-state="pending"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#live-state[data-state="on"]`)),
	)
	steps := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#timeline li')).map(li => li.dataset.step)`)
	require.Equal(t, obstest.Steps, steps)
	obstest.Finish(t, c, waiting, nil)
	run(t, ctx, 2*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="review"][data-state="done"]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="publish"][data-state="done"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#task-status .s-completed`)),
		chromedp.WaitVisible(chromedp.ID("task-result")),
	)
	attempts := eval[int](t, ctx, `document.querySelectorAll('#timeline table.attempts tr').length`)
	require.Equal(t, 4, attempts, "one attempt per step, with who and how long")
	screenshot(t, ctx, "dashboard-task.png")
}

// example62 builds example 62 and serves it over HTTP on 127.0.0.1 with
// the dashboard on (its admin token is adminToken); it returns the MCP
// URL and the dashboard's.
func example62(t *testing.T) (mcpURL, dashURL string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "62_tasks_workflow")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/taskbridge/taskbridge/examples/62_tasks_workflow")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	cmd := exec.Command(bin, "serve", "-http", "127.0.0.1:0", "-db", filepath.Join(dir, "tasks.db"), "-dashboard-token", adminToken)
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
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case base := <-found:
		return base + "/mcp", base + "/dashboard/"
	case <-time.After(30 * time.Second):
		t.Fatal("example 62 did not say where it listens")
	}
	return "", ""
}

var servingRE = regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+)/mcp`)

// TestBrowserReleaseTrain: example 62's release_train, run by a client
// with a flaky service, in the dashboard of the example's own server: the
// train's page nests each for-each's items (item, state, result) and each
// smoke test's runs with their count, links the child workflow that wrote
// the notes (whose page links back to the train and the step), and says
// what was rolled back after the failure, last deploy first.
func TestBrowserReleaseTrain(t *testing.T) {
	ctx := browser(t)
	mcpURL, dash := example62(t)
	c, err := client.Dial(t.Context(), client.HTTPTransport(mcpURL, nil), nil)
	require.NoError(t, err)
	defer c.Close()
	_, doc, err := c.GetPrompt(t.Context(), "release_train", map[string]string{"repo": "acme/shop", "services": "api,flaky-web"})
	require.NoError(t, err)
	var child string
	for _, s := range doc.RemainingSteps {
		if s.Name == "notes/review" {
			require.NoError(t, json.Unmarshal(s.Call.Arguments[mcptask.ArgTaskID], &child))
		}
	}
	require.NotEmpty(t, child, "the child's review is the train's client's")

	run(t, ctx, 10*time.Second, chromedp.Navigate(dash))
	run(t, ctx, 10*time.Second, chromedp.WaitVisible(chromedp.ID("token")))
	run(t, ctx, 10*time.Second, chromedp.SendKeys(chromedp.ID("token"), adminToken), chromedp.Click(chromedp.ID("signin")))
	run(t, ctx, 10*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`tr[data-task-id="`+child+`"] .child-of`)),
		chromedp.Navigate(dash+"tasks/"+doc.TaskID),
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="notes"][data-state="waiting"]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="build[1]"][data-state="done"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#live-state[data-state="on"]`)),
	)
	require.Equal(t, "flaky-web", eval[string](t, ctx, `document.querySelector('li[data-step="build[1]"] .item').textContent`))

	// The client reviews the child's draft; the train goes on live, fails
	// its smoke test and rolls back.
	_, err = c.CallToolAndWait(t.Context(), "review_notes", map[string]any{mcptask.ArgTaskID: child, "approved": true, "feedback": "ship it"},
		&client.CallOptions{AllowPlain: true})
	require.NoError(t, err)
	run(t, ctx, 30*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`#task-status .s-failed`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="notes"][data-state="done"]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="deploy[1]"][data-state="done"]`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="smoke[1][3]"][data-state="done"]`)),
		chromedp.WaitVisible(chromedp.ID("undo")),
	)
	smoke := eval[string](t, ctx, `document.querySelector('li[data-step="smoke[1]"] .step-note').textContent`)
	require.Equal(t, "ran 3 time(s)", smoke)
	runs := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('li[data-step="smoke[1]"] ol.records > li')).map(li => li.querySelector('.label').textContent)`)
	require.Equal(t, []string{"run 1", "run 2", "run 3"}, runs)
	undo := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#undo > li')).map(li => li.dataset.step + " " + li.dataset.state + " " + li.querySelector('.item').textContent)`)
	require.Equal(t, []string{"undo:deploy[1] done flaky-web", "undo:deploy[0] done api"}, undo, "rolled back, last deploy first")
	require.Contains(t, eval[string](t, ctx, `document.getElementById('undo-title').textContent`), "2 of 2 undone")
	screenshot(t, ctx, "dashboard-train.png")

	// The child's page, and back to the train's step.
	run(t, ctx, 10*time.Second,
		chromedp.Click(chromedp.CSS(`li[data-step="notes"] a.child-link`)),
		chromedp.WaitVisible(chromedp.ID("parent")),
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="review"][data-state="done"]`)),
	)
	require.Contains(t, eval[string](t, ctx, `location.pathname`), child)
	run(t, ctx, 10*time.Second,
		chromedp.Click(chromedp.ID("parent-step")),
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="notes"]`)),
	)
	require.Equal(t, "#step-notes", eval[string](t, ctx, `location.hash`))
	require.Contains(t, eval[string](t, ctx, `location.pathname`), doc.TaskID)
}
