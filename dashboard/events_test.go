package dashboard_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/tests/obstest"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
)

// addReporter adds the tool "report": it reports a progress and a log
// line, waits for gate, then reports a second pair.
func addReporter(gate chan struct{}) func(*builder.Builder) {
	return func(b *builder.Builder) {
		builder.Tool(b, &mcp.Tool{Name: "report"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			log := taskrouter.Logger(ctx)
			_ = taskrouter.Progress(ctx, 1, 2, "first half")
			log.Info("wrote the first half")
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			_ = taskrouter.Progress(ctx, 2, 2, "second half")
			log.Info("wrote the second half")
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "report done"}}}, nil, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	}
}

// TestTaskEventsStream: a task page's event stream sends the task's
// events as server-sent events numbered by their sequence, resumes after
// Last-Event-ID, ends with the task, and is another viewer's "not found".
func TestTaskEventsStream(t *testing.T) {
	gate := make(chan struct{})
	close(gate)
	e := newEnv(t, usersOptions(), addReporter(gate))
	c := e.f.Client(t)
	_, err := c.CallToolAndWait(t.Context(), "report", nil, nil)
	require.NoError(t, err)
	id := c.Tracked()[0].ID

	read := func(token, lastID string) (int, []string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.web.URL+"/dashboard/tasks/"+id+"/events", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var lines []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "id: ") || strings.HasPrefix(l, "event: ") {
				lines = append(lines, l)
			}
		}
		return resp.StatusCode, lines
	}
	code, all := read(adminToken, "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "event: end", all[len(all)-1])
	require.Equal(t, []string{"id: 1", "event: taskevent"}, all[:2])
	code, rest := read(localToken, "3")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "id: 4", rest[0], "resumed after Last-Event-ID")
	require.Equal(t, all[6:], rest)
	code, _ = read(bobToken, "")
	require.Equal(t, http.StatusNotFound, code, "another owner's task")
}

// TestBrowserTaskEvents: the task page lists what the task reports while
// it runs, line by line, without a reload, and stops listening when the
// task has ended.
func TestBrowserTaskEvents(t *testing.T) {
	ctx := browser(t)
	gate := make(chan struct{})
	e := newEnv(t, usersOptions(), addReporter(gate))
	c := e.f.Client(t)
	id := obstest.Start(t, c, "report", nil)
	base := e.web.URL + "/dashboard/"
	run(t, ctx, 10*time.Second, chromedp.Navigate(base))
	run(t, ctx, 10*time.Second, chromedp.WaitVisible(chromedp.ID("token")))
	run(t, ctx, 10*time.Second, chromedp.SendKeys(chromedp.ID("token"), adminToken), chromedp.Click(chromedp.ID("signin")))
	run(t, ctx, 10*time.Second, chromedp.WaitVisible(chromedp.ID("tasks")))

	run(t, ctx, 10*time.Second,
		chromedp.Navigate(base+"tasks/"+id),
		chromedp.WaitVisible(chromedp.CSS(`#events[data-state="on"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#events li.e-log`)),
	)
	loaded := eval[string](t, ctx, `window.__loaded = Math.random().toString(); window.__loaded`)
	lines := func() []string {
		return eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#events li')).map(li => li.lastChild.textContent)`)
	}
	require.Contains(t, lines(), "1/2 (50%) first half")
	require.Contains(t, lines(), "info: wrote the first half")
	close(gate)
	run(t, ctx, 5*time.Second, chromedp.WaitVisible(chromedp.CSS(`#events[data-state="ended"]`)))
	got := lines()
	require.Equal(t, "info: wrote the second half", got[len(got)-2])
	require.True(t, strings.HasPrefix(got[len(got)-1], "status completed"), got[len(got)-1])
	require.Equal(t, loaded, eval[string](t, ctx, `window.__loaded`), "the page was not reloaded")
	seqs := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#events li')).map(li => li.dataset.seq)`)
	for i, s := range seqs {
		require.Equal(t, strconv.Itoa(i+1), s, "each event once, in order")
	}
}
