package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
