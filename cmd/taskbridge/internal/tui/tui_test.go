package tui

import (
	"context"
	"github.com/taskbridge/taskbridge/mcptask"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/client"
	"github.com/taskbridge/taskbridge/internal/tests/clitest"
)

func TestToolsTabCallsAToolAsATask(t *testing.T) {
	url := clitest.Release(t)
	dialects(t, func(t *testing.T, d mcptask.Dialect) {
		h := newHarness(t, url, d, true)
		v := h.see("[1 Tools]", "generate_report")
		require.Regexp(t, `generate_report\s+optional\s+Produce a report; slow`, v)
		require.Regexp(t, `review_notes\s+forbidden\s+Record a review`, v)
		require.Contains(t, v, "0 working  ◆ 0 need input", "the status line")

		h.selectTool("generate_report")
		h.see("› generate_report", "Produce a report; slow, so best run as a task.", "runs as: task (taskSupport optional)", "arguments: topic* (string), seconds (number)")
		h.keys("enter")
		h.see("Call generate_report", "topic*", "seconds", "number")
		h.typ("q3")
		h.keys("tab")
		h.typ("soon")
		h.keys("enter")
		h.see(`✗ "soon" is not valid: want number`, "fix the marked field(s) first")
		require.Empty(t, h.m.tasks.rows, "a refused form calls nothing")

		h.keys("ctrl+u")
		h.typ("0.3")
		h.keys("enter")
		// The task appears at once, in the Tasks tab, then completes.
		v = h.see("[3 Tasks (1)]", "generate_report")
		require.Regexp(t, `› [0-9a-f]{8} generate_report`, v)
		v = h.see("✓ completed", `Report on "q3" is ready.`, "✓ 1 done")
		require.Regexp(t, `task [0-9a-f]{32}`, v)
		require.Contains(t, v, "tool generate_report · ✓ completed")
		require.Regexp(t, `ttl left \d+m`, v)
	})
}

func TestToolsTabPlainCallShowsItsResult(t *testing.T) {
	h := newHarness(t, clitest.Release(t), mcptask.Extension, true)
	h.selectTool("review_notes")
	h.see("runs as: plain call (taskSupport forbidden)")
	h.keys("enter")
	h.see("Call review_notes", "approved*", "boolean: true or false")
	h.typ("true")
	h.keys("tab")
	h.typ("the draft")
	h.keys("tab")
	h.typ("ok")
	h.keys("enter")
	v := h.see("review_notes returned (no task):", `"approved":true`)
	require.Contains(t, v, "[1 Tools]")
	require.Empty(t, h.m.tasks.rows)
}

func TestPromptsTabFollowsAWorkflowToCompletion(t *testing.T) {
	url := clitest.Release(t)
	dialects(t, func(t *testing.T, d mcptask.Dialect) {
		h := newHarness(t, url, d, true)
		h.keys("2")
		h.see("[2 Prompts]", "› release_notes", "arguments: repo*, since")
		h.keys("enter")
		h.see("Get prompt release_notes", "repo*", "since")
		h.keys("ctrl+s")
		h.see("✗ a value is required")
		h.typ("taskbridge")
		h.keys("ctrl+s")

		v := h.see("Workflow release_notes", "● working")
		require.Regexp(t, `✓ fetch\s+fetch_changes\s+done`, v)
		require.Regexp(t, `✓ draft\s+draft_notes\s+done`, v)
		require.Regexp(t, `› → review\s+review_notes\s+waiting for you · needs approved, feedback`, v)
		require.Regexp(t, `· publish\s+publish_notes\s+pending \(server\)`, v)
		require.Len(t, h.m.tasks.rows, 1, "the workflow's task is in the Tasks tab")

		h.keys("enter")
		v = h.see("Step review: call review_notes", "Read the draft")
		require.Equal(t, []string{"approved", "feedback"}, h.m.form.placeholderNames(), "placeholders are highlighted")
		require.Contains(t, v, "◆approved*")
		require.Contains(t, v, "◆feedback*")
		require.Regexp(t, `draft\*\s+\(kept\) # taskbridge`, v, "resolved arguments are prefilled")
		h.typ("yes")
		h.keys("tab")
		h.typ("ship it")
		h.keys("ctrl+s")
		h.see(`✗ "yes" is not valid: want boolean: true or false`)
		require.Equal(t, "approved", h.m.form.fields[h.m.form.focus].field.Name, "the refused field has the cursor")
		h.keys("ctrl+u")
		h.typ("true")
		h.keys("ctrl+s")

		v = h.see("✓ workflow completed: 4 step(s) done")
		require.Regexp(t, `✓ review\s+review_notes\s+done`, v)
		require.Regexp(t, `✓ publish\s+publish_notes\s+done`, v)
		h.keys("3")
		v = h.see("release_notes", "✓ completed", "progress: 4/4 steps done", "outputs:")
		require.Contains(t, v, "✓ fetch  ✓ draft  ✓ review  ✓ publish")
		require.Regexp(t, `review: \{"approved":true`, v)
	})
}

func TestPromptsTabRepairsAHandedOverStep(t *testing.T) {
	h := newHarness(t, clitest.Release(t), mcptask.Core, true)
	h.keys("2", "enter")
	h.typ("nope")
	h.keys("ctrl+s")
	v := h.see("! fetch", "handed to you")
	require.Contains(t, v, `✗ unknown repository "nope" (try "taskbridge")`)
	require.Regexp(t, `· review\s+review_notes\s+yours, after the steps before it`, v, "review waits for fetch")

	// r resumes: the server tries the step again, and hands it back.
	h.keys("r")
	h.until("the resume to finish", func(string) bool { return h.m.prompts.wf.busy == "" })
	h.see("! fetch", "handed to you")

	h.keys("enter")
	v = h.see("Step fetch: call fetch_changes", `The server gave up on this step after 2 attempt(s): unknown repository "nope"`)
	require.Regexp(t, `repo\*\s+nope`, v, "prefilled with the resolved arguments")
	h.keys("ctrl+u")
	h.typ("taskbridge")
	h.keys("ctrl+s")
	v = h.see("✓ fetch", "✓ draft", "waiting for you · needs approved, feedback")
	require.NotContains(t, v, "handed to you")
}

func TestTasksTabOpensWatchesAndCancels(t *testing.T) {
	url := clitest.Release(t)
	dialects(t, func(t *testing.T, d mcptask.Dialect) {
		// Another client starts a long task; the UI opens it by id.
		other, err := client.Dial(context.Background(), client.HTTPTransport(url, nil), &client.Options{Dialect: mcptask.Extension})
		require.NoError(t, err)
		defer other.Close()
		var id string
		for ev, err := range other.CallTool(context.Background(), "generate_report", map[string]any{"topic": "long", "seconds": 30}, nil) {
			require.NoError(t, err)
			id = ev.Task.ID
			break
		}

		h := newHarness(t, url, d, true)
		h.keys("3")
		v := h.see("[3 Tasks]", "No tasks yet")
		if d == mcptask.Extension {
			require.Contains(t, v, "has no tasks/list")
		}
		h.keys("o")
		h.see("Open a task by id")
		h.typ(id)
		h.keys("enter")
		v = h.see("● working", "task "+id)
		// Not started here and not in a task history: no name to show.
		require.Regexp(t, short(id)+`\s+-\s+● working\s+\d+s\s+\d+m`, v, "id, name, status, age and ttl left")
		require.Contains(t, v, "1 working")

		h.keys("c")
		h.see("Cancel task " + short(id))
		h.keys("n")
		h.see("not cancelled")
		require.Equal(t, mcptask.StatusWorking, h.m.tasks.byID[id].status)
		h.keys("c", "y")
		// The cancel's own answer (its flash), not only the watcher's
		// poll, before the next key: a late answer would replace the
		// next key's flash.
		v = h.see("⊘ cancelled", "⊘ 1 cancelled", "task "+short(id)+": cancelled")
		require.Contains(t, v, "0 working")

		// r refreshes: tasks/list in the core dialect, an explanation in
		// the extension.
		h.keys("r")
		if d == mcptask.Core {
			h.see("tasks/list: 0 task(s) of this session")
		} else {
			h.see("the tasks extension has no tasks/list")
		}

		h.keys("o")
		h.typ("0123456789abcdef0123456789abcdef")
		h.keys("enter")
		h.see("cannot open task 0123456789abcdef0123456789abcdef")
	})
}

func TestTasksTabListsTheSessionsTasksInCore(t *testing.T) {
	h := newHarness(t, clitest.Release(t), mcptask.Core, true)
	h.selectTool("generate_report")
	h.keys("enter")
	h.typ("a")
	h.keys("tab")
	h.typ("0")
	h.keys("enter")
	h.see("✓ completed")
	h.keys("r")
	h.see("tasks/list: 1 task(s) of this session, 0 new")
	require.Len(t, h.m.tasks.rows, 1)
}

func TestInputRequestsAreAnsweredInAForm(t *testing.T) {
	url := clitest.Jobs(t)
	dialects(t, func(t *testing.T, d mcptask.Dialect) {
		h := newHarness(t, url, d, true)
		h.selectTool("confirm_delete")
		h.see("runs as: task (taskSupport required)")
		h.keys("enter")
		h.typ("a.txt")
		h.keys("enter")
		v := h.see("asks", "Delete 'a.txt'?", "confirm*", "boolean: true or false", "esc later", "ctrl+d decline")
		require.Contains(t, v, "◆ 1 need input", "the status line counts the waiting request")
		h.typ("maybe")
		h.keys("enter")
		h.see(`✗ "maybe" is not valid: want boolean: true or false`)
		h.keys("ctrl+u")
		h.typ("true")
		h.keys("enter")
		v = h.see("✓ completed", "deleted 'a.txt'")
		require.Contains(t, v, "◆ 0 need input")

		// esc closes the form without an answer; a opens it again;
		// ctrl+d declines.
		h.selectTool("confirm_delete")
		h.keys("enter")
		h.typ("b.txt")
		h.keys("enter")
		h.see("Delete 'b.txt'?")
		h.keys("esc")
		v = h.see("not answered: press a to answer it later", "a answer")
		require.Contains(t, v, "◆ 1 need input", "the question still waits")
		h.keys("a")
		h.see("Delete 'b.txt'?")
		h.keys("ctrl+d")
		h.see("kept 'b.txt'")
	})
}

func TestFailedTasksShowTheirError(t *testing.T) {
	h := newHarness(t, clitest.Jobs(t), mcptask.Core, true)
	h.selectTool("failing_job")
	h.keys("enter", "enter")
	v := h.see("✗ failed", "result (isError):", "simulated failure: job crashed", "✗ 1 failed")
	require.Contains(t, v, "0 working")
	h.selectTool("protocol_error_job")
	h.keys("enter", "enter")
	h.see("✗ 2 failed", "error: ", "simulated protocol error")
}

func TestHelpLayoutAndNoColor(t *testing.T) {
	url := clitest.Release(t)
	h := newHarness(t, url, mcptask.Extension, true)
	h.keys("?")
	v := h.see("Keys", "c: cancel (asks y/n)", "ctrl+s: submit", "◆ needs input")
	require.Contains(t, v, "? help  q quit", "the status line stays")
	h.keys("x")
	h.see("[1 Tools]", "generate_report")
	require.False(t, h.m.help)

	// Tabs by number and by tab key.
	h.keys("tab")
	h.see("[2 Prompts]")
	h.keys("shift+tab", "shift+tab")
	h.see("[3 Tasks]")

	sgrColour := regexp.MustCompile(`\x1b\[[0-9;]*(3[0-7]|9[0-7]|38;)[0-9;]*m`)
	require.NotRegexp(t, sgrColour, h.m.View().Content, "NO_COLOR: no colour codes")
	coloured := newHarness(t, url, mcptask.Extension, false)
	coloured.keys("?")
	require.Regexp(t, sgrColour, coloured.m.View().Content, "colours otherwise")

	// A smaller terminal still gets a full, clipped screen.
	h.process(teaSize(60, 16))
	h.keys("1")
	lines := strings.Split(h.view(), "\n")
	require.Len(t, lines, 16)

	h.keys("q")
	h.until("the program to quit", func(string) bool { return h.quit })
}

func TestStatusLineCountsWorkingTasks(t *testing.T) {
	h := newHarness(t, clitest.Release(t), mcptask.Extension, true)
	for _, topic := range []string{"a", "b"} {
		h.selectTool("generate_report")
		h.keys("enter")
		h.typ(topic)
		h.keys("tab")
		h.typ("1")
		h.keys("enter")
	}
	h.see("● 2 working  ◆ 0 need input")
	h.see("● 0 working  ◆ 0 need input  ✓ 2 done")
}

func TestOpenedTaskThatNeedsInputAsksInAForm(t *testing.T) {
	url := clitest.Jobs(t)
	dialects(t, func(t *testing.T, d mcptask.Dialect) {
		// Another client starts a task that asks a question, and walks
		// away: the task waits in input_required.
		other, err := client.Dial(context.Background(), client.HTTPTransport(url, nil), &client.Options{Dialect: d})
		require.NoError(t, err)
		defer other.Close()
		var id string
		for ev, err := range other.CallTool(context.Background(), "confirm_delete", map[string]any{"filename": "c.txt"}, nil) {
			require.NoError(t, err)
			id = ev.Task.ID
			break
		}

		h := newHarness(t, url, d, true)
		h.keys("3", "o")
		h.typ(id)
		h.keys("enter")
		v := h.see("Delete 'c.txt'?", "confirm*")
		require.Contains(t, v, "◆ 1 need input")
		h.typ("yes")
		h.keys("enter")
		h.see(`✗ "yes" is not valid`)
		h.keys("ctrl+u")
		h.typ("true")
		h.keys("enter")
		h.see("✓ completed", "deleted 'c.txt'", "◆ 0 need input")
	})
}

func TestPromptsTabShowsAPlainPrompt(t *testing.T) {
	h := newHarness(t, clitest.Release(t), mcptask.Extension, true)
	h.keys("2", "down")
	h.see("› release_notes_plain")
	h.keys("enter")
	h.typ("taskbridge")
	h.keys("enter", "enter")
	v := h.see("prompt release_notes_plain: (lines 1-", "[user] Run workflow \"release_notes_plain\"", "[assistant] Step \"fetch\": calling tool \"fetch_changes\"")
	require.NotContains(t, v, "stopped: waiting for the client")
	h.keys("pgdown", "pgdown")
	h.see(`[assistant] Workflow "release_notes_plain" stopped: waiting for the client`)
	h.keys("esc")
	require.NotContains(t, h.view(), "prompt release_notes_plain: (lines")
	require.Nil(t, h.m.prompts.wf, "no workflow view: a plain prompt has no handoff")
	require.Empty(t, h.m.tasks.rows, "and no task")
}
