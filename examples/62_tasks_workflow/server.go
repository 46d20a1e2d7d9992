package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// The example's domain: release notes for a repository. The changes come
// from an embedded changelog so the demo runs offline and gives the same
// output every time.

type commit struct {
	Hash    string `json:"hash"`
	Kind    string `json:"kind" jsonschema:"feat, fix or chore"`
	Subject string `json:"subject"`
}

var history = map[string][]commit{
	"taskbridge": {
		{"a1f3c9e", "feat", "durable tasks on bbolt with group commit"},
		{"b7d2e41", "feat", "task-prompt bridge with handoff documents"},
		{"c93a0f2", "fix", "tasks/result wakes on completion instead of polling"},
		{"d1e8b77", "chore", "bump go-sdk to v1.8.0"},
		{"e4c6a10", "fix", "cancel stops the tool handler"},
	},
}

type fetchIn struct {
	Repo  string `json:"repo" jsonschema:"repository name"`
	Since string `json:"since,omitempty" jsonschema:"tag to start from"`
}

type fetchOut struct {
	Repo    string   `json:"repo"`
	Since   string   `json:"since"`
	Commits []commit `json:"commits"`
}

type draftIn struct {
	Repo    string   `json:"repo"`
	Commits []commit `json:"commits"`
}

type draftOut struct {
	Title    string   `json:"title"`
	Draft    string   `json:"draft"`
	Sections []string `json:"sections"`
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
	Text    string `json:"text"`
	Channel string `json:"channel"`
}

type publishOut struct {
	Channel string `json:"channel"`
	URL     string `json:"url"`
	Bytes   int    `json:"bytes"`
}

type reportIn struct {
	Topic   string  `json:"topic"`
	Seconds float64 `json:"seconds,omitempty" jsonschema:"how long the report takes"`
}

func fetchChanges(ctx context.Context, _ *mcp.CallToolRequest, in fetchIn) (*mcp.CallToolResult, fetchOut, error) {
	commits, ok := history[in.Repo]
	if !ok {
		return nil, fetchOut{}, fmt.Errorf("unknown repository %q (try %q)", in.Repo, "taskbridge")
	}
	return nil, fetchOut{Repo: in.Repo, Since: in.Since, Commits: commits}, nil
}

func draftNotes(ctx context.Context, _ *mcp.CallToolRequest, in draftIn) (*mcp.CallToolResult, draftOut, error) {
	byKind := map[string][]string{}
	for _, c := range in.Commits {
		byKind[c.Kind] = append(byKind[c.Kind], fmt.Sprintf("- %s (%s)", c.Subject, c.Hash))
	}
	names := map[string]string{"feat": "Features", "fix": "Fixes", "chore": "Maintenance"}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	title := fmt.Sprintf("Release notes for %s", in.Repo)
	fmt.Fprintf(&b, "# %s\n", title)
	var sections []string
	for _, k := range kinds {
		sections = append(sections, names[k])
		fmt.Fprintf(&b, "\n## %s\n%s\n", names[k], strings.Join(byKind[k], "\n"))
	}
	return nil, draftOut{Title: title, Draft: b.String(), Sections: sections}, nil
}

func reviewNotes(ctx context.Context, _ *mcp.CallToolRequest, in reviewIn) (*mcp.CallToolResult, reviewOut, error) {
	text := in.Draft
	if in.Feedback != "" {
		text += "\n_Reviewer: " + in.Feedback + "_\n"
	}
	return nil, reviewOut{Approved: in.Approved, FinalText: text}, nil
}

func publishNotes(ctx context.Context, _ *mcp.CallToolRequest, in publishIn) (*mcp.CallToolResult, publishOut, error) {
	if strings.TrimSpace(in.Text) == "" {
		return nil, publishOut{}, fmt.Errorf("nothing to publish")
	}
	slug := strings.TrimPrefix(in.Channel, "#")
	return nil, publishOut{Channel: in.Channel, URL: "https://chat.example/" + slug + "/1", Bytes: len(in.Text)}, nil
}

func generateReport(ctx context.Context, _ *mcp.CallToolRequest, in reportIn) (*mcp.CallToolResult, any, error) {
	d := time.Duration(in.Seconds * float64(time.Second))
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("Report on %q is ready.", in.Topic)}}}, nil, nil
}

// releaseWorkflow is the example's workflow: two server steps, a step the
// client performs, and a server step that needs the client's output.
func releaseWorkflow(name string) *workflow.SequentialWorkflow {
	return workflow.New(name, "Draft, review and publish release notes for a repository").
		WithGoal("Publish reviewed release notes for the repository").
		Arg("repo", "repository to describe", true).
		Arg("since", "tag to start from", false).
		Step(
			workflow.Server("fetch", "fetch_changes").
				Bind("repo", workflow.PromptArg("repo")).
				Bind("since", workflow.PromptArg("since")).
				As("changes").
				WithGuidance("Collects the commits since the tag."),
			workflow.Server("draft", "draft_notes").
				Bind("repo", workflow.PromptArg("repo")).
				Bind("commits", workflow.StepOutput("changes", "commits")).
				WithGuidance("Groups the commits into sections."),
			workflow.Client("review", "review_notes").
				Bind("draft", workflow.StepOutput("draft", "draft")).
				Bind("feedback", workflow.FromClient("your verdict and any edits")).
				Bind("approved", workflow.FromClient("true to approve publishing")).
				WithGuidance("Read the draft, then call review_notes with the draft, your feedback, and approved=true if it may be published."),
			workflow.Server("publish", "publish_notes").
				Bind("text", workflow.StepOutput("review", "final_text")).
				Bind("channel", workflow.Const("#releases")).
				WithGuidance("Posts the reviewed notes to the releases channel.").
				WithRetry(),
		)
}

// newBuilder assembles the example server.
func newBuilder() *builder.Builder {
	b := builder.New("taskbridge-example-62", "0.1.0")
	builder.Tool(b, &mcp.Tool{Name: "fetch_changes", Description: "List the commits of a repository since a tag."}, fetchChanges, taskrouter.ToolOptions{TaskSupport: taskrouter.TaskOptional, Retryable: true})
	builder.Tool(b, &mcp.Tool{Name: "draft_notes", Description: "Draft release notes from commits."}, draftNotes, taskrouter.ToolOptions{TaskSupport: taskrouter.TaskOptional, Retryable: true})
	builder.Tool(b, &mcp.Tool{Name: "review_notes", Description: "Record a review of draft release notes."}, reviewNotes, taskrouter.ToolOptions{})
	builder.Tool(b, &mcp.Tool{Name: "publish_notes", Description: "Publish release notes to a chat channel."}, publishNotes, taskrouter.ToolOptions{TaskSupport: taskrouter.TaskOptional})
	builder.Tool(b, &mcp.Tool{Name: "generate_report", Description: "Produce a report; slow, so best run as a task."}, generateReport, taskrouter.ToolOptions{TaskSupport: taskrouter.TaskOptional, Retryable: true})
	b.TaskWorkflow(releaseWorkflow("release_notes"))
	b.Workflow(releaseWorkflow("release_notes_plain"))
	return b
}
