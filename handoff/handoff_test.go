package handoff_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	invopop "github.com/invopop/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// pausedDoc is paused at a client step with placeholders, followed by a
// server step.
func pausedDoc() *handoff.Document {
	return &handoff.Document{
		SchemaVersion: handoff.SchemaVersion,
		TaskID:        "task-paused-1",
		Workflow:      "publish-summary",
		Goal:          "Summarize a page and publish it.",
		Status:        string(mcptask.StatusInputRequired),
		PauseReason:   `step "review" must be performed by the client`,
		CompletedSteps: []handoff.CompletedStep{
			{Name: "fetch", Tool: "fetch_url", Result: json.RawMessage(`{"content":[{"text":"Example Domain","type":"text"}],"isError":false}`)},
			{Name: "summarize", Tool: "summarize_text", Result: json.RawMessage(`{"summary":"A domain for examples & <docs>."}`)},
			{Name: "note", Tool: "noop"},
		},
		RemainingSteps: []handoff.RemainingStep{
			{
				Name:      "review",
				Tool:      "review_draft",
				Execution: mcptask.ExecClient,
				Arguments: map[string]json.RawMessage{
					"draft":   json.RawMessage(`"A domain for examples & <docs>."`),
					"verdict": handoff.Placeholder("approve or reject"),
					"limits":  json.RawMessage(`{"maxWords":100,"tags":["a","b"]}`),
				},
				Guidance:  "Check the draft for accuracy.\nReject it if anything is invented.",
				DependsOn: []string{"summarize"},
			},
			{
				Name:      "publish",
				Tool:      "publish_post",
				Execution: mcptask.ExecServer,
				Arguments: map[string]json.RawMessage{"body": handoff.Placeholder("the approved draft")},
				DependsOn: []string{"review"},
			},
		},
		Continuation: handoff.NewContinuation("task-paused-1", mcptask.Core),
	}
}

// failedDoc stopped at a failed step.
func failedDoc() *handoff.Document {
	return &handoff.Document{
		SchemaVersion: handoff.SchemaVersion,
		TaskID:        "task-failed-2",
		Workflow:      "nightly-report",
		Status:        string(mcptask.StatusFailed),
		PauseReason:   `step "fetch" failed: connection refused`,
		CompletedSteps: []handoff.CompletedStep{
			{Name: "plan", Tool: "make_plan", Result: json.RawMessage(`"plan ready"`)},
		},
		RemainingSteps: []handoff.RemainingStep{
			{Name: "fetch", Tool: "fetch_url", Execution: mcptask.ExecServer, Arguments: map[string]json.RawMessage{"url": json.RawMessage(`"https://example.com"`)}},
		},
		Errors: []handoff.StepError{
			{Step: "fetch", Tool: "fetch_url", Message: "connection refused", Retryable: true},
			{Step: "plan", Message: "plan was truncated"},
		},
		Continuation: handoff.NewContinuation("task-failed-2", mcptask.Core),
	}
}

// completeDoc has no remaining steps.
func completeDoc() *handoff.Document {
	return &handoff.Document{
		SchemaVersion: handoff.SchemaVersion,
		TaskID:        "task-done-3",
		Workflow:      "greet",
		Status:        string(mcptask.StatusCompleted),
		CompletedSteps: []handoff.CompletedStep{
			{Name: "greet", Tool: "greet", Result: json.RawMessage(`{"content":[{"text":"Hello, Ada!","type":"text"}]}`)},
		},
		Continuation: handoff.NewContinuation("task-done-3", mcptask.Core),
	}
}

// extDoc is for a client on the tasks extension: no tasks/result.
func extDoc() *handoff.Document {
	return &handoff.Document{
		SchemaVersion: handoff.SchemaVersion,
		TaskID:        "ext-4",
		Workflow:      "triage",
		Status:        string(mcptask.StatusInputRequired),
		PauseReason:   `step "label" must be performed by the client`,
		RemainingSteps: []handoff.RemainingStep{
			{Name: "label", Tool: "set_label", Execution: mcptask.ExecClient, Arguments: map[string]json.RawMessage{"label": handoff.Placeholder("bug, feature or question")}, Guidance: "Pick the best label."},
			{Name: "close", Tool: "close_issue", Execution: mcptask.ExecClient, Guidance: "Close the issue if it is a question."},
		},
		Continuation: handoff.NewContinuation("ext-4", mcptask.Extension),
	}
}

func allDocs() map[string]*handoff.Document {
	return map[string]*handoff.Document{
		"paused":    pausedDoc(),
		"failed":    failedDoc(),
		"complete":  completeDoc(),
		"extension": extDoc(),
	}
}

// prose returns the part of a rendered handoff before the JSON block.
func prose(t *testing.T, text string) string {
	t.Helper()
	i := strings.LastIndex(text, "```json")
	require.GreaterOrEqual(t, i, 0)
	if j := strings.LastIndex(text[:i], "\nThe same handoff follows as JSON"); j >= 0 {
		return text[:j+1]
	}
	return text[:i]
}

func TestRenderParseRoundTrip(t *testing.T) {
	for name, doc := range allDocs() {
		t.Run(name, func(t *testing.T) {
			text, err := handoff.Render(doc)
			require.NoError(t, err)
			require.True(t, strings.HasSuffix(text, "\n```\n"), "ends with the closing fence")
			require.Equal(t, 1, strings.Count(text, "```json"), "exactly one json block")

			got, err := handoff.Parse(text)
			require.NoError(t, err)
			require.Equal(t, doc, got)

			// Rendering is deterministic.
			again, err := handoff.Render(got)
			require.NoError(t, err)
			require.Equal(t, text, again)
		})
	}
}

func TestProse(t *testing.T) {
	for name, doc := range allDocs() {
		t.Run(name, func(t *testing.T) {
			text, err := handoff.Render(doc)
			require.NoError(t, err)
			p := prose(t, text)
			first, _, _ := strings.Cut(p, "\n")
			require.Contains(t, first, `"`+doc.TaskID+`"`, "task id in the first sentence")
			require.Contains(t, first, `"`+doc.Workflow+`"`, "workflow in the first sentence")
			require.Contains(t, first, doc.Status)
			for _, s := range doc.CompletedSteps {
				require.Contains(t, p, `(tool "`+s.Tool+`")`)
			}
			next := doc.ClientSteps()
			for _, s := range doc.RemainingSteps {
				if s.Execution == mcptask.ExecClient && s.Status != mcptask.StepPending {
					require.Contains(t, p, `Call tool "`+s.Tool+`" with {`, "the step the client performs now is a call to make")
					for _, line := range strings.Split(s.Guidance, "\n") {
						require.Contains(t, p, strings.TrimSpace(line))
					}
					continue
				}
				require.Contains(t, p, `(tool "`+s.Tool+`")`)
			}
			switch {
			case doc.Status == string(mcptask.StatusCompleted) || doc.Status == string(mcptask.StatusFailed) || doc.Status == string(mcptask.StatusCancelled):
				require.Contains(t, p, "The workflow has finished")
				require.NotContains(t, p, "Next:")
			case len(next) > 0:
				require.Contains(t, p, "Next")
				require.Contains(t, p, `"_meta": {"_task_id": "`+doc.TaskID+`"}`)
			default:
				require.Contains(t, p, "Next: nothing for you to call now")
				require.Contains(t, p, `tasks/get {"taskId": "`+doc.TaskID+`"}`)
				if doc.PauseReason != "" {
					require.Contains(t, p, doc.PauseReason)
				}
			}
			if doc.Continuation.ResultMethod == "" {
				require.NotContains(t, p, "tasks/result")
			}
			require.NotContains(t, p, "\r")
		})
	}
}

func TestProseDetails(t *testing.T) {
	text, err := handoff.Render(pausedDoc())
	require.NoError(t, err)
	p := prose(t, text)
	// CallToolResult text, not raw JSON.
	require.Contains(t, p, `- "fetch" (tool "fetch_url"): Example Domain`+"\n")
	require.NotContains(t, p, `"content"`)
	// Other results as compact JSON, not HTML-escaped.
	require.Contains(t, p, `- "summarize" (tool "summarize_text"): {"summary":"A domain for examples & <docs>."}`)
	require.Contains(t, p, `- "note" (tool "noop"): (no result recorded)`)
	// The client step: one call to make, the values to fill in named, the
	// guidance kept on its lines.
	require.Contains(t, p, `Next: step "review". Call tool "review_draft" with {"draft":"A domain for examples & <docs>.","limits":{"maxWords":100,"tags":["a","b"]},"verdict":<value>}, where:`)
	require.Contains(t, p, "\n- \"verdict\" (value): approve or reject")
	require.Contains(t, p, "Guidance: Check the draft for accuracy.\n  Reject it if anything is invented.")
	// The server step after it.
	require.Contains(t, p, "Then:\n- \"publish\" (tool \"publish_post\"): the server runs it by itself.")
	require.NotContains(t, p, "the approved draft", "server step arguments are not spelled out in the prose")

	// A failed document: why it stopped, what was done, nothing to do.
	text, err = handoff.Render(failedDoc())
	require.NoError(t, err)
	p = prose(t, text)
	require.Contains(t, p, `Workflow "nightly-report" (task "task-failed-2") has failed (status: failed).`)
	require.Contains(t, p, `Stopped because: step "fetch" failed: connection refused.`)
	require.Contains(t, p, `- "plan" (tool "make_plan"): plan ready`)
	require.Contains(t, p, `- "fetch" (tool "fetch_url"): will not run: the workflow stopped.`)
	require.Contains(t, p, "The workflow has finished; there is nothing more to do.")

	// A complete document.
	text, err = handoff.Render(completeDoc())
	require.NoError(t, err)
	p = prose(t, text)
	require.Contains(t, p, `Workflow "greet" (task "task-done-3") is complete (status: completed).`)
	require.Contains(t, p, `- "greet" (tool "greet"): Hello, Ada!`)
	require.NotContains(t, p, "Then:")
	require.Contains(t, text, `"remainingSteps": [],`)

	// An extension document: two client steps, one without arguments.
	text, err = handoff.Render(extDoc())
	require.NoError(t, err)
	p = prose(t, text)
	require.Contains(t, p, "Next, in any order:\n1. step \"label\"")
	require.Contains(t, p, `2. step "close". Call tool "close_issue" with {}.`)
	require.NotContains(t, p, "Done:")
	require.Contains(t, text, `"completedSteps": [],`)
	require.Contains(t, text, `"arguments": {},`)

	// Without the JSON block: the prose alone, for a tool result.
	alone, err := handoff.RenderWith(pausedDoc(), &handoff.RenderOptions{NoJSON: true})
	require.NoError(t, err)
	require.NotContains(t, alone, "```")
	require.Equal(t, strings.TrimSpace(prose(t, mustRender(t, pausedDoc()))), strings.TrimSpace(alone))
}

func mustRender(t *testing.T, d *handoff.Document) string {
	t.Helper()
	text, err := handoff.Render(d)
	require.NoError(t, err)
	return text
}

func TestProseTruncatesLongResults(t *testing.T) {
	doc := completeDoc()
	long := strings.Repeat("word ", 100) + "END"
	b, err := json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text", "text": long}}})
	require.NoError(t, err)
	doc.CompletedSteps[0].Result = b
	doc.CompletedSteps = append(doc.CompletedSteps, handoff.CompletedStep{
		Name: "multi", Tool: "multi", Result: json.RawMessage(`"line one\nline two\ttabbed"`),
	})
	text, err := handoff.Render(doc)
	require.NoError(t, err)
	p := prose(t, text)
	require.NotContains(t, p, "END")
	require.Contains(t, p, "word word…\n")
	for _, line := range strings.Split(p, "\n") {
		require.LessOrEqual(t, len([]rune(line)), 260, "line %q", line)
	}
	require.Contains(t, p, `- "multi" (tool "multi"): line one line two tabbed`)

	// Huge arguments are truncated in the prose only.
	doc = extDoc()
	big := json.RawMessage(`"` + strings.Repeat("x", 5000) + `"`)
	doc.RemainingSteps[0].Arguments["body"] = big
	text, err = handoff.Render(doc)
	require.NoError(t, err)
	require.Contains(t, prose(t, text), "(truncated: the full arguments are in the structured content)")
	got, err := handoff.Parse(text)
	require.NoError(t, err)
	require.Equal(t, big, got.RemainingSteps[0].Arguments["body"])
}

func TestParsePicksLastBlock(t *testing.T) {
	first, err := handoff.Render(completeDoc())
	require.NoError(t, err)
	second, err := handoff.Render(pausedDoc())
	require.NoError(t, err)
	got, err := handoff.Parse(first + "\nSome later text.\n\n" + second)
	require.NoError(t, err)
	require.Equal(t, pausedDoc(), got)

	// A later non-json fence does not count.
	got, err = handoff.Parse(second + "\n```go\nfunc main() {}\n```\n")
	require.NoError(t, err)
	require.Equal(t, pausedDoc(), got)
}

func TestParseTolerance(t *testing.T) {
	text, err := handoff.Render(failedDoc())
	require.NoError(t, err)
	text = strings.ReplaceAll(text, "\n", "\r\n")
	text = strings.Replace(text, "```json", "  ```JSON  ", 1)
	text = "\n\n   " + text + "  \r\n\t\n"
	got, err := handoff.Parse(text)
	require.NoError(t, err)
	require.Equal(t, failedDoc(), got)

	// Longer fences, unknown fields, and non-canonical JSON (values come
	// back compact, with sorted keys and numbers as written).
	body := `{"schemaVersion":1,"taskId":"t","workflow":"w","status":"working","futureField":{"x":1},
	  "completedSteps":[{"name":"a","tool":"ta","result": { "k" : [1, 2], "b": 1.50, "a": "\u003cx\u003e", "a": "dup" },"extra":true}],
	  "remainingSteps":[{"name":"b","tool":"tb","execution":"server","arguments":{"v": [ 1 ]},"dependsOn":[]}],
	  "errors":[],
	  "continuation":{"metaKey":"_task_id","taskId":"t","statusMethod":"tasks/get","instructions":"x","later":1}}`
	got, err = handoff.Parse("prose\n````json\n" + body + "\n````\n")
	require.NoError(t, err)
	require.Equal(t, &handoff.Document{
		SchemaVersion:  1,
		TaskID:         "t",
		Workflow:       "w",
		Status:         "working",
		CompletedSteps: []handoff.CompletedStep{{Name: "a", Tool: "ta", Result: json.RawMessage(`{"a":"dup","b":1.50,"k":[1,2]}`)}},
		RemainingSteps: []handoff.RemainingStep{{Name: "b", Tool: "tb", Execution: mcptask.ExecServer, Arguments: map[string]json.RawMessage{"v": json.RawMessage(`[1]`)}}},
		Continuation:   handoff.Continuation{MetaKey: "_task_id", TaskID: "t", StatusMethod: "tasks/get", Instructions: "x"},
	}, got)
}

// docJSON returns pausedDoc as a generic JSON value, to be broken.
func docJSON(t *testing.T) map[string]any {
	t.Helper()
	b, err := json.Marshal(pausedDoc())
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

func block(t *testing.T, m map[string]any) string {
	t.Helper()
	b, err := json.MarshalIndent(m, "", "  ")
	require.NoError(t, err)
	return "Some prose.\n\n```json\n" + string(b) + "\n```\n"
}

func remaining(m map[string]any, i int) map[string]any {
	return m["remainingSteps"].([]any)[i].(map[string]any)
}

func TestParseRejects(t *testing.T) {
	cases := []struct {
		name     string
		text     func(t *testing.T) string
		sentinel error
		msg      string
	}{
		{"no block", func(*testing.T) string { return "Just prose, no JSON.\n```\n{}\n```\n" }, handoff.ErrNoHandoff, "handoff: no ```json block found in the text"},
		{"empty text", func(*testing.T) string { return "" }, handoff.ErrNoHandoff, "no ```json block"},
		{"unterminated fence", func(t *testing.T) string {
			text, err := handoff.Render(pausedDoc())
			require.NoError(t, err)
			return strings.TrimSuffix(text, "```\n")
		}, handoff.ErrInvalid, "is never closed"},
		{"empty block", func(*testing.T) string { return "```json\n\n```" }, handoff.ErrInvalid, "the ```json block is empty"},
		{"invalid JSON", func(*testing.T) string { return "prose\n```json\n{\n  \"schemaVersion\": 1,\n  oops\n}\n```\n" }, handoff.ErrInvalid, "invalid JSON at line 5"},
		{"truncated JSON", func(*testing.T) string { return "```json\n{\"schemaVersion\": 1,\n```\n" }, handoff.ErrInvalid, "invalid JSON"},
		{"wrong type", func(*testing.T) string { return "```json\n{\"schemaVersion\": \"1\"}\n```\n" }, handoff.ErrInvalid, "invalid JSON at line 2"},
		{"not an object", func(*testing.T) string { return "```json\n[1, 2]\n```\n" }, handoff.ErrInvalid, "does not hold a JSON object"},
		{"trailing data", func(*testing.T) string { return "```json\n{}\n{}\n```\n" }, handoff.ErrInvalid, "unexpected data after the JSON object at line 3"},
		{"wrong schemaVersion", func(t *testing.T) string {
			m := docJSON(t)
			m["schemaVersion"] = 5
			return block(t, m)
		}, handoff.ErrInvalid, "handoff: schemaVersion 5 is not supported (this package supports schemaVersions 1 to 4)"},
		{"tool-less step without a kind", func(t *testing.T) string {
			m := docJSON(t)
			remaining(m, 0)["tool"] = ""
			return block(t, m)
		}, handoff.ErrInvalid, `handoff: remainingSteps[0]: step "review": tool is empty`},
		{"unknown kind", func(t *testing.T) string {
			m := docJSON(t)
			remaining(m, 0)["kind"] = "Nap Time"
			return block(t, m)
		}, handoff.ErrInvalid, `handoff: remainingSteps[0]: step "review": kind "Nap Time" is not a kind name (lowercase letters and underscores, like "sleep")`},
		{"missing schemaVersion", func(t *testing.T) string {
			m := docJSON(t)
			delete(m, "schemaVersion")
			return block(t, m)
		}, handoff.ErrInvalid, "schemaVersion is missing"},
		{"missing taskId", func(t *testing.T) string {
			m := docJSON(t)
			delete(m, "taskId")
			return block(t, m)
		}, handoff.ErrInvalid, "handoff: taskId is empty"},
		{"missing workflow", func(t *testing.T) string {
			m := docJSON(t)
			m["workflow"] = ""
			return block(t, m)
		}, handoff.ErrInvalid, "handoff: workflow is empty"},
		{"bad status", func(t *testing.T) string {
			m := docJSON(t)
			m["status"] = "paused"
			return block(t, m)
		}, handoff.ErrInvalid, `handoff: status "paused" is not one of working, input_required, completed, failed, cancelled`},
		{"bad execution", func(t *testing.T) string {
			m := docJSON(t)
			remaining(m, 1)["execution"] = "bogus"
			return block(t, m)
		}, handoff.ErrInvalid, `handoff: remainingSteps[1]: execution "bogus" is not "server" or "client"`},
		{"missing execution", func(t *testing.T) string {
			m := docJSON(t)
			delete(remaining(m, 0), "execution")
			return block(t, m)
		}, handoff.ErrInvalid, `handoff: remainingSteps[0]: execution is empty`},
		{"missing tool", func(t *testing.T) string {
			m := docJSON(t)
			m["completedSteps"].([]any)[1].(map[string]any)["tool"] = ""
			return block(t, m)
		}, handoff.ErrInvalid, `handoff: completedSteps[1]: step "summarize": tool is empty`},
		{"missing name", func(t *testing.T) string {
			m := docJSON(t)
			delete(remaining(m, 0), "name")
			return block(t, m)
		}, handoff.ErrInvalid, `handoff: remainingSteps[0]: name is empty`},
		{"duplicate step names", func(t *testing.T) string {
			m := docJSON(t)
			remaining(m, 1)["name"] = "fetch"
			return block(t, m)
		}, handoff.ErrInvalid, `handoff: remainingSteps[1]: duplicate step name "fetch" (also completedSteps[0])`},
		{"self dependency", func(t *testing.T) string {
			m := docJSON(t)
			remaining(m, 1)["dependsOn"] = []any{"publish"}
			return block(t, m)
		}, handoff.ErrInvalid, `handoff: remainingSteps[1]: dependsOn[0]: step "publish" depends on itself`},
		{"error without message", func(t *testing.T) string {
			m := docJSON(t)
			m["errors"] = []any{map[string]any{"step": "fetch"}}
			return block(t, m)
		}, handoff.ErrInvalid, `handoff: errors[0]: message is empty`},
		{"mismatched continuation task id", func(t *testing.T) string {
			m := docJSON(t)
			m["continuation"].(map[string]any)["taskId"] = "other"
			return block(t, m)
		}, handoff.ErrInvalid, `handoff: continuation.taskId "other" does not match taskId "task-paused-1"`},
		{"wrong continuation metaKey", func(t *testing.T) string {
			m := docJSON(t)
			m["continuation"].(map[string]any)["metaKey"] = "taskId"
			return block(t, m)
		}, handoff.ErrInvalid, `handoff: continuation.metaKey is "taskId", want "_task_id"`},
		{"missing statusMethod", func(t *testing.T) string {
			m := docJSON(t)
			delete(m["continuation"].(map[string]any), "statusMethod")
			return block(t, m)
		}, handoff.ErrInvalid, `handoff: continuation.statusMethod is empty`},
		{"too large", func(*testing.T) string {
			return "```json\n{}\n```\n" + strings.Repeat(" ", handoff.MaxSize)
		}, handoff.ErrInvalid, "more than the 8388608-byte limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := handoff.Parse(tc.text(t))
			require.Error(t, err)
			require.Nil(t, doc)
			require.ErrorIs(t, err, tc.sentinel)
			other := handoff.ErrInvalid
			if tc.sentinel == handoff.ErrInvalid {
				other = handoff.ErrNoHandoff
			}
			require.NotErrorIs(t, err, other)
			require.Contains(t, err.Error(), tc.msg)
		})
	}
}

func TestValidate(t *testing.T) {
	var nilDoc *handoff.Document
	require.ErrorIs(t, nilDoc.Validate(), handoff.ErrInvalid)
	for name, doc := range allDocs() {
		require.NoError(t, doc.Validate(), name)
	}

	doc := pausedDoc()
	doc.CompletedSteps[0].Result = json.RawMessage(`{broken`)
	require.EqualError(t, doc.Validate(), `handoff: completedSteps[0]: result is not valid JSON`)
	_, err := handoff.Render(doc)
	require.ErrorIs(t, err, handoff.ErrInvalid)

	doc = pausedDoc()
	doc.RemainingSteps[0].Arguments["x"] = nil
	require.EqualError(t, doc.Validate(), `handoff: remainingSteps[0]: arguments["x"] is empty (use json.RawMessage("null") for null)`)

	doc = pausedDoc()
	doc.RemainingSteps[0].Arguments["x"] = json.RawMessage(`nope`)
	require.EqualError(t, doc.Validate(), `handoff: remainingSteps[0]: arguments["x"] is not valid JSON`)

	doc = pausedDoc()
	doc.Errors = []handoff.StepError{{Message: "m"}}
	require.EqualError(t, doc.Validate(), `handoff: errors[0]: step is empty`)
}

func TestMarshalNeverNull(t *testing.T) {
	doc := &handoff.Document{
		SchemaVersion:  1,
		TaskID:         "t",
		Workflow:       "w",
		Status:         string(mcptask.StatusWorking),
		RemainingSteps: []handoff.RemainingStep{{Name: "s", Tool: "x", Execution: mcptask.ExecServer}},
		Continuation:   handoff.NewContinuation("t", mcptask.Extension),
	}
	for _, v := range []any{doc, *doc} {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		require.Contains(t, string(b), `"completedSteps":[]`)
		require.Contains(t, string(b), `"arguments":{}`)
		require.NotContains(t, string(b), "null")
		require.NotContains(t, string(b), `"errors"`)
	}
	b, err := json.Marshal(&handoff.Document{})
	require.NoError(t, err)
	require.Contains(t, string(b), `"completedSteps":[],"remainingSteps":[]`)
}

func TestNewContinuation(t *testing.T) {
	c := handoff.NewContinuation("abc", mcptask.Core)
	require.Equal(t, "_task_id", c.MetaKey)
	require.Equal(t, "abc", c.TaskID)
	require.Equal(t, "tasks/get", c.StatusMethod)
	require.Equal(t, "tasks/result", c.ResultMethod)
	require.Contains(t, c.Instructions, `"_meta": {"_task_id": "abc"}`)
	require.Contains(t, c.Instructions, "tasks/result")
	require.Equal(t, 1, strings.Count(c.Instructions, "."), "one sentence")

	c = handoff.NewContinuation("abc", mcptask.Extension)
	require.Empty(t, c.ResultMethod)
	require.NotContains(t, c.Instructions, "tasks/result")
	require.Contains(t, c.Instructions, `tasks/get with {"taskId": "abc"}`)
}

func TestPlaceholder(t *testing.T) {
	require.Equal(t, json.RawMessage(`"<the draft>"`), handoff.Placeholder("the draft"))
	p := handoff.Placeholder(`a "quoted" & <odd> one`)
	require.True(t, json.Valid(p))
	require.True(t, handoff.IsPlaceholder(p))
	var s string
	require.NoError(t, json.Unmarshal(p, &s))
	require.Equal(t, `<a "quoted" & <odd> one>`, s)

	for _, v := range []string{`"<x>"`, `"<>"`, ` "<x>" `, `"\u003cx\u003e"`} {
		require.True(t, handoff.IsPlaceholder(json.RawMessage(v)), v)
	}
	for _, v := range []string{``, `"x"`, `"<x"`, `"x>"`, `"<"`, `">"`, `""`, `42`, `null`, `["<x>"]`, `{"a":"<x>"}`, `"<x>`, `<x>`} {
		require.False(t, handoff.IsPlaceholder(json.RawMessage(v)), v)
	}
	require.False(t, handoff.IsPlaceholder(nil))
}

func TestClientSteps(t *testing.T) {
	steps := pausedDoc().ClientSteps()
	require.Len(t, steps, 1)
	require.Equal(t, "review", steps[0].Name)
	require.Len(t, extDoc().ClientSteps(), 2)
	require.Empty(t, completeDoc().ClientSteps())
	var nilDoc *handoff.Document
	require.Nil(t, nilDoc.ClientSteps())
}

func TestMessageAndMeta(t *testing.T) {
	doc := pausedDoc()
	msg, err := doc.Message()
	require.NoError(t, err)
	require.Equal(t, mcp.Role("assistant"), msg.Role)
	text, err := handoff.Render(doc)
	require.NoError(t, err)
	require.Equal(t, &mcp.TextContent{Text: text}, msg.Content)

	meta := doc.Meta()
	require.Len(t, meta, 1)
	require.Same(t, doc, meta[mcptask.MetaHandoff])

	bad := pausedDoc()
	bad.TaskID = ""
	_, err = bad.Message()
	require.ErrorIs(t, err, handoff.ErrInvalid)
}

// promptResult builds a prompts/get result carrying the handoff of doc in
// its text and, if meta is non-nil, in its _meta.
func promptResult(t *testing.T, doc *handoff.Document, meta map[string]any) *mcp.GetPromptResult {
	t.Helper()
	msg, err := doc.Message()
	require.NoError(t, err)
	return &mcp.GetPromptResult{
		Meta: meta,
		Messages: []*mcp.PromptMessage{
			{Role: "user", Content: &mcp.TextContent{Text: "Run the workflow."}},
			msg,
			{Role: "user", Content: &mcp.TextContent{Text: "```json\n{}\n```"}},
			{Role: "assistant", Content: &mcp.ImageContent{Data: []byte("png"), MIMEType: "image/png"}},
		},
	}
}

func TestFromPromptResult(t *testing.T) {
	t.Run("meta after JSON transit", func(t *testing.T) {
		// The text holds a different document: _meta wins.
		res := promptResult(t, extDoc(), pausedDoc().Meta())
		b, err := json.Marshal(res)
		require.NoError(t, err)
		var wire mcp.GetPromptResult
		require.NoError(t, json.Unmarshal(b, &wire))
		require.IsType(t, map[string]any{}, wire.Meta[mcptask.MetaHandoff])

		got, err := handoff.FromPromptResult(&wire)
		require.NoError(t, err)
		require.Equal(t, pausedDoc(), got)
	})
	t.Run("meta in process", func(t *testing.T) {
		doc := failedDoc()
		got, err := handoff.FromPromptResult(promptResult(t, extDoc(), doc.Meta()))
		require.NoError(t, err)
		require.Equal(t, failedDoc(), got)
		require.NotSame(t, doc, got)

		got, err = handoff.FromPromptResult(promptResult(t, extDoc(), map[string]any{mcptask.MetaHandoff: *doc}))
		require.NoError(t, err)
		require.Equal(t, failedDoc(), got)

		raw, err := json.Marshal(doc)
		require.NoError(t, err)
		got, err = handoff.FromPromptResult(promptResult(t, extDoc(), map[string]any{mcptask.MetaHandoff: json.RawMessage(raw)}))
		require.NoError(t, err)
		require.Equal(t, failedDoc(), got)
	})
	t.Run("message text", func(t *testing.T) {
		res := promptResult(t, completeDoc(), map[string]any{"other": 1})
		got, err := handoff.FromPromptResult(res)
		require.NoError(t, err)
		require.Equal(t, completeDoc(), got)

		// Also after JSON transit.
		b, err := json.Marshal(res)
		require.NoError(t, err)
		var wire mcp.GetPromptResult
		require.NoError(t, json.Unmarshal(b, &wire))
		got, err = handoff.FromPromptResult(&wire)
		require.NoError(t, err)
		require.Equal(t, completeDoc(), got)
	})
	t.Run("neither", func(t *testing.T) {
		_, err := handoff.FromPromptResult(&mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
			{Role: "user", Content: &mcp.TextContent{Text: "hi"}},
		}})
		require.ErrorIs(t, err, handoff.ErrNoHandoff)
		require.EqualError(t, err, `handoff: prompt result has no _meta["taskbridge/handoff"] and no assistant message with text content`)

		_, err = handoff.FromPromptResult(nil)
		require.ErrorIs(t, err, handoff.ErrNoHandoff)
	})
	t.Run("assistant text without a block", func(t *testing.T) {
		_, err := handoff.FromPromptResult(&mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
			{Role: "assistant", Content: &mcp.TextContent{Text: "Nothing to see."}},
		}})
		require.ErrorIs(t, err, handoff.ErrNoHandoff)
	})
	t.Run("invalid meta", func(t *testing.T) {
		m := docJSON(t)
		delete(m, "taskId")
		_, err := handoff.FromPromptResult(promptResult(t, extDoc(), map[string]any{mcptask.MetaHandoff: m}))
		require.ErrorIs(t, err, handoff.ErrInvalid)
		require.EqualError(t, err, `handoff: _meta["taskbridge/handoff"]: taskId is empty`)

		_, err = handoff.FromPromptResult(promptResult(t, extDoc(), map[string]any{mcptask.MetaHandoff: "a string"}))
		require.ErrorIs(t, err, handoff.ErrInvalid)
		require.EqualError(t, err, `handoff: _meta["taskbridge/handoff"] does not hold a JSON object`)

		var nilDoc *handoff.Document
		_, err = handoff.FromPromptResult(promptResult(t, extDoc(), map[string]any{mcptask.MetaHandoff: nilDoc}))
		require.ErrorIs(t, err, handoff.ErrInvalid)

		_, err = handoff.FromPromptResult(promptResult(t, extDoc(), map[string]any{mcptask.MetaHandoff: func() {}}))
		require.ErrorIs(t, err, handoff.ErrInvalid)
	})
}

// resolvedSchema loads SchemaJSON into the go-sdk's validator.
func resolvedSchema(t *testing.T) *jsonschema.Resolved {
	t.Helper()
	var s jsonschema.Schema
	require.NoError(t, json.Unmarshal(handoff.SchemaJSON(), &s))
	resolved, err := s.Resolve(nil)
	require.NoError(t, err)
	return resolved
}

func TestSchemaValidatesRenderedDocuments(t *testing.T) {
	resolved := resolvedSchema(t)
	for name, doc := range allDocs() {
		t.Run(name, func(t *testing.T) {
			text, err := handoff.Render(doc)
			require.NoError(t, err)
			body := text[strings.LastIndex(text, "```json\n")+len("```json\n") : len(text)-len("```\n")]
			var instance any
			require.NoError(t, json.Unmarshal([]byte(body), &instance))
			require.NoError(t, resolved.Validate(instance))
		})
	}

	bad := map[string]func(m map[string]any){
		"bad execution":      func(m map[string]any) { remaining(m, 0)["execution"] = "bogus" },
		"bad status":         func(m map[string]any) { m["status"] = "paused" },
		"schemaVersion 5":    func(m map[string]any) { m["schemaVersion"] = 5 },
		"no taskId":          func(m map[string]any) { delete(m, "taskId") },
		"empty taskId":       func(m map[string]any) { m["taskId"] = "" },
		"null steps":         func(m map[string]any) { m["completedSteps"] = nil },
		"wrong metaKey":      func(m map[string]any) { m["continuation"].(map[string]any)["metaKey"] = "x" },
		"no arguments":       func(m map[string]any) { delete(remaining(m, 0), "arguments") },
		"empty step name":    func(m map[string]any) { remaining(m, 1)["name"] = "" },
		"no statusMethod":    func(m map[string]any) { delete(m["continuation"].(map[string]any), "statusMethod") },
		"error with no step": func(m map[string]any) { m["errors"] = []any{map[string]any{"message": "m"}} },
	}
	for name, mutate := range bad {
		m := docJSON(t)
		mutate(m)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		var instance any
		require.NoError(t, json.Unmarshal(b, &instance))
		require.Error(t, resolved.Validate(instance), name)
	}

	// Unknown fields are accepted, like Parse does.
	m := docJSON(t)
	m["futureField"] = true
	remaining(m, 0)["futureField"] = true
	m["continuation"].(map[string]any)["futureField"] = true
	require.NoError(t, resolved.Validate(m))
}

func TestSchemaStructure(t *testing.T) {
	s := handoff.Schema()
	require.Equal(t, handoff.SchemaID, string(s.ID))
	require.Equal(t, "https://json-schema.org/draft/2020-12/schema", s.Version)
	require.Equal(t, "object", s.Type)
	require.Equal(t, []string{"schemaVersion", "taskId", "workflow", "status", "completedSteps", "remainingSteps", "continuation"}, s.Required)

	get := func(s *invopop.Schema, path ...string) *invopop.Schema {
		t.Helper()
		for _, name := range path {
			if name == "[]" {
				require.NotNil(t, s.Items)
				s = s.Items
				continue
			}
			p, ok := s.Properties.Get(name)
			require.True(t, ok, "property %q", name)
			s = p
		}
		return s
	}
	require.Equal(t, []any{"working", "input_required", "completed", "failed", "cancelled"}, get(s, "status").Enum)
	require.Equal(t, []any{1, 2, 3, 4}, get(s, "schemaVersion").Enum)
	require.Equal(t, "_task_id", get(s, "continuation", "metaKey").Const)
	require.Equal(t, []any{"server", "client"}, get(s, "remainingSteps", "[]", "execution").Enum)
	require.Equal(t, []string{"name", "tool", "execution", "arguments"}, get(s, "remainingSteps", "[]").Required)
	require.Equal(t, []string{"name", "tool"}, get(s, "completedSteps", "[]").Required)
	require.Equal(t, []string{"step", "message"}, get(s, "errors", "[]").Required)
	require.Equal(t, []string{"metaKey", "taskId", "statusMethod", "instructions"}, get(s, "continuation").Required)
	require.Equal(t, "array", get(s, "completedSteps").Type)
	require.Empty(t, get(s, "completedSteps", "[]", "result").Type, "a result is any JSON value")
	for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
		require.NotEmpty(t, pair.Value.Description, pair.Key)
	}

	// Schema returns a new schema each time.
	get(s, "status").Enum = nil
	require.Len(t, get(handoff.Schema(), "status").Enum, 5)

	// SchemaJSON encodes the same schema.
	js := handoff.SchemaJSON()
	want, err := json.Marshal(handoff.Schema())
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(js))
	js[0] = 'x'
	require.Equal(t, byte('{'), handoff.SchemaJSON()[0], "SchemaJSON returns a copy")
}

func TestErrorsAreDistinct(t *testing.T) {
	require.False(t, errors.Is(handoff.ErrInvalid, handoff.ErrNoHandoff))
	require.False(t, errors.Is(handoff.ErrNoHandoff, handoff.ErrInvalid))
}

// Fill.Placeholder is the <type> the prose shows in a call's arguments:
// what a server refuses when a call sends it back.
func TestFillPlaceholder(t *testing.T) {
	for _, c := range []struct {
		f    handoff.Fill
		want string
	}{
		{handoff.Fill{Name: "approved", Type: "boolean"}, "<boolean>"},
		{handoff.Fill{Name: "note", Type: "string", Optional: true}, "<string, optional>"},
		{handoff.Fill{Name: "size", Type: "string", Enum: []json.RawMessage{json.RawMessage(`"s"`), json.RawMessage(`"m"`)}}, `<string, one of "s", "m">`},
		{handoff.Fill{Name: "x"}, "<value>"},
	} {
		require.Equal(t, c.want, c.f.Placeholder(), "%+v", c.f)
	}
	text, err := handoff.RenderWith(&handoff.Document{SchemaVersion: handoff.SchemaVersion, TaskID: "t", Workflow: "w", Status: string(mcptask.StatusWorking),
		CompletedSteps: []handoff.CompletedStep{}, Continuation: handoff.NewContinuation("t", mcptask.Core),
		RemainingSteps: []handoff.RemainingStep{{Name: "s", Tool: "x", Execution: mcptask.ExecClient, Status: mcptask.StepAwaitingClient, Arguments: map[string]json.RawMessage{},
			Call: &handoff.Call{Tool: "x", Arguments: map[string]json.RawMessage{mcptask.ArgTaskID: json.RawMessage(`"t"`)}, Fill: []handoff.Fill{{Name: "note", Type: "string", Optional: true}}}}}},
		&handoff.RenderOptions{NoJSON: true})
	require.NoError(t, err)
	require.Contains(t, text, `{"_task_id":"t","note":<string, optional>}`)
}

// The prose names each kind of step that calls no tool as a person says
// it: a for-each, a loop, a child workflow; the records of a container
// and a child's steps keep their paths.
func TestProseNamesKinds(t *testing.T) {
	doc := &handoff.Document{
		SchemaVersion: handoff.SchemaVersion, TaskID: "task-train", Workflow: "release_train", Status: string(mcptask.StatusWorking),
		CompletedSteps: []handoff.CompletedStep{{Name: "build", Kind: string(mcptask.StepKindForEach), Result: json.RawMessage(`[{"service":"api"}]`), By: "server"}},
		RemainingSteps: []handoff.RemainingStep{
			{Name: "notes", Kind: string(mcptask.StepKindChild), Execution: mcptask.ExecServer, Status: mcptask.StepAwaitingChild, Do: `child workflow "release_notes" (task c1) runs its steps on the server; do not call anything for it.`},
			{Name: "smoke", Kind: string(mcptask.StepKindForEach), Execution: mcptask.ExecServer, Status: mcptask.StepPending, Do: "runs a loop once per item of the services."},
			{Name: "poll", Kind: string(mcptask.StepKindLoop), Execution: mcptask.ExecServer, Status: mcptask.StepPending, Do: "runs until healthy."},
		},
		Continuation: handoff.NewContinuation("task-train", mcptask.Core),
	}
	p := prose(t, mustRender(t, doc))
	require.Contains(t, p, `- "build" (a for-each): [{"service":"api"}]`)
	require.Contains(t, p, `- "notes" (a child workflow): child workflow "release_notes" (task c1) runs its steps on the server`)
	require.Contains(t, p, `- "smoke" (a for-each): runs a loop once per item`)
	require.Contains(t, p, `- "poll" (a loop): runs until healthy.`)
	require.NotContains(t, p, "foreach")
}
