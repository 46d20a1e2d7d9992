package mcptask_test

import (
	"testing"

	"github.com/taskbridge/taskbridge/mcptask"
)

// TestDialectQuestions is the dialect table of the package doc, one row
// per question: the answer in the core dialect and in the extension.
func TestDialectQuestions(t *testing.T) {
	for _, q := range []struct {
		name            string
		ask             func(mcptask.Dialect) bool
		core, extension bool
	}{
		{"HasMethod(tasks/result)", func(d mcptask.Dialect) bool { return d.HasMethod(mcptask.MethodTasksResult) }, true, false},
		{"HasMethod(tasks/list)", func(d mcptask.Dialect) bool { return d.HasMethod(mcptask.MethodTasksList) }, true, false},
		{"HasMethod(tasks/update)", func(d mcptask.Dialect) bool { return d.HasMethod(mcptask.MethodTasksUpdate) }, false, true},
		{"HasMethod(tasks/cancel)", func(d mcptask.Dialect) bool { return d.HasMethod(mcptask.MethodTasksCancel) }, true, true},
		{"ServerDecidesTasks", mcptask.Dialect.ServerDecidesTasks, false, true},
		{"AcksFinishedCancel", mcptask.Dialect.AcksFinishedCancel, false, true},
		{"AcksCancel", mcptask.Dialect.AcksCancel, false, true},
		{"ClientRetriesWithInput", mcptask.Dialect.ClientRetriesWithInput, false, true},
		{"ServerSetsTTL", mcptask.Dialect.ServerSetsTTL, false, true},
		{"UndeclaredForbidsTasks", mcptask.Dialect.UndeclaredForbidsTasks, true, false},
		{"ServerDeclaresTaskMethods", mcptask.Dialect.ServerDeclaresTaskMethods, true, false},
		{"NegotiatesPerRequest", mcptask.Dialect.NegotiatesPerRequest, false, true},
		{"ClientRunsTasks", mcptask.Dialect.ClientRunsTasks, true, false},
	} {
		if got := q.ask(mcptask.Core); got != q.core {
			t.Errorf("core: %s = %v, want %v", q.name, got, q.core)
		}
		if got := q.ask(mcptask.Extension); got != q.extension {
			t.Errorf("extension: %s = %v, want %v", q.name, got, q.extension)
		}
	}
	if got := mcptask.Core.ToolErrorStatus(); got != mcptask.StatusFailed {
		t.Errorf("core: ToolErrorStatus = %s", got)
	}
	if got := mcptask.Extension.ToolErrorStatus(); got != mcptask.StatusCompleted {
		t.Errorf("extension: ToolErrorStatus = %s", got)
	}
}
