package handoff_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
	"github.com/taskbridge/taskbridge/mcptask"
)

// TestProseNeverRepeatsTheFailingValue: a step handed over after a failure
// is shown in the prose with the value its error quotes as one to fill in
// (what a model copies must not fail again); the document keeps it.
func TestProseNeverRepeatsTheFailingValue(t *testing.T) {
	fix := `version "next" is not a semantic version like v1.2.3: call create_tag with a version such as v1.4.0`
	args := map[string]json.RawMessage{"_task_id": json.RawMessage(`"T"`), "repo": json.RawMessage(`"widgets"`), "version": json.RawMessage(`"next"`)}
	d := &handoff.Document{SchemaVersion: handoff.SchemaVersion, TaskID: "T", Workflow: "ship_release", Status: string(mcptask.StatusWorking),
		CompletedSteps: []handoff.CompletedStep{},
		RemainingSteps: []handoff.RemainingStep{{Name: "tag", Tool: "create_tag", Execution: mcptask.ExecClient, Status: mcptask.StepFailed,
			HandedToClient: true, Error: fix, Arguments: args,
			Call: &handoff.Call{Tool: "create_tag", Arguments: args, Fix: fix}}},
		Continuation: handoff.NewContinuation("T", mcptask.Core)}
	msg, err := d.Message()
	require.NoError(t, err)
	prose := msg.Content.(*mcp.TextContent).Text
	require.Contains(t, prose, `Call tool "create_tag" with {"_task_id":"T","repo":"widgets","version":<string>}`)
	require.Contains(t, prose, `- "version" (string): a corrected value: "next" failed`)
	require.True(t, strings.Contains(string(d.RemainingSteps[0].Call.Arguments["version"]), "next"), "the document keeps the value")
}
