package taskrouter

import (
	"errors"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// TestStoreError pins the JSON-RPC error a client sees for every store
// error the task methods may meet: code and message.
func TestStoreError(t *testing.T) {
	const params, internal = mcptask.CodeInvalidParams, mcptask.CodeInternalError
	cases := []struct {
		name string
		err  error
		code int64
		msg  string
	}{
		{"not found", store.ErrNotFound, params, "task not found"},
		{"not found, wrapped", fmt.Errorf("task t1: %w", store.ErrNotFound), params, "task not found"},
		{"invalid cursor", store.ErrInvalidCursor, params, "invalid cursor"},
		{"terminal", store.ErrTerminal, params, "task is already in a terminal status"},
		{"too large", fmt.Errorf("result of t1: %w", store.ErrTooLarge), params, "result of t1: store: value too large"},
		{"invalid", store.ErrInvalid, params, "store: invalid task"},
		{"shutdown", errShutdown, internal, "server is shutting down"},
		{"conflict", store.ErrConflict, internal, "task store: store: version conflict"},
		{"exists", store.ErrExists, internal, "task store: store: task already exists"},
		{"invalid transition", store.ErrInvalidTransition, internal, "task store: store: invalid status transition"},
		{"closed", store.ErrClosed, internal, "task store: store: closed"},
		{"fenced", store.ErrFenced, internal, "task store: store: lease lost"},
		{"leased", store.ErrLeased, internal, "task store: store: task is leased by another holder"},
		{"other", errors.New("disk on fire"), internal, "task store: disk on fire"},
		// An error matching several: the first rule wins.
		{"terminal and not found", errors.Join(store.ErrTerminal, store.ErrNotFound), params, "task not found"},
		{"invalid and shutdown", errors.Join(errShutdown, store.ErrInvalid), params, "taskrouter: server shutting down\nstore: invalid task"},
		{"already JSON-RPC", &jsonrpc.Error{Code: -32042, Message: "as is"}, -32042, "as is"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var je *jsonrpc.Error
			require.True(t, errors.As(storeError(c.err), &je))
			require.Equal(t, c.code, je.Code)
			require.Equal(t, c.msg, je.Message)
		})
	}
	wrapped := fmt.Errorf("context: %w", &jsonrpc.Error{Code: 1, Message: "m"})
	require.True(t, storeError(wrapped) == wrapped, "a JSON-RPC error is returned as it is, wrapping and all")
}
