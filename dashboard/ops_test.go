package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/tests/obstest"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// opsEnv is newEnv with a scheduled workflow and a workflow whose slow
// step runs one at a time.
func opsEnv(t *testing.T) *env {
	t.Helper()
	return newEnv(t, usersOptions(), func(b *builder.Builder) {
		b.WithWorkflowOptions(workflow.Options{PromptWait: 50 * time.Millisecond})
		b.TaskWorkflow(workflow.New("nightly_report", "the nightly report").Arg("scheduled_at", "when", true).Step(
			workflow.Server("say", "echo").Bind("text", workflow.PromptArg("scheduled_at"))))
		b.Schedule(workflow.Schedule{Name: "nightly", Workflow: "nightly_report", Cron: "0 2 * * *", Description: "the nightly report", Overlap: taskrouter.OverlapBufferOne})
		b.TaskWorkflow(workflow.New("one_at_a_time", "a slow step, one at a time").Step(
			workflow.Server("wait", "slow").Bind("ms", workflow.Const(60000)).Bind("text", workflow.Const("waited")).
				OnQueue(&workflow.Queue{Name: "slow", Concurrency: 1})))
	})
}

// TestPauseFromTheTaskPage: the owner pauses a workflow task from its
// page (a reason, who did it, the task still working) and resumes it; the
// actions list both; a read-only viewer and another owner cannot.
func TestPauseFromTheTaskPage(t *testing.T) {
	e := newEnv(t, usersOptions())
	c := e.f.Client(t)
	_, doc := obstest.Handoff(t, c, "pause me")
	path := "/dashboard/tasks/" + doc.TaskID
	_, body := e.get(t, localToken, path)
	require.Contains(t, body, `id="pause"`)
	require.NotContains(t, body, `id="resume"`)
	token := csrfRE.FindStringSubmatch(body)[1]
	_, peek := e.get(t, adminToken, path)
	require.Contains(t, peek, `id="pause"`, "an admin may too")
	require.Equal(t, http.StatusForbidden, e.post(t, aliceToken, path+"/pause", url.Values{"csrf": {token}}, nil).StatusCode, "another viewer's form token")
	require.Equal(t, http.StatusForbidden, e.post(t, localToken, path+"/pause", url.Values{}, nil).StatusCode, "no form token")

	resp := e.post(t, localToken, path+"/pause", url.Values{"csrf": {token}, "reason": {"a bad deploy"}}, map[string]string{"Origin": e.web.URL})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Location"), "done=paused")
	_, body = e.get(t, localToken, path)
	require.Contains(t, body, `id="paused"`)
	require.Contains(t, body, "Paused by <b>dashboard user local</b>")
	require.Contains(t, body, "a bad deploy")
	require.Contains(t, body, `<span class="badge s-working">working</span>`, "the status stays working")
	require.Contains(t, body, `id="resume"`)
	require.NotContains(t, body, `id="pause"`)
	require.Equal(t, http.StatusConflict, e.post(t, localToken, path+"/pause", url.Values{"csrf": {token}}, nil).StatusCode, "paused already")

	resp = e.post(t, localToken, path+"/resume", url.Values{"csrf": {token}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = e.get(t, localToken, path)
	require.NotContains(t, body, `id="paused"`)
	require.Contains(t, body, `id="actions"`)
	require.Equal(t, 2, strings.Count(body, "dashboard user local"), "paused and resumed, by whom")
}

// TestSchedulesPage: the schedules and queues page lists a schedule to
// its owner and admins (not to another owner), and pauses, resumes and
// fires it; a queued step is drawn queued on the task's timeline, and
// the queue counts it.
func TestSchedulesPage(t *testing.T) {
	e := opsEnv(t)
	code, body := e.get(t, adminToken, "/dashboard/schedules")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `data-schedule="nightly"`)
	require.Contains(t, body, `<span class="overlap">overlap: buffer_one</span>`, "the overlap policy is shown")
	require.Contains(t, body, "Fire now")
	_, alice := e.get(t, aliceToken, "/dashboard/schedules")
	require.Contains(t, alice, `id="no-schedules"`)
	require.NotContains(t, alice, `id="queues"`, "queues are an admin's")
	token := csrfRE.FindStringSubmatch(body)[1]
	require.Equal(t, http.StatusNotFound, e.post(t, aliceToken, "/dashboard/schedules/nightly/pause", url.Values{"csrf": {token}}, nil).StatusCode)

	_, local := e.get(t, localToken, "/dashboard/schedules")
	ltoken := csrfRE.FindStringSubmatch(local)[1]
	resp := e.post(t, localToken, "/dashboard/schedules/nightly/pause", url.Values{"csrf": {ltoken}, "reason": {"freeze"}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, local = e.get(t, localToken, "/dashboard/schedules")
	require.Contains(t, local, "paused by dashboard user local: freeze")
	require.Contains(t, local, "Resume")

	resp = e.post(t, localToken, "/dashboard/schedules/nightly/trigger", url.Values{"csrf": {ltoken}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc := resp.Header.Get("Location")
	require.Contains(t, loc, "done=triggered")
	_, page := e.get(t, localToken, strings.Split(loc, "?")[0])
	require.Contains(t, page, "nightly_report")
	require.Equal(t, http.StatusSeeOther, e.post(t, localToken, "/dashboard/schedules/nightly/resume", url.Values{"csrf": {ltoken}}, nil).StatusCode)

	c := e.f.Client(t)
	var ids []string
	for range 2 {
		_, doc, err := c.GetPrompt(t.Context(), "one_at_a_time", nil)
		require.NoError(t, err)
		ids = append(ids, doc.TaskID)
	}
	_, second := e.get(t, adminToken, "/dashboard/tasks/"+ids[1])
	require.Regexp(t, `data-step="wait" data-state="queued"`, second)
	require.Contains(t, second, "queued on slow")
	_, body = e.get(t, adminToken, "/dashboard/schedules")
	require.Regexp(t, `<td class="mono">slow</td><td>1</td><td>1</td>`, body)
}
