package main

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/internal/filelock"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/taskrouter"
	"github.com/taskbridge/taskbridge/workflow"
)

// The example's domain: release notes for a repository. The changes come
// from an embedded changelog for "taskbridge" and from a deterministic
// generator for any other name, so the example runs offline and gives the
// same output for the same input every time.

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

// subjects are what generated commits say, by kind.
var subjects = map[string][]string{
	"feat": {"add a --dry-run flag", "support configuration from the environment", "export metrics for the job queue",
		"stream progress to the client", "paginate the listing endpoint", "add a health check"},
	"fix": {"retry transient network errors", "close the file handle on error", "handle empty input gracefully",
		"fix an off-by-one in pagination", "avoid a data race in the cache"},
	"chore": {"update dependencies", "tidy the build scripts", "improve the README"},
}

// changesOf returns the commits of repo since a tag: the embedded history
// for known repositories, a stable generated one for any other name.
func changesOf(repo, since string) []commit {
	if c, ok := history[repo]; ok {
		return c
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s@%s", repo, since)
	seed := h.Sum64()
	kinds := []string{"feat", "fix", "chore"}
	n := 3 + int(seed%4)
	out := make([]commit, 0, n)
	for i := range n {
		kind := kinds[(seed>>(8*uint(i%8)))%3]
		list := subjects[kind]
		sum := sha1.Sum([]byte(fmt.Sprintf("%s@%s#%d", repo, since, i)))
		out = append(out, commit{Hash: hex.EncodeToString(sum[:])[:7], Kind: kind, Subject: list[(seed>>uint(3*i))%uint64(len(list))]})
	}
	return out
}

type fetchIn struct {
	Repo  string `json:"repo" jsonschema:"repository name"`
	Since string `json:"since,omitempty" jsonschema:"tag to start from (default: the first commit)"`
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
	Feedback  string `json:"feedback,omitempty"`
}

type publishIn struct {
	Text    string `json:"text"`
	Channel string `json:"channel"`
}

type publishOut struct {
	Channel string `json:"channel"`
	URL     string `json:"url"`
	Bytes   int    `json:"bytes"`
	// Deduplicated is true when this call repeated a publication already
	// made for the same workflow step (a re-run after a restart).
	Deduplicated bool `json:"deduplicated,omitempty"`
}

type reportIn struct {
	Topic   string  `json:"topic"`
	Seconds float64 `json:"seconds,omitempty" jsonschema:"how long the report takes (0 to 3600)"`
}

type checksIn struct {
	Repo string `json:"repo"`
}

type checksOut struct {
	Passed  int `json:"passed"`
	Skipped int `json:"skipped"`
}

type tagIn struct {
	Repo    string `json:"repo"`
	Version string `json:"version" jsonschema:"a semantic version such as v1.2.3"`
}

type tagOut struct {
	Tag    string `json:"tag"`
	Commit string `json:"commit"`
}

type announceIn struct {
	Tag     string `json:"tag"`
	Message string `json:"message" jsonschema:"the announcement text"`
}

type announceOut struct {
	Announced string `json:"announced"`
}

// app holds the example's state: the publication ledger and the flaky
// check runner's memory.
type app struct {
	ledger *ledger
	suites map[string]time.Duration // how long each check suite takes (suiteTime)
	mu     sync.Mutex
	checks map[string]int // idempotency key -> attempts seen
}

func fetchChanges(ctx context.Context, _ *mcp.CallToolRequest, in fetchIn) (*mcp.CallToolResult, fetchOut, error) {
	if strings.TrimSpace(in.Repo) == "" {
		return nil, fetchOut{}, errors.New("repo is empty: name a repository")
	}
	return nil, fetchOut{Repo: in.Repo, Since: in.Since, Commits: changesOf(in.Repo, in.Since)}, nil
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
		name := names[k]
		if name == "" {
			name = k
		}
		sections = append(sections, name)
		fmt.Fprintf(&b, "\n## %s\n%s\n", name, strings.Join(byKind[k], "\n"))
	}
	return nil, draftOut{Title: title, Draft: b.String(), Sections: sections}, nil
}

func reviewNotes(ctx context.Context, _ *mcp.CallToolRequest, in reviewIn) (*mcp.CallToolResult, reviewOut, error) {
	text := in.Draft
	if in.Feedback != "" {
		text += "\n_Reviewer: " + in.Feedback + "_\n"
	}
	return nil, reviewOut{Approved: in.Approved, FinalText: text, Feedback: in.Feedback}, nil
}

type suiteIn struct {
	Repo    string `json:"repo"`
	Version string `json:"version"`
	Suite   string `json:"suite" jsonschema:"lint, unit or integration"`
}

type suiteOut struct {
	Suite   string `json:"suite"`
	Passed  int    `json:"passed"`
	Seconds string `json:"seconds"`
}

// suiteTime is how long each check suite of canary_release takes: long
// enough that the three running together visibly beat them in a row.
var suiteTime = map[string]time.Duration{"lint": 300 * time.Millisecond, "unit": 600 * time.Millisecond, "integration": 1500 * time.Millisecond}

// runSuite runs one check suite of a release (as long as a.suites says).
func (a *app) runSuite(ctx context.Context, _ *mcp.CallToolRequest, in suiteIn) (*mcp.CallToolResult, suiteOut, error) {
	d, ok := a.suites[in.Suite]
	if !ok {
		return nil, suiteOut{}, fmt.Errorf("unknown suite %q: lint, unit or integration", in.Suite)
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return nil, suiteOut{}, ctx.Err()
	}
	h := fnv.New32a()
	fmt.Fprintf(h, "%s@%s/%s", in.Repo, in.Version, in.Suite)
	return nil, suiteOut{Suite: in.Suite, Passed: 10 + int(h.Sum32()%90), Seconds: fmt.Sprintf("%.1f", d.Seconds())}, nil
}

type rolloutIn struct {
	Repo    string `json:"repo"`
	Version string `json:"version"`
}

type rolloutOut struct {
	Release string `json:"release"`
	Traffic string `json:"traffic"`
}

// promoteRelease sends all traffic to the new version.
func promoteRelease(ctx context.Context, _ *mcp.CallToolRequest, in rolloutIn) (*mcp.CallToolResult, rolloutOut, error) {
	return nil, rolloutOut{Release: in.Repo + "@" + in.Version, Traffic: "100% on " + in.Version}, nil
}

// rollbackRelease sends all traffic back to the previous version.
func rollbackRelease(ctx context.Context, _ *mcp.CallToolRequest, in rolloutIn) (*mcp.CallToolResult, rolloutOut, error) {
	return nil, rolloutOut{Release: in.Repo + "@" + in.Version, Traffic: "0% on " + in.Version + " (rolled back)"}, nil
}

// publishNotes posts the notes. A workflow passes the step's idempotency
// key in _meta: a publication already recorded under that key (the step
// ran before a crash and runs again) is not made twice.
func (a *app) publishNotes(ctx context.Context, req *mcp.CallToolRequest, in publishIn) (*mcp.CallToolResult, publishOut, error) {
	if strings.TrimSpace(in.Text) == "" {
		return nil, publishOut{}, fmt.Errorf("nothing to publish")
	}
	key, _ := req.Params.GetMeta()[mcptask.MetaIdempotencyKey].(string)
	slug := strings.TrimPrefix(in.Channel, "#")
	url, dup, err := a.ledger.publish(key, func(n int) string { return fmt.Sprintf("https://chat.example/%s/%d", slug, n) })
	if err != nil {
		return nil, publishOut{}, err
	}
	return nil, publishOut{Channel: in.Channel, URL: url, Bytes: len(in.Text), Deduplicated: dup}, nil
}

func generateReport(ctx context.Context, _ *mcp.CallToolRequest, in reportIn) (*mcp.CallToolResult, any, error) {
	if in.Seconds < 0 || in.Seconds > 3600 {
		return nil, nil, fmt.Errorf("seconds must be between 0 and 3600, got %v", in.Seconds)
	}
	// One progress report and log line per second, which a client
	// following the task (taskbridge call generate_report -follow) sees
	// as they happen; outside a task they go nowhere.
	d := time.Duration(in.Seconds * float64(time.Second))
	log := taskrouter.Logger(ctx)
	total := int(math.Ceil(in.Seconds))
	start := time.Now()
	for s := 1; s <= total; s++ {
		select {
		case <-time.After(time.Until(start.Add(min(d, time.Duration(s)*time.Second)))):
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		_ = taskrouter.Progress(ctx, float64(s), float64(total), fmt.Sprintf("section %d of %d written", s, total))
		log.Info("wrote a section of the report", "topic", in.Topic, "section", s)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("Report on %q is ready.", in.Topic)}}}, nil, nil
}

// runChecks fails the first time it runs for a workflow step (a flaky
// test suite) and passes when the server retries it.
func (a *app) runChecks(ctx context.Context, req *mcp.CallToolRequest, in checksIn) (*mcp.CallToolResult, checksOut, error) {
	key, _ := req.Params.GetMeta()[mcptask.MetaIdempotencyKey].(string)
	a.mu.Lock()
	a.checks[key]++
	n := a.checks[key]
	a.mu.Unlock()
	if key != "" && n == 1 {
		return nil, checksOut{}, fmt.Errorf("checks for %s: integration test timed out (flaky); run them again", in.Repo)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(in.Repo))
	return nil, checksOut{Passed: 40 + int(h.Sum32()%60), Skipped: int(h.Sum32() % 3)}, nil
}

var semver = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)

func createTag(ctx context.Context, _ *mcp.CallToolRequest, in tagIn) (*mcp.CallToolResult, tagOut, error) {
	if !semver.MatchString(in.Version) {
		return nil, tagOut{}, fmt.Errorf("version %q is not a semantic version like v1.2.3: call create_tag with a version such as v1.4.0", in.Version)
	}
	sum := sha1.Sum([]byte(in.Repo + "@" + in.Version))
	return nil, tagOut{Tag: in.Repo + "@" + in.Version, Commit: hex.EncodeToString(sum[:])[:7]}, nil
}

func announceRelease(ctx context.Context, _ *mcp.CallToolRequest, in announceIn) (*mcp.CallToolResult, announceOut, error) {
	if strings.TrimSpace(in.Message) == "" {
		return nil, announceOut{}, errors.New("message is empty: write the announcement")
	}
	return nil, announceOut{Announced: fmt.Sprintf("%s: %s", in.Tag, in.Message)}, nil
}

// releaseWorkflow is the example's workflow: two server steps, a step the
// client performs, and a server step that needs the client's output and
// runs only when the review approved (a rejection completes the workflow
// with publish skipped and the reviewer's feedback in the result).
func releaseWorkflow(name string) *workflow.Definition {
	return workflow.New(name, "Draft, review and publish release notes for a repository").
		WithGoal("Publish reviewed release notes for the repository").
		TypedArg("repo", "repository to describe (any name)", true, workflow.ArgString).
		TypedArg("since", "tag to start from (optional)", false, workflow.ArgString).
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
				WithGuidance("Read the draft, then give your verdict with review_notes: approved=true if it may be published, and your feedback."),
			workflow.Server("publish", "publish_notes").
				When(workflow.Truthy(workflow.StepOutput("review", "approved"))).
				Bind("text", workflow.StepOutput("review", "final_text")).
				Bind("channel", workflow.Const("#releases")).
				WithGuidance("Posts the reviewed notes to the releases channel (once per workflow, even if it runs again).").
				WithRetry(),
		)
}

// canaryWorkflow uses every step kind: three check suites in a parallel
// group, a durable sleep while the canary soaks, a person's decision (the
// event go_live: a model asks the user and delivers the answer with the
// event tool, a host that runs tasks asks the user itself, and a chat
// button or CI job may POST it to the webhook), and a branch: promote when
// approved, roll back otherwise.
func canaryWorkflow() *workflow.Definition {
	approved := workflow.Truthy(workflow.StepOutput("go_live", "approved"))
	suite := func(name string) *workflow.Step {
		return workflow.Server(name, "run_suite").
			Bind("repo", workflow.PromptArg("repo")).
			Bind("version", workflow.PromptArg("version")).
			Bind("suite", workflow.Const(name)).
			WithRetry()
	}
	rollout := func(name string) *workflow.Step {
		return workflow.Server(name, name).
			Bind("repo", workflow.PromptArg("repo")).
			Bind("version", workflow.PromptArg("version"))
	}
	return workflow.New("canary_release", "Check a release, soak it as a canary, then promote or roll it back on a person's decision").
		WithGoal("Roll out the release to every user only if its checks pass and a person approves the canary").
		Arg("repo", "repository to release (any name)", true).
		Arg("version", "version to roll out, like v1.2.3", true).
		TypedArg("soak_seconds", "how long the canary soaks before the decision (default 30 seconds)", false, workflow.ArgDuration).
		Step(
			workflow.Parallel("checks", suite("lint"), suite("unit"), suite("integration")).StopOnFailure(),
			workflow.SleepFor("soak", workflow.PromptArg("soak_seconds").WithDefault(30)).
				WithGuidance("The canary serves a few users while the server waits."),
			workflow.Event("go_live", "whether the canary may go to every user").WithPayload(goLivePayload),
			rollout("promote_release").When(approved).
				WithGuidance("Sends every user to the new version."),
			rollout("rollback_release").Unless(approved).
				WithGuidance("Sends every user back to the previous version."),
		)
}

// goLivePayload is the JSON Schema of the go_live event's payload: a
// person's decision on the canary, with the reason.
var goLivePayload = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"approved": map[string]any{"type": "boolean", "description": "true to send every user to the new version, false to roll it back"},
		"reason":   map[string]any{"type": "string", "description": "what the soak showed"},
	},
	"required": []string{"approved", "reason"},
}

// shipWorkflow exercises the failure paths: a flaky server step that the
// server retries, and a server step whose failure is handed to the client
// when the version the user typed is not a semantic version.
func shipWorkflow() *workflow.Definition {
	return workflow.New("ship_release", "Check, tag and announce a release").
		WithGoal("Tag a checked release and announce it").
		Arg("repo", "repository to release (any name)", true).
		Arg("version", "version to tag, like v1.2.3 (default: next, which is not a valid version, to show a step handed to the client)", false).
		Step(
			workflow.Server("checks", "run_checks").
				Bind("repo", workflow.PromptArg("repo")).
				WithGuidance("Runs the test suite; it is flaky, so the server retries it.").
				WithRetryPolicy(workflow.RetryPolicy{MaxAttempts: 3, Backoff: 50 * time.Millisecond}),
			workflow.Server("tag", "create_tag").
				Bind("repo", workflow.PromptArg("repo")).
				Bind("version", workflow.PromptArg("version").WithDefault("next")).
				WithGuidance("Tags the release. If the version is not a semantic version the server cannot tag it: call create_tag yourself with a valid version such as v1.4.0."),
			workflow.Client("announce", "announce_release").
				Bind("tag", workflow.StepOutput("tag", "tag")).
				Bind("message", workflow.FromClient("the announcement text")).
				WithGuidance("Write a one-line announcement of the release."),
		)
}

// options configure the example server.
type options struct {
	// DB is the bbolt file.
	DB string
	// Ledger is the publication ledger file; empty means DB + ".published"
	// (for a PostgreSQL store, ledgerInStateDir).
	Ledger string
	// Schedule, when set, is the cron expression of the schedule that
	// starts scheduled_report; ApprovalSchedule, of the one that starts
	// nightly_release; ScheduleTZ their time zone (ops.go).
	Schedule, ApprovalSchedule, ScheduleTZ string
	// ScheduleOwner, when set, is the user (of -tokens) whose schedules
	// they are.
	ScheduleOwner string
}

// newBuilder assembles the example server.
func newBuilder(o options) (*builder.Builder, error) {
	path := o.Ledger
	if path == "" && builder.IsPostgresDSN(o.DB) {
		var err error
		if path, err = ledgerInStateDir(); err != nil {
			return nil, err
		}
	} else if path == "" {
		path = o.DB + ".published"
	}
	a, err := newApp(path)
	if err != nil {
		return nil, err
	}
	b := builder.New("taskbridge-example-62", "0.2.0").WithDB(o.DB)
	a.register(b, o)
	return b, nil
}

// newApp returns the example's tools' state, publishing to the ledger
// file at path.
func newApp(path string) (*app, error) {
	l, err := openLedger(path)
	if err != nil {
		return nil, err
	}
	return &app{ledger: l, suites: suiteTime, checks: map[string]int{}}, nil
}

// register adds the example's tools and workflows to b: the server's
// own setup, which its tests run with package workflowtest too.
func (a *app) register(b *builder.Builder, o options) {
	a.addTools(b)
	// The task-aware workflows are tools too, so that a model in an LLM
	// host (which cannot pick prompts) can start them.
	b.TaskWorkflow(releaseWorkflow("release_notes").AsTool())
	b.PlainWorkflow(releaseWorkflow("release_notes_plain"))
	b.TaskWorkflow(shipWorkflow().AsTool())
	b.TaskWorkflow(canaryWorkflow().AsTool())
	addTrain(b)               // train.go
	addSchedule(b, o)         // ops.go
	addApprovalSchedule(b, o) // ops.go
}

// addTools adds the tools of the example's workflows to b (release_train
// adds its own).
func (a *app) addTools(b *builder.Builder) {
	builder.Tool(b, &mcp.Tool{Name: "fetch_changes", Description: "List the commits of a repository since a tag."}, fetchChanges, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional, Retryable: true})
	builder.Tool(b, &mcp.Tool{Name: "draft_notes", Description: "Draft release notes from commits."}, draftNotes, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional, Retryable: true})
	builder.Tool(b, &mcp.Tool{Name: "review_notes", Description: "Record a review of draft release notes."}, reviewNotes, nil)
	builder.Tool(b, &mcp.Tool{Name: "publish_notes", Description: "Publish release notes to a chat channel (once per workflow step)."}, a.publishNotes, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional})
	builder.Tool(b, &mcp.Tool{Name: "generate_report", Description: "Produce a report; slow, so best run as a task."}, generateReport, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional, Retryable: true})
	builder.Tool(b, &mcp.Tool{Name: "run_checks", Description: "Run a repository's test suite (flaky: fails on the first run of a workflow step)."}, a.runChecks, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional, Retryable: true})
	builder.Tool(b, &mcp.Tool{Name: "create_tag", Description: "Tag a release with a semantic version."}, createTag, nil)
	builder.Tool(b, &mcp.Tool{Name: "announce_release", Description: "Announce a tagged release."}, announceRelease, nil)
	builder.Tool(b, &mcp.Tool{Name: "run_suite", Description: "Run one check suite (lint, unit or integration) of a release."}, a.runSuite, &taskrouter.ToolOptions{TaskSupport: mcptask.TaskOptional, Retryable: true})
	builder.Tool(b, &mcp.Tool{Name: "promote_release", Description: "Send every user to a release."}, promoteRelease, nil)
	builder.Tool(b, &mcp.Tool{Name: "rollback_release", Description: "Send every user back to the previous release."}, rollbackRelease, nil)
}

// ledger records publications by idempotency key in an append-only file,
// synced before a publication is reported, so that a step re-run after a
// crash (in this process, or in another replica sharing the file) finds
// what it already published. Every publication holds an exclusive lock on
// the file (flock) while it reads it and appends, so processes sharing the
// file never publish one key twice.
type ledger struct {
	mu   sync.Mutex
	path string
}

type ledgerEntry struct {
	Key string `json:"key"`
	URL string `json:"url"`
}

func openLedger(path string) (*ledger, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	return &ledger{path: path}, f.Close()
}

// publish records a publication (url(n) for the n-th one) and returns its
// URL; a key already recorded returns the recorded URL and dup.
func (l *ledger) publish(key string, url func(n int) string) (string, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	unlock, err := filelock.Lock(f)
	if err != nil {
		return "", false, err
	}
	defer unlock()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e ledgerEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue // a line cut by a crash before its sync
		}
		n++
		if key != "" && e.Key == key {
			return e.URL, true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", false, err
	}
	e := ledgerEntry{Key: key, URL: url(n + 1)}
	b, _ := json.Marshal(e)
	if _, err := f.Write(append(b, '\n')); err != nil {
		return "", false, err
	}
	if err := f.Sync(); err != nil {
		return "", false, err
	}
	return e.URL, false, nil
}
