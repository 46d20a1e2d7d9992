// Package storerpc maps the task store's errors to the JSON-RPC errors a
// client sees. It is the one implementation behind the engine's mapping
// (taskrouter) and the workflow bridge's (workflow), which differ only in
// their wording and in which store errors they count as the client's to
// fix (-32602) rather than the server's (-32603); each keeps its table of
// rules beside the code that uses it.
package storerpc

import (
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/taskbridge/taskbridge/mcptask"
)

// Rule answers an error that matches Err (errors.Is) with a JSON-RPC error
// of Code. Its message is Message, or the error's own text when Message is
// empty.
type Rule struct {
	Err     error
	Code    int64
	Message string
}

// Mapping is an ordered list of rules: the first that matches answers.
type Mapping []Rule

// Error returns the JSON-RPC error a client sees for err: err itself when
// it already is (or wraps) a *jsonrpc.Error; the first matching rule's
// error; otherwise a -32603 "task store: <err>".
func (m Mapping) Error(err error) error {
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return err
	}
	for _, r := range m {
		if !errors.Is(err, r.Err) {
			continue
		}
		if r.Message == "" {
			return mcptask.Errorf(r.Code, "%v", err)
		}
		return mcptask.Errorf(r.Code, "%s", r.Message)
	}
	return mcptask.InternalError("task store: %v", err)
}
