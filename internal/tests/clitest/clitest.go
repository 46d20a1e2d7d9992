// Package clitest serves, on 127.0.0.1, the MCP servers that the tests of
// the taskbridge CLI and its terminal UI talk to: a release-notes server
// (Release: tools and a workflow shaped like examples/62_tasks_workflow's),
// and a set of jobs (Jobs: a plain tool, a slow one, failing ones, one
// that asks the client). Both are the harness's own fixtures, built with
// the builder; they keep tasks in memory and poll fast, so tests stay
// short.
//
// It is a test harness: only _test.go files import it, and it imports no
// example (internal/tests/obstest's TestHarnessesStayTests checks both).
// It lives outside cmd/taskbridge so that no package of the CLI (test
// helpers included) depends on a server package it does not need
// (cmd/taskbridge's TestCLIDependsOnNoExample checks that with go list).
package clitest

import (
	"context"
	"fmt"
	"github.com/taskbridge/taskbridge/mcptask"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/tokenauth"
	"github.com/taskbridge/taskbridge/store/memory"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// PollInterval is the poll interval the servers suggest.
const PollInterval = 20 * time.Millisecond

// Serve serves h at http://127.0.0.1:PORT/mcp until the test ends and
// returns that URL.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String() + "/mcp"
}

// Jobs serves the jobs fixture (see jobs.go: greet, slow_compute,
// failing_job, protocol_error_job, confirm_delete) and returns the URL.
func Jobs(t testing.TB) string {
	t.Helper()
	b := builder.New("taskbridge-test-jobs", "0.1.0").WithStore(memory.New(nil)).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: PollInterval})
	addJobs(b)
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return Serve(t, srv.HTTPHandler(nil))
}

type fetchIn struct {
	Repo  string `json:"repo" jsonschema:"repository name"`
	Since string `json:"since,omitempty" jsonschema:"tag to start from"`
}

type fetchOut struct {
	Repo    string   `json:"repo"`
	Commits []string `json:"commits"`
}

type draftIn struct {
	Repo    string   `json:"repo"`
	Commits []string `json:"commits"`
}

type draftOut struct {
	Draft string `json:"draft"`
}

type reviewIn struct {
	Draft    string `json:"draft" jsonschema:"the draft release notes to review"`
	Feedback string `json:"feedback" jsonschema:"the reviewer's verdict and edits"`
	Approved bool   `json:"approved" jsonschema:"whether the notes may be published"`
}

type reviewOut struct {
	Approved  bool   `json:"approved"`
	FinalText string `json:"final_text"`
}

type publishIn struct {
	Text     string `json:"text"`
	Channel  string `json:"channel"`
	Approved bool   `json:"approved"`
}

type publishOut struct {
	URL string `json:"url"`
}

type reportIn struct {
	Topic   string  `json:"topic"`
	Seconds float64 `json:"seconds,omitempty" jsonschema:"how long the report takes"`
}

// Release serves a server shaped like examples/62_tasks_workflow and
// returns its URL. Its tools: fetch_changes (fails for any repo but
// "taskbridge", so the workflow hands that step to the client),
// draft_notes, review_notes (draft, feedback, approved: a boolean),
// publish_notes (fails unless approved; the failure fails the workflow)
// and generate_report (topic, seconds). Its task-aware workflow
// release_notes (repo required, since optional) runs fetch and draft,
// hands review to the client, then publishes; release_notes_plain is the
// same workflow as a plain prompt (no task, no handoff); sign_off (also a
// tool) waits for a person's decision, then publishes.
func Release(t testing.TB) string {
	t.Helper()
	return Serve(t, releaseHandler(t))
}

// ReleaseWithTokens serves the Release server behind bearer-token
// authentication (tokens: token -> user, as example 62's serve -tokens
// takes them) and returns its URL. Each user owns the tasks its requests
// create.
func ReleaseWithTokens(t testing.TB, tokens map[string]string) string {
	t.Helper()
	return Serve(t, tokenauth.Middleware(tokens)(releaseHandler(t)))
}

func releaseHandler(t testing.TB) http.Handler {
	t.Helper()
	b := builder.New("taskbridge-test-release", "0.1.0").WithStore(memory.New(nil)).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: PollInterval})
	builder.Tool(b, &mcp.Tool{Name: "fetch_changes", Description: "List the commits of a repository since a tag."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in fetchIn) (*mcp.CallToolResult, fetchOut, error) {
			if in.Repo != "taskbridge" {
				return nil, fetchOut{}, fmt.Errorf("unknown repository %q (try %q)", in.Repo, "taskbridge")
			}
			return nil, fetchOut{Repo: in.Repo, Commits: []string{"feat: durable tasks", "fix: cancel stops the handler"}}, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	builder.Tool(b, &mcp.Tool{Name: "draft_notes", Description: "Draft release notes from commits."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in draftIn) (*mcp.CallToolResult, draftOut, error) {
			return nil, draftOut{Draft: "# " + in.Repo + "\n- " + strings.Join(in.Commits, "\n- ")}, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	builder.Tool(b, &mcp.Tool{Name: "review_notes", Description: "Record a review of draft release notes."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in reviewIn) (*mcp.CallToolResult, reviewOut, error) {
			return nil, reviewOut{Approved: in.Approved, FinalText: in.Draft + "\n_" + in.Feedback + "_"}, nil
		}, nil)
	builder.Tool(b, &mcp.Tool{Name: "publish_notes", Description: "Publish release notes to a chat channel."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in publishIn) (*mcp.CallToolResult, publishOut, error) {
			if !in.Approved {
				return nil, publishOut{}, fmt.Errorf("the notes were not approved")
			}
			return nil, publishOut{URL: "https://chat.example/releases/1"}, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	builder.Tool(b, &mcp.Tool{Name: "generate_report", Description: "Produce a report; slow, so best run as a task."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in reportIn) (*mcp.CallToolResult, any, error) {
			select {
			case <-time.After(time.Duration(in.Seconds * float64(time.Second))):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("Report on %q is ready.", in.Topic)}}}, nil, nil
		}, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	b.TaskWorkflow(releaseWorkflow("release_notes"))
	b.PlainWorkflow(releaseWorkflow("release_notes_plain"))
	b.TaskWorkflow(signOffWorkflow())
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv.HTTPHandler(nil)
}

// releaseWorkflow is example 62's workflow: fetch and draft on the server,
// review by the client, publish on the server (failing the workflow when
// the notes were not approved).
func releaseWorkflow(name string) *workflow.Definition {
	return workflow.New(name, "Draft, review and publish release notes for a repository").
		WithGoal("Publish reviewed release notes for the repository").
		Arg("repo", "repository to describe", true).
		Arg("since", "tag to start from", false).
		Step(
			workflow.Server("fetch", "fetch_changes").
				Bind("repo", workflow.PromptArg("repo")).
				Bind("since", workflow.PromptArg("since")).
				As("changes"),
			workflow.Server("draft", "draft_notes").
				Bind("repo", workflow.PromptArg("repo")).
				Bind("commits", workflow.StepOutput("changes", "commits")),
			workflow.Client("review", "review_notes").
				Bind("draft", workflow.StepOutput("draft", "draft")).
				Bind("feedback", workflow.FromClient("your verdict and any edits")).
				Bind("approved", workflow.FromClient("true to approve publishing")).
				WithGuidance("Read the draft, then call review_notes with the draft, your feedback, and approved=true if it may be published."),
			workflow.Server("publish", "publish_notes").
				Bind("text", workflow.StepOutput("review", "final_text")).
				Bind("approved", workflow.StepOutput("review", "approved")).
				Bind("channel", workflow.Const("#releases")).
				FailsWorkflow(),
		)
}

// signOffWorkflow is sign_off, also a tool: a person's decision (the
// event approve: approved, reason), then publish_notes, which fails the
// workflow unless approved.
func signOffWorkflow() *workflow.Definition {
	return workflow.New("sign_off", "A person signs the notes off, then the server publishes them").
		Arg("repo", "repository to describe", true).
		Step(
			workflow.Event("approve", "whether the notes may be published").WithPayload(map[string]any{"type": "object",
				"properties": map[string]any{
					"approved": map[string]any{"type": "boolean", "description": "true to publish"},
					"reason":   map[string]any{"type": "string", "description": "why"},
				}, "required": []string{"approved", "reason"}}),
			workflow.Server("publish", "publish_notes").
				Bind("text", workflow.PromptArg("repo")).
				Bind("approved", workflow.StepOutput("approve", "approved")).
				Bind("channel", workflow.Const("#releases")).
				FailsWorkflow(),
		).AsTool()
}

type boundIn struct {
	Note string `json:"note"`
}

type boundOut struct {
	Seen string `json:"seen"`
}

// TaskIDArgument serves a workflow with one client step, mark, calling
// bound with note (a placeholder in the handoff); the handoff also lists
// the task id as the argument _task_id, as host-mode handoffs do, which
// the engine takes out of the arguments before bound runs. It returns the
// URL and a function that returns, for each call of bound, the task id it
// was bound to (from _meta._task_id), or "ARGUMENT LEAKED" when _task_id
// reached the tool's arguments.
func TaskIDArgument(t testing.TB) (url string, seen func() []string) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	b := builder.New("taskbridge-test-bound", "0.1.0").WithStore(memory.New(nil)).WithoutEnv().
		WithRouterOptions(taskrouter.Options{PollInterval: PollInterval})
	builder.Tool(b, &mcp.Tool{Name: "bound", Description: "Record a note against a workflow task."},
		func(ctx context.Context, req *mcp.CallToolRequest, in boundIn) (*mcp.CallToolResult, boundOut, error) {
			id, _ := req.Params.GetMeta()["_task_id"].(string)
			if strings.Contains(string(req.Params.Arguments), "_task_id") {
				id = "ARGUMENT LEAKED"
			}
			mu.Lock()
			got = append(got, id)
			mu.Unlock()
			return nil, boundOut{Seen: id + ": " + in.Note}, nil
		}, nil)
	b.TaskWorkflow(workflow.New("bound_flow", "A step that names its workflow task").Step(
		workflow.Client("mark", "bound").Bind("note", workflow.FromClient("a note")),
	))
	srv, err := b.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return Serve(t, srv.HTTPHandler(nil)), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}
