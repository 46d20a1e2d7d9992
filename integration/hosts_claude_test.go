package integration

// Claude Code's way (issue 28, item 5): a host that behaves as Claude
// Code's CLI is documented to (2.1.319+): it speaks only the 2026-07-28
// extension dialect, opens with server/discover (no initialize), declares
// the tasks extension on every request, sends every tools/call plainly
// (in this dialect the server decides whether a call becomes a task) and
// takes a task for an answer, polls tasks/get at pollIntervalMs, shows
// its model only a task's final result (never statusMessage), and asks
// the *user* an input_required task's questions (a question card),
// answering with tasks/update. Its model is the prose reader of
// model_test.go, which must never need task_result.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
)

// claudeHost is a host that runs tasks as Claude Code's CLI does.
type claudeHost struct {
	t    testing.TB
	c    *relClient
	user map[string]any // what the user answers in a question card, by field

	tasks     int      // tools/call answered with a task
	polls     int      // tasks/get sent
	questions []string // the questions shown to the user
	plain     int      // tools/call answered with a result
}

// newClaudeHost opens the session as Claude Code does: server/discover,
// declaring the extension, with no initialize.
func newClaudeHost(t testing.TB, ctx context.Context, url string, user map[string]any) *claudeHost {
	t.Helper()
	h := &claudeHost{t: t, c: newRelClient(url, nil, relExt, ""), user: user}
	found := h.c.must(t, ctx, "server/discover", map[string]any{})
	exts, _ := found["capabilities"].(map[string]any)["extensions"].(map[string]any)
	require.Contains(t, exts, mcptask.ExtensionID, "the server offers the tasks extension: %v", found)
	require.Contains(t, found["supportedVersions"], relExtVersion)
	return h
}

func (h *claudeHost) listTools(ctx context.Context) ([]*mcp.Tool, error) {
	rep, err := h.c.call(ctx, "tools/list", map[string]any{})
	if err != nil {
		return nil, err
	}
	if rep.Err != nil {
		return nil, rep.Err
	}
	var res mcp.ListToolsResult
	if err := json.Unmarshal(rep.Result, &res); err != nil {
		return nil, err
	}
	return res.Tools, nil
}

// callTool sends the model's call plainly; a task answer is polled to its
// end in the background, the model seeing only its final result.
func (h *claudeHost) callTool(ctx context.Context, name string, args map[string]any) (string, bool, error) {
	rep, err := h.c.call(ctx, "tools/call", map[string]any{"name": name, "arguments": args})
	if err != nil {
		return "", false, err
	}
	if rep.Err != nil {
		return rep.Err.Message, true, nil // shown to the model as the call's error
	}
	res := rep.Map()
	if res["resultType"] != "task" {
		h.plain++
		text, isError := resultText(res)
		return text, isError, nil
	}
	h.tasks++
	return h.await(ctx, res)
}

// await polls a task at its pollIntervalMs until it ends, asking the
// user its questions on the way, and returns its final result as the
// model sees it.
func (h *claudeHost) await(ctx context.Context, task map[string]any) (string, bool, error) {
	id, _ := task["taskId"].(string)
	if id == "" {
		return "", false, fmt.Errorf("a task answer without taskId: %v", task)
	}
	answered := map[string]bool{}
	for {
		interval := 1000.0
		if v, ok := task["pollIntervalMs"].(float64); ok && v > 0 {
			interval = v
		}
		select {
		case <-ctx.Done():
			return "", false, fmt.Errorf("task %s did not end: %w (last: %v)", id, ctx.Err(), task)
		case <-time.After(time.Duration(interval) * time.Millisecond):
		}
		rep, err := h.c.call(ctx, "tasks/get", map[string]any{"taskId": id})
		if err != nil {
			return "", false, err
		}
		if rep.Err != nil {
			return "", false, fmt.Errorf("tasks/get %s: %v", id, rep.Err)
		}
		h.polls++
		task = rep.Map()
		switch task["status"] {
		case "completed":
			res, _ := task["result"].(map[string]any)
			text, isError := resultText(res)
			return text, isError, nil
		case "failed":
			b, _ := json.Marshal(task["error"])
			return string(b), true, nil
		case "cancelled":
			return "the task was cancelled", true, nil
		case "input_required":
			if err := h.ask(ctx, id, task, answered); err != nil {
				return "", false, err
			}
		}
	}
}

// ask shows each new question of task id to the user (a question card)
// and sends the user's answers with tasks/update.
func (h *claudeHost) ask(ctx context.Context, id string, task map[string]any, answered map[string]bool) error {
	reqs, _ := task["inputRequests"].(map[string]any)
	answers := map[string]any{}
	for key, r := range reqs {
		if answered[key] {
			continue
		}
		params, _ := r.(map[string]any)["params"].(map[string]any)
		msg, _ := params["message"].(string)
		props, _ := params["requestedSchema"].(map[string]any)["properties"].(map[string]any)
		content := map[string]any{}
		for field := range props {
			v, ok := h.user[field]
			if !ok {
				return fmt.Errorf("the question %q asks for %q, which the user has no answer for", msg, field)
			}
			content[field] = v
		}
		h.questions = append(h.questions, msg)
		answers[key] = map[string]any{"action": "accept", "content": content}
		answered[key] = true
	}
	if len(answers) == 0 {
		return nil
	}
	rep, err := h.c.call(ctx, "tasks/update", map[string]any{"taskId": id, "inputResponses": answers})
	if err != nil {
		return err
	}
	if rep.Err != nil {
		return fmt.Errorf("tasks/update %s: %v", id, rep.Err)
	}
	return nil
}

// resultText is the text of a CallToolResult as JSON, and its isError.
func resultText(res map[string]any) (string, bool) {
	var parts []string
	content, _ := res["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok && m["type"] == "text" {
			parts = append(parts, m["text"].(string))
		}
	}
	isError, _ := res["isError"].(bool)
	return strings.Join(parts, "\n"), isError
}

// TestClaudeCodeWay: a host that behaves as Claude Code's CLI completes
// every example-62 workflow. A workflow tool call becomes a task (a leg)
// the host polls; its final result is the handoff at the next pause for
// the model (a step it calls) or the workflow's end. The model follows
// the prose as in a tool-only host but never calls task_result, and never
// meets go_live: a person's decision reaches the user as the leg's
// input_required question, answered with tasks/update. The model's steps
// are the tool steps (the review, a handed-over tag, the announcement);
// the person's are the events.
func TestClaudeCodeWay(t *testing.T) {
	p := startProc(t, exampleBinary(t, "./examples/62_tasks_workflow"), nil, "serve", "-http", "ADDR", "-db", t.TempDir()+"/tasks.db")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runs := []struct {
		modelRun
		user      map[string]any
		questions int
	}{
		{modelRun: exampleRuns[0]},
		{modelRun: exampleRuns[1]},
		{modelRun: exampleRuns[2]},
		{modelRun: modelRun{name: "canary_release approved by the user", tool: "canary_release",
			// a soak longer than the prompt's wait: the host polls through it
			args: map[string]any{"repo": "shop", "version": "v2.0.0", "soak_seconds": 4},
			check: func(t *testing.T, m *model, end state) {
				require.Contains(t, end.text, `"promote_release" (tool "promote_release"): {`)
			}},
			user: map[string]any{"approved": true, "reason": "error rate flat during the soak"}, questions: 1},
		{modelRun: modelRun{name: "canary_release rejected by the user", tool: "canary_release",
			args: map[string]any{"repo": "shop", "version": "v2.1.0", "soak_seconds": 1},
			check: func(t *testing.T, m *model, end state) {
				require.Contains(t, end.text, `"rollback_release" (tool "rollback_release"): {`)
			}},
			user: map[string]any{"approved": false, "reason": "p99 latency doubled"}, questions: 1},
		// TODO(issue 28): release_train, once the step kinds it shows are on main.
	}
	for _, run := range runs {
		t.Run(strings.ReplaceAll(run.name, " ", "_"), func(t *testing.T) {
			h := newClaudeHost(t, ctx, p.url, run.user)
			tools, err := h.listTools(ctx)
			require.NoError(t, err)
			require.True(t, slices.ContainsFunc(tools, func(tl *mcp.Tool) bool { return tl.Name == run.tool }))
			m := &model{t: t, h: h, says: run.says, never: []string{"task_result"}}
			end := m.follow(ctx, run.tool, run.args)
			require.Equal(t, "completed", end.status, m.transcript())
			run.check(t, m, end)
			require.GreaterOrEqual(t, h.tasks, 1, "the workflow's call became a task the host polled")
			require.Empty(t, m.asked, "the model asked the user nothing itself")
			require.Len(t, h.questions, run.questions, "the user's question cards: %q", h.questions)
			for _, q := range h.questions {
				require.Equal(t, `The workflow waits for your decision (event "go_live"): whether the canary may go to every user.`, q,
					"a question for a person, not the ways a program delivers it")
			}
			for _, tr := range m.turns {
				require.NotContains(t, tr.text, "task_result", "the model is never told to wait:\n%s", m.transcript())
			}
			total, largest := m.readBytes()
			t.Logf("%s: %d model calls (%d answered by a task, %d plainly), %d polls by the host, %d questions to the user, %d bytes read by the model (largest %d)",
				run.name, len(m.turns), h.tasks, h.plain, h.polls, len(h.questions), total, largest)
		})
	}
}
