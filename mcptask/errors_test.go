package mcptask_test

import (
	"testing"

	"github.com/taskbridge/taskbridge/mcptask"
)

// TestCodes pins the error codes' values: the standard ones are go-sdk's
// constants, and a go-sdk that changed them would change the wire.
func TestCodes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"CodeParseError", mcptask.CodeParseError, -32700},
		{"CodeInvalidRequest", mcptask.CodeInvalidRequest, -32600},
		{"CodeMethodNotFound", mcptask.CodeMethodNotFound, -32601},
		{"CodeInvalidParams", mcptask.CodeInvalidParams, -32602},
		{"CodeInternalError", mcptask.CodeInternalError, -32603},
		{"CodeTooManyTasks", mcptask.CodeTooManyTasks, -32000},
		{"CodeHeaderMismatch", mcptask.CodeHeaderMismatch, -32020},
		{"CodeMissingCapability", mcptask.CodeMissingCapability, -32021},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}
