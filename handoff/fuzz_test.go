package handoff_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskbridge/taskbridge/handoff"
)

// FuzzParse checks that Parse never panics, that its errors wrap one of the
// sentinels, and that any document it accepts re-renders and re-parses to
// an equal document.
func FuzzParse(f *testing.F) {
	for _, doc := range allDocs() {
		text, err := handoff.Render(doc)
		require.NoError(f, err)
		f.Add(text)
	}
	for _, s := range []string{
		"",
		"no block at all",
		"```json\n{}\n```",
		"```json\n",
		"```JSON\r\n{\"schemaVersion\":1}\r\n```",
		"````json\n```\n````",
		"```json\nnull\n```",
		"```json\n{\"schemaVersion\":1,\"taskId\":\"t\",\"workflow\":\"w\",\"status\":\"working\",\"completedSteps\":[],\"remainingSteps\":[{\"name\":\"a\",\"tool\":\"b\",\"execution\":\"client\",\"arguments\":{\"x\":\"<y>\",\"z\":{ \"k\" : 1 }},\"guidance\":\"```json\\n```\"}],\"continuation\":{\"metaKey\":\"_task_id\",\"taskId\":\"t\",\"statusMethod\":\"s\"}}\n```",
		"\x00\xff```json\n{\"a\":\n```",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		doc, err := handoff.Parse(text)
		if err != nil {
			require.Nil(t, doc)
			require.True(t, errors.Is(err, handoff.ErrNoHandoff) != errors.Is(err, handoff.ErrInvalid), "error %v wraps exactly one sentinel", err)
			return
		}
		rendered, err := handoff.Render(doc)
		require.NoError(t, err)
		again, err := handoff.Parse(rendered)
		require.NoError(t, err, "re-parsing:\n%s", rendered)
		require.Equal(t, doc, again)
	})
}
