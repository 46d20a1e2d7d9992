package dashboard_test

import (
	"html"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/workflow"
)

// convoy is a workflow of every kind of issue 29 on the fixture's tools:
// a for-each whose items each have an undo step, a loop, a child
// workflow, and a step cut by its timeout that fails the workflow, which
// undoes the items; with a deadline.
func convoy(b *builder.Builder) {
	b.TaskWorkflow(workflow.New("convoy_inner", "The child: echoes its word").
		Arg("word", "a word", true).
		Step(workflow.Server("say", "echo").Bind("text", workflow.PromptArg("word"))))
	b.TaskWorkflow(workflow.New("convoy", "Every kind of step, then a timeout").
		Arg("items", "comma-separated items", true).
		WithDeadline(time.Hour).
		Step(
			workflow.ForEach("each", workflow.PromptArg("items"),
				workflow.Server("ship", "echo").Bind("text", workflow.Item()).
					Undo(workflow.Server("unship", "echo").Bind("text", workflow.Item()))).Limit(2),
			workflow.Repeat("poll", workflow.Server("probe", "echo").Bind("text", workflow.Const("ready"))).
				Until(workflow.Truthy(workflow.StepOutput("probe", "text"))).AtMost(3),
			workflow.Child("sub", "convoy_inner").Bind("word", workflow.Const("hello")),
			workflow.Server("stall", "slow").Bind("text", workflow.Const("stalled")).Bind("ms", workflow.Const(60000)).
				Timeout(200*time.Millisecond).FailsWorkflow(),
		))
}

// TestTaskPageShowsEveryKind: a workflow task's page draws a for-each as
// its item records (item, state, attempts, result), a loop with its runs
// and their count, a child step linked to the child's page (which links
// back to the parent and the step), the deadline, an attempt cut by its
// timeout, and what was undone after the failure.
func TestTaskPageShowsEveryKind(t *testing.T) {
	e := newEnv(t, usersOptions(), convoy)
	c := e.f.Client(t)
	_, doc, err := c.GetPrompt(t.Context(), "convoy", map[string]string{"items": "alpha, beta"})
	require.NoError(t, err)
	task := e.f.Wait(t, doc.TaskID, mcptask.StatusFailed)
	require.Contains(t, task.StatusMessage, "undone")

	code, body := e.get(t, adminToken, "/dashboard/tasks/"+doc.TaskID)
	require.Equal(t, http.StatusOK, code)
	body = html.UnescapeString(body)
	// The for-each: its records nested, each with its item and result.
	for _, rec := range []string{`each[0]" data-state="done"`, `each[1]" data-state="done"`} {
		require.Contains(t, body, `data-step="`+rec)
	}
	require.Regexp(t, `(?s)data-step="each\[1\]".*?<b class="label">\[1\]</b> <span class="item mono" title="the item">beta</span>.*?result</span> <span class="mono">\{"text":"beta"\}`, body)
	require.Contains(t, body, "2 of 2 item(s) done")
	// The loop: its run and the count.
	require.Contains(t, body, `data-step="poll[1]"`)
	require.Contains(t, body, "ran 1 time(s)")
	// The child: linked.
	child := regexp.MustCompile(`data-step="sub" data-state="done" data-child="([0-9a-f]{32})"`).FindStringSubmatch(body)
	require.NotNil(t, child, "the child step names its task")
	require.Contains(t, body, `href="/dashboard/tasks/`+child[1]+`"`)
	// The deadline, and the attempt the timeout cut.
	require.Contains(t, body, `id="workflow-deadline"`)
	require.Contains(t, body, "the workflow had until then to end")
	require.Regexp(t, `(?s)data-step="stall".*?<span class="cut">timed out</span>.*?timed out after 200ms`, body)
	// What was undone, last first, each with its item.
	require.Contains(t, body, "Undone after the failure")
	require.Contains(t, body, "2 of 2 undone")
	order := regexp.MustCompile(`each\[\d\]`).FindAllString(task.StatusMessage, -1) // the last completed first
	require.Len(t, order, 2)
	require.Regexp(t, `(?s)id="undo".*data-step="undo:`+regexp.QuoteMeta(order[0])+`" data-state="done".*data-step="undo:`+regexp.QuoteMeta(order[1])+`" data-state="done"`, body)
	require.Regexp(t, `(?s)data-step="undo:each\[1\]".*?href="#step-each%5b1%5d">each\[1\]</a></b> <span class="item mono" title="the item">beta</span>`, body)

	// The child's page links back to its parent and the step.
	code, page := e.get(t, adminToken, "/dashboard/tasks/"+child[1])
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `id="parent"`)
	require.Contains(t, page, `href="/dashboard/tasks/`+doc.TaskID+`#step-sub"`)
	// And the table says which task is whose child.
	_, over := e.get(t, adminToken, "/dashboard/?partial=1")
	require.Regexp(t, `(?s)data-task-id="`+child[1]+`".*?child of <a class="mono" href="/dashboard/tasks/`+doc.TaskID+`"`, over)

	// Alice owns none of it: the child is hidden from her as the parent is.
	code, _ = e.get(t, aliceToken, "/dashboard/tasks/"+child[1])
	require.Equal(t, http.StatusNotFound, code)
}
