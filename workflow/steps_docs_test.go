package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// TestStepDocsShowWhatAModelSees keeps the handoff prose quoted in
// docs/STEPS.md (one block per step kind, between <!-- prose:NAME -->
// and <!-- /prose --> markers) equal to what the bridge renders. Run with
// UPDATE_DOCS=1 to rewrite the blocks.
func TestStepDocsShowWhatAModelSees(t *testing.T) {
	got := map[string]string{}
	render := func(name string, f *fixture, tk *store.Task, p *Progress) {
		t.Helper()
		text, err := handoff.Render(f.b.handoff(tk, p, mcptask.Extension))
		require.NoError(t, err)
		prose, _, _ := strings.Cut(text, "\n\n```json")
		prose = strings.ReplaceAll(prose, tk.ID, "TASK")
		var token string
		if json.Unmarshal(tk.Variables[VarWebhookToken], &token) == nil && token != "" {
			prose = strings.ReplaceAll(prose, token, "TOKEN")
		}
		got[name] = prose
	}
	hooks := &Options{PromptWait: -1, WebhookURL: "https://ci.example.com/hooks"}

	{ // a condition: publish runs only when the review approved
		e := newFakeEngine()
		e.tool("review", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
			return ok(map[string]any{"approved": args["approved"], "args": args}), nil
		})
		echoTools(e, "publish", "notify", "explain")
		f := newFixture(t, e, hooks, review())
		tk, p := f.start(t, "rel", nil)
		render("condition", f, tk, p)
		_, err := f.call(t, tk.ID, "review", map[string]any{"approved": false, "feedback": "wrong version"})
		require.NoError(t, err)
		tk, p = f.settled(t, tk.ID)
		render("condition-skipped", f, tk, p)
	}
	{ // a parallel group, running
		e := newFakeEngine()
		g := newGate()
		for _, n := range []string{"lint", "unit", "integration"} {
			e.tool(n, g.tool(n))
		}
		echoTools(e, "report")
		f := newFixture(t, e, &Options{PromptWait: time.Millisecond}, checks())
		tk, _ := f.start(t, "ci", nil)
		g.waitStarted(t, 3)
		tk, p := f.task(t, tk.ID)
		render("group", f, tk, p)
		close(g.release)
		f.settled(t, tk.ID)
	}
	{ // a durable sleep
		e := newFakeEngine()
		echoTools(e, "before", "after")
		f := newFixture(t, e, hooks, soak())
		tk, _ := f.start(t, "soak", map[string]string{"soak": "90"})
		tk, p := f.settled(t, tk.ID)
		render("sleep", f, tk, p)
	}
	{ // an event, with its webhook and a wait
		e := newFakeEngine()
		echoTools(e, "deploy", "rollback")
		w := approval()
		w.Steps[0].WaitsAtMost(24*time.Hour, TimeoutSkip)
		f := newFixture(t, e, hooks, w)
		tk, _ := f.start(t, "deploy", nil)
		tk, p := f.settled(t, tk.ID)
		render("event", f, tk, p)
	}
	{ // an approval: a client step an outside system may perform too
		e := newFakeEngine()
		echoTools(e, "sign_off", "publish_release", "hold_release")
		ok := Truthy(StepOutput("sign_off", "approved"))
		w := New("release", "").Step(
			Client("sign_off", "sign_off").
				Bind("approved", FromClient("true to publish the release, false to hold it")).
				Bind("reason", FromClient("why")).AcceptsWebhook().
				WithGuidance("Decide whether the release may be published."),
			Server("publish_release", "publish_release").When(ok),
			Server("hold_release", "hold_release").Unless(ok),
		)
		f := newFixture(t, e, hooks, w)
		tk, p := f.start(t, "release", nil)
		render("approval", f, tk, p)
	}

	{ // a for-each whose body the client performs: one entry per item
		e := newFakeEngine()
		e.tool("list", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
			return ok(map[string]any{"files": []string{"a.go", "b.go"}}), nil
		})
		echoTools(e, "review", "merge")
		f := newFixture(t, e, hooks, reviews())
		tk, _ := f.start(t, "reviews", nil)
		tk, p := f.settled(t, tk.ID)
		render("foreach", f, tk, p)
	}
	{ // a loop waiting for its next run
		e := newFakeEngine()
		probe, _ := healthyAfter(3, false)
		e.tool("probe", probe)
		echoTools(e, "report")
		f := newFixture(t, e, hooks, poll())
		tk, _ := f.start(t, "poll", nil)
		tk, p := f.settled(t, tk.ID)
		render("loop", f, tk, p)
	}
	{ // a child workflow waiting for its client
		e := newFakeEngine()
		childTools(e)
		f := newFixture(t, e, hooks, notesWorkflow(), train())
		tk, _ := f.start(t, "train", map[string]string{"repo": "acme/api"})
		tk, p := f.settled(t, tk.ID)
		render("child", f, tk, p)
		got["child"] = strings.ReplaceAll(got["child"], p.step("notes").Child, "CHILD")
	}
	{ // a failed workflow, undone
		e := newFakeEngine()
		echoTools(e, "deploy", "rollback", "tag", "untag")
		e.tool("check", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
			return nil, errors.New("smoke test failed")
		})
		f := newFixture(t, e, hooks, release())
		tk, _ := f.start(t, "release", map[string]string{"services": "api,web"})
		tk, p := f.settled(t, tk.ID)
		render("undo", f, tk, p)
	}
	{ // a sampling step, for a client of the tasks extension
		e := newFakeEngine()
		e.tool("collect", func(ctx context.Context, args map[string]any) (*mcp.CallToolResult, error) {
			return ok(map[string]any{"log": "fix the retry backoff; add the sampling step"}), nil
		})
		echoTools(e, "publish")
		w := New("notes", "Release notes the client's model writes").Arg("repo", "the repository", true).Step(
			Server("collect", "collect").Bind("repo", PromptArg("repo")),
			Sample("summary", "Write release notes for {{repo}} from this log: {{log}}").
				Bind("repo", PromptArg("repo")).Bind("log", StepOutput("collect", "log")),
			Server("publish", "publish").Bind("text", StepOutput("summary", "text")),
		)
		f := newFixture(t, e, hooks, w)
		tk, _ := f.start(t, "notes", map[string]string{"repo": "taskbridge"})
		tk, p := f.settled(t, tk.ID)
		render("sampling", f, tk, p)
	}
	{ // a question for a person
		e := newFakeEngine()
		echoTools(e, "deploy")
		w := New("release", "").Arg("version", "the version", true).Step(
			Ask("go_ahead", "Release {{version}} to every user?", map[string]any{"type": "object", "required": []string{"approved"},
				"properties": map[string]any{"approved": map[string]any{"type": "boolean", "description": "true to release"}}}).
				Bind("version", PromptArg("version")),
			Server("deploy", "deploy").When(Truthy(StepOutput("go_ahead", "approved"))),
		)
		f := newFixture(t, e, hooks, w)
		tk, _ := f.start(t, "release", map[string]string{"version": "v2.1.0"})
		tk, p := f.settled(t, tk.ID)
		render("question", f, tk, p)
	}

	path := filepath.Join("..", "docs", "STEPS.md")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(raw)
	block := regexp.MustCompile("(?s)<!-- prose:([a-z-]+) -->\n```text\n(.*?)```\n<!-- /prose -->")
	seen := map[string]bool{}
	out := block.ReplaceAllStringFunc(doc, func(m string) string {
		name := block.FindStringSubmatch(m)[1]
		seen[name] = true
		want, ok := got[name]
		require.True(t, ok, "docs/STEPS.md quotes an unknown block %q", name)
		return "<!-- prose:" + name + " -->\n```text\n" + want + "\n```\n<!-- /prose -->"
	})
	for name := range got {
		require.True(t, seen[name], "docs/STEPS.md has no <!-- prose:%s --> block", name)
	}
	if os.Getenv("UPDATE_DOCS") != "" {
		require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
		return
	}
	require.Equal(t, out, doc, "docs/STEPS.md quotes stale handoff prose: run UPDATE_DOCS=1 go test ./workflow -run TestStepDocs")
}
