package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/builder"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/workflow"
	"github.com/taskbridge/taskbridge/workflowtest"
)

// The example's workflows tested with package workflowtest: the server's
// own setup (app.register) and tools, on a clock the tests skip.

// exampleEnv is the example server under workflowtest, with its
// publication ledger in a temporary file.
func exampleEnv(t *testing.T) (*workflowtest.Env, *app) {
	t.Helper()
	a, err := newApp(filepath.Join(t.TempDir(), "published"))
	require.NoError(t, err)
	return workflowtest.New(t, func(b *builder.Builder) { a.register(b, options{}) }, nil), a
}

// TestCanaryThreeDaySoak: a canary soaks three days, then a person
// approves it and it is promoted (or refuses it and it is rolled back).
// The three days are the Env's clock, skipped: the test's time is the
// time the steps take, and the check suites take none here (their
// durations set to zero: the real tools, faked in their one slow part).
func TestCanaryThreeDaySoak(t *testing.T) {
	for _, approved := range []bool{true, false} {
		a, err := newApp(filepath.Join(t.TempDir(), "published"))
		require.NoError(t, err)
		a.suites = map[string]time.Duration{"lint": 0, "unit": 0, "integration": 0}
		env := workflowtest.New(t, func(b *builder.Builder) { a.register(b, options{}) }, nil)
		start := env.Now()
		run := env.Start("canary_release", map[string]string{"repo": "shop", "version": "v2.0.0", "soak_seconds": "259200"})
		doc := run.Handoff()
		require.Equal(t, []string{"lint", "unit", "integration"}, names(doc.CompletedSteps), "the checks ran")
		require.Empty(t, doc.ClientSteps(), "the canary soaks: nothing for the client yet")

		env.Advance(71 * time.Hour)
		require.Empty(t, run.Handoff().ClientSteps(), "still soaking after 71 hours")
		env.Advance(time.Hour)
		goLive := run.Handoff().ClientSteps()
		require.Len(t, goLive, 1)
		require.Equal(t, "go_live", goLive[0].Name)
		var soak workflow.StepProgress
		for _, sp := range run.Progress().Steps {
			if sp.Name == "soak" {
				soak = sp
			}
		}
		require.Equal(t, mcptask.StepCompleted, soak.Status)
		require.Equal(t, start.Add(72*time.Hour), *soak.Until, "the soak ended three days of the Env's clock after it began")
		require.Equal(t, start.Add(72*time.Hour), env.Now())

		doc = run.Send("go_live", map[string]any{"approved": approved, "reason": "error rate flat"})
		require.Equal(t, "completed", doc.Status)
		ran, skipped := "promote_release", "rollback_release"
		if !approved {
			ran, skipped = skipped, ran
		}
		require.Contains(t, names(doc.CompletedSteps), ran)
		require.Equal(t, skipped, doc.SkippedSteps[0].Name)
		var tools []string
		for _, c := range env.Steps() {
			tools = append(tools, c.Tool)
		}
		require.Equal(t, []string{"run_suite", "run_suite", "run_suite", ran}, sortedChecks(tools))
	}
}

// sortedChecks puts the three suites (run side by side) first.
func sortedChecks(tools []string) []string {
	var suites, rest []string
	for _, t := range tools {
		if t == "run_suite" {
			suites = append(suites, t)
		} else {
			rest = append(rest, t)
		}
	}
	return append(suites, rest...)
}

// TestReleaseNotesReviewAndCrash: the client reviews the drafted notes
// (the handoff gives it the draft); the server crashes right after
// publishing, before recording it; the restarted server publishes again
// with the same idempotency key, and the ledger makes it once.
func TestReleaseNotesReviewAndCrash(t *testing.T) {
	env, a := exampleEnv(t)
	run := env.Start("release_notes", map[string]string{"repo": "taskbridge"})
	doc := run.Handoff()
	require.Equal(t, []string{"fetch", "draft"}, names(doc.CompletedSteps))
	review := doc.ClientSteps()[0]
	require.Equal(t, "review_notes", review.Tool)
	var draft string
	require.NoError(t, json.Unmarshal(review.Arguments["draft"], &draft))
	require.Contains(t, draft, "Release notes for taskbridge")

	env.CrashAfter("publish")
	doc = run.Call("review_notes", map[string]any{"draft": draft, "feedback": "ship it", "approved": true})
	require.Equal(t, "completed", doc.Status)
	var publishes []workflowtest.StepCall
	for _, c := range env.Steps() {
		if c.Step == "publish" {
			publishes = append(publishes, c)
		}
	}
	require.Len(t, publishes, 2, "published, crashed, published again")
	require.Equal(t, "crash after", publishes[0].Injected)
	out := run.Progress().Outputs["publish"]
	var pub publishOut
	require.NoError(t, json.Unmarshal(out, &pub))
	require.True(t, pub.Deduplicated, "the second run found the first publication under its key")
	_, dup, err := a.ledger.publish(run.ID+"/publish", func(int) string { return "new" })
	require.NoError(t, err)
	require.True(t, dup, "one publication in the ledger")
}

// TestShipReleaseRetriesThenHandsBack: the flaky checks fail once and the
// server retries them after their backoff (on the Env's clock); a version
// that is not semantic hands the tag step to the client.
func TestShipReleaseRetriesThenHandsBack(t *testing.T) {
	env, _ := exampleEnv(t)
	run := env.Start("ship_release", map[string]string{"repo": "widgets"})
	checks := run.Progress().Steps[0]
	require.Equal(t, mcptask.StepFailed, checks.Status, "the first run failed")
	require.NotNil(t, checks.RetryAt, "a retry is due after the backoff")
	env.Advance(time.Second)
	doc := run.Handoff()
	require.Equal(t, "checks", doc.CompletedSteps[0].Name)
	require.Equal(t, 2, doc.CompletedSteps[0].Attempts)
	tag := doc.RemainingSteps[0]
	require.True(t, tag.HandedToClient)
	require.Contains(t, tag.Error, `version "next" is not a semantic version`)
	run.Call("create_tag", map[string]any{"repo": "widgets", "version": "v1.4.0"})
	doc = run.Call("announce_release", map[string]any{"tag": "widgets@v1.4.0", "message": "1.4 is out"})
	require.Equal(t, "completed", doc.Status)
}

// TestReleaseNotesReplay: a release_notes task recorded waiting for its
// review is served by a server whose release_notes changed, as long as
// it keeps the definition the task started on; the replayer reports a
// server that dropped it.
func TestReleaseNotesReplay(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tasks.db")
	ledger := filepath.Join(t.TempDir(), "published")
	var waiting string
	t.Run("record", func(t *testing.T) {
		a, err := newApp(ledger)
		require.NoError(t, err)
		env := workflowtest.New(t, func(b *builder.Builder) { a.register(b, options{}) }, &workflowtest.Options{File: file})
		waiting = env.Start("release_notes", map[string]string{"repo": "shop"}).ID
	})
	// The next release of the server asks for a second reviewer.
	changed := func(keepOld bool) func(b *builder.Builder) {
		return func(b *builder.Builder) {
			a, err := newApp(ledger)
			require.NoError(t, err)
			a.addTools(b)
			if keepOld {
				b.TaskWorkflow(releaseWorkflow("release_notes").AsTool()) // served beside the new one
			}
			b.TaskWorkflow(releaseWorkflow("release_notes").AsTool().Step(
				workflow.Client("second_review", "review_notes").
					Bind("draft", workflow.StepOutput("draft", "draft")).
					Bind("feedback", workflow.FromClient("a second reviewer's verdict")).
					Bind("approved", workflow.FromClient("true to approve"))))
		}
	}
	t.Run("kept", func(t *testing.T) {
		env := workflowtest.Replay(t, file, changed(true), nil)
		run := env.Runs()[0]
		require.Equal(t, waiting, run.ID)
		doc := run.Call("review_notes", map[string]any{"draft": "notes", "feedback": "ok", "approved": false})
		require.Equal(t, "completed", doc.Status, "the recorded task finishes on its own definition")
	})
	t.Run("dropped", func(t *testing.T) {
		f := &replayErrors{T: t}
		workflowtest.Replay(f, file, changed(false), nil)
		require.Len(t, f.errs, 1, "the replayer names the task the new server fails")
		require.Contains(t, f.errs[0], waiting)
	})
}

// replayErrors collects the errors Replay reports.
type replayErrors struct {
	*testing.T
	errs []string
}

func (r *replayErrors) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
