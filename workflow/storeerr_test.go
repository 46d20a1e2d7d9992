package workflow

import (
	"errors"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/mcptask"
	"github.com/taskbridge/taskbridge/store"
)

// TestStoreErr pins the JSON-RPC error a client sees for every store
// error the workflow bridge may meet: code and message.
func TestStoreErr(t *testing.T) {
	const params, internal = mcptask.CodeInvalidParams, mcptask.CodeInternalError
	cases := []struct {
		name string
		err  error
		code int64
		msg  string
	}{
		{"not found", store.ErrNotFound, params, "workflow task not found"},
		{"not found, wrapped", fmt.Errorf("task t1: %w", store.ErrNotFound), params, "workflow task not found"},
		{"terminal", store.ErrTerminal, params, "the workflow task has already ended"},
		{"too large", fmt.Errorf("progress of t1: %w", store.ErrTooLarge), params, "progress of t1: store: value too large"},
		{"conflict", store.ErrConflict, internal, "the workflow task was changed concurrently; retry"},
		// The engine wrote something the store refused: the server's fault.
		{"invalid", store.ErrInvalid, internal, "task store: store: invalid task"},
		{"invalid cursor", store.ErrInvalidCursor, internal, "task store: store: invalid cursor"},
		{"exists", store.ErrExists, internal, "task store: store: task already exists"},
		{"invalid transition", store.ErrInvalidTransition, internal, "task store: store: invalid status transition"},
		{"closed", store.ErrClosed, internal, "task store: store: closed"},
		{"fenced", store.ErrFenced, internal, "task store: store: lease lost"},
		{"leased", store.ErrLeased, internal, "task store: store: task is leased by another holder"},
		{"other", errors.New("disk on fire"), internal, "task store: disk on fire"},
		// An error matching several: the first rule wins.
		{"not found and conflict", errors.Join(store.ErrNotFound, store.ErrConflict), internal, "the workflow task was changed concurrently; retry"},
		{"not found and terminal", errors.Join(store.ErrNotFound, store.ErrTerminal), params, "the workflow task has already ended"},
		{"already JSON-RPC", &jsonrpc.Error{Code: -32042, Message: "as is"}, -32042, "as is"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var je *jsonrpc.Error
			require.True(t, errors.As(storeErr(c.err), &je))
			require.Equal(t, c.code, je.Code)
			require.Equal(t, c.msg, je.Message)
		})
	}
	wrapped := fmt.Errorf("context: %w", &jsonrpc.Error{Code: 1, Message: "m"})
	require.True(t, storeErr(wrapped) == wrapped, "a JSON-RPC error is returned as it is, wrapping and all")
}
