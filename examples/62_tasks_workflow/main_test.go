package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// TestDemoRunsTheWholeLifecycle runs the example the way `go run` does and
// checks the story it tells (INTG-03).
func TestDemoRunsTheWholeLifecycle(t *testing.T) {
	var out, errOut bytes.Buffer
	require.NoError(t, run(nil, &out, &errOut), errOut.String())
	text := out.String()
	for _, want := range []string{
		"1. Client -> prompts/get release_notes",
		`Step "fetch": calling tool "fetch_changes"`,
		`Step "draft": calling tool "draft_notes"`,
		"2. Handoff",
		"```json",
		"3. Client -> tools/call review_notes with _meta._task_id=",
		`"status":"completed"`,
		"status: completed",
		"5. Workflow result: 4 steps completed",
		"publish (publish_notes)",
	} {
		require.Contains(t, text, want)
	}
	id := regexp.MustCompile(`_task_id=([0-9a-f]{32})`).FindStringSubmatch(text)
	require.NotNil(t, id)
	require.Contains(t, text, `task "`+id[1]+`"`, "the handoff prose names the task")
	require.False(t, strings.Contains(text, `\u003c`), "placeholders are readable")
}

// TestDemoKeepsItsStore runs the demo twice on the same file: the first
// workflow task is still there, completed, when the second run starts.
func TestDemoKeepsItsStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.db")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var first, second bytes.Buffer
	require.NoError(t, demo(ctx, path, &first))
	require.NoError(t, demo(ctx, path, &second))
	require.NotEqual(t, first.String(), second.String())
}

// exampleSession builds the example server on a temporary store and
// connects a go-sdk client that declares the tasks extension.
func exampleSession(t *testing.T) (*mcp.ClientSession, string) {
	cs, db, _ := exampleServer(t)
	return cs, db
}

func exampleServer(t *testing.T) (*mcp.ClientSession, string, *builder.Server) {
	t.Helper()
	dir := t.TempDir()
	b, err := newBuilder(options{DB: filepath.Join(dir, "tasks.db")})
	require.NoError(t, err)
	srv, err := b.WithoutEnv().Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	caps := &mcp.ClientCapabilities{}
	caps.AddExtension(mcptask.ExtensionID, nil)
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, &mcp.ClientOptions{Capabilities: caps})
	tr, err := srv.Connect(context.Background())
	require.NoError(t, err)
	cs, err := c.Connect(context.Background(), tr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs, filepath.Join(dir, "tasks.db"), srv
}

func promptDoc(t *testing.T, cs *mcp.ClientSession, name string, args map[string]string) *handoff.Document {
	t.Helper()
	res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: name, Arguments: args})
	require.NoError(t, err)
	doc, err := handoff.FromPromptResult(res)
	require.NoError(t, err)
	return doc
}

func continueStep(t *testing.T, cs *mcp.ClientSession, id, tool string, args map[string]any) map[string]any {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args, Meta: mcp.Meta{mcptask.MetaTaskID: id}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%v", res.Content)
	b, _ := json.Marshal(res.Meta[mcptask.MetaWorkflow])
	var sum map[string]any
	require.NoError(t, json.Unmarshal(b, &sum))
	return sum
}

// TestReleaseNotesForAnyRepository: the values a user types work: any
// repository name, with or without the optional since, runs to completion
// (release_notes and release_notes_plain).
func TestReleaseNotesForAnyRepository(t *testing.T) {
	cs, _ := exampleSession(t)
	for _, args := range []map[string]string{{"repo": "taskbridge"}, {"repo": "my-service"}, {"repo": "acme/widgets", "since": "v2.3.0"}} {
		doc := promptDoc(t, cs, "release_notes", args)
		require.Equal(t, []string{"fetch", "draft"}, names(doc.CompletedSteps), "%v", args)
		require.Empty(t, doc.Errors)
		review := doc.ClientSteps()[0]
		var draft string
		require.NoError(t, json.Unmarshal(review.Arguments["draft"], &draft))
		require.Contains(t, draft, "Release notes for "+args["repo"])
		sum := continueStep(t, cs, doc.TaskID, "review_notes", map[string]any{"draft": draft, "feedback": "ok", "approved": true})
		require.Equal(t, "completed", sum["status"], "%v", args)

		plain, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "release_notes_plain", Arguments: args})
		require.NoError(t, err)
		require.Contains(t, plain.Messages[len(plain.Messages)-1].Content.(*mcp.TextContent).Text, "review (performed by you)")
	}
	// The same input gives the same changes.
	a := promptDoc(t, cs, "release_notes", map[string]string{"repo": "x"})
	b := promptDoc(t, cs, "release_notes", map[string]string{"repo": "x"})
	require.JSONEq(t, string(a.CompletedSteps[0].Result), string(b.CompletedSteps[0].Result))
}

// TestShipReleaseFailurePaths: the flaky checks step is retried by the
// server; a version that is not a semantic version hands the tag step to
// the client, which tags it itself and finishes the workflow; a good
// version runs straight through to the client's announcement.
func TestShipReleaseFailurePaths(t *testing.T) {
	cs, _ := exampleSession(t)
	doc := promptDoc(t, cs, "ship_release", map[string]string{"repo": "widgets"})
	require.Equal(t, []string{"checks"}, names(doc.CompletedSteps))
	require.Equal(t, 2, doc.CompletedSteps[0].Attempts, "the flaky step passed on the server's retry")
	tag := doc.RemainingSteps[0]
	require.True(t, tag.HandedToClient)
	require.Contains(t, tag.Error, `version "next" is not a semantic version`)
	sum := continueStep(t, cs, doc.TaskID, "create_tag", map[string]any{"repo": "widgets", "version": "v1.4.0"})
	require.Equal(t, []any{"announce"}, sum["clientSteps"])
	sum = continueStep(t, cs, doc.TaskID, "announce_release", map[string]any{"tag": "widgets@v1.4.0", "message": "1.4 is out"})
	require.Equal(t, "completed", sum["status"])

	good := promptDoc(t, cs, "ship_release", map[string]string{"repo": "widgets", "version": "v1.5.0"})
	require.Equal(t, []string{"checks", "tag"}, names(good.CompletedSteps))
	require.Equal(t, "announce", good.ClientSteps()[0].Name)
}

// TestPublishIsIdempotent: publish_notes publishes once per idempotency
// key, and says so when a re-run repeats it.
func TestPublishIsIdempotent(t *testing.T) {
	_, db, srv := exampleServer(t)
	call := func(key string) publishOut {
		meta := mcp.Meta{}
		if key != "" {
			meta[mcptask.MetaIdempotencyKey] = key
		}
		// In-process, as the workflow's server step calls it (the extension
		// client would get a task for this task-optional tool).
		res, err := srv.Router.CallTool(context.Background(), nil, "publish_notes", map[string]any{"text": "notes", "channel": "#releases"}, meta)
		require.NoError(t, err)
		var out publishOut
		b, _ := json.Marshal(res.StructuredContent)
		require.NoError(t, json.Unmarshal(b, &out))
		return out
	}
	first := call("task-1/publish")
	again := call("task-1/publish")
	require.Equal(t, first.URL, again.URL)
	require.True(t, again.Deduplicated)
	other := call("task-2/publish")
	require.NotEqual(t, first.URL, other.URL)
	// The ledger survives a restart.
	l, err := openLedger(db + ".published")
	require.NoError(t, err)
	u, dup, err := l.publish("task-1/publish", func(int) string { return "new" })
	require.NoError(t, err)
	require.True(t, dup)
	require.Equal(t, first.URL, u)
}

// TestCommandLine: -h lists the serve mode; an unknown argument is an
// error, not a silent demo run.
func TestCommandLine(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run([]string{"-h"}, &out, &errOut)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, errOut.String(), "serve -http ADDR")
	require.Contains(t, errOut.String(), "-tokens LIST")
	errOut.Reset()
	err = run([]string{"bogus"}, &out, &errOut)
	require.ErrorContains(t, err, `unknown argument "bogus"`)
	require.Empty(t, out.String(), "no demo ran")
	err = run([]string{"serve", "-stdio", "-http", "127.0.0.1:0"}, &out, &errOut)
	require.ErrorContains(t, err, "exactly one of")
	err = run([]string{"serve", "-http", "127.0.0.1:0", "-tokens", "broken"}, &out, &errOut)
	require.ErrorContains(t, err, "want TOKEN=USER")
}

func names(steps []handoff.CompletedStep) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.Name)
	}
	return out
}

// TestCanaryRelease: the checks run together, the canary soaks, the
// person's decision (the event go_live, delivered with the event tool)
// decides between promote and rollback (the other skipped); a rejected
// release_notes review publishes nothing.
func TestCanaryRelease(t *testing.T) {
	cs, _ := exampleSession(t)
	for _, approved := range []bool{true, false} {
		doc := promptDoc(t, cs, "canary_release", map[string]string{"repo": "shop", "version": "v2.0.0", "soak_seconds": "1"})
		deadline := time.Now().Add(20 * time.Second)
		for len(doc.ClientSteps()) == 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "canary_release", Meta: mcp.Meta{mcptask.MetaTaskID: doc.TaskID}})
			require.NoError(t, err)
			doc, err = handoff.FromPromptResult(res)
			require.NoError(t, err)
		}
		require.Equal(t, []string{"lint", "unit", "integration", "soak"}, names(doc.CompletedSteps)[:4])
		goLive := doc.ClientSteps()[0]
		require.Equal(t, "go_live", goLive.Name)
		require.Equal(t, string(mcptask.StepKindEvent), goLive.Kind)
		require.Equal(t, "workflow_event", goLive.Call.Tool)
		require.True(t, goLive.Call.Person, "the decision is a person's")
		require.JSONEq(t, `{"type":"object","properties":{"approved":{"type":"boolean","description":"true to send every user to the new version, false to roll it back"},"reason":{"type":"string","description":"what the soak showed"}},"required":["approved","reason"]}`, string(goLive.Payload))
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "workflow_event", Meta: mcp.Meta{mcptask.MetaTaskID: doc.TaskID},
			Arguments: map[string]any{"event": "go_live", "payload": map[string]any{"approved": approved, "reason": "error rate flat"}}})
		require.NoError(t, err)
		require.False(t, res.IsError, "%v", res.Content)
		doc, err = handoff.FromToolResult(res)
		require.NoError(t, err)
		require.Equal(t, "completed", doc.Status)
		ran, skipped := "promote_release", "rollback_release"
		if !approved {
			ran, skipped = skipped, ran
		}
		require.Contains(t, names(doc.CompletedSteps), ran)
		require.Len(t, doc.SkippedSteps, 1)
		require.Equal(t, skipped, doc.SkippedSteps[0].Name)
	}

	doc := promptDoc(t, cs, "release_notes", map[string]string{"repo": "shop"})
	var draft string
	require.NoError(t, json.Unmarshal(doc.ClientSteps()[0].Arguments["draft"], &draft))
	sum := continueStep(t, cs, doc.TaskID, "review_notes", map[string]any{"draft": draft, "feedback": "reject: wrong version", "approved": false})
	require.Equal(t, "completed", sum["status"])
	res, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "release_notes", Meta: mcp.Meta{mcptask.MetaTaskID: doc.TaskID}})
	require.NoError(t, err)
	doc, err = handoff.FromPromptResult(res)
	require.NoError(t, err)
	require.Equal(t, "publish", doc.SkippedSteps[0].Name)
	require.NotContains(t, names(doc.CompletedSteps), "publish")
	require.Contains(t, string(doc.CompletedSteps[len(doc.CompletedSteps)-1].Result), "reject: wrong version")
}

// TestCanaryArgumentsCheckedFirst: soak_seconds is a duration; a value
// that is none is refused before a task exists, at prompts/get (-32602),
// at the workflow's tool from a host (a tool error the model reads) and
// from a client that takes tasks (-32602 before the call becomes a task),
// naming the argument and the form.
func TestCanaryArgumentsCheckedFirst(t *testing.T) {
	cs, _, srv := exampleServer(t)
	ctx := context.Background()
	bad := map[string]string{"repo": "shop", "version": "v1.2.3", "soak_seconds": "abc"}
	const want = `argument "soak_seconds" must be a duration`
	_, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "canary_release", Arguments: bad})
	var je *jsonrpc.Error
	require.ErrorAs(t, err, &je)
	require.EqualValues(t, mcptask.CodeInvalidParams, je.Code)
	require.Contains(t, je.Message, want)
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "canary_release", Arguments: bad})
	require.ErrorAs(t, err, &je)
	require.EqualValues(t, mcptask.CodeInvalidParams, je.Code)
	require.Contains(t, je.Message, want)
	host := hostSession(t, srv)
	res, err := host.CallTool(ctx, &mcp.CallToolParams{Name: "canary_release", Arguments: bad})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, res.Content[0].(*mcp.TextContent).Text, want)
	page, err := srv.Store.Query(ctx, store.Query{})
	require.NoError(t, err)
	require.Empty(t, page.Tasks, "no task was created")
}

// hostSession connects a go-sdk client to srv that declares nothing, as
// an LLM host does: its model's tool name and arguments are all it sends.
func hostSession(t *testing.T, srv *builder.Server) *mcp.ClientSession {
	t.Helper()
	tr, err := srv.Connect(context.Background())
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}
