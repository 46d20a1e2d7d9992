package workflow

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/handoff"
)

// TestPublishedSchemasAreCurrent keeps docs/schemas in step with the code.
// Run with UPDATE_SCHEMAS=1 to rewrite them.
func TestPublishedSchemasAreCurrent(t *testing.T) {
	files := map[string][]byte{
		"workflow-progress.schema.json": ProgressSchemaJSON(),
		"handoff.schema.json":           handoff.SchemaJSON(),
	}
	for name, want := range files {
		path := filepath.Join("..", "docs", "schemas", name)
		if os.Getenv("UPDATE_SCHEMAS") != "" {
			require.NoError(t, os.WriteFile(path, append(want, '\n'), 0o644))
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err, "run UPDATE_SCHEMAS=1 go test ./workflow -run TestPublishedSchemas")
		require.JSONEq(t, string(want), string(got), "%s is stale: run UPDATE_SCHEMAS=1 go test ./workflow -run TestPublishedSchemas", name)
	}
}
