package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// The printer nests what a container step lists under it (a for-each's
// items, a child workflow's steps), shows a completed for-each's results
// item by item, the child task a step started, what a kind of step says
// of itself, and the undo list of a failed workflow; once the workflow
// has ended, no step reads as running.
func TestPrinterShowsTheKinds(t *testing.T) {
	raw := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	doc := &handoff.Document{
		SchemaVersion: handoff.SchemaVersion, TaskID: "t1", Workflow: "release_train", Status: string(mcptask.StatusWorking),
		CompletedSteps: []handoff.CompletedStep{
			{Name: "build", Kind: string(mcptask.StepKindForEach), Result: json.RawMessage(`[{"service":"api"},{"service":"web"}]`)},
		},
		RemainingSteps: []handoff.RemainingStep{
			{Name: "notes", Kind: string(mcptask.StepKindChild), Execution: mcptask.ExecServer, Status: mcptask.StepAwaitingClient,
				Do: `child workflow "release_notes" (task c1) waits for the steps listed next.`},
			{Name: "notes/review", Tool: "review_notes", Execution: mcptask.ExecClient, Status: mcptask.StepAwaitingClient,
				Arguments: map[string]json.RawMessage{mcptask.ArgTaskID: raw("c1"), "approved": raw("<true to approve>")}},
			{Name: "smoke", Kind: string(mcptask.StepKindForEach), Execution: mcptask.ExecServer, Status: mcptask.StepRunning,
				Do: `step "smoke": 1 of 2 items done, 1 running (a loop per item).`},
		},
		Undo: []handoff.UndoStep{
			{Undoes: "deploy[1]", Tool: "rollback_service", Status: mcptask.StepCompleted},
			{Undoes: "deploy[0]", Tool: "rollback_service", Status: mcptask.StepFailed, Error: "registry down"},
		},
		Continuation: handoff.NewContinuation("t1", 0),
	}
	var b bytes.Buffer
	require.NoError(t, (&printer{w: &b}).handoff(doc))
	out := b.String()
	for _, want := range []string{
		"  ✓ build        (for-each)       2 item(s)\n",
		"      build[0]   {\"service\":\"api\"}\n",
		"      build[1]   {\"service\":\"web\"}\n",
		"  · notes        (child workflow) (yours below, child task c1)\n",
		"      child workflow \"release_notes\" (task c1) waits for the steps listed next.\n",
		"    → notes/review review_notes     (you) needs: approved\n",
		"  ● smoke        (for-each)       (server, running)\n",
		"      step \"smoke\": 1 of 2 items done, 1 running (a loop per item).\n",
		"  being undone by the server, last first:\n",
		"    ✓ deploy[1]    rollback_service undone\n",
		"    ✗ deploy[0]    rollback_service NOT undone (registry down): take it back by hand\n",
	} {
		require.Contains(t, out, want)
	}

	doc.Status = string(mcptask.StatusFailed)
	b.Reset()
	require.NoError(t, (&printer{w: &b}).handoff(doc))
	out = b.String()
	require.Contains(t, out, "  · smoke        (for-each)       (not run: the workflow failed)\n")
	require.NotContains(t, out, "1 running", "what a step said while it ran is not shown once the workflow ended")
	require.Contains(t, out, "  undone after the failure, last first:\n")

	b.Reset()
	require.NoError(t, (&printer{w: &b}).completed(doc))
	require.Contains(t, b.String(), "      build[1]   {\"service\":\"web\"}\n")
	require.Contains(t, b.String(), "    ✓ deploy[1]    rollback_service undone\n")
}

var taskIDRe = regexp.MustCompile(`task ([0-9a-f]{32})`)

// TestReleaseTrainFromTheCLI runs example 62's release_train with a flaky
// service from the command line: the handoff shows the builds item by
// item and the child workflow's review nested under the step that started
// it; `call review_notes -task-id TRAIN` performs that review on the child
// (the handoff's entry names it) and says where the train stands; once the
// train has failed, `prompt -resume` shows what was rolled back, last
// deploy first.
func TestReleaseTrainFromTheCLI(t *testing.T) {
	dir := build(t)
	url := startServer(t, filepath.Join(dir, "62_tasks_workflow"), "serve", "-http", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "train.db"))
	code, out, errOut := cli(t, "", "-url", url, "prompt", "release_train", "repo=acme/shop", "services=api,flaky-web")
	require.Equal(t, exitOK, code, errOut)
	train := taskIDRe.FindStringSubmatch(out)[1]
	require.Regexp(t, `✓ build +\(for-each\) +2 item\(s\)`, out)
	require.Regexp(t, `build\[1\] +\{"artifact":"acme/shop/flaky-web@[0-9a-f]{7}","service":"flaky-web"\}`, out)
	child := regexp.MustCompile(`notes +\(child workflow\) \(yours below, child task ([0-9a-f]{32})\)`).FindStringSubmatch(out)
	require.NotNil(t, child, out)
	require.NotEqual(t, train, child[1])
	require.Contains(t, out, "    → notes/review review_notes     (you) needs: approved, feedback")
	require.Regexp(t, `· deploy +\(for-each\) +\(server\)\n +runs tool "deploy_service" once per item`, out)

	code, out, errOut = cli(t, "", "-url", url, "call", "review_notes", "-task-id", train, "approved=true", "feedback=ship it")
	require.Contains(t, []int{exitOK, exitFailed}, code, "the train may have failed by the time the call answers: %s", errOut)
	require.Contains(t, errOut, `Step "notes/review" of workflow "release_train"`)
	require.Contains(t, out, "the step is recorded on that child workflow of task "+train+", which is ")

	var final string
	require.Eventually(t, func() bool {
		_, final, _ = cli(t, "", "-url", url, "prompt", "release_train", "-resume", train)
		return strings.Contains(final, " — failed\n")
	}, time.Minute, 200*time.Millisecond, "the train did not fail")
	require.Contains(t, final, "  undone after the failure, last first:\n    ✓ deploy[1]    rollback_service undone\n    ✓ deploy[0]    rollback_service undone\n")
	require.Contains(t, final, "  · smoke        (for-each)       (not run: the workflow failed)\n")
}
